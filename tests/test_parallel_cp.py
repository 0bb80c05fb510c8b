"""Context parallelism: causal load balancing, K/V traffic per block with the arithmetic,
the ring's step structure and its overlap on an idealised replay, the all-gather variant."""

from __future__ import annotations

import pytest

from parallel_helpers import emit_with_hooks
from simulator.models import layer_costs, load_model
from simulator.strategies.parallel.context import (CPHooks, allgather_size_bytes, causal_pairs,
                                        chunk_ranges, kv_block_bytes, ring_sent_bytes,
                                        ring_slices, ring_step_size_bytes)

BF16 = 2


@pytest.mark.parametrize("cp,s", [(2, 16), (4, 64), (8, 4096)])
def test_two_chunks_per_rank_cover_the_sequence_and_balance_causal_work(cp, s):
    ranges = [chunk_ranges(c, cp, s) for c in range(cp)]
    tokens = sorted(t for pair in ranges for r in pair for t in r)
    assert tokens == list(range(s))
    # chunk j of n = s / (2 cp) tokens has j n^2 + n (n + 1) / 2 causal pairs; chunks c and
    # 2 cp - 1 - c together: (2 cp - 1) n^2 + n (n + 1), the same for every rank
    n = s // (2 * cp)
    pairs = [causal_pairs(r) for r in ranges]
    assert pairs == [(2 * cp - 1) * n * n + n * (n + 1)] * cp
    assert sum(pairs) == s * (s + 1) // 2


def test_kv_block_and_ring_traffic_arithmetic():
    # Llama-2-70B, 8 KV heads of 128, tp 8 (1 KV head per rank), cp 4, one 8192-token
    # sequence, bf16: a rank's K and V are 2 x 1 x 2048 x 128 x 2 = 1,048,576 B; ring
    # attention sends 3 of them forward and 2 x (4 - 1) = 6 backward, per block (TE's
    # loop: K/V, K/V + dK/dV twice, dK/dV).
    model = load_model("llama-2-70b")
    block = kv_block_bytes(model, 1, 8192, 4, BF16, tp=8)
    assert block == 2 * 1 * 2048 * 128 * 2 == 1_048_576
    assert ring_sent_bytes(model, 1, 8192, 4, BF16, tp=8) == (3 * block, 6 * block)
    assert ring_sent_bytes(model, 1, 8192, 1, BF16, tp=8) == (0, 0)
    # the all-gather variant: the whole sequence's K/V, 2 x 8192 x 128 x 2 = 4 MiB, of
    # which (cp - 1) / cp = 3/4 leave each rank, the same as the ring's forward
    size = allgather_size_bytes(model, 1, 8192, BF16, tp=8)
    assert size == 2 * 8192 * 128 * 2 == 4 * block
    assert size * 3 / 4 == ring_sent_bytes(model, 1, 8192, 4, BF16, tp=8)[0]


def _block(cp: int, mode: str = "ring"):
    """A Llama-2-7B block's costs on one of ``cp`` ranks (ring steps cut when ``ring``)."""
    model = load_model("llama-2-7b")
    layer = layer_costs(model, 1, 4096, "bf16", cp=cp)[1]
    return ring_slices(layer, cp) if mode == "ring" else layer


def _ops(layer, cp: int, mode: str, phases=("forward", "backward"), block=1000, gather=4000):
    return emit_with_hooks(layer, lambda i, c: CPHooks(i, c, mode=mode, cp=cp,
                                                       block_bytes=block, gather_bytes=gather),
                           phases, stream="cp").ops


def _sent(op, cp: int) -> float:
    """Bytes a rank sends in an all-gather of ``op.size_bytes`` on ``cp`` ranks."""
    return op.size_bytes * (cp - 1) / cp


@pytest.mark.parametrize("cp", [2, 4, 8])
def test_ring_moves_the_formula_bytes_and_splits_the_attention(cp):
    layer = _block(cp)
    whole = _block(cp, "allgather")
    ops = _ops(layer, cp, "ring", block=1000)
    fwd = [op for op in ops if op.kind == "collective" and op.phase == "forward"]
    bwd = [op for op in ops if op.kind == "collective" and op.phase == "backward"]
    assert {op.collective for op in fwd + bwd} == {"all_gather"}
    # (cp - 1) blocks forward; backward as TE's loop sends them: K/V alone, K/V with the
    # dK/dV so far (cp - 2 times), dK/dV alone home: 1 + 2 (cp - 2) + 1 = 2 (cp - 1); each
    # step's size rounded up to a whole byte
    assert sum(_sent(op, cp) for op in fwd) == pytest.approx((cp - 1) * 1000, abs=cp)
    assert sum(_sent(op, cp) for op in bwd) == pytest.approx(2 * (cp - 1) * 1000, abs=2 * cp)
    steps = [op for op in ops if op.kind == "compute" and ".ring" in op.name]
    assert len(steps) == 2 * cp
    attention = [c for c in whole.forward + whole.backward if c.op_class == "attention"]
    assert sum(op.flops for op in steps) == pytest.approx(sum(c.flops for c in attention))


@pytest.mark.parametrize("cp", [2, 4, 8])
def test_a_ring_step_is_an_attention_kernel_over_one_kv_block(cp):
    """Each ring step attends the rank's queries to one K/V block: 1/cp of the keys per
    query the whole kernel has (Llama-2-7B at 4,096 tokens, causal: 2,048 keys a query on
    average over the sequence, 2,048 / cp per step), and it costs what an attention kernel
    of that shape costs on its own (one price for the same kernel)."""
    from simulator.compute.model import ComputeModel
    from simulator.hardware import gpu_spec

    whole = _block(cp, "allgather")
    steps = [c for c in _block(cp).forward if ".ring" in c.name]
    attn = next(c for c in whole.forward if c.op_class == "attention")
    assert attn.n == 4096 // 2
    assert [c.n for c in steps] == [round(2048 / cp)] * cp
    assert [(c.m, c.k) for c in steps] == [(attn.m, attn.k)] * cp
    model = ComputeModel(gpu_spec("H100-SXM"), strategy="megatron")
    step = steps[0]
    alone = model.op_time_s("attention", attn.flops / cp, attn.bytes_accessed / cp, "bf16",
                            shape=(attn.m, 2048 // cp, attn.k))
    assert model.op_time_s(step.op_class, step.flops, step.bytes_accessed, "bf16",
                           shape=step.shape) == alone
    # shorter kernels run lower on the flash curve: cp steps take longer than the whole
    whole_t = model.op_time_s("attention", attn.flops, attn.bytes_accessed, "bf16",
                              shape=attn.shape)
    assert cp * (alone - model.kernel_launch_s) > whole_t - model.kernel_launch_s


def test_each_step_waits_for_its_block_and_backward_sends_before_each_step():
    cp = 4
    ops = _ops(_block(cp), cp, "ring")
    by_id = {op.id: op for op in ops}
    fwd = [op for op in ops if op.phase == "forward" and op.kind == "compute"
           and ".ring" in op.name]
    assert fwd[0].deps == ()                        # its own K/V
    for op in fwd[1:]:
        (dep,) = op.deps
        assert by_id[dep].kind == "collective"
    first_comm = next(op for op in ops if op.kind == "collective")
    # sends the K/V just computed: the op before the first ring step (rotary under RoPE)
    before_core = max(op.id for op in ops if op.kind == "compute" and op.id < fwd[0].id)
    assert first_comm.deps[0] == before_core
    assert by_id[before_core].name in ("qkv_proj", "rotary")
    # backward (TE's loop): exchange i goes out before step i, after step i - 1 (the
    # kernel before the first step for exchange 0) and exchange i - 1; step i + 1 and, after
    # the last step, the next kernel wait for it
    bwd_comm = [op for op in ops if op.kind == "collective" and op.phase == "backward"]
    bwd = [op for op in ops if op.phase == "backward" and op.kind == "compute"
           and ".ring" in op.name]
    assert len(bwd_comm) == len(bwd) == cp
    assert by_id[bwd_comm[0].deps[0]].name == "attn_out.wgrad"
    for i in range(1, cp):
        assert set(bwd_comm[i].deps) == {bwd[i - 1].id, bwd_comm[i - 1].id}
        assert bwd[i].deps == (bwd_comm[i - 1].id,)
    assert all(comm.id < step.id for comm, step in zip(bwd_comm, bwd))
    nxt = next(op for op in ops if op.phase == "backward" and op.id > bwd[-1].id
               and op.kind == "compute")
    assert nxt.deps == (bwd_comm[-1].id,)


def _replay(ops, compute_s: float, transfer_s: float) -> float:
    """Each op starts when its stream is free and its deps ended; compute takes
    ``compute_s``, a CP exchange ``transfer_s``, every other kernel nothing."""
    end, free = {}, {}
    for op in ops:
        start = max([free.get(op.stream, 0.0)] + [end[d] for d in op.deps])
        took = transfer_s if op.kind == "collective" else (
            compute_s if ".ring" in op.name else 0.0)
        end[op.id] = free[op.stream] = start + took
    return max(end.values())


def test_forward_ring_hides_the_transfer_behind_the_previous_block():
    cp = 4
    ops = _ops(_block(cp), cp, "ring", phases=("forward",))
    assert _replay(ops, 1.0, 0.5) == cp * 1.0              # transfer < one step: hidden
    assert _replay(ops, 1.0, 2.0) == 1.0 + (cp - 1) * 2.0  # transfer-bound: it shows


def test_backward_ring_hides_each_transfer_behind_its_step():
    """TE's backward loop sends exchange i while step i computes: hidden while a transfer is
    shorter than a step; transfer-bound, one transfer after another."""
    cp = 4
    ops = _ops(_block(cp), cp, "ring", phases=("backward",))
    assert _replay(ops, 1.0, 0.5) == cp * 1.0
    assert _replay(ops, 1.0, 2.0) == cp * 2.0


def test_allgather_variant_gathers_before_and_reduce_scatters_after():
    ops = _ops(_block(4, "allgather"), 4, "allgather", gather=4096)
    comm = [op for op in ops if op.kind == "collective"]
    assert [(op.collective, op.phase, op.size_bytes) for op in comm] == \
        [("all_gather", "forward", 4096), ("reduce_scatter", "backward", 4096)]
    by_name = {(op.name, op.phase): op for op in ops}
    assert by_name["attn_core", "forward"].deps == (comm[0].id,)
    assert comm[1].deps == (by_name["attn_core.bwd", "backward"].id,)
    assert by_name["attn_out.dgrad", "backward"].id < comm[1].id
    # the first kernel after the attention core's backward (RoPE's, under rotary) waits
    after = by_name.get(("rotary.bwd", "backward"), by_name["qkv_proj.dgrad", "backward"])
    assert after.deps == (comm[1].id,)


def test_ring_step_size_moves_exactly_the_step_bytes():
    # a ring all-gather of S on cp ranks sends (cp - 1) S / cp per rank: S = 4000 on 4 ranks
    # sends 3000, so one ring step that sends a 3000-byte block is an all-gather of 4000
    assert ring_step_size_bytes(3000, 4) == 4000
    assert ring_step_size_bytes(1000, 2) == 2000

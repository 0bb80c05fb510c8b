"""Context parallelism through the trace generator: ring attention's K/V exchanges and the
all-gather variant on the CP communicators with the formula's bytes, a replay, Megatron's
spelling, bad input."""

from __future__ import annotations

import dataclasses

import pytest

from simulator.errors import ConfigError
from simulator.models import load_model
from simulator.strategies.parallel import ParallelPlan
from simulator.strategies.parallel.context import ring_step_size_bytes
from simulator.strategies.frameworks.megatron import MegatronConfig
from simulator.strategies.parallel.generate import build_parallel
from simulator.pipeline import build_setup, run_setup
from simulator.scenario import load_scenario, resolve_scenario
from simulator.strategies import World

LLAMA = dataclasses.replace(load_model("llama-2-7b"), layers=2)   # 32 heads = 32 KV heads
S, E = 2048, 2


def _trace(cp: int, mode: str = "ring", tp: int = 1, flash: bool = True):
    plan = ParallelPlan(cp=cp, tp=tp, cp_mode=mode, dp_mode="ddp")
    cfg = MegatronConfig(micro_batch=1, grad_accum=1, tensor_model_parallel_size=tp,
                         context_parallel_size=cp)
    return build_parallel(LLAMA, plan, cfg, World(plan.size, min(plan.size, 8)), seq_len=S,
                          flash=flash)


def _cp_ops(trace, layer="block.0"):
    return [op for op in trace.classes[0].ops if op.kind == "collective"
            and op.comm.startswith("cp.") and op.layer == layer]


@pytest.mark.parametrize("cp,tp", [(2, 1), (4, 2)])
def test_ring_sends_cp_minus_1_blocks_forward_and_2_cp_minus_1_backward(cp, tp):
    trace = _trace(cp, tp=tp)
    # a rank's K/V: 2 x (2048 / cp) tokens x (32 / tp heads x 128) x 2 bytes
    block = 2 * (S // cp) * (32 // tp * 128) * E
    ops = _cp_ops(trace)
    fwd = [op for op in ops if op.phase == "forward"]
    bwd = [op for op in ops if op.phase == "backward"]
    assert {op.collective for op in ops} == {"all_gather"}
    assert [op.size_bytes for op in fwd] == [ring_step_size_bytes(block, cp)] * (cp - 1)
    # TE's backward loop: K/V alone, K/V with the dK/dV so far, dK/dV alone home
    assert [op.size_bytes for op in bwd] == [ring_step_size_bytes(block, cp)] + \
        [ring_step_size_bytes(2 * block, cp)] * (cp - 2) + [ring_step_size_bytes(block, cp)]
    # each all-gather of S moves (cp - 1) / cp of S per rank: the blocks, in total
    sent = lambda xs: sum(op.size_bytes * (cp - 1) / cp for op in xs)   # noqa: E731
    assert sent(fwd) == pytest.approx((cp - 1) * block, abs=cp)
    assert sent(bwd) == pytest.approx(2 * (cp - 1) * block, abs=2 * cp)
    groups = trace.communicators["cp.s0"].groups
    assert groups[0] == tuple(range(0, cp * tp, tp))       # CP neighbours tp ranks apart


def test_allgather_variant_moves_the_whole_sequences_kv():
    ops = _cp_ops(_trace(2, "allgather"))
    size = 2 * S * 32 * 128 * E                            # K and V of all 2048 tokens
    assert [(op.phase, op.collective, op.size_bytes) for op in ops] == \
        [("forward", "all_gather", size), ("backward", "reduce_scatter", size)]


def test_context_parallel_jobs_replay():
    # (the ring's overlap is tested on the idealised replay of test_parallel_cp.py)
    scn = load_scenario(resolve_scenario("quickstart"), ["training.seq_len=2048"])
    setup = build_setup(scn, extrapolate_steps=False)
    for mode in ("ring", "allgather"):
        m = run_setup(dataclasses.replace(setup, trace=_trace(4, mode))).metrics
        assert m.iteration_time_s > 0 and m.comm_s > 0 and not m.oom


def test_megatron_spelling_picks_the_variant():
    scn = load_scenario(resolve_scenario("quickstart"), [
        "strategy={name: megatron, context_parallel_size: 2, tensor_model_parallel_size: 4,"
        " cp_comm_type: all_gather}", "training.seq_len=4096"])
    trace = build_setup(scn, extrapolate_steps=False).trace
    kinds = {op.collective for op in trace.classes[0].ops if op.comm.startswith("cp.")}
    assert kinds == {"all_gather", "reduce_scatter"}


def test_ring_attention_needs_flash_attention():
    with pytest.raises(ConfigError, match="fused attention") as info:
        _trace(2, flash=False)
    assert info.value.field == "training.flash_attention"


# ------------------------------------------------------------------ a2a (Ulysses)
GQA = dataclasses.replace(load_model("llama-3-8b"), layers=2)     # 32 heads, 8 KV heads of 128


def _a2a_trace(cp: int, tp: int, model=GQA, flash: bool = True):
    plan = ParallelPlan(cp=cp, tp=tp, cp_mode="a2a", dp_mode="ddp")
    cfg = MegatronConfig(micro_batch=1, grad_accum=1, tensor_model_parallel_size=tp,
                         context_parallel_size=cp, cp_comm_type="a2a")
    return build_parallel(model, plan, cfg, World(plan.size, min(plan.size, 8)), seq_len=S,
                          flash=flash)


@pytest.mark.parametrize("cp,tp", [(2, 1), (4, 2), (8, 1)])
def test_a2a_moves_q_k_v_o_forward_and_their_gradients_backward(cp, tp):
    ops = _cp_ops(_a2a_trace(cp, tp))
    # nccl-tests size: the rank's buffer of its S / cp tokens; Q and O 32 / tp heads of 128,
    # K and V 8 / tp heads of 128, 2 bytes each
    q = 1 * (S // cp) * (32 // tp * 128) * E
    kv = 1 * (S // cp) * (8 // tp * 128) * E
    fwd = [(op.name.split(".")[0], op.size_bytes) for op in ops if op.phase == "forward"]
    bwd = [(op.name.split(".")[0], op.size_bytes) for op in ops if op.phase == "backward"]
    assert {op.collective for op in ops} == {"all_to_all"}
    assert fwd == [("cp_a2a_q", q), ("cp_a2a_k", kv), ("cp_a2a_v", kv), ("cp_a2a_o", q)]
    assert bwd == [("cp_a2a_do", q), ("cp_a2a_dq", q), ("cp_a2a_dk", kv), ("cp_a2a_dv", kv)]
    # an all-to-all of S on cp ranks sends S / cp to each of the cp - 1 others
    off_rank = sum(op.size_bytes / cp * (cp - 1) for op in ops if op.phase == "forward")
    assert off_rank == pytest.approx((cp - 1) / cp * (2 * q + 2 * kv))
    groups = _a2a_trace(cp, tp).communicators["cp.s0"].groups
    assert groups[0] == tuple(range(0, cp * tp, tp))


def test_a2a_is_on_the_compute_path():
    """The attention waits for the Q, K, V all-to-alls and the next kernel for O; backward,
    the attention waits for dO and the next kernel for dQ, dK and dV."""
    trace = _a2a_trace(4, 2)
    ops = [op for op in trace.classes[0].ops if op.layer == "block.0"]
    by_id = {op.id: op for op in ops}
    name = lambda i: by_id[i].name.split(".")[0]                     # noqa: E731
    comm = {op.name: op for op in ops if op.kind == "collective" and op.comm.startswith("cp.")}
    attn = next(op for op in ops if op.name == "attn_core" and op.phase == "forward")
    assert sorted(map(name, attn.deps)) == ["cp_a2a_k", "cp_a2a_q", "cp_a2a_v"]
    assert comm["cp_a2a_o.attn_core"].deps == (attn.id,)
    after = next(op for op in ops if op.kind == "compute" and op.phase == "forward"
                 and op.id > attn.id)
    assert comm["cp_a2a_o.attn_core"].id in after.deps
    bwd = next(op for op in ops if op.name == "attn_core.bwd")
    assert [name(d) for d in bwd.deps] == ["cp_a2a_do"]
    grads = {comm[f"cp_a2a_{t}.attn_core.bwd"].id for t in ("dq", "dk", "dv")}
    assert all(comm[f"cp_a2a_{t}.attn_core.bwd"].deps == (bwd.id,) for t in ("dq", "dk", "dv"))
    nxt = next(op for op in ops if op.kind == "compute" and op.phase == "backward"
               and op.id > bwd.id)
    assert grads <= set(nxt.deps)


@pytest.mark.parametrize("cp,tp", [(2, 1), (4, 2)])
def test_a2a_attention_is_a_whole_sequence_kernel_on_heads_over_cp(cp, tp):
    """The kernel is the one a model of heads / cp and kv_heads / cp heads runs over the
    whole sequence on the TP rank (same FLOPs, bytes, rows, keys per query, head_dim), and
    its FLOPs are the whole attention's over cp."""
    from simulator.models import layer_costs
    ops = [op for op in _a2a_trace(cp, tp).classes[0].ops if op.layer == "block.0"]
    fewer = dataclasses.replace(GQA, heads=GQA.heads // cp, kv_heads=GQA.kv_heads // cp,
                                head_size=GQA.head_dim)
    block = layer_costs(fewer, 1, S, "bf16", tp=tp)[1]
    whole = layer_costs(GQA, 1, S, "bf16", tp=tp)[1]
    for phase, kernels in (("forward", block.forward), ("backward", block.backward)):
        got = next(op for op in ops if op.phase == phase and op.name.startswith("attn_core"))
        want = next(c for c in kernels if c.op_class == "attention")
        full = next(c for c in (whole.forward if phase == "forward" else whole.backward)
                    if c.op_class == "attention")
        assert tuple(got.attrs[d] for d in "mnk") == (want.m, want.n, want.k)
        assert want.n == round((S + 1) / 2)              # keys per query: the whole sequence
        assert got.flops == pytest.approx(want.flops) == pytest.approx(full.flops / cp)
        assert got.bytes_accessed == pytest.approx(want.bytes_accessed)


def test_a2a_needs_heads_divisible_by_cp():
    # Llama 3 8B's 8 KV heads on tp 4: 2 a rank, not divisible by cp 4
    with pytest.raises(ConfigError, match="kv_heads") as info:
        ParallelPlan(cp=4, tp=4, cp_mode="a2a").check(GQA, 16, seq_len=S)
    assert info.value.field == "strategy.cp_mode"
    # GPT-2's 12 heads over cp 8, through Megatron's spelling
    scn = load_scenario(resolve_scenario("quickstart"), [
        "model=gpt2-small", "training.seq_len=1024",
        "strategy={name: megatron, context_parallel_size: 8, cp_comm_type: a2a}"])
    with pytest.raises(ConfigError) as info:
        build_setup(scn, extrapolate_steps=False)
    assert info.value.field == "strategy.cp_comm_type" and "not divisible" in str(info.value)


def test_a2a_needs_flash_attention_and_hierarchical_cp_is_refused():
    with pytest.raises(ConfigError, match="fused attention") as info:
        _a2a_trace(2, 1, flash=False)
    assert info.value.field == "training.flash_attention"
    cfg = MegatronConfig(context_parallel_size=2, cp_comm_type="a2a+p2p")
    with pytest.raises(ConfigError, match="not modelled") as info:
        cfg.plan(2)
    assert info.value.field == "strategy.cp_comm_type"


def test_megatron_argument_file_reads_cp_comm_type(tmp_path):
    from simulator.strategies.frameworks.megatron import read_file
    path = tmp_path / "a.args"
    path.write_text("--context-parallel-size 2 --cp-comm-type a2a\n")
    assert read_file(path).strategy["cp_comm_type"] == "a2a"
    path.write_text("--cp-comm-type a2a p2p\n")
    with pytest.raises(ConfigError, match="one type for every layer"):
        read_file(path)

"""Context parallelism: causal load balancing, K/V traffic per block with the arithmetic,
the ring's step structure and its overlap on an idealised replay, the all-gather variant."""

from __future__ import annotations

import pytest

from simulator.models import load_model
from simulator.models.ops import OpCost
from simulator.parallel.context import (RECV, SEND, allgather_size_bytes, allgather_steps,
                                        causal_pairs, chunk_ranges, kv_block_bytes,
                                        ring_offsets, ring_sent_bytes, ring_steps)

BF16 = 2
ATTN = [OpCost("attn_core", "attention", 8.0e12, 4.0e9)]


@pytest.mark.parametrize("cp,s", [(2, 16), (4, 64), (8, 4096)])
def test_two_chunks_per_rank_cover_the_sequence_and_balance_causal_work(cp, s):
    ranges = [chunk_ranges(c, cp, s) for c in range(cp)]
    tokens = sorted(t for pair in ranges for a, b in pair for t in range(a, b))
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
    # attention sends 3 of them forward and 2 x 4 - 1 = 7 backward, per block.
    model = load_model("llama-2-70b")
    block = kv_block_bytes(model, 1, 8192, 4, BF16, tp=8)
    assert block == 2 * 1 * 2048 * 128 * 2 == 1_048_576
    assert ring_sent_bytes(model, 1, 8192, 4, BF16, tp=8) == (3 * block, 7 * block)
    assert ring_sent_bytes(model, 1, 8192, 1, BF16, tp=8) == (0, 0)
    # the all-gather variant: the whole sequence's K/V, 2 x 8192 x 128 x 2 = 4 MiB, of
    # which (cp - 1) / cp = 3/4 leave each rank, the same as the ring's forward
    size = allgather_size_bytes(model, 1, 8192, BF16, tp=8)
    assert size == 2 * 8192 * 128 * 2 == 4 * block
    assert size * 3 / 4 == ring_sent_bytes(model, 1, 8192, 4, BF16, tp=8)[0]


@pytest.mark.parametrize("phase", ["forward", "backward"])
def test_ring_steps_carry_the_formula_bytes_and_split_the_attention(phase):
    cp, block = 4, 1000
    steps = ring_steps(ATTN, cp, block, phase, ring_offsets(1, cp, 8))
    sends = [s for s in steps if s.kind == "send"]
    recvs = [s for s in steps if s.kind == "recv"]
    sent = sum(s.size_bytes for s in sends)
    assert sent == (cp - 1) * block if phase == "forward" else (2 * cp - 1) * block
    assert [s.size_bytes for s in sends] == [s.size_bytes for s in recvs]
    assert {s.stream for s in sends} == {SEND} and {s.stream for s in recvs} == {RECV}
    assert {(s.peer_offset) for s in sends} == {8} and {s.peer_offset for s in recvs} == {-8}
    compute = [s for s in steps if s.kind == "compute"]
    assert len(compute) == cp
    assert sum(s.cost.flops for s in compute) == pytest.approx(ATTN[0].flops)
    for s in compute[1:]:                  # every later step waits for its block's arrival
        assert len(s.after) == 1 and steps[s.after[0]].kind == "recv"


def test_the_ring_closes():
    cp, stride = 4, 8
    rank, seen = 0, []
    for _ in range(cp):
        seen.append(rank)
        send, _ = ring_offsets(rank // stride, cp, stride)
        rank += send
    assert rank == 0 and sorted(seen) == [0, 8, 16, 24]
    for c in range(cp):                    # my next rank receives from me
        send, _ = ring_offsets(c, cp, stride)
        nxt = (c * stride + send) // stride
        assert ring_offsets(nxt, cp, stride)[1] == -send


def _replay(steps, compute_s: float, transfer_s: float) -> float:
    """Every CP rank runs the same steps at the same times (symmetry), so the k-th send
    meets the neighbour's k-th recv at the later of the two starts, and both end with the
    transfer; streams run in order."""
    end: list[float] = [0.0] * len(steps)
    free: dict[str, float] = {}
    sends: list[tuple[int, float]] = []     # (index, start) of each send, in order
    recvs = 0
    for i, step in enumerate(steps):
        start = max([free.get(step.stream, 0.0)] + [end[j] for j in step.after])
        if step.kind == "send":
            sends.append((i, start))
            continue                        # ends with its transfer, at the matching recv
        if step.kind == "compute":
            end[i] = start + compute_s
        else:
            j, sent_at = sends[recvs]
            recvs += 1
            end[i] = end[j] = max(start, sent_at) + transfer_s
            free[steps[j].stream] = end[j]
        free[step.stream] = end[i]
    return max(end)


def test_forward_ring_hides_the_transfer_behind_the_previous_block():
    cp = 4
    steps = ring_steps(ATTN, cp, 1000, "forward", ring_offsets(0, cp, 1))
    assert _replay(steps, 1.0, 0.5) == cp * 1.0              # transfer < one step: hidden
    assert _replay(steps, 1.0, 2.0) == 1.0 + (cp - 1) * 2.0  # transfer-bound: it shows


def test_allgather_variant_gathers_before_and_reduce_scatters_after():
    fwd = allgather_steps(ATTN, 4096, "forward")
    bwd = allgather_steps(ATTN, 4096, "backward")
    assert [(s.kind, s.collective, s.group) for s in fwd] == \
        [("collective", "all_gather", "cp"), ("compute", "", "")]
    assert [(s.kind, s.collective) for s in bwd] == \
        [("compute", ""), ("collective", "reduce_scatter")]
    assert fwd[0].size_bytes == bwd[1].size_bytes == 4096


def test_one_rank_needs_no_ring():
    assert [s.kind for s in ring_steps(ATTN, 1, 1000, "backward", (0, 0))] == ["compute"]

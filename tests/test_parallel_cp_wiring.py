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
def test_ring_sends_cp_minus_1_blocks_forward_and_2cp_minus_1_backward(cp, tp):
    trace = _trace(cp, tp=tp)
    # a rank's K/V: 2 x (2048 / cp) tokens x (32 / tp heads x 128) x 2 bytes
    block = 2 * (S // cp) * (32 // tp * 128) * E
    ops = _cp_ops(trace)
    fwd = [op for op in ops if op.phase == "forward"]
    bwd = [op for op in ops if op.phase == "backward"]
    assert {op.collective for op in ops} == {"all_gather"}
    assert [op.size_bytes for op in fwd] == [ring_step_size_bytes(block, cp)] * (cp - 1)
    assert [op.size_bytes for op in bwd] == \
        [ring_step_size_bytes(2 * block, cp)] * (cp - 1) + [ring_step_size_bytes(block, cp)]
    # each all-gather of S moves (cp - 1) / cp of S per rank: the blocks, in total
    sent = lambda xs: sum(op.size_bytes * (cp - 1) / cp for op in xs)   # noqa: E731
    assert sent(fwd) == pytest.approx((cp - 1) * block, abs=cp)
    assert sent(bwd) == pytest.approx((2 * cp - 1) * block, abs=2 * cp)
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

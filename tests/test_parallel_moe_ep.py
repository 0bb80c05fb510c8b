"""Expert parallelism through the trace generator: the shipped Mixtral 8x7B EP8 scenario's
all-to-alls on the EP communicators with the formula's bytes, a replay of a small EP job,
the imbalance knob in a scenario, bad input as one line naming the field."""

from __future__ import annotations

import dataclasses

import pytest

from simulator.errors import ConfigError
from simulator.models import load_model
from simulator.strategies.parallel import ParallelPlan
from simulator.strategies.frameworks.megatron import MegatronConfig
from simulator.strategies.parallel.generate import build_parallel
from simulator.strategies.parallel.moe import ExpertLoad
from simulator.pipeline import build_setup, run_setup
from simulator.scenario import load_scenario, resolve_scenario
from simulator.strategies import World

MIXTRAL = load_model("mixtral-8x7b")


def _a2a(cls):
    return [op for op in cls.ops if op.kind == "collective" and op.collective == "all_to_all"]


def test_shipped_scenario_runs_four_token_all_to_alls_per_moe_block_on_the_ep_group():
    scn = load_scenario(resolve_scenario("mixtral-8x7b-ep8"), [])
    trace = build_setup(scn, extrapolate_steps=False).trace
    # 32 blocks over pp 4 x vp 8: 8 MoE blocks per stage, 8 micro-batches, 4 token
    # all-to-alls each, every one t k h e = 4096 x 2 x 4096 x 2 = 67,108,864 B (even
    # routing); beside them 2 of the router probabilities (t k fp32 = 32,768 B) and one
    # all-gather of the tokens per expert (8 ranks x 8 experts x int64 = 512 B)
    for p, cls in enumerate(trace.classes):
        ops = _a2a(cls)
        tokens = [op for op in ops if op.size_bytes == 67_108_864]
        assert len(tokens) == 8 * 8 * 4 == len(ops) * 4 // 6
        assert {op.size_bytes for op in ops} == {4096 * 2 * 4096 * 2, 4096 * 2 * 4}
        assert {op.comm for op in ops} == {f"ep.s{p}"}
        assert {op.stream for op in ops} == {"ep"}
        counts = [op for op in cls.ops if op.kind == "collective" and op.comm == f"ep.s{p}"
                  and op.collective == "all_gather"]
        assert len(counts) == 8 * 8 and {op.size_bytes for op in counts} == {8 * 8 * 8}
    # stage 0's 16 data-parallel ranks: two EP groups of 8 consecutive ranks (a server each)
    assert trace.communicators["ep.s0"].groups == (tuple(range(8)), tuple(range(8, 16)))


def _small_trace(load: ExpertLoad | None = None, m: int = 4):
    model = dataclasses.replace(MIXTRAL, layers=4)
    plan = ParallelPlan(pp=2, dp_shard=8, ep=8, dp_mode="zero1")
    cfg = MegatronConfig(micro_batch=1, grad_accum=m, use_distributed_optimizer=True,
                         moe_load=load or ExpertLoad())
    return build_parallel(model, plan, cfg, World(16, 8), seq_len=1024)


def _replay(trace) -> float:
    scn = load_scenario(resolve_scenario("quickstart"),
                        ["cluster.topology=dgx-h100-superpod", "cluster.nodes=2",
                         "training.seq_len=1024"])
    setup = dataclasses.replace(build_setup(scn, extrapolate_steps=False), trace=trace)
    return run_setup(setup).metrics.iteration_time_s


def test_uneven_routing_makes_the_busiest_rank_set_the_pace():
    even, skewed = _small_trace(), _small_trace(ExpertLoad(distribution="zipf", zipf_s=1.0))
    sizes = {op.size_bytes for op in _a2a(skewed.classes[0])}
    # Zipf s = 1 over 8 experts, one per EP rank: the top one takes 1 / H_8 of the group's
    # 8 x 1024 x 2 = 16,384 copies, H_8 = 1 + 1/2 + ... + 1/8 = 761/280: 6,028.3 against
    # the even 2,048, so every all-to-all moves ceil(6028.3) x 4096 x 2 bytes
    assert 16384 * 280 / 761 == pytest.approx(6028.3, abs=0.05)
    assert sizes == {6029 * 4096 * 2, 6029 * 4}       # the tokens; their fp32 probabilities
    assert _replay(skewed) > _replay(even)


def test_the_imbalance_knob_in_a_scenario():
    knob = "strategy.moe_load={distribution: measured, counts: [8, 1, 1, 1, 1, 1, 1, 2]}"
    scn = load_scenario(resolve_scenario("mixtral-8x7b-ep8"), [knob])
    trace = build_setup(scn, extrapolate_steps=False).trace
    # expert 0 gets 8/16 of the 16 x 4096 x 2 copies of its EP group, capped at the group's
    # 8 x 4096 tokens (a token once per expert): 32,768 copies, 4x the even 8,192
    assert {op.size_bytes for op in _a2a(trace.classes[0])} == {32_768 * 4096 * 2,
                                                                32_768 * 4}   # + probs


@pytest.mark.parametrize("override,field", [
    ("strategy.moe_load={distribution: zipf, zipf: 1.2}", "strategy.moe_load.zipf"),
    ("strategy.moe_load={distribution: measured, counts: [1, 2]}",
     "strategy.moe_load.counts"),
    ("strategy.moe_expert_capacity_factor=0", "strategy.moe_expert_capacity_factor"),
    ("strategy.expert_model_parallel_size=3", "strategy.expert_model_parallel_size"),
])
def test_bad_expert_settings_name_the_field(override, field):
    with pytest.raises(ConfigError) as info:
        scn = load_scenario(resolve_scenario("mixtral-8x7b-ep8"), [override])
        build_setup(scn, extrapolate_steps=False)
    assert info.value.field == field


def test_capacity_factor_override_drops_tokens_and_caps_the_all_to_all():
    knob = "strategy.moe_load={distribution: measured, counts: [8, 1, 1, 1, 1, 1, 1, 2]}"
    scn = load_scenario(resolve_scenario("mixtral-8x7b-ep8"),
                        [knob, "strategy.moe_expert_capacity_factor=1.0"])
    trace = build_setup(scn, extrapolate_steps=False).trace
    # capacity 1.0 x 65,536 copies / 8 experts = 8,192: the busiest rank keeps 8,192
    assert {op.size_bytes for op in _a2a(trace.classes[0])} == {8192 * 4096 * 2, 8192 * 4}

"""The dense models issue 17's scenarios need, against their published sizes, and the
shipped 3-D scenarios' plans (built, not replayed: cheap)."""

from __future__ import annotations

import pytest

from simulator.models import load_model, params_total
from simulator.pipeline import strategy_dict
from simulator.scenario import load_scenario, resolve_scenario
from simulator.strategies import parse_strategy


@pytest.mark.parametrize("name, published", [
    ("llama-3-70b", 70.6e9),        # Hugging Face model card: 70.6B
    ("llama-3-405b", 405e9),        # arXiv 2407.21783: 405B
    ("megatron-22b", 22e9),         # arXiv 2205.05198 table 3: 22B
])
def test_parameter_counts_match_published_sizes(name, published):
    assert params_total(load_model(name)) == pytest.approx(published, rel=0.01)


@pytest.mark.parametrize("name, gpus, mesh", [
    ("llama3-70b-fsdp-tp8-256gpu", 256, dict(pp=1, dp_shard=32, tp=8)),
    ("llama3-405b-tp8-pp8-fsdp-512gpu", 512, dict(pp=8, dp_shard=8, tp=8, vp=2)),
    ("gpt3-175b-megatron-tp8-pp16-selene", 128, dict(pp=16, dp_shard=1, tp=8, vp=2)),
])
def test_shipped_3d_scenarios_plan_as_their_comments_say(name, gpus, mesh):
    scn = load_scenario(resolve_scenario(name))
    cfg = parse_strategy(strategy_dict(scn))
    plan = cfg.plan(gpus)
    assert {k: getattr(plan, k) for k in mesh} == mesh
    model = load_model(scn.model)
    plan.check(model, gpus, seq_len=scn.training.seq_len)
    blocks = plan.model_stage_blocks(model.layers)
    assert sum(blocks) == model.layers and len(blocks) == plan.pp * plan.vp

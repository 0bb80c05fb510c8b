"""Megatron-Bridge's DeepSeek-V3 and Kimi K2 rows as validation/parallel runs them: the model
with or without its MTP layer as the row's label says, the recipe's pipeline layout, the
token-dropping rows still refused (cases.yaml)."""

from __future__ import annotations

import pytest

from simulator.pipeline import strategy_dict
from simulator.scenario import scenario_from_dict
from simulator.strategies import parse_strategy
from simulator.validation.parallel import cases as pc
from simulator.validation.parallel import nemo

ROOT = pc.default_root()


SPEC = pc.load(ROOT)
ROWS = {nemo.case_id("blackwell", r): r for r in nemo.table_rows(ROOT, SPEC, "blackwell")}


@pytest.mark.parametrize("case, model, mtp, blocks", [
    # GB300 PP2 x VP8: 16 model stages of Megatron-Bridge's DeepSeek-V3 layout, E + 4 layers
    # first, 4 on each middle stage, 1 + MTP + loss last
    ("parallel/bridge/gb300/26.08/deepseekv3-256gpu-mxfp8-gbs4096", "deepseek-v3", 1,
     (4,) * 15 + (1,)),
    # the 25.11 table's w/o MTP row: the same model without its MTP layer, PP2 x VP4
    ("parallel/bridge/gb300/25.11/deepseekv3-w-o-mtp-256gpu-bf16-gbs4096",
     "deepseek-v3-no-mtp", 0, (8,) * 7 + (5,)),
    ("parallel/bridge/gb300/26.06/kimi-k2-256gpu-mxfp8-gbs4096", "kimi-k2", 0,
     (4,) * 15 + (1,)),
])
def test_a_deepseek_row_runs_its_model_and_layout(case, model, mtp, blocks):
    sc = nemo.scenario_of(ROWS[case], ROOT, SPEC, "x", "blackwell")
    m = pc.model_for(ROOT, SPEC.nemo_models[ROWS[case]["model"]])
    assert (m.name, m.mtp_layers, m.is_mla) == (model, mtp, True)
    # the scenario as a user's file is read: Megatron's training spellings in the strategy
    # (the GB300 MXFP8 preset's fp8_dot_product_attention) move to the training section
    cfg = parse_strategy(strategy_dict(scenario_from_dict(sc, case)))
    plan = cfg.plan(256)
    plan.check(m, 256, seq_len=4096, names=cfg.plan_fields())
    assert tuple(plan.model_stage_blocks(m.layers)) == blocks and sum(blocks) == 61


def test_token_dropping_rows_stay_refused():
    drop = [r for c, r in ROWS.items() if "tokendrop" in c and "deepseekv3" in c]
    assert drop and all("token dropping" in nemo._not_simulated(SPEC, r) for r in drop)
    kept = [r for c, r in ROWS.items() if ("deepseekv3" in c or "kimi" in c)
            and "tokendrop" not in c]
    assert kept and not any(nemo._not_simulated(SPEC, r) for r in kept)

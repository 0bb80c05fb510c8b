"""DeepSeek-V3's Megatron-Bridge presets as the validation rows run them (cases.yaml
``nemo_strategy`` and ``bridge_recipes``): from 26.06 (v0.5.0) the GB200/GB300 MXFP8
presets replay the whole iteration from CUDA graphs (``cuda_graph_impl full_iteration``,
local here) with the EP all-to-all overlap (GB300; GB200's keeps its [mla_up_proj]
recompute, which the overlap refuses here) and GB300's FP8 attention; every release's
DeepSeek-V3 performance config reduces the gradients in bf16 (``grad_reduce_in_fp32``
false)."""

from __future__ import annotations

import pytest

from simulator.scenario import scenario_from_dict
from simulator.strategies import parse_strategy
from simulator.validation.parallel import cases, nemo

NEW = ("26.06", "26.06.01", "26.08")


def _rows(model_prefix: str = "DeepSeekV3"):
    spec, root = cases.load(), cases.default_root()
    for kind in nemo.KINDS:
        for row in nemo.table_rows(root, spec, kind):
            if str(row["model"]).startswith(model_prefix):
                yield spec, root, kind, row


def _mxfp8(gpu: str):
    for spec, root, kind, row in _rows():
        if row["model"] == "DeepSeekV3" and nemo.gpu_of(row) == gpu \
                and str(row["precision"]).strip() == "MXFP8":
            yield nemo.release_of(row), nemo.scenario_of(row, root, spec, "x", kind)


@pytest.mark.parametrize("gpu, overlap, fp8_attention, recompute", [
    ("GB300", True, True, False),     # graphs, the EP overlap, FP8 attention; recompute []
    ("GB200", False, False, True),    # graphs; keeps [mla_up_proj], which the overlap refuses
])
def test_mxfp8_from_26_06_runs_its_preset(gpu, overlap, fp8_attention, recompute):
    seen = set()
    for release, scn in _mxfp8(gpu):
        s = scn["strategy"]
        new = release in NEW
        assert (s.get("cuda_graph_impl") == "local") == new, release
        assert bool(s.get("overlap_moe_expert_parallel_comm")) == (new and overlap), release
        assert bool(s.get("fp8_dot_product_attention")) == (new and fp8_attention), release
        assert ("recompute_modules" in s) == (not new or recompute), release
        seen.add(release)
    assert set(NEW) | {"26.04"} <= seen


def test_the_gb300_scenario_takes_fp8_attention_as_a_training_setting():
    (scn,) = [scn for release, scn in _mxfp8("GB300") if release == "26.08"]
    s = scenario_from_dict(scn, "x")
    assert s.training.fp8_attention is True
    strategy = parse_strategy(s.strategy)
    assert strategy.cuda_graphs and strategy.overlap_moe_expert_parallel_comm


def test_every_deepseek_v3_row_reduces_its_gradients_in_bf16():
    rows = 0
    for spec, root, kind, row in _rows():
        if row["model"] not in spec.nemo_models:
            continue
        scn = nemo.scenario_of(row, root, spec, "x", kind)
        assert scn["strategy"].get("grad_reduce_in_bf16") is True, row["model"]
        rows += 1
    assert rows > 20
    # bf16 gradient buffers: 2 bytes a parameter where Megatron's default keeps 4 (fp32)
    (scn,) = [scn for release, scn in _mxfp8("GB300") if release == "26.04"]
    assert parse_strategy(scn["strategy"]).grad_reduce_bytes() == 2
    scn["strategy"].pop("grad_reduce_in_bf16")
    assert parse_strategy(scn["strategy"]).grad_reduce_bytes() == 4

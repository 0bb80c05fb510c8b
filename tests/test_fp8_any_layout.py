"""Transformer Engine's per-tensor FP8 recipes on a GPU whose FP8 GEMMs take any operand
layout (datacenter Blackwell): one FP8 copy per cast, no transposes (simulator/models/fp8.py,
TE's ``nvte_is_non_tn_fp8_gemm_supported``). Hopper keeps its transposed copies."""

from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.hardware import ANY_LAYOUT_FP8_FAMILIES, gpu_spec
from simulator.models.costs import layer_costs
from simulator.models.finetune import Finetune
from simulator.models.spec import load_model
from simulator.pipeline import build_setup
from simulator.scenario import scenario_from_dict

T = 1024
MODEL = load_model("llama-2-7b")


def _block(recipe: str, any_layout: bool, model=MODEL):
    return layer_costs(replace(model, fp8_any_layout=any_layout), 1, T, "fp8",
                       fp8_recipe=recipe)[1]


def _op(ops, name: str):
    return next(o for o in ops if o.name == name)


@pytest.mark.parametrize("recipe, hopper, blackwell", [("delayed", 4, 3), ("current", 6, 5)])
def test_a_cast_writes_one_fp8_copy_where_any_layout_runs(recipe, hopper, blackwell):
    h = MODEL.hidden
    elements = T * h + h * 3 * h          # x [T, h] and w [h, 3h] of the QKV projection
    # TN-only (Hopper): read 2, (amax 2 under current), write the copy and its transpose
    assert _op(_block(recipe, False).forward, "te_cast_transpose.qkv_proj"
               ).bytes_accessed == hopper * elements
    # any layout: the row-wise copy serves both usages, one byte per element less
    assert _op(_block(recipe, True).forward, "te_cast_transpose.qkv_proj"
               ).bytes_accessed == blackwell * elements


def test_mxfp8_and_torchao_keep_their_copies():
    for recipe in ("mxfp8", "tensorwise"):
        assert _block(recipe, True) == _block(recipe, False)


def test_an_fp8_stored_weight_is_not_transposed_where_any_layout_runs():
    lora = replace(MODEL, finetune=Finetune(mode="lora", rank=16, alpha=32.0,
                                            targets=("o", "qkv"), base_precision="fp8"))
    h = MODEL.hidden
    hopper = [o for o in _block("delayed", False, lora).backward
              if o.name.startswith("fp8_transpose.")]
    assert hopper and _op(hopper, "fp8_transpose.qkv_proj.dgrad").bytes_accessed == 2 * 3 * h * h
    assert not [o for o in _block("delayed", True, lora).backward
                if o.name.startswith("fp8_transpose.")]


def test_the_families_that_run_any_layout_are_blackwells():
    assert {g: gpu_spec(g).family in ANY_LAYOUT_FP8_FAMILIES
            for g in ("H100-SXM", "H200-SXM", "B200", "GB200", "B300", "GB300", "MI300X",
                      "MI355X")} == {"H100-SXM": False, "H200-SXM": False, "B200": True,
                                     "GB200": True, "B300": True, "GB300": True,
                                     "MI300X": False, "MI355X": False}


def _cast_bytes(topology: str, strategy: dict) -> float:
    """Forward cast bytes of one step of Llama 3 8B at seq 1,024, FP8 delayed, rank class 0."""
    scn = scenario_from_dict({
        "name": "layout", "model": "llama-3-8b", "cluster": {"topology": topology},
        "strategy": strategy, "simulation": {"variability": "none"},
        "training": {"seq_len": 1024, "micro_batch": 1, "precision": "fp8",
                     "fp8_recipe": "delayed"}})
    ops = build_setup(scn, extrapolate_steps=False).trace.classes[0].ops
    return sum(o.bytes_accessed for o in ops if o.name.startswith("te_cast_transpose.")
               and o.phase == "forward")


@pytest.mark.parametrize("strategy", [{"name": "fsdp"}, {"name": "megatron"}])
def test_every_strategy_casts_as_its_gpu_runs(strategy):
    """The data-parallel generators (layer_costs) and the parallel one (build_parallel) both
    take the GPU's layout: on B200 each forward cast moves 3/4 of the bytes it moves on H100."""
    assert _cast_bytes("dgx-b200", strategy) == pytest.approx(
        0.75 * _cast_bytes("dgx-h100", strategy), rel=1e-12)

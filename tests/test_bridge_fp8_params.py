"""Megatron-Bridge's precision configs hold the weights as FP8 parameters
(``fp8_param_gather``, ``cases.yaml`` ``bridge_precision_strategy``): every FP8 current-
scaling pre-training row of its H100 and Blackwell tables runs with them; MXFP8 rows leave the
setting unset (Megatron-Core gathers MXFP8 parameters in bf16, priced as without it), BF16
and NVFP4 rows have no FP8 parameters, and a LoRA row's frozen FP8 base is its
``finetune.base_precision`` instead. The row's note says so."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

from simulator.validation.parallel import cases, nemo


def _scenarios():
    root, spec = cases.default_root(), cases.load()
    for kind in ("bridge", "blackwell"):
        for row in nemo.table_rows(root, spec, kind):
            ran, _ = nemo.preset_layout(spec, row)
            if nemo._not_simulated(spec, ran):
                continue
            yield kind, row, nemo.scenario_of(ran, root, spec, nemo.case_id(kind, row), kind)


def test_current_scaling_pretraining_rows_and_only_they_hold_fp8_parameters():
    seen = Counter()
    for kind, row, scn in _scenarios():
        recipe = scn["training"].get("fp8_recipe")
        task = str(row.get("task") or "pretrain")
        fp8_params = bool(scn["strategy"].get("fp8_param_gather"))
        assert fp8_params == (recipe == "current" and task == "pretrain"), nemo.case_id(kind, row)
        seen[(kind, recipe, fp8_params)] += 1
    # both tables have such rows, and MXFP8 rows that do not set it
    assert seen[("bridge", "current", True)] and seen[("blackwell", "current", True)]
    assert seen[("blackwell", "mxfp8", False)]


def test_a_lora_rows_base_is_held_in_fp8_by_its_finetune_setting():
    lora = [scn for _, row, scn in _scenarios() if row.get("task") == "LoRA"
            and scn["training"].get("fp8_recipe") == "current"]
    assert lora
    for scn in lora:
        assert scn["strategy"]["fp8_param_gather"] is False
        assert scn["training"]["finetune"]["base_precision"] == "fp8"


def test_the_rows_note_says_it_ran_fp8_parameters():
    root, spec = cases.default_root(), cases.load()
    row = next(r for r in nemo.table_rows(root, spec, "bridge")
               if str(r["precision"]).strip() == "FP8" and r["model"] == "LLAMA3_70B")
    fake = SimpleNamespace(oom=False, iteration_time_s=1.0, peak_memory_gib=10.0)
    out = nemo._row("bridge", row, root, spec, lambda scn, case: fake)
    assert "(current scaling with FP8 parameters)" in out["note"]

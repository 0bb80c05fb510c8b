"""The FSDP tables of the training validation (llm-foundry, torchtitan): the copied rows,
the declared split, the scenario of each row, the gates, and the fitted family factors
(simulator/data/training_fit.yaml, checked by the fit's --check).

Cheap: a handful of rows are simulated; the full run is `clustersim validate training`.
"""

import csv
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simulator.compute import ComputeModel
from simulator.compute.training_fit import IDENTITY, FamilyFit, families, family_of
from simulator.hardware import gpu_spec
from simulator.models import load_model
from simulator.models.costs import params_total
from simulator.validation import known_misses as km
from simulator.validation.training import fit as tfit
from simulator.validation.training.tables import load_rows
from simulator.validation.training.tables_report import gated_cases
from simulator.validation.training.tables_run import (MEDIAN_GATE, ROW_GATE, SCALING_GATE,
                                                      _model_file, run_rows, scaling_rows)

ROOT = Path(__file__).resolve().parents[1] / "validation" / "training"
SHARED = Path("/work/shared/validation-data/training")
ROWS = load_rows()
BY_ID = {r.row_id: r for r in ROWS}


def _csv(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.parametrize("name", ["llm_foundry_fsdp.csv", "torchtitan_a100_64gpu.csv",
                                  "torchtitan_h100.csv"])
def test_copies_keep_every_row_and_its_source(name):
    rows = _csv(ROOT / name)
    assert rows and all(r["source"] for r in rows)
    if (SHARED / name).is_file():
        assert rows == _csv(SHARED / name)


def test_every_row_is_loaded_with_the_declared_split():
    lf = _csv(ROOT / "llm_foundry_fsdp.csv")
    tt = _csv(ROOT / "torchtitan_a100_64gpu.csv")
    th = _csv(ROOT / "torchtitan_h100.csv")
    ao = _csv(ROOT / "torchao_float8.csv")      # published outside shared/: validation only
    assert len(ROWS) == len(lf) + len(tt) + len(th) + len(ao) == 172
    for r, raw in zip(ROWS, lf + tt + th + ao):
        want = "calibration" if r.table not in ("torchtitan", "torchao") \
            and raw["gpus"] == "8" else "validation"
        assert r.split == want
        assert r.source == raw["source"]
    # amp_fp8 (all 8-GPU rows, calibration) is simulated through the FP8 model and
    # reported, never dropped (it was "not modelled" before FP8 GEMMs existed)
    fp8 = [r for r in ROWS if r.precision == "amp_fp8"]
    assert len(fp8) == 7 and all(r.not_modelled == "" and r.split == "calibration"
                                 and r.scenario["training"]["precision"] == "fp8"
                                 for r in fp8)


def test_mpt_parameter_counts_equal_the_published_num_params(tmp_path):
    for raw in _csv(ROOT / "llm_foundry_fsdp.csv"):
        model = load_model(_model_file(f"mpt-{raw['model']}", int(raw["seq_len"]), tmp_path))
        assert params_total(model) == int(raw["num_params"]), raw["model"]


def test_scenarios_follow_the_published_setup():
    h = BY_ID["llmfoundry/h100_amp_bf16/13b_s2048_g64_mb2"].scenario
    assert h["cluster"] == {"topology": "dgx-h100-superpod", "nodes": 8}
    assert h["strategy"]["reduce_dtype"] == "fp32"           # mixed_precision DEFAULT
    assert h["strategy"]["activation_checkpointing"] is False
    assert h["training"] == {"micro_batch": 2, "seq_len": 2048, "grad_accum": 1,
                             "precision": "bf16", "flash_attention": True,
                             "attention": "flash2"}     # the flash-attn 2 package
    f = BY_ID["llmfoundry/h100_amp_fp8/1b_s512_g8_mb56"].scenario["training"]
    assert (f["precision"], f["fp8_recipe"]) == ("fp8", "delayed")   # Transformer Engine
    a = BY_ID["llmfoundry/a100_bf16/70b_s2048_g32_mb2"].scenario
    assert a["cluster"]["topology"] == "a100-roce-leaf-spine" and a["cluster"]["nodes"] == 4
    assert a["strategy"]["reduce_dtype"] == "bf16"           # mixed_precision PURE
    assert a["strategy"]["activation_checkpointing"] is True
    assert a["training"]["grad_accum"] == 16
    t = BY_ID["torchtitan/a100/llama-3-70b_full_mb1"].scenario
    assert t["model"] == "llama-3-70b" and t["training"]["seq_len"] == 8192
    assert t["strategy"]["reshard_after_forward"] is True
    assert t["strategy"]["activation_checkpointing"] == "full"
    s = BY_ID["torchtitan/a100/llama-2-13b_selective-layer_mb2"].scenario["strategy"]
    assert (s["activation_checkpointing"], s["selective_ac_option"]) == ("selective", 2)


def test_a_few_rows_simulate_with_the_error_formula():
    ids = ["llmfoundry/a100_amp_bf16/125m_s2048_g8_mb40",
           "llmfoundry/h100_amp_fp8/1b_s512_g8_mb56",
           "torchtitan/a100/llama-2-70b_selective-layer_mb2_oom-v1"]
    df = run_rows([BY_ID[i] for i in ids])
    ran = df.iloc[0]
    assert ran["not_modelled"] == "" and ran["simulated"] > 0
    assert math.isclose(ran["error"], (ran["simulated"] - 142830) / 142830)
    assert ran["ok"] == (abs(ran["error"]) <= ROW_GATE)
    fp8 = df.iloc[1]                 # simulated through the FP8 model since it exists
    assert fp8["not_modelled"] == "" and fp8["simulated"] > 0
    assert math.isclose(fp8["error"], (fp8["simulated"] - 70315) / 70315)
    assert "OOM" in df.iloc[2]["not_modelled"]


def _df(rows):
    cols = ["case", "table", "gpu_type", "split", "model", "gpus", "seq_len", "micro_batch",
            "measured", "simulated", "error", "ok", "not_modelled", "oom", "precision"]
    return pd.DataFrame([dict(zip(cols, (*r, "amp_bf16")[:len(cols)])) for r in rows],
                        columns=cols)


def test_gates_per_gpu_type_and_weak_scaling_arithmetic():
    df = _df([
        ("a8", "t", "H100", "calibration", "m", 8, 2048, 2, 100.0, 110.0, 0.10, True, "", False),
        ("a16", "t", "H100", "validation", "m", 16, 2048, 2, 98.0, 105.0, 7 / 98, True, "",
         False),
        ("a32", "t", "H100", "validation", "m", 32, 2048, 2, 96.0, 97.0, 1 / 96, True, "",
         False),
        ("b64", "t", "A100", "validation", "m", 64, 2048, 1, 50.0, 60.0, 0.2, False, "", False),
        # an FP8 run of the same model on fewer GPUs is no baseline of the bf16 ones
        ("f4", "t", "H100", "calibration", "m", 4, 2048, 2, 300.0, 200.0, -1 / 3, False, "",
         False, "amp_fp8"),
    ])
    sc = scaling_rows(df).set_index("case")
    assert set(sc["baseline"]) == {"a8"}
    assert math.isclose(sc.loc["a16/scaling", "measured"], 98 / 100)
    assert math.isclose(sc.loc["a16/scaling", "error"], 105 / 110 - 98 / 100)
    assert sc.loc["a32/scaling", "ok"] == (abs(97 / 110 - 96 / 100) <= SCALING_GATE)
    cases = {c["case"]: c for c in gated_cases(df)}
    assert cases["training/a8"]["ok"] is None                 # calibration: reported only
    med = np.median([7 / 98, 1 / 96])
    assert cases["training/fsdp-tables/H100/median"]["ok"] == (med <= MEDIAN_GATE)
    assert cases["training/fsdp-tables/A100/median"]["ok"] is False
    assert cases["training/b64"]["ok"] is False


def test_framework_groups_gate_at_7_and_20_and_scale_only_the_same_job():
    from simulator.validation.training.tables_run import (FRAMEWORK_GATES, MIN_MEDIAN_ROWS,
                                                          gates)
    assert gates("H100") == (MEDIAN_GATE, ROW_GATE) and gates("A100") == (0.05, 0.15)
    assert gates("H100-500W") == gates("H200") == FRAMEWORK_GATES == (0.07, 0.20)
    # a group of fewer than 10 validation rows gates its rows, not its median
    rows = [(f"t{i}", "tt", "H200", "validation", "m", 16, 8192, 2, 100.0, 118.0, 0.18,
             True, "", False) for i in range(MIN_MEDIAN_ROWS - 1)]
    cases = {c["case"]: c for c in gated_cases(_df(rows))}
    assert "training/fsdp-tables/H200/median" not in cases
    assert cases["training/t0"]["ok"] is True and cases["training/t0"]["bound"] == "<= 20%"
    rows.append(("t9", "tt", "H200", "validation", "m", 16, 8192, 2, 100.0, 118.0, 0.18,
                 True, "", False))
    cases = {c["case"]: c for c in gated_cases(_df(rows))}
    assert cases["training/fsdp-tables/H200/median"]["ok"] is False       # 18% > 7%
    # weak scaling: the baseline is the same job (compile, mesh) on fewer GPUs
    df = _df([("e8", "tt", "H200", "calibration", "m", 8, 8192, 2, 100.0, 100.0, 0.0, True,
               "", False),
              ("c8", "tt", "H200", "calibration", "m", 8, 8192, 2, 120.0, 110.0, -1 / 12,
               True, "", False),
              ("c64", "tt", "H200", "validation", "m", 64, 8192, 2, 118.0, 108.0, -10 / 118,
               True, "", False)])
    df["job"] = ["eager", "compiled", "compiled"]
    sc = scaling_rows(df).set_index("case")
    assert sc.loc["c64/scaling", "baseline"] == "c8"
    assert math.isclose(sc.loc["c64/scaling", "error"], 108 / 110 - 118 / 120)


def test_family_fit_scales_the_kernel_time_and_adds_the_overhead():
    gpu = gpu_spec("A100-SXM4-80GB")
    base = ComputeModel(gpu, fit=IDENTITY)
    fit = FamilyFit("X", ("bf16",), IDENTITY.with_values({"matmul": 1.5}).time_factor, 7e-6)
    fitted = ComputeModel(gpu, fit=fit)
    launch = base.kernel_launch_s
    t0 = base.op_time_s("matmul", 1e12, 1e6, "bf16") - launch
    assert math.isclose(fitted.op_time_s("matmul", 1e12, 1e6, "bf16"), 1.5 * t0 + launch + 7e-6)
    e0 = base.op_time_s("elementwise", 0, 1e9, "bf16")
    assert math.isclose(fitted.op_time_s("elementwise", 0, 1e9, "bf16"), e0 + 7e-6)
    # fp16 is bf16's price (the same kernels); another precision is the roofline's
    assert fitted.op_time_s("matmul", 1e12, 1e6, "fp16") == fitted.op_time_s("matmul", 1e12,
                                                                            1e6, "bf16")
    assert fitted.op_time_s("matmul", 1e12, 1e6, "tf32") == base.op_time_s("matmul", 1e12, 1e6,
                                                                          "tf32")
    assert fitted.scaled(2.0).fit is fit


def test_a_fit_reaches_its_generation_and_no_other():
    h100 = family_of(gpu_spec("H100-SXM"))
    assert h100.name == "H100" and family_of(gpu_spec("A100-PCIE-40GB")).name == "A100"
    assert family_of(gpu_spec("H200-SXM")) is h100                     # hopper, by family
    assert family_of(gpu_spec("H100-SXM-96GB-500W")) is h100
    b200 = family_of(gpu_spec("B200"))                 # blackwell: its own fit (Megatron rows)
    assert b200.name == "B200" and family_of(gpu_spec("GB200")) is b200
    assert b200 is not h100 and b200.time_factor["matmul"] != h100.time_factor["matmul"]
    # the 500 W part runs the H100's fit at its capped clocks: slower matmuls, not faster
    capped = ComputeModel(gpu_spec("H100-SXM-96GB-500W"))
    full = ComputeModel(gpu_spec("H100-SXM"))
    assert capped.fit is full.fit
    assert capped.op_time_s("matmul", 1e13, 1e8, "bf16") > full.op_time_s("matmul", 1e13, 1e8,
                                                                            "bf16")


def test_shipped_fit_names_its_rows_and_is_in_step():
    fams = families()
    # B200: blackwell_fit's own; B300: Transformer Engine's B300 GEMM benchmark, not fitted
    assert set(fams) == set(tfit.FAMILIES) | {"B200", "B300"}
    for name, (gpus, fit) in fams.items():
        assert all(family_of(gpu_spec(g)) == fit for g in gpus)
    data = tfit.read_fit()
    for name, entry in data["families"].items():
        if name not in tfit.FAMILIES:
            continue                                     # test_validation_blackwell.py
        rows = entry["calibration_rows"]
        assert len(rows) > 5 * len(tfit.PARAMS)          # many more rows than constants
        assert all(BY_ID[r].split == "calibration" for r in rows)
        assert all("fitted by" in entry["time_factor"][g]["source"] for g in tfit.GROUPS)
    assert tfit.check() == []                             # the --check: replays 6 rows


def test_check_fails_when_the_file_is_out_of_step(tmp_path):
    data = tfit.read_fit()
    fam = next(iter(data["families"]))
    rows = data["families"][fam]["calibration_rows"]
    rows[next(iter(rows))] += 1.0                         # a measured value that differs
    path = tmp_path / "fit.yaml"
    tfit.write_yaml(path, data, "")
    problems = tfit.check(path, replay=False)
    assert any(fam in p and "differ" in p for p in problems)


def test_known_misses_of_the_tables_are_table_cases():
    ids = {f"training/{r.row_id}" for r in ROWS}
    for k in km.load():
        if k.startswith(("training/llmfoundry/", "training/torchtitan/")):
            assert k.removesuffix("/scaling") in ids, k
        elif k.startswith("training/fsdp-tables/"):      # a GPU type's median gate
            assert k.split("/")[2] in {r.gpu_type for r in ROWS} and k.endswith("/median"), k

"""torchtitan's published H100 runs (validation/training/torchtitan_h100.csv): the copy, the
declared split, and each row's scenario against the published setup."""

import csv
from pathlib import Path

from simulator.validation.training import fit as tfit
from simulator.validation.training.tables import load_rows
from simulator.validation.training.tables_titan import H100_GPU, H100_LABEL

ROOT = Path(__file__).resolve().parents[1] / "validation" / "training"
ROWS = [r for r in load_rows() if r.table == "torchtitan_h100"]
BY_ID = {r.row_id: r for r in ROWS}


def _raw():
    with open(ROOT / "torchtitan_h100.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def test_every_row_is_kept_in_file_order_with_its_split_and_source():
    raw = _raw()
    assert len(ROWS) == len(raw) == 35
    for r, x in zip(ROWS, raw):
        assert r.source == x["source"] and r.measured == float(x["value"])
        assert r.split == ("calibration" if x["gpus"] == "8" else "validation")
    assert sum(r.split == "calibration" for r in ROWS) == 7


def test_the_fit_never_sees_these_rows():
    # their GPU is reported apart (H100-500W, H200), so the eager stack's fit keeps its rows
    assert {r.gpu_type for r in ROWS} == {H100_LABEL, "H200"}
    fitted = {r.row_id for rows in tfit.calibration_rows().values() for r in rows}
    assert not fitted & set(BY_ID)


def test_fsdp_rows_follow_the_published_setup():
    r = BY_ID["torchtitan/h100-2412/llama-3-8b_fsdp8_compile_mb2_s8192"]
    s = r.scenario
    assert s["model"] == "llama-3-8b"
    assert s["cluster"] == {"topology": "dgx-h100",
                            "topology_set": {"params.node.gpu": H100_GPU}}
    assert s["training"] == {"micro_batch": 2, "seq_len": 8192, "grad_accum": 1,
                             "precision": "bf16", "compile": True,
                             # SDPA's flash backend; the reference code op by op
                             "attention": "flash2", "elementwise": "eager"}
    assert s["strategy"]["activation_checkpoint"] == {"mode": "selective",
                                                     "selective_ac_option": "op"}
    assert (s["strategy"]["param_dtype"], s["strategy"]["reduce_dtype"]) == ("bf16", "fp32")
    eager = BY_ID["torchtitan/h100-2412/llama-3-8b_fsdp128_mb2_s8192"].scenario
    assert eager["training"]["compile"] is False
    assert eager["cluster"]["topology"] == "hgx-h100-roce" and eager["cluster"]["nodes"] == 16


def test_model_parallel_rows_follow_the_published_setup():
    cp = BY_ID["torchtitan/h100-2412/llama-3-8b_fsdp2_cp4_compile_f8tensorwise_mb1_s131072"]
    par = cp.scenario["strategy"]["parallelism"]
    assert (par["data_parallel_shard_degree"], par["context_parallel_degree"]) == (2, 4)
    assert cp.scenario["training"]["precision"] == "fp8"
    assert cp.scenario["strategy"]["activation_checkpoint"] == {"mode": "full"}
    # PP: the local batch of 32 split into one microbatch per pipeline rank, whatever the
    # schedule (torchtitan 9dec370's default: pipeline_parallel_degree microbatches)
    pp = BY_ID["torchtitan/h100-2412/llama-3-405b_fsdp8_tp8_pp8async-interleaved1f1b"
               "_compile_f8tensorwise_mb32_s8192"].scenario
    assert pp["strategy"]["parallelism"]["pipeline_parallel_schedule"] == "Interleaved1F1B"
    assert (pp["training"]["micro_batch"], pp["training"]["grad_accum"]) == (32 // 8, 8)
    one = BY_ID["torchtitan/h100-2412/llama-3-405b_fsdp8_tp8_pp8async-1f1b"
                "_compile_f8tensorwise_mb32_s8192"].scenario
    assert (one["training"]["micro_batch"], one["training"]["grad_accum"]) == (4, 8)
    assert one["strategy"]["parallelism"]["enable_async_tensor_parallel"] is True


def test_h200_and_2408_rows_and_what_is_not_modelled():
    h = BY_ID["torchtitan/h200-2506/llama-3-8b_fsdp64_compile_f8tensorwise_mb2_s8192"]
    assert h.gpu_type == "H200" and h.scenario["cluster"]["nodes"] == 8
    assert h.scenario["cluster"]["topology_set"] == {"params.node.gpu": "H200-SXM"}
    assert h.scenario["strategy"]["parallelism"]["data_parallel_shard_degree"] == 64
    # the 2024-08 rows print no compile column: their train config (3faaa1a0) compiles
    old = BY_ID["torchtitan/h100-2408/llama-3-405b_fsdp16_tp8_compile_mb2_s8192"]
    assert old.scenario["training"]["compile"] is True
    # float8 rowwise runs torchao's rowwise recipe; every row is modelled
    assert not [r for r in ROWS if r.not_modelled]
    rowwise = [r for r in ROWS if r.precision == "float8 rowwise"]
    assert len(rowwise) == 4
    assert all(r.scenario["training"]["fp8_recipe"] == "rowwise" for r in rowwise)
    assert all("fp8_recipe" not in r.scenario["training"] for r in ROWS
               if r.precision == "float8 tensorwise")

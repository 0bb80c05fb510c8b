"""The accuracy envelope (simulator/validation/envelope.py): the shipped ground is in step
with the validation results, the nearest case and the distance follow the documented
formula, the axes that leave the ground are named, the median is over the source rows, and
run / compare / capacity print it and put it in their JSON."""

from __future__ import annotations

from pathlib import Path

import csv
import json
import math
import statistics

import pytest

from simulator.validation.envelope import (MIN_ROWS, SHIPPED, Query, distance, envelope,
                                           family_of, generation, grouped_lines, load_ground,
                                           trust_sentence, vendor)
from simulator.validation.envelope_data import summary_text, validated_rows
from simulator.validation.common import read_yaml
from simulator.validation.paths import data_dir
from simulator.validation.training.tables_titan import H100_GPU
from test_cli import run_main

TRAIN = data_dir("training") / "report" / "results.csv"
TABLES = data_dir("training") / "report" / "fsdp_tables.csv"
GPU = data_dir("gpu") / "results.csv"
PARALLEL = data_dir("parallel") / "results.csv"
FINETUNE = data_dir("finetune") / "results.csv"


def _csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_shipped_summary_is_in_step_with_the_validation_results():
    # regenerate with: python -m simulator.validation.envelope_data
    assert SHIPPED.read_text() == summary_text(validated_rows())


def test_the_ground_holds_every_throughput_case_with_its_error():
    ground = {r["case"]: r for r in load_ground()}
    train = [r for r in _csv(TRAIN) if r["metric"] != "scaling_efficiency"]
    gen = [r for r in _csv(GPU) if r["kind"] == "generated"]
    tables = [r for r in _csv(TABLES) if r["error"] not in ("", "nan")]
    h100 = [r for r in _csv(PARALLEL) if r["kind"] in ("nemo", "bridge")
            and r["error"] not in ("", "nan")]
    blackwell = [r for r in _csv(PARALLEL) if r["kind"] in ("blackwell", "simumax")
                 and r["error"] not in ("", "nan")]
    selene = [r for r in _csv(PARALLEL) if r["kind"] == "iteration"
              and r["error"] not in ("", "nan")]
    mlperf = [r for r in _csv(PARALLEL) if r["kind"] == "mlperf"
              and r["error"] not in ("", "nan")]
    lora = [r for r in _csv(FINETUNE) if r["round"] in ("v4.1", "v5.0")]
    assert len(tables) > 100 and len(h100) >= 20 and len(selene) >= 4 and len(blackwell) >= 40
    assert len(mlperf) == 6
    assert len(ground) == len(train) + len(tables) + len(gen) + len(h100) + len(selene) + \
        len(blackwell) + len(mlperf) + len(lora)
    for r in lora:      # MLPerf LoRA rows: held out, fine-tuning, step time as throughput
        g = ground[f"finetune/{r['round']}/{r['system']}"]
        assert (g["split"], g["finetune"], g["family"], g["gpus"]) == \
            ("validation", "lora", "megatron", int(r["gpus"]))
        assert g["error"] == pytest.approx(float(r["measured_s"]) / float(r["simulated_s"]) - 1,
                                           rel=1e-5)
    for r in mlperf:        # MLPerf GPT-3 rows: held out, step time as throughput
        g = ground[r["case"]]
        assert (g["split"], g["family"], g["metric"]) == ("validation", "megatron", "steps_per_s")
        assert g["error"] == pytest.approx(float(r["measured"]) / float(r["simulated"]) - 1,
                                           rel=1e-5)
    for r in blackwell:     # Blackwell rows carry their GPU; SimuMax's with the declared split
        g = ground[r["case"]]
        assert g["gpu"] == r["gpu"] and g["family"] == "megatron"
        assert g["split"] == ("calibration" if r["note"].startswith("calibration")
                              else "validation")
    for r in tables:    # llm-foundry / torchtitan rows, with split.yaml's split
        g = ground[f"training/{r['case']}"]
        # torchtitan's H100 runs and torchao's are its own strategy's (the A100 ones: fsdp)
        family = "torchtitan" if r["table"] in ("torchtitan_h100", "torchao") else "fsdp"
        assert (g["split"], g["model"], g["gpus"], g["family"], g["metric"]) == \
            (r["split"], r["model"], int(r["gpus"]), family, "tokens_per_s")
        assert g["gpu"] == {"H100-500W": H100_GPU, "torchao H100": "H100-SXM",
                            "torchao MI300X": "MI300X"}.get(r["gpu_type"], g["gpu"])
        assert g["gpu"].startswith(r["gpu_type"].removesuffix("-500W").removeprefix("torchao "))
        assert g["precision"] == {"amp_bf16": "bf16", "amp_fp8": "fp8", "bf16": "bf16",
                                  "float8 tensorwise": "fp8", "float8 rowwise": "fp8",
                                  "float8 rowwise_with_gw_hp": "fp8"}.get(
                                      r["precision"], r["precision"])
        assert g["error"] == pytest.approx(float(r["error"]), rel=1e-5)
    for r in train:
        g = ground[f"training/{r['case']}"]
        assert (g["split"], g["model"], g["gpus"], g["precision"]) == \
            (r["split"], r["model"], int(r["gpus"]), r["precision"])
        assert g["error"] == pytest.approx(float(r["error"]), rel=1e-5)
    gpu_cases = read_yaml(data_dir("gpu") / "cases.yaml")["generated"]
    for r in gen:       # a step-time case as a throughput error: measured / simulated - 1
        g = ground[r["case"]]
        split = gpu_cases[r["case"].split("/")[1]].get("split", "validation")
        assert g["gpu"] == "H200-SXM" and g["gpus"] == 1 and g["split"] == split
        assert g["error"] == pytest.approx(
            float(r["measured_s"]) / float(r["simulated_s"]) - 1, rel=1e-5)
    for r in h100:      # NVIDIA's DGX H100 tables: Megatron's own family, never fitted on
        g = ground[r["case"]]
        assert (g["family"], g["gpu"], g["split"], g["metric"]) == \
            ("megatron", "H100-SXM", "validation", "tokens_per_s")
        assert g["moe"] == ("EP" in r["mode"])
        assert g["error"] == pytest.approx(float(r["error"]), rel=1e-5)
    for r in selene:    # Megatron-LM on Selene: an iteration time as a throughput error
        g = ground[r["case"]]
        assert (g["family"], g["gpu"], g["precision"], g["metric"]) == \
            ("megatron", "A100-SXM4-80GB", "fp16", "steps_per_s")
        assert g["error"] == pytest.approx(
            float(r["measured"]) / float(r["simulated"]) - 1, rel=1e-5)
    fsdp = ground["training/gpt3_175b_fsdp_128gpu"]
    assert (fsdp["family"], fsdp["gpu"], fsdp["nodes"]) == ("fsdp", "A100-SXM4-40GB", 16)
    assert ground["training/tf2_maskrcnn_b2_1gpu_tf32"]["family"] == "tensorflow"


def test_distance_is_the_documented_formula():
    row = {"family": "fsdp", "gpu": "A100-SXM4-40GB", "precision": "fp16", "params": 175e9,
           "gpus": 128}
    q = Query("fsdp", "x", 7e9, "H100-SXM", 16384, "bf16")
    want = 2 + 0.25 + abs(math.log10(7e9 / 175e9)) + abs(math.log10(16384 / 128))
    assert distance(q, row) == pytest.approx(want)
    q2 = Query("fsdp", "x", 175e9, "A100-SXM4-80GB", 128, "tf32")
    assert distance(q2, row) == pytest.approx(0.5 + 1.0)        # same generation, other precision


def test_a_validated_configuration_finds_itself_inside_the_ground():
    rows = [r for r in _csv(TRAIN) if r["case"] == "bert_large_seq128_8gpu_amp"]
    # DLE's PyTorch BERT pads its vocabulary to 30,528 (validation/training/models/)
    e = envelope(Query.of("ddp", "bert-large-pad8", 335180608, "A100-SXM4-80GB", 8, "fp16"))
    assert e.distance == 0 and e.differs == []
    assert e.nearest["case"] == "training/bert_large_seq128_8gpu_amp"   # first of the tie
    assert e.nearest["error"] == pytest.approx(float(rows[0]["error"]), rel=1e-5)
    twin = [r for r in _csv(TRAIN) if r["case"] == "bert_large_seq512_8gpu_amp"][0]
    assert [r["case"] for r in e.tied] == ["training/bert_large_seq512_8gpu_amp"]
    lo, hi = sorted([float(rows[0]["error"]), float(twin["error"])])
    assert f"error {100 * lo:+.1f}% to {100 * hi:+.1f}% over 2 held-out cases" in e.lines()[0]
    same = [abs(float(r["error"])) for r in _csv(TRAIN) if r["split"] == "validation"
            and r["metric"] != "scaling_efficiency" and r["case"].startswith(
                "bert_large_")]      # the PyTorch DDP transformer rows on A100-80GB
    assert e.median_rows == len(same) >= MIN_ROWS
    assert e.median_abs_error == pytest.approx(statistics.median(same), rel=1e-5)
    assert "inside the validated range on every axis" in e.lines()[1]


def test_a_fitted_calibration_case_is_named_but_never_the_nearest():
    e = envelope(Query.of("ddp", "resnet-50", 25557032, "A100-SXM4-80GB", 1, "fp16",
                          model_family="resnet"))
    assert e.nearest["split"] == "validation" and e.distance > 0
    assert e.as_dict()["calibration_case_nearer"]["case"] == "training/resnet50_1gpu_amp"
    assert "training/resnet50_1gpu_amp is nearer but was fitted" in e.lines()[0]
    inside = envelope(Query.of("ddp", "bert-large", 335174458, "A100-SXM4-80GB", 8, "fp16"))
    assert inside.fitted_nearer is None


def test_far_configurations_name_the_axes_that_differ_and_give_no_invented_number():
    e = envelope(Query.of("fsdp", "llama-2-70b", 69e9, "B200", 16384, "bf16"))
    assert e.nearest["family"] == "fsdp"
    assert "no validated FSDP case on B200" in e.differs     # Megatron has B200 cases
    fsdp = [r for r in load_ground() if r["family"] == "fsdp"]
    top = max(r["gpus"] for r in fsdp)                   # 128 (GPT-3 175B FSDP)
    assert f"GPU count {16384 / top:.3g}x larger than any validated FSDP case" in e.differs
    assert e.median_abs_error is None and e.median_rows == 0
    assert e.as_dict()["validation_median_abs_error"] is None
    big = max(r["params"] for r in fsdp)
    large = envelope(Query.of("fsdp", "m", 10 * big, "A100-SXM4-40GB", 128, "fp16"))
    assert "model 10x larger than any validated FSDP case" in large.differs
    assert large.median_abs_error is None and large.median_rows == 2     # 175B and 1T rows
    assert "too few for a median" in large.lines()[1]
    none = envelope(Query.of("nosuch", "m", 1e9, "H100-PCIE-80GB", 8, "fp8"))
    assert none.differs[:2] == ["no validated nosuch case",
                                "no validated case on H100-PCIE-80GB"]


def test_the_fsdp_tables_put_h100_and_8_gpu_a100_runs_on_the_ground():
    # the llm-foundry / torchtitan rows: an FSDP question on H100 gets the median of its
    # held-out H100 rows, and a 7B on 8 A100-80GB is inside the ground on every axis
    ground = load_ground()
    h100 = [abs(r["error"]) for r in ground if r["split"] == "validation"
            and r["family"] == "fsdp" and r["gpu"] == "H100-SXM"]
    e = envelope(Query.of("fsdp", "llama-2-70b", 69e9, "H100-SXM", 64, "bf16"))
    assert e.nearest["gpu"] == "H100-SXM" and e.nearest["split"] == "validation"
    assert e.median_rows == len(h100) >= MIN_ROWS
    assert e.median_abs_error == pytest.approx(statistics.median(h100))
    seven = envelope(Query.of("fsdp", "llama-2-7b", 6738415616, "A100-SXM4-80GB", 8, "bf16"))
    assert seven.differs == [] and seven.nearest["gpu"] == "A100-SXM4-80GB"
    assert seven.nearest["framework"] in ("llm-foundry", "torchtitan")


def test_family_and_grouping():
    assert family_of("tf_central_storage") == "tensorflow" and family_of("fsdp") == "fsdp"
    assert grouped_lines({"a": ["x", "y"], "b": ["x", "y"], "c": ["z"]}) == \
        ["(a, b) x", "(a, b) y", "(c) z"]


SMALL = ["--set", "training.seq_len=1024", "--set", "training.micro_batch=1"]


def test_run_prints_the_envelope_and_puts_it_in_the_json(capsys):
    code, out, err = run_main(capsys, "run", *SMALL)
    assert code == 0, err
    lines = [x for x in out.splitlines() if x.startswith("# accuracy: ")]
    want = envelope(Query.of("fsdp", "llama-2-7b", 6738415616, "A100-SXM4-80GB", 8, "bf16"))
    assert len(lines) == 2 and lines[0] == f"# accuracy: {want.lines()[0]}"
    code, out, err = run_main(capsys, "run", *SMALL, "--format", "json")
    acc = json.loads(out)["accuracy"]
    assert acc["nearest"]["case"] == want.nearest["case"]
    assert acc["differs"] == want.differs


def test_compare_and_capacity_carry_one_envelope_per_strategy(capsys):
    code, out, err = run_main(capsys, "compare", "--set", "model=gpt2-small", *SMALL,
                              "--strategies", "fsdp-full,ddp", "--no-capacity",
                              "--no-scaling", "--format", "json")
    assert code == 0, err
    rows = json.loads(out)["rows"]
    for r, fam in zip(rows, ("fsdp", "ddp")):
        want = envelope(Query.of(fam, "gpt2-small", 124439808, "A100-SXM4-80GB", 8, "bf16"))
        assert r["accuracy"] == json.loads(json.dumps(want.as_dict()))
    # the FSDP row's nearest case is an FSDP table row on this GPU, the DDP row's a DDP one
    assert [r["accuracy"]["nearest"]["family"] for r in rows] == ["fsdp", "ddp"]
    assert rows[0]["accuracy"]["nearest"]["gpu"] == "A100-SXM4-80GB"
    code, out, err = run_main(capsys, "capacity", "--set", "training.micro_batch=1",
                              "--set", "training.seq_len=2048", "--strategies", "ddp",
                              "--format", "json")
    assert code == 0, err
    res = json.loads(out)["results"][0]
    fit = res["largest_fit"]
    want = envelope(Query.of("ddp", fit["model"], fit["params"], "A100-SXM4-80GB", 8, "bf16"))
    assert res["accuracy"] == json.loads(json.dumps(want.as_dict()))


def test_run_out_puts_the_envelope_in_summary_json_and_report_html(capsys, tmp_path):
    code, out, err = run_main(capsys, "run", *SMALL, "--out", str(tmp_path / "r"))
    assert code == 0, err
    acc = json.loads((tmp_path / "r" / "summary.json").read_text())["accuracy"]
    page = (tmp_path / "r" / "report.html").read_text()
    assert "How far to trust it" in page and acc["nearest"]["case"] in page


def test_compare_table_and_out_carry_the_envelope(capsys, tmp_path):
    args = ["compare", "--set", "model=gpt2-small", *SMALL, "--strategies", "fsdp-full,ddp",
            "--no-capacity", "--no-scaling", "--price-per-gpu-hour", "2"]
    code, out, err = run_main(capsys, *args, "--out", str(tmp_path / "c"))
    assert code == 0, err
    lines = [x for x in out.splitlines() if x.startswith("# accuracy (")]
    assert len(lines) == 4 and lines[0].startswith("# accuracy (fsdp-full) nearest validated")
    rows = json.loads((tmp_path / "c" / "compare.json").read_text())["rows"]
    page = (tmp_path / "c" / "report.html").read_text()
    assert "How far to trust it" in page and rows[1]["accuracy"]["nearest"]["case"] in page


def test_an_unknown_model_size_drops_that_axis_instead_of_failing():
    q = Query.of("ddp", "imported", 0, "A100-SXM4-80GB", 8, "fp16")
    row = {"family": "ddp", "gpu": "A100-SXM4-80GB", "precision": "fp16", "params": 3e8,
           "gpus": 8}
    assert distance(q, row) == 0
    assert not any(d.startswith("model") for d in envelope(q).differs)


def test_another_frameworks_error_is_never_quoted():
    e = envelope(Query.of("deepspeed", "llama-3-70b", 70e9, "H100-SXM", 256, "bf16"))
    assert e.nearest is None and e.band is None and e.tied == []
    assert e.lines()[0].startswith("no validated deepspeed case: no measured error to quote")
    assert e.as_dict()["nearest"] is None
    for family in ("fsdp", "megatron"):
        near = envelope(Query.of(family, "llama-3-70b", 70e9, "H100-SXM", 256, "bf16"))
        assert near.nearest["family"] == family and not near.nearest["moe"]


def test_a_dense_models_error_is_never_quoted_for_an_moe_model():
    ground = load_ground()
    moe = envelope(Query.of("megatron", "qwen3-30b-a3b", 30e9, "H100-SXM", 16, "fp8",
                            moe=True))
    assert moe.nearest["moe"] and all(r["moe"] for r in moe.tied)
    hopper = {r["gpu"] for r in ground if generation(r["gpu"]) == "hopper"}
    errors = [r["error"] for r in ground if r["family"] == "megatron" and r["moe"]
              and r["gpu"] in hopper]               # the band of the question's generation
    assert (moe.band.low, moe.band.high) == (min(errors), max(errors))
    assert moe.lines()[0].startswith("nearest validated: Megatron MoE qwen3-30b-a3b")
    dense = envelope(Query.of("megatron", "llama-3-70b", 70e9, "H100-SXM", 64, "fp8"))
    errors = [r["error"] for r in ground if r["family"] == "megatron" and not r["moe"]
              and not r["finetune"] and r["gpu"] in hopper and r["split"] == "validation"]
    assert (dense.band.low, dense.band.high) == (min(errors), max(errors))


def test_a_pre_trainings_error_is_never_quoted_for_a_fine_tuning():
    """A LoRA step's nearest case and band are LoRA rows (MLPerf's Llama 2 70B LoRA), a
    pre-training step's never are, on NVIDIA and on AMD alike (the MI300X LoRA rows are the
    only validated AMD cases)."""
    ground = load_ground()
    lora = envelope(Query.of("megatron", "llama-2-70b", 70e9, "H100-SXM", 8, "fp8",
                             finetune={"mode": "lora", "rank": 16}))
    assert lora.nearest["finetune"] == "lora" and all(r["finetune"] == "lora" for r in lora.tied)
    assert lora.lines()[0].startswith("nearest validated: Megatron LoRA llama-2-70b")
    hopper = {r["gpu"] for r in ground if generation(r["gpu"]) == "hopper"}
    errors = [r["error"] for r in ground if r["finetune"] == "lora" and r["gpu"] in hopper]
    assert (lora.band.low, lora.band.high, lora.band.rows) == \
        (min(errors), max(errors), len(errors))
    pretrain = envelope(Query.of("megatron", "llama-2-70b", 70e9, "H100-SXM", 64, "fp8"))
    assert not pretrain.nearest["finetune"] and not any(r["finetune"] for r in pretrain.tied)
    amd = envelope(Query.of("megatron", "llama-2-70b", 70e9, "MI300X", 8, "fp8",
                            finetune={"mode": "lora"}))
    assert amd.nearest["gpu"] == "MI300X" and amd.nearest["finetune"] == "lora"
    assert envelope(Query.of("fsdp", "llama-2-70b", 70e9, "H100-SXM", 8, "fp8",
                             finetune={"mode": "lora"})).nearest is None


def test_the_error_band_is_the_range_of_the_family_on_that_generation():
    from simulator.validation.envelope import generation
    ground = load_ground()
    e = envelope(Query.of("ddp", "gpt2-medium", 355e6, "H200-SXM", 1, "bf16"))
    hopper = [r["error"] for r in ground if r["split"] == "validation"
              and r["family"] == "ddp" and generation(r["gpu"]) == "hopper"
              and r["architecture"] == "transformer"]      # not the H200's ResNet-50 rows
    assert (e.band.low, e.band.high, e.band.rows) == (min(hopper), max(hopper), len(hopper))
    assert e.band.scope == "DDP cases on hopper GPUs"
    # a generation with too few of the family: the family's range on any GPU, said so
    b = envelope(Query.of("horovod", "bert-large", 335e6, "H100-SXM", 8, "fp16")).band
    tensorflow = [r["error"] for r in ground if r["split"] == "validation"
                  and r["family"] in ("horovod", "tensorflow")
                  and r["architecture"] == "transformer"]
    assert (b.low, b.high) == (min(tensorflow), max(tensorflow)) and "too few" in b.scope
    assert b.scope.startswith("TensorFlow cases on any GPU")


def test_the_band_holds_four_in_five_held_out_cases_left_out_one_at_a_time():
    from simulator.validation.envelope import error_band
    held = [r for r in load_ground() if r["split"] == "validation"]
    inside = total = 0
    for r in held:
        q = Query(r["family"], r["model"], r["params"], r["gpu"], r["gpus"], r["precision"],
                  r["moe"], r["finetune"], r["architecture"])
        band = error_band(q, [x for x in held if x is not r and q.kin(x)])
        if band is not None:
            total += 1
            inside += band.low <= r["error"] <= band.high
    assert total >= 60 and inside / total >= 0.80
    page = " ".join((Path(__file__).resolve().parents[1] / "docs" / "envelope.md")
                    .read_text().split())
    assert f"{inside} times in {total} ({100 * inside / total:.0f}%;" in page


def test_a_detection_models_error_is_never_quoted_for_a_transformer():
    """TensorFlow's held-out runs are TF2 BERT-large (under Horovod), one ResNet-50 and
    eight Mask R-CNN: a TensorFlow question about a transformer is answered from the BERT
    runs, one about Mask R-CNN from the Mask R-CNN runs (whose error comes from the
    detection ops the simulator does not model), and each median and band is its own
    architecture's."""
    ground = load_ground()

    def tf_rows(arch):
        return [r for r in ground if r["split"] == "validation" and r["architecture"] == arch
                and r["family"] in ("tensorflow", "horovod") and r["gpu"] == "A100-SXM4-80GB"]

    llm = envelope(Query.of("tf_mirrored", "llama-2-7b", 6.7e9, "A100-SXM4-80GB", 8, "bf16",
                            model_family="llama"))
    assert llm.nearest["model"] == "bert-large" and llm.nearest["architecture"] == "transformer"
    want = statistics.median(abs(r["error"]) for r in tf_rows("transformer"))
    assert llm.median_abs_error == pytest.approx(want) and want < 0.25
    assert llm.lines()[0].startswith("nearest validated: TensorFlow bert-large")
    det = envelope(Query.of("tf_mirrored", "mask-rcnn", 44e6, "A100-SXM4-80GB", 8, "tf32",
                            model_family="maskrcnn"))
    assert det.nearest["model"] == "mask-rcnn" and all(r["model"] == "mask-rcnn"
                                                        for r in det.tied)
    errors = [r["error"] for r in tf_rows("detection")]
    assert (det.band.low, det.band.high) == (min(errors), max(errors))
    assert det.lines()[0].startswith("nearest validated: TensorFlow detection mask-rcnn")
    # the trust line of a comparison: the detection rows are too far off to rank, the
    # transformer rows are not
    assert "the TensorFlow detection rows are too far off to rank" in trust_sentence([det])
    assert "too far off" not in trust_sentence([llm])


def test_horovod_and_tf_strategies_quote_tensorflows_runs_alike():
    """The ``horovod`` strategy is TensorFlow 2 with Horovod's all-reduce (the same
    kernels): its question and a ``tf_*`` one quote the same runs."""
    ask = ("bert-large", 335e6, "A100-SXM4-80GB", 8, "fp16")
    hvd = envelope(Query.of("horovod", *ask))
    for strategy in ("tf_mirrored", "tf_multiworker", "tf_ps", "tf_central_storage"):
        tf = envelope(Query.of(strategy, *ask))
        assert tf.lines() == hvd.lines() and tf.nearest == hvd.nearest
    assert hvd.query.label == "TensorFlow" and hvd.query.framework == "tensorflow"
    assert Query.of("fsdp", *ask).framework == "fsdp"


def test_a_gpu_without_a_calibration_generation_is_its_own_chip():
    from simulator.validation.envelope import generation
    assert (generation("B200"), generation("GB200"), generation("H200-SXM"),
            generation("A100-SXM4-40GB"), generation("MI300X"), generation("Gaudi3-x")) == \
        ("blackwell", "blackwell", "hopper", "ampere", "cdna3", "Gaudi3")
    b = envelope(Query.of("fsdp", "llama-3-8b", 8e9, "B200", 64, "bf16")).band
    assert b.scope == "FSDP cases on any GPU (blackwell: too few)"


def test_an_amd_gpu_is_outside_the_validated_ground_and_quotes_no_nvidia_error():
    """An AMD answer is measured against AMD cases only: with none (a ground of NVIDIA runs)
    it names none, gives no band and no median, and says why; on the shipped ground, whose
    AMD cases are MLPerf LoRA runs, an FSDP pre-training answer on MI300X names no NVIDIA
    case either."""
    nvidia = tuple(r for r in load_ground() if vendor(r["gpu"]) == "nvidia")
    e = envelope(Query.of("fsdp", "llama-3-8b", 8e9, "MI300X", 8, "bf16"), nvidia)
    assert e.nearest is None and e.band is None and e.median_abs_error is None
    first, second = e.lines()
    assert first.startswith("no validated case on AMD GPUs: no measured error to quote")
    assert "MI300X is outside the validated ground" in second
    shipped = envelope(Query.of("fsdp", "llama-3-8b", 8e9, "MI300X", 8, "bf16"))
    assert shipped.nearest is None and shipped.band is None
    assert shipped.lines()[0].startswith("no validated FSDP case")
    assert "%" not in first + second
    assert e.as_dict()["outside_validated_ground"] == first
    # the NVIDIA answer is unchanged by the vendor filter
    h = envelope(Query.of("fsdp", "llama-3-8b", 8e9, "H100-SXM", 8, "bf16"))
    assert h.nearest is not None and h.as_dict()["outside_validated_ground"] is None


def test_the_trust_line_says_when_no_validated_run_was_as_large():
    """TensorFlow's and DDP's held-out runs are on 1 and 8 GPUs: a comparison on 128 says
    none ran on as many GPUs; one on 8 does not."""
    ask = ("llama-2-7b", 6.7e9, "A100-SXM4-80GB")
    big = [envelope(Query.of(s, *ask, 128, "bf16", model_family="llama"))
           for s in ("fsdp", "ddp", "tf_mirrored")]
    line = trust_sentence(big)
    ddp = statistics.median(abs(r["error"]) for r in load_ground()
                            if r["family"] == "ddp" and r["split"] == "validation"
                            and r["architecture"] == "transformer"
                            and r["gpu"] == "A100-SXM4-80GB")
    most = max(r["gpus"] for r in load_ground() if r["family"] == "ddp"
               and r["architecture"] == "transformer")
    assert most < 128
    assert f"DDP {100 * ddp:.1f}% ({big[1].median_rows} runs, none on as many GPUs)" in line
    assert [e.beyond_gpus for e in big] == [False, True, True]
    small = [envelope(Query.of(s, *ask, 8, "bf16", model_family="llama"))
             for s in ("fsdp", "ddp", "tf_mirrored")]
    assert not any(e.beyond_gpus for e in small)
    assert "none on as many GPUs" not in trust_sentence(small)

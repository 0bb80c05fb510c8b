"""``validation/training/measurements.csv`` from the shared source CSVs
(:func:`build_measurements`, :func:`write_measurements`); published numbers are parsed by
:mod:`.parse`."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from simulator.outpaths import atomic_write_csv
from simulator.validation.training.data_tf import tf_rows
from simulator.validation.training.parse import pair, parse_number
from simulator.validation.training.schema import (MEASUREMENT_COLUMNS, MEASUREMENTS_FILE,
                                                  SOURCE_FILES)


def _gpu_of(hardware: str) -> str:
    h = str(hardware)
    if "80GB" in h.replace(" ", ""):
        return "A100-SXM4-80GB"
    if "40GB" in h.replace(" ", ""):
        return "A100-SXM4-40GB"
    raise ValueError(f"cannot tell the A100 variant from {hardware!r}")


_DLE_MODELS = {"ResNet-50 v1.5 (ImageNet)": ("resnet50", "samples_per_s"),
               "BERT-large pretraining (LAMB)": ("bert_large", "samples_per_s")}
_RESNET_BATCH = ("256", "micro_batch 256 per GPU for both TF32 and AMP: the README's DGX A100 "
                        "configuration, not printed in the table (its batch column is blank)")
_FSDP_IDS = {"GPT 175B": "fsdp_blog_gpt175b", "GPT 1T": "fsdp_blog_gpt1t"}


def _dle_rows(shared: Path) -> list[dict]:
    """DeepLearningExamples: a TF32 and an AMP row per PyTorch ResNet-50 / BERT source row."""
    rows = []
    dle = pd.read_csv(shared / SOURCE_FILES[0], dtype=str, keep_default_na=False)
    for r in dle.itertuples(index=False):
        if r.framework != "PyTorch" or r.model not in _DLE_MODELS:
            continue
        stem, metric = _DLE_MODELS[r.model]
        batches, accums = pair(r.batch_per_gpu), pair(r.grad_accum_steps)
        for i, (label, prec) in enumerate((("TF32", "tf32"), ("AMP", "fp16"))):
            rows.append(_dle_row(r, stem, metric, i, label, prec, batches[i], accums[i]))
    return rows


def _dle_row(r, stem: str, metric: str, i: int, label: str, prec: str, batch: str,
             accum: str) -> dict:
    """Precision ``i`` (0: TF32, 1: AMP) of the DeepLearningExamples source row ``r``."""
    note = ""
    if not batch and stem == "resnet50":
        batch, note = _RESNET_BATCH
    seq = f"_seq{r.seq_len}" if r.seq_len else ""
    raw = r.throughput_tf32_or_fp32 if i == 0 else r.throughput_amp
    scal = r.scaling_tf32_or_fp32 if i == 0 else r.scaling_amp
    return {
        "measurement_id": f"dle_pt_{stem}{seq}_{r.gpus}gpu_{label.lower()}",
        "framework": r.framework, "model": r.model, "hardware": r.hardware,
        "gpu": _gpu_of(r.hardware), "nodes": int(r.nodes), "gpus": int(r.gpus),
        "precision": prec, "precision_label": label,
        "micro_batch": int(batch) if batch else None,
        "seq_len": int(r.seq_len) if r.seq_len else None,
        "grad_accum": int(accum) if accum else None,
        "metric": metric, "unit": r.throughput_unit,
        "value": parse_number(raw), "value_raw": raw,
        "scaling_factor": parse_number(scal), "scaling_raw": scal,
        "scaling_type": r.scaling_type, "settings_note": note,
        "notes": f"{r.grad_allreduce}; container {r.container}",
        "source": r.source,
    }


def _fsdp_rows(shared: Path) -> list[dict]:
    """The PyTorch FSDP blog's rows (TFLOPS per GPU)."""
    rows = []
    fsdp = pd.read_csv(shared / SOURCE_FILES[1], dtype=str, keep_default_na=False)
    for r in fsdp.itertuples(index=False):
        key = next(k for k in _FSDP_IDS if r.model.startswith(k))
        if r.metric != "TFLOPS per GPU":
            raise ValueError(f"unexpected FSDP metric {r.metric!r}")
        gpus = int(r.gpus)
        rows.append({
            "measurement_id": f"{_FSDP_IDS[key]}_{gpus}gpu", "framework": "PyTorch FSDP",
            "model": r.model, "hardware": r.hardware, "gpu": _gpu_of(r.hardware),
            "nodes": gpus // 8, "gpus": gpus, "precision": r.precision,
            "precision_label": r.precision, "micro_batch": int(r.batch_per_gpu),
            "seq_len": int(r.seq_len), "grad_accum": None, "metric": "tflops_per_gpu",
            "unit": "TFLOPS per GPU", "value": parse_number(r.value), "value_raw": r.value,
            "scaling_factor": float("nan"), "scaling_raw": "",
            "scaling_type": "", "settings_note": "nodes = gpus / 8 (8 GPUs per p4d node)",
            "notes": (f"{r.sharding}; activation checkpointing {r.activation_checkpointing}; "
                      f"cpu offload: {r.cpu_offload}; {r.interconnect}; mfu as stated: "
                      f"{r.mfu}; {r.notes}"),
            "source": r.source,
        })
    return rows


def build_measurements(shared_dir: Path | str) -> pd.DataFrame:
    """The rows of ``measurements.csv`` from the shared source CSVs (read as text).

    DeepLearningExamples: the PyTorch ResNet-50 v1.5 and BERT-large pre-training rows; each
    source row gives a TF32 and an AMP measurement (precision ``tf32`` / ``fp16``); "128 and
    256" style batch and accumulation columns are (TF32, AMP). FSDP blog: both rows.
    TensorFlow rows (TF2 BERT, Mask R-CNN, Horovod ResNet-50): :mod:`.data_tf`.
    ``value`` and ``scaling_factor`` are parsed from the copied ``value_raw`` /
    ``scaling_raw`` strings and nothing else.
    """
    shared = Path(shared_dir)
    rows = _dle_rows(shared) + _fsdp_rows(shared) + tf_rows(shared, _dle_row)
    df = pd.DataFrame(rows, columns=MEASUREMENT_COLUMNS)
    for col in ("micro_batch", "seq_len", "grad_accum"):
        df[col] = df[col].astype("Int64")
    return df


def write_measurements(shared_dir: Path | str, root: Path | str) -> pd.DataFrame:
    """Write :func:`build_measurements` to ``<root>/measurements.csv``."""
    df = build_measurements(shared_dir)
    Path(root).mkdir(parents=True, exist_ok=True)
    atomic_write_csv(df, Path(root) / MEASUREMENTS_FILE, index=False)
    return df


__all__ = ["build_measurements", "write_measurements"]

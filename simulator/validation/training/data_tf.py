"""The TensorFlow rows of ``validation/training/measurements.csv``
(:func:`simulator.validation.training.data.build_measurements` appends them):

* DeepLearningExamples TensorFlow 2 BERT-large pre-training (Horovod) and Mask R-CNN
  (MirroredStrategy) single-node rows of ``dle_a100_training_scaling.csv``, TF32 and AMP;
* the Horovod TF2 ResNet-50 synthetic benchmark on one OCI BM.GPU4.8 node of
  ``tf_distribution_a100_measurements.csv`` (its total img/s row).

As everywhere, ``value`` and ``scaling_factor`` are parsed from the copied strings.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from simulator.validation.training.parse import parse_number

TF_SOURCE = "tf_distribution_a100_measurements.csv"
_BERT = "BERT-large pretraining (LAMB)"
_MASKRCNN = "Mask R-CNN (COCO)"
# The TF2 BERT README's table header reads "Batch size / GPU: mixed precision, TF32" and
# "Gradient Accumulation: mixed precision, TF32": its pairs are (AMP, TF32), the opposite of
# the PyTorch tables' "TF32 and AMP" (the 312/176 batch ratio is AMP's halved activations).
_BERT_PAIR_NOTE = ("batch and accumulation pairs are (mixed precision, TF32) as the README's "
                   "header says ('Batch size / GPU: mixed precision, TF32')")
_MASK_NOTE = ("1-GPU scaling shown as '-' in the README: the 1-GPU row is the baseline the "
              "8-GPU weak scaling is relative to")


def _split_pair(text: str) -> tuple[str, str]:
    """``"312 , 176"`` -> ("312", "176")."""
    parts = [p.strip() for p in str(text).split(",")]
    if len(parts) != 2:
        raise ValueError(f"expected 'A , B', got {text!r}")
    return parts[0], parts[1]


def _dle_tf_rows(shared: Path, dle_row) -> list[dict]:
    """TF2 BERT and Mask R-CNN rows; ``dle_row`` builds one (see :mod:`.data`)."""
    rows = []
    dle = pd.read_csv(shared / "dle_a100_training_scaling.csv", dtype=str,
                      keep_default_na=False)
    for r in dle.itertuples(index=False):
        if r.framework != "TensorFlow2" or r.model not in (_BERT, _MASKRCNN):
            continue
        bert = r.model == _BERT
        for i, (label, prec) in enumerate((("TF32", "tf32"), ("AMP", "fp16"))):
            if bert:
                amp_tf32 = _split_pair(r.batch_per_gpu), _split_pair(r.grad_accum_steps)
                batch, accum = (pair[1 - i] for pair in amp_tf32)
                stem, note = "tf2_bert_large", _BERT_PAIR_NOTE
            else:
                batch, accum = r.batch_per_gpu, ""
                stem, note = f"tf2_maskrcnn_b{r.batch_per_gpu}", _MASK_NOTE
            row = dle_row(r, stem, "samples_per_s", i, label, prec, batch, accum)
            row["measurement_id"] = row["measurement_id"].replace("dle_pt_", "dle_")
            row["settings_note"] = note
            rows.append(row)
    return rows


def _horovod_rows(shared: Path) -> list[dict]:
    """The total img/s row of the Horovod TF2 ResNet-50 synthetic benchmark."""
    tf = pd.read_csv(shared / TF_SOURCE, dtype=str, keep_default_na=False)
    rows = []
    for r in tf.itertuples(index=False):
        if not (r.framework == "TensorFlow2+Horovod" and r.metric == "total img/sec"):
            continue
        rows.append({
            "measurement_id": "hvd_tf2_resnet50_synthetic_8gpu_tf32",
            "framework": r.framework, "model": r.model, "hardware": r.hardware,
            "gpu": "A100-SXM4-40GB", "nodes": int(r.nodes), "gpus": int(r.gpus_total),
            "precision": "tf32", "precision_label": "not stated (fp32 variables)",
            "micro_batch": int(r.per_gpu_or_worker_batch.split()[0]), "seq_len": None,
            "grad_accum": None, "metric": "samples_per_s", "unit": "img/s",
            "value": parse_number(r.value), "value_raw": r.value,
            "scaling_factor": float("nan"), "scaling_raw": "", "scaling_type": "",
            "settings_note": ("precision: the benchmark script builds a float32 Keras "
                              "ResNet50 (no mixed precision flag), which TensorFlow runs with "
                              "TF32 math on A100; batch 32 per GPU as printed"),
            "notes": f"{r.distribution}; {r.interconnect}; {r.software}; +-{r.uncertainty}; "
                     f"{r.notes}".replace("+-+-", "+-"),
            "source": r.source,
        })
    return rows


def tf_rows(shared: Path, dle_row) -> list[dict]:
    """Every TensorFlow measurement row, in source order."""
    return _dle_tf_rows(shared, dle_row) + _horovod_rows(shared)


__all__ = ["TF_SOURCE", "tf_rows"]

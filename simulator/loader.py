"""The DataLoader behind an evaluation: its workers' host time per batch, and a pass of
batches that a producer (the loader) feeds to a consumer (the forward step).

NeMo's packed SFT dataset with ``return_cu_seqlen`` false (MLPerf v4.1's Llama 2 70B LoRA)
collates every sample with a dense seq x seq causal mask (``simulator/data/loader.yaml``:
what it costs and where that was measured). Each data-parallel rank has its own DataLoader
with ``workers`` processes that prefetch (PyTorch's ``prefetch_factor``, 2 per worker) in
parallel with the training process: a batch of ``samples`` samples a rank costs its
workers ``samples x per_sample / workers`` seconds of host time.

One collate, one price: the training steps' loader (``training.dense_mask_workers``,
:func:`simulator.pipeline.fed_by_loader`) and the evaluation's (``training.evaluation.
dense_mask_workers``, :mod:`simulator.evaluation`) both cost :func:`loader_batch_s`, and
both feed a two-stage pipeline (:func:`fed_pass_s`): a step takes max(step, loader), the
loader's excess a wait with every GPU idle. The training iterator lives through the run, so
its first batch is counted in no step; an evaluation's starts anew each time, so each
evaluation adds its first batch's load.
"""

from __future__ import annotations

import functools

from simulator.compute.checks import check_keys, check_source, check_time
from simulator.errors import ConfigError
from simulator.yamlio import read_yaml
from .yamlio import data_file

FILE = "loader.yaml"
PARTS = ("mask", "other")


@functools.cache
def dense_mask_table() -> tuple[int, dict[str, float]]:
    """(the measured sample's tokens, {part: seconds}) of the shipped ``loader.yaml``."""
    src = f"simulator/data/{FILE}"
    data = read_yaml(data_file(FILE), "data loader")
    check_keys(data, {"seq_len", *PARTS}, {"seq_len", *PARTS}, src, None)
    seq = data["seq_len"]
    if type(seq) is not int or seq <= 0:
        raise ConfigError(f"must be a positive integer, got {seq!r}", source=src,
                          field="seq_len")
    out = {}
    for part in PARTS:
        check_keys(data[part], {"value", "source"}, {"value", "source"}, src, part)
        check_source(data[part]["source"], src, part)
        out[part] = check_time(data[part]["value"], src, f"{part}.value")
    return seq, out


def dense_mask_sample_s(seq_len: int) -> float:
    """Host seconds to collate one sample of ``seq_len`` tokens with a dense causal mask:
    the measured mask x (seq / measured seq)^2 + the rest x (seq / measured seq)."""
    seq, part = dense_mask_table()
    r = seq_len / seq
    return part["mask"] * r * r + part["other"] * r


def loader_batch_s(samples_per_rank: int, seq_len: int, workers: int) -> float:
    """Host seconds a rank's DataLoader (``workers`` processes) takes to produce one batch
    of ``samples_per_rank`` samples of ``seq_len`` tokens, each with a dense causal mask."""
    return samples_per_rank * dense_mask_sample_s(seq_len) / workers


def loader_rows(loader_s: float, wait_s: float, step_s: float) -> list[tuple[str, str]]:
    """The line ``run`` prints for a training step fed by a loader of ``loader_s`` a step
    (none without one): hidden under the ``step_s`` step it feeds, or the wait it adds."""
    if loader_s <= 0:
        return []
    if wait_s <= 0:
        return [("train_loader_s", f"{loader_s:.4g} s a step (hidden under the "
                                   f"{step_s:.4g} s step)")]
    return [("train_loader_s", f"{loader_s:.4g} s a step (the GPUs wait {wait_s:.4g} s a "
                               f"step for it: the step is the loader's)")]


def fed_pass_s(batches: int, step_s: float, loader_s: float) -> float:
    """Seconds of ``batches`` steps of ``step_s`` fed by a loader of ``loader_s`` a batch
    that starts with the pass (its iterator is made anew at each evaluation, so the first
    batch is not prefetched): a two-stage pipeline, the first batch's load, then each batch
    at the slower stage's pace, then the last step: batches x max + min of the two."""
    if loader_s <= 0:
        return batches * step_s
    return batches * max(step_s, loader_s) + min(step_s, loader_s)


__all__ = ["FILE", "dense_mask_sample_s", "dense_mask_table", "fed_pass_s", "loader_batch_s",
           "loader_rows"]

"""Variable-length sequences: what a micro-batch of real data is padded to.

A scenario without ``training.sequence_lengths`` pads every sample to ``seq_len`` (fixed
shapes, as in packed or synthetic data). With it, samples have the lengths of a dataset's
histogram (``simulator/data/seq_lengths.yaml`` or a YAML file of the same form) and each
micro-batch is padded to its longest sample:

* ``bin_size: null``: the ``batch`` samples are drawn from the whole dataset (dynamic
  padding, e.g. a collator that pads to the longest in the batch);
* ``bin_size: B``: sequence binning as in NVIDIA's LDDL (github.com/NVIDIA/LDDL README:
  bin ``i`` holds lengths ``(i - 1) B + 1 .. i B``; each iteration picks a bin with the
  probability of its share of the dataset, every rank draws its micro-batch from that bin,
  "each mini-batch is only padded to the longest sequence within this mini-batch").

The longest of ``n`` independent draws from a distribution with CDF ``F`` is ``x`` with
probability ``F(x)^n - F(x-1)^n``, so :func:`padded_length_weights` gives the exact
distribution of the padded length. Layer costs are affine in FLOPs and bytes in each
roofline regime, so :func:`mixed_layer_costs` averages them over that distribution (a
step's expected time); activation memory is the longest padded length's, because those
batches occur and must fit.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from simulator.errors import ConfigError
from simulator.models.costs import layer_costs
from simulator.models.ops import LayerCost, OpCost
from simulator.models.spec import ModelSpec
from simulator.yamlio import read_yaml
from ..yamlio import data_file

_CATALOG = "seq_lengths.yaml"


def histogram_names() -> list[str]:
    return sorted(_catalog())


def _catalog() -> dict:
    return read_yaml(data_file(_CATALOG))


def load_histogram(name_or_path: str, field: str = "histogram") -> list[int]:
    """Counts per length (index ``i`` = ``i + 1`` tokens) of a catalog histogram or of a YAML
    file ``{counts: [...]}``."""
    catalog = _catalog()
    if name_or_path in catalog:
        entry, where = catalog[name_or_path], name_or_path
    elif Path(name_or_path).suffix in (".yaml", ".yml"):
        entry, where = read_yaml(Path(name_or_path)), name_or_path
    else:
        raise ConfigError(f"unknown histogram {name_or_path!r}; valid: "
                          f"{', '.join(histogram_names())} (or a path to a YAML file with "
                          f"'counts')", field=field)
    counts = entry.get("counts") if isinstance(entry, dict) else None
    if (not isinstance(counts, list) or not counts
            or any(isinstance(c, bool) or not isinstance(c, int) or c < 0 for c in counts)
            or sum(counts) == 0):
        raise ConfigError(f"{where}: 'counts' must be a non-empty list of non-negative "
                          f"integers with a positive sum", field=field)
    return counts


def padded_length_weights(counts: list[int], batch: int,
                          bin_size: int | None) -> list[tuple[int, float]]:
    """``(padded length, probability)`` of one micro-batch of ``batch`` samples."""
    total = float(sum(counts))
    edges = ([(0, len(counts))] if bin_size is None else
             [(lo, min(lo + bin_size, len(counts))) for lo in range(0, len(counts), bin_size)])
    weights: dict[int, float] = {}
    for lo, hi in edges:
        in_bin = sum(counts[lo:hi])
        if in_bin == 0:
            continue
        share, below, prev = in_bin / total, 0, 0.0
        for i in range(lo, hi):
            below += counts[i]
            cdf = (below / in_bin) ** batch
            if cdf > prev:
                weights[i + 1] = weights.get(i + 1, 0.0) + share * (cdf - prev)
            prev = cdf
    return sorted(weights.items())


def mean_length(counts: list[int]) -> float:
    """Mean real (unpadded) tokens per sample."""
    return sum((i + 1) * c for i, c in enumerate(counts)) / sum(counts)


def _mix_ops(weights, ops_by_len: list[tuple[OpCost, ...]]) -> tuple[OpCost, ...]:
    """The ops of the first list with FLOPs, bytes and GEMM shape (``m, n, k``) averaged over
    all lists by ``weights``; a mixed dimension is rounded to a multiple of the common divisor
    of its values, so a shape aligned at every length stays aligned."""
    def table(attr):
        return np.array([[getattr(op, attr) for op in ops] for ops in ops_by_len])

    def mix_dim(attr):
        values = table(attr)
        step = np.maximum(np.gcd.reduce(values, axis=0), 1)
        return np.round(weights @ values / step) * step
    flops, nbytes = weights @ table("flops"), weights @ table("bytes_accessed")
    dims = [mix_dim(d) for d in "mnk"]
    return tuple(replace(op, flops=float(f), bytes_accessed=float(b),
                         **{d: int(v[i]) for d, v in zip("mnk", dims)})
                 for i, (op, f, b) in enumerate(zip(ops_by_len[0], flops, nbytes)))


def mixed_layer_costs(model: ModelSpec, batch: int, weights: list[tuple[int, float]],
                      precision: str, flash_attention: bool = True,
                      autocast: bool = False, compile: bool = False,
                      fp8_recipe: str = "tensorwise",
                      elementwise: str = "fused") -> list[LayerCost]:
    """Layer costs averaged over padded lengths (see module docstring); activation and
    output bytes of the longest. Identical blocks are mixed once."""
    w = np.array([p for _, p in weights])
    per_len = [layer_costs(model, batch, n, precision, flash_attention, autocast, compile,
                           fp8_recipe=fp8_recipe, elementwise=elementwise)
               for n, _ in weights]
    longest = per_len[-1]
    done: dict[int, tuple] = {}                 # id(forward ops) -> mixed (forward, backward)
    mixed = []
    for k, layer in enumerate(longest):
        key = id(layer.forward)
        if key not in done:
            done[key] = (_mix_ops(w, [layers[k].forward for layers in per_len]),
                         _mix_ops(w, [layers[k].backward for layers in per_len]))
        fwd, bwd = done[key]
        mixed.append(replace(layer, forward=fwd, backward=bwd))
    return mixed

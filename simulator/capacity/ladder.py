"""The size ladder of a model family for ``clustersim capacity`` (:func:`build_ladder`).

A family's ladder is its real configurations from the catalog (the *anchors*: Llama-2
7B/13B/34B/70B; GPT-3 1.3B/2.7B/6.7B/13B/175B) plus generated decoder configs between
them, so that consecutive rungs differ by about :data:`STEP` (15 %) in parameters. The
rule, between two consecutive anchors A and B (``n = ceil(ln(P_B / P_A) / ln(1 + STEP))``
intervals, rung ``k`` at ``x = k / n``):

* ``layers`` and ``hidden`` are interpolated geometrically, ``exp((1 - x) ln A + x ln B)``,
  which follows the family's own aspect ratio (hidden / layers) from one anchor to the
  next; since parameters grow as ``layers * hidden^2`` this spaces rungs evenly in
  log-parameters. ``layers`` is rounded to an integer and ``hidden`` to a multiple of
  the head width :data:`HEAD_DIM` (128, as in every Llama-2 and most GPT-3 models); from
  hidden :data:`GROUPED_FROM` (8192) up to :data:`HEAD_GROUP` (8) heads and
  :data:`LAYER_GROUP` (8) layers, so that tensor and pipeline parallelism up to 8 split
  them (the layer count then ranges within a third of the path's to make up the rung's
  parameters); up or down, whichever of the four pairs comes closest to the rung's target parameter count
  (the geometric interpolation of the anchors' counts); ``heads = hidden / 128``;
* MLP width: GPT ``4 * hidden``; Llama ``ffn/hidden`` interpolated linearly in ``x``
  (2.6875 up to 34B, 3.5 for 70B) and rounded up to a multiple of 256, as Llama's
  ``multiple_of`` does;
* attention: grouped-query with the anchors' 8 KV heads when both anchors use GQA
  (Llama between 34B and 70B), else multi-head;
* everything else (vocabulary, norms, biases, positions, tied embeddings) as anchor A.

Below the smallest anchor the ladder is extrapolated with the slope of the first two
anchors (``x < 0``) down to about :data:`FLOOR_PARAMS` (1B), keeping the smallest anchor's
MLP ratio and attention type: DDP's answer on 80 GB GPUs lies below 7B. Above the largest
anchor it is extrapolated the same way along the last two anchors' slope, keeping the
largest anchor's shape rules (MLP ratio, attention, vocabulary), up to about
:data:`CEIL_PARAMS` (1.2T): a 3-D plan on 64 GPUs fits far more than the largest catalog
model. A strategy that fits the top rung is reported as "top of the ladder fits".
Generated rungs are named ``llama-like-8.88b`` (the family, then the parameter count;
their source says between or beyond which anchors), built with
:func:`simulator.models.parse_model` (so they are checked like any model file), and rungs
within 3 % of a neighbour are dropped.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from ..choices import FAMILIES
from ..errors import ConfigError
from ..models import ModelSpec, load_model, parse_model
from ..models.transformer import block_params, embed_params, head_params

STEP = 0.15                 # target parameter ratio between rungs (+15 %)
FLOOR_PARAMS = 1.0e9        # extrapolate the ladder down to about this many parameters
CEIL_PARAMS = 1.2e12        # ... and up to about this many (past 1T)
DEDUP = 0.03                # drop a rung within 3 % of the previous one
HEAD_DIM = 128
HEAD_GROUP = 8              # heads come in multiples of 8, so tensor parallelism 2-8 divides them
LAYER_GROUP = 8             # ... and layers, so pipelines of 2-8 stages split them evenly
GROUPED_FROM = 8192         # hidden width from which rungs keep those multiples


@dataclass(frozen=True)
class Rung:
    """One model of the ladder; ``kind`` is ``catalog``, ``interpolated`` or
    ``extrapolated``."""

    model: ModelSpec
    params: int
    kind: str


def _shape(m: ModelSpec) -> dict:
    return {"layers": m.layers, "hidden": m.hidden, "ffn_ratio": m.ffn_hidden / m.hidden,
            "gqa": m.kv_heads < m.heads, "kv_heads": m.kv_heads}


def _generate(family: str, a: ModelSpec, b: ModelSpec, x: float, target: float,
              kind: str) -> ModelSpec:
    """The rung at ``x`` on the geometric path from anchor ``a`` (0) to ``b`` (1).

    ``layers`` and ``hidden`` are rounded (to an integer, to a multiple of HEAD_DIM) to the
    neighbouring pair whose parameter count is closest to ``target``, the geometric
    interpolation of the anchors' counts, so rungs stay evenly spaced despite rounding.
    """
    def geo(u: float, v: float) -> float:
        return math.exp((1 - x) * math.log(u) + x * math.log(v))

    sa, sb = _shape(a), _shape(b)
    ratio = sa["ffn_ratio"] if x <= 0 else (1 - x) * sa["ffn_ratio"] + x * sb["ffn_ratio"]
    L0, H0 = geo(a.layers, b.layers), geo(a.hidden, b.hidden)
    where = (f"between {a.name} and {b.name} at x={x:.3f}" if kind == "interpolated" else
             f"beyond {a.name}, away from {b.name} along their slope, x={x:.3f}")

    def make(layers: int, hidden: int) -> ModelSpec:
        heads = hidden // HEAD_DIM
        ffn = 256 * math.ceil(ratio * hidden / 256) if family == "llama" else 4 * hidden
        gqa = sa["gqa"] and (sb["gqa"] or x <= 0)
        kv = math.gcd(heads, sa["kv_heads"]) if gqa else heads
        name = f"{family}-{kind}-{layers}x{hidden}"      # renamed by _renamed
        data = {"name": name, "family": a.family,
                "source": f"generated by clustersim capacity ({kind} {where}; see "
                          f"simulator/capacity/ladder.py)",
                "layers": layers, "hidden": hidden, "heads": heads, "kv_heads": kv,
                "ffn_hidden": ffn, "vocab": a.vocab, "max_seq_len": a.max_seq_len,
                "mlp": a.mlp, "norm": a.norm, "tied_embeddings": a.tied_embeddings,
                "bias": a.bias, "position_embedding": a.position_embedding}
        return parse_model(data, f"<capacity ladder {name}>")

    best = None
    # hidden 8192 and up (30B and more): tensor parallelism and pipelines up to 8 split
    # the heads and the layers (below, the geometric path is followed head by head)
    big = H0 >= GROUPED_FROM
    unit, step = HEAD_DIM * (HEAD_GROUP if big else 1), LAYER_GROUP if big else 1
    # layers within a third of the path's: where hidden moves in coarse steps (8 heads),
    # the layer count makes up the rung's parameters
    lows, highs = ((math.floor(0.75 * L0 / step), math.ceil(1.33 * L0 / step)) if big
                   else (math.floor(L0), math.ceil(L0)))
    for layers in {max(step, step * k) for k in range(lows, highs + 1)}:
        for units in {max(1, math.floor(H0 / unit)), max(1, math.ceil(H0 / unit))}:
            m = make(layers, units * unit)
            miss = abs(math.log(_params(m) / target))
            shape = abs(math.log(layers / L0)) + abs(math.log(units * unit / H0))
            if best is None or (miss, shape) < best[0]:
                best = ((miss, shape), m)
    return best[1]


def _params(m: ModelSpec) -> int:
    """``params_total`` of a transformer without building its layers (same formulas)."""
    return embed_params(m) + m.layers * block_params(m) + head_params(m)


def _renamed(m: ModelSpec, kind: str) -> ModelSpec:
    """Name a generated rung after its family and real parameter count:
    ``llama-like-8.88b``, ``gpt3-like-1.02t``."""
    if kind == "catalog":
        return m
    prefix = "gpt3" if m.family == "gpt" else m.family
    n = _params(m)
    size = f"{n / 1e12:.3g}t" if n >= 1e12 else f"{n / 1e9:.3g}b"
    return dataclasses.replace(m, name=f"{prefix}-like-{size}")


def _anchors(key: str, min_seq_len: int) -> list[ModelSpec]:
    """The family's catalog models, learned position tables extended to ``min_seq_len``."""
    anchors = [load_model(n) for n in FAMILIES[key]]
    if min_seq_len:
        anchors = [dataclasses.replace(m, max_seq_len=max(m.max_seq_len, min_seq_len))
                   if m.position_embedding == "learned" else m for m in anchors]
    return anchors


def _extrapolated(key: str, anchors: list[ModelSpec], sizes: list[int], step: float,
                  floor: float) -> list[tuple[ModelSpec, str]]:
    """Rungs below the smallest anchor, along the first interval's slope, down to ``floor``."""
    a, b = anchors[0], anchors[1]
    n = max(1, math.ceil(math.log(sizes[1] / sizes[0]) / math.log1p(step)))
    out: list[tuple[ModelSpec, str]] = []
    k = 1
    while sizes[0] * (sizes[1] / sizes[0]) ** (-k / n) >= floor * (1 - step / 2):
        hint = sizes[0] * (sizes[1] / sizes[0]) ** (-k / n)
        out.append((_generate(key, a, b, -k / n, hint, "extrapolated"), "extrapolated"))
        k += 1
    return out


def _extrapolated_above(key: str, anchors: list[ModelSpec], sizes: list[int], step: float,
                        ceil: float) -> list[tuple[ModelSpec, str]]:
    """Rungs above the largest anchor, along the last interval's slope, up to ``ceil``."""
    a, b = anchors[-1], anchors[-2]
    n = max(1, math.ceil(math.log(sizes[-1] / sizes[-2]) / math.log1p(step)))
    out: list[tuple[ModelSpec, str]] = []
    k = 1
    while sizes[-1] * (sizes[-1] / sizes[-2]) ** (k / n) <= ceil * (1 + step / 2):
        hint = sizes[-1] * (sizes[-1] / sizes[-2]) ** (k / n)
        out.append((_generate(key, a, b, -k / n, hint, "extrapolated"), "extrapolated"))
        k += 1
    return out


def _interpolated(key: str, anchors: list[ModelSpec], sizes: list[int],
                  step: float) -> list[tuple[ModelSpec, str]]:
    """The anchors and the rungs generated between consecutive anchors, in order."""
    out: list[tuple[ModelSpec, str]] = []
    for i, (a, b) in enumerate(zip(anchors, anchors[1:])):
        out.append((a, "catalog"))
        n = max(1, math.ceil(math.log(sizes[i + 1] / sizes[i]) / math.log1p(step)))
        for k in range(1, n):
            hint = sizes[i] * (sizes[i + 1] / sizes[i]) ** (k / n)
            out.append((_generate(key, a, b, k / n, hint, "interpolated"), "interpolated"))
    out.append((anchors[-1], "catalog"))
    return out


def _candidates(key: str, anchors: list[ModelSpec], step: float, floor: float,
                ceil: float) -> list[tuple[ModelSpec, str]]:
    """(model, kind) of every rung before sorting and de-duplication."""
    sizes = [_params(m) for m in anchors]
    return (_extrapolated(key, anchors, sizes, step, floor)
            + _interpolated(key, anchors, sizes, step)
            + _extrapolated_above(key, anchors, sizes, step, ceil))


def _deduplicated(rungs: list[Rung]) -> list[Rung]:
    """Keep catalog models; drop generated rungs too close to a neighbour."""
    out: list[Rung] = []
    for r in rungs:
        if out and r.params < out[-1].params * (1 + DEDUP):
            if r.kind != "catalog":
                continue
            if out[-1].kind != "catalog":
                out.pop()
        out.append(r)
    return out


def build_ladder(family: str, step: float = STEP, floor: float = FLOOR_PARAMS,
                 min_seq_len: int = 0, ceil: float = CEIL_PARAMS) -> list[Rung]:
    """The size ladder of ``family`` ordered by parameter count (see the module doc).

    :param min_seq_len: learned position tables (GPT) are extended to at least this many
        positions, so every rung can train at the scenario's ``seq_len``.
    :raises ConfigError: unknown family.
    """
    key = family.lower()
    if key not in FAMILIES:
        raise ConfigError(f"unknown family {family!r}; valid: {', '.join(FAMILIES)}",
                          source="--family")
    cands = _candidates(key, _anchors(key, min_seq_len), step, floor, ceil)
    rungs = sorted((Rung(_renamed(m, kind), _params(m), kind) for m, kind in cands),
                   key=lambda r: (r.params, r.kind != "catalog"))
    out = _deduplicated(rungs)
    if len({r.model.name for r in out}) != len(out):   # names key the probe cache
        raise AssertionError(f"duplicate rung names in the {key} ladder")
    return out


__all__ = ["CEIL_PARAMS", "DEDUP", "FLOOR_PARAMS", "HEAD_DIM", "STEP", "Rung", "build_ladder"]

"""Largest model of a family that fits per strategy on a cluster (``clustersim capacity``).

The question "how big a model can I train here with DDP, with FSDP?" is answered with the
engine's own memory verdict, not a formula: for each strategy we replay one iteration of
candidate models (the scenario's training settings) and read ``metrics.oom`` and
``metrics.peak_memory_gib``, binary-searching a *size ladder* of the family for the largest
model that fits. See ``docs/capacity.md`` for what it finds on one DGX A100.

The size ladder (catalog models plus generated decoder configs about 15 % apart in
parameters) is built by :mod:`simulator.capacity_ladder`, whose doc gives the rule; the
strategies and the replay of one rung under one of them (:class:`Prober`) are in
:mod:`simulator.capacity_probe`. Their names are importable from here as well.

Search
------
Memory grows with parameters along the ladder, so the largest fitting rung is found by
bisection (:func:`largest_fitting`), about ``log2(len(ladder))`` replays per strategy. A
rung whose *static* memory (weights + gradients + optimizer state, ``Trace.meta``) alone
exceeds the GPU's memory is rejected without a replay (the "fast path"; reported as
``static memory (not replayed)`` with the static size as its peak).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from .capacity_ladder import FAMILIES, Rung, build_ladder
from .capacity_probe import GIB, Probe, Prober, StrategySpec, parse_strategy_specs
from .choices import DEFAULT_STRATEGIES
from .errors import ConfigError
from .models import load_model
from .pipeline import strategy_dict as strategy_dict_of
from .scenario import Scenario
from .strategies import parse_strategy

# Every name defined or imported here before the split stays importable from here.
# ruff: noqa: F401
from .capacity_ladder import (DEDUP, FLOOR_PARAMS, HEAD_DIM, STEP, _generate, _params,
                              _renamed, _shape)
from .capacity_probe import (_COMMON_KEYS, _SHARDING_KEYS, BASE_MODEL, locate_oom,
                             strategy_dict)
from .models import ModelSpec, parse_model
from .models.transformer import block_params, embed_params, head_params
from .pipeline import Setup, build_setup, make_trace, run_setup
from .strategies import SHARDINGS, STRATEGIES, World

# Folk claim checked by the command: 8 x A100-80GB, DDP ~7B, FSDP ~30B (FULL_SHARD).
CLAIM = {"gpu": "A100", "gib": 80, "gpus": 8, "ddp": 7e9, "fsdp:FULL_SHARD": 30e9}
CLAIM_TEXT = "on 8x A100-80GB, DDP trains about 7B, FSDP about 30B"
CLAIM_TOLERANCE = 1.25      # "about": within a factor 1.25 either way


# ----------------------------------------------------------------------------- search
def largest_fitting(n: int, fits: Callable[[int], bool]) -> int:
    """Largest index ``i < n`` with ``fits(i)``, assuming ``fits`` is monotone (true up to
    a boundary, false after it); -1 when none fits. Calls ``fits`` about ``log2 n`` times."""
    lo, hi = -1, n          # invariant: fits(lo) (or lo = -1), not fits(hi) (or hi = n)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo


# ------------------------------------------------------------------------------ answer
@dataclass
class StrategyResult:
    spec: StrategySpec
    settings: dict
    largest: Probe | None
    first_oom: Probe | None
    probes: list[Probe] = field(default_factory=list)
    replays: int = 0

    def as_dict(self) -> dict:
        return {"strategy": self.spec.label, "settings": self.settings,
                "largest_fit": self.largest.as_dict() if self.largest else None,
                "first_no_fit": self.first_oom.as_dict() if self.first_oom else None,
                "top_of_ladder_fits": self.first_oom is None and self.largest is not None,
                "replays": self.replays,
                "probed": [p.as_dict() for p in self.probes]}


def settings_of(scn: Scenario) -> dict:
    t = scn.training
    return {"micro_batch": t.micro_batch, "seq_len": t.seq_len, "grad_accum": t.grad_accum,
            "precision": t.precision, "flash_attention": t.flash_attention,
            "activation_checkpointing": bool(scn.strategy.get("activation_checkpointing",
                                                              False))}


def search(scn: Scenario, spec: StrategySpec, ladder: list[Rung],
           source: str = "<scenario>", prober: Prober | None = None) -> StrategyResult:
    """Bisect ``ladder`` for the largest rung ``spec`` fits with ``scn``'s training setup."""
    prober = prober or Prober(scn, spec, source)
    order: list[Probe] = []

    def fits(i: int) -> bool:
        p = prober.probe(ladder[i])
        if p not in order:
            order.append(p)
        return p.fits

    i = largest_fitting(len(ladder), fits)
    largest = prober.probe(ladder[i]) if i >= 0 else None
    first = prober.probe(ladder[i + 1]) if i + 1 < len(ladder) else None
    s = settings_of(prober.scn)
    return StrategyResult(spec, s, largest, first, order, prober.replays)


@dataclass
class CapacityReport:
    scenario: str
    family: str
    cluster: dict
    settings: dict
    ladder: list[Rung]
    results: list[StrategyResult]
    claim: dict | None
    notes: list[str]

    def as_dict(self) -> dict:
        return {"scenario": self.scenario, "family": self.family, "cluster": self.cluster,
                "settings": self.settings,
                "ladder": [{"model": r.model.name, "params": r.params, "kind": r.kind}
                           for r in self.ladder],
                "results": [r.as_dict() for r in self.results], "folk_claim": self.claim,
                "notes": self.notes}


def family_of(scn: Scenario) -> str:
    """The scenario's model family if it has a ladder, else llama."""
    try:
        fam = load_model(scn.model).family
    except ConfigError:
        return "llama"
    return fam if fam in FAMILIES else "llama"


def _position_notes(scn: Scenario, family: str, ladder: list[Rung]) -> list[str]:
    """A note when the family's learned position tables were extended to seq_len."""
    notes: list[str] = []
    if ladder[0].model.position_embedding == "learned" and \
            scn.training.seq_len > load_model(FAMILIES[family][0]).max_seq_len:
        notes.append(f"{family} models have {load_model(FAMILIES[family][0]).max_seq_len} "
                     f"learned positions; their tables were extended to seq_len "
                     f"{scn.training.seq_len}")
    return notes


def _cluster_of(prober: Prober) -> dict:
    """Topology, GPU, GPU count and memory of the cluster ``prober`` replays on."""
    base = prober.base
    gpu = str(base.cluster.G.graph.get("gpu"))
    return {"topology": str(base.cluster.G.graph.get("name")), "gpu": gpu,
            "gpus": base.trace.world_size,
            "gpu_memory_gib": round(base.capacity_bytes / GIB, 2)}


def _static_notes(results: list[StrategyResult]) -> list[str]:
    """A note per strategy that rejected rungs on static memory alone."""
    notes = []
    for r in results:
        statics = [p for p in r.probes if not p.replayed]
        if statics:
            notes.append(f"{r.spec.label}: {len(statics)} rung(s) rejected on static memory "
                         f"alone, without replay ({', '.join(p.rung.model.name for p in statics)})")
    return notes


def capacity(scn: Scenario, family: str | None = None,
             strategies: str | list[str] | tuple[str, ...] = DEFAULT_STRATEGIES,
             source: str = "<scenario>", check_claim: bool = True) -> CapacityReport:
    """Largest fitting rung of ``family`` per strategy (see the module doc).

    :raises ConfigError: unknown family or strategy, a sharding the world cannot lay out.
    """
    specs = parse_strategy_specs(strategies)
    parse_strategy(strategy_dict_of(scn), source=source)    # the scenario's own keys
    family = (family or family_of(scn)).lower()
    ladder = build_ladder(family, min_seq_len=scn.training.seq_len)
    notes = _position_notes(scn, family, ladder)
    probers = {s: Prober(scn, s, source) for s in specs}  # validate first
    results = [search(scn, s, ladder, source, probers[s]) for s in specs]
    cluster = _cluster_of(next(iter(probers.values())))
    notes += _static_notes(results)
    claim = None
    if check_claim:
        claim = check_folk_claim(scn, ladder, cluster, source,
                                 {r.spec.label: r for r in results}, probers)
    return CapacityReport(str(scn.name), family, cluster, settings_of(scn), ladder, results,
                          claim, notes)


# -------------------------------------------------------------------------- folk claim
def _claim_checked(label: str, claimed: float, res: StrategyResult) -> tuple[dict, str]:
    """(the claim's entry for ``label``, its phrase in the verdict)."""
    got = res.largest.rung.params if res.largest else 0
    ratio = got / claimed
    word = ("holds" if 1 / CLAIM_TOLERANCE <= ratio <= CLAIM_TOLERANCE else
            "optimistic" if ratio < 1 else "conservative")
    entry = {"claimed_params": claimed, "largest_fit": res.largest.as_dict()
             if res.largest else None, "first_no_fit": res.first_oom.as_dict()
             if res.first_oom else None, "verdict": word}
    name = f"{res.largest.rung.model.name} ({got / 1e9:.1f}B)" if res.largest else "nothing"
    short = "DDP" if label == "ddp" else "FSDP FULL_SHARD"
    return entry, f"{short} {name} vs ~{claimed / 1e9:.0f}B claimed: {word}"


def check_folk_claim(scn: Scenario, ladder: list[Rung], cluster: dict, source: str,
                     done: dict[str, StrategyResult], probers: dict) -> dict:
    """Compare "8x A100-80GB: DDP ~7B, FSDP ~30B" with the search at micro_batch 1."""
    # An "80GB" A100 reports 79.2 GiB usable; compare within 2 GiB of the claim's size.
    if CLAIM["gpu"] not in cluster["gpu"] or abs(cluster["gpu_memory_gib"] - CLAIM["gib"]) > 2 \
            or cluster["gpus"] != CLAIM["gpus"]:
        return {"claim": CLAIM_TEXT, "checked": False,
                "verdict": f"folk claim ({CLAIM_TEXT}) not checked: this cluster is "
                           f"{cluster['gpus']} x {cluster['gpu']}"}
    scn1 = scn.model_copy(update={"training": scn.training.model_copy(
        update={"micro_batch": 1})}, deep=True)
    reuse = scn.training.micro_batch == 1
    ckpt = bool(scn.strategy.get("activation_checkpointing", False))
    found: dict[str, dict] = {}
    parts = []
    for label, claimed in (("ddp", CLAIM["ddp"]), ("fsdp:FULL_SHARD", CLAIM["fsdp:FULL_SHARD"])):
        spec = parse_strategy_specs(label)[0]
        if reuse and label in done:
            res = done[label]
        else:
            res = search(scn1, spec, ladder, source)
        found[label], part = _claim_checked(label, claimed, res)
        parts.append(part)
    t = scn1.training
    verdict = (f"folk claim ({CLAIM_TEXT}) at micro_batch 1, seq_len {t.seq_len}, "
               f"activation checkpointing {'on' if ckpt else 'off'}: " + "; ".join(parts) +
               f" (DDP keeps 16 B/param of weights, grads and Adam state on every GPU: "
               f"7B = {16 * CLAIM['ddp'] / GIB:.0f} GiB; FSDP divides it by "
               f"{cluster['gpus']}, then activations decide)")
    return {"claim": CLAIM_TEXT, "checked": True, "micro_batch": 1, "seq_len": t.seq_len,
            "activation_checkpointing": ckpt, "results": found, "verdict": verdict}


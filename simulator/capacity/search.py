"""Bisection of a size ladder for the largest model one strategy fits
(:func:`search`), with the engine's memory verdict for each rung it tries.

Memory grows with parameters along the ladder, so the largest fitting rung is found by
bisection (:func:`largest_fitting`), about ``log2(len(ladder))`` replays per strategy. A
rung whose *static* memory (weights + gradients + optimizer state, ``Trace.meta``) alone
exceeds the GPU's memory is rejected without a replay (the "fast path"; reported as
``static memory (not replayed)`` with the static size as its peak).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..scenario import Scenario
from ..strategies.checkpointing import ac_setting
from .ladder import Rung
from .probe import Probe, Prober, StrategySpec


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
            "activation_checkpointing": ac_setting(scn.strategy),
            **({"finetune": t.finetune} if t.finetune is not None else {})}


def search(scn: Scenario, spec: StrategySpec, ladder: list[Rung],
           source: str = "<scenario>", prober: Prober | None = None) -> StrategyResult:
    """Bisect ``ladder`` for the largest rung ``spec`` fits with ``scn``'s training setup
    (the rungs its parallel plan can split: :meth:`Prober.lays_out`)."""
    prober = prober or Prober(scn, spec, source)
    ladder = [r for r in ladder if prober.lays_out(r.model)]
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

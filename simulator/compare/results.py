"""The answer of ``clustersim compare``: one :class:`Row` per strategy in a
:class:`Comparison`, and which row trains at the lowest cost (:func:`cheapest`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ..choices import NamedStrategy
from ..energy import Energy, Site
from ..metrics import Metrics
from .cost import Budget, Cost, Price


@dataclass
class Scaling:
    """The same strategy on twice the GPUs (weak scaling)."""

    gpus: int | None = None
    iteration_time_s: float | None = None
    samples_per_s: float | None = None
    efficiency: float | None = None
    reason: str = ""


@dataclass
class Row:
    alias: NamedStrategy
    status: str = "ok"                      # ok | n/a
    reason: str = ""
    reason_field: str = ""                  # the setting an n/a row's reason is about
    metrics: Metrics | None = None
    global_batch: int = 0
    tokens_per_sample: float = 0
    oom_at: str | None = None
    comm_bytes_per_gpu: float = 0.0
    scaling: Scaling = field(default_factory=Scaling)
    largest_fit: dict | None = None
    capacity_reason: str = ""
    cost: Cost | None = None
    migration_days: float = 0.0
    extrapolated: dict | None = None        # the step was extrapolated (accum.Extrapolation)
    extrapolated_also: tuple = ()           # "2x GPUs", "N capacity rungs": so were these
    kernels: str = ""                       # the kernel stack its step is priced by
    fp8_recipe: str = ""                    # an FP8 step's recipe (its framework's default
    # where training.fp8_recipe is unset), "" otherwise
    forward_gpu_s_per_sample: float | None = None   # forward kernels' GPU-s per sample
    energy: Energy | None = None            # its step's energy and power (simulator.energy)
    result: object = field(default=None, repr=False, compare=False)  # own RunResult, until
    # the capacity search has used it (not in the output)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def as_dict(self) -> dict:
        m = self.metrics.as_dict() if self.metrics else None
        if m:
            m.pop("peak_memory_gib_per_class")
        return {"strategy": self.alias.key, "registry_name": self.alias.strategy,
                "sharding": self.alias.sharding, "framework": self.alias.framework,
                "status": self.status, "reason": self.reason,
                "reason_field": self.reason_field, "metrics": m,
                "global_batch": self.global_batch, "oom_at": self.oom_at,
                "kernels": self.kernels, "fp8_recipe": self.fp8_recipe or None,
                "forward_gpu_s_per_sample": self.forward_gpu_s_per_sample,
                "comm_bytes_per_gpu": self.comm_bytes_per_gpu,
                "scaling_2x": dataclasses.asdict(self.scaling),
                "largest_fit": self.largest_fit, "capacity_reason": self.capacity_reason,
                "migration_days": self.migration_days,
                "cost": self.cost.as_dict() if self.cost else None,
                "energy": self.energy.as_dict() if self.energy else None,
                **({"extrapolated": self.extrapolated} if self.extrapolated else {})}


@dataclass
class Comparison:
    scenario: str
    model: str
    cluster: dict
    settings: dict
    doubling: str
    price: Price | None
    budget: Budget | None
    rows: list[Row]
    notes: list[str]
    site: Site | None = None                # PUE, electricity price, carbon of the energy

    def as_dict(self) -> dict:
        return {"scenario": self.scenario, "model": self.model, "cluster": self.cluster,
                "settings": self.settings, "doubling": self.doubling,
                "price": dataclasses.asdict(self.price) if self.price else None,
                "budget": dataclasses.asdict(self.budget) if self.budget else None,
                "rows": [r.as_dict() for r in self.rows], "notes": self.notes,
                "site": dataclasses.asdict(self.site) if self.site else None}



def cheapest(rows: list[Row]) -> Row | None:
    """The row that trains at the lowest cost among those that run and fit in memory:
    lowest total with a budget, else lowest cost per sample."""
    live = [r for r in rows if r.cost is not None and not r.metrics.oom]
    if not live:
        return None
    return min(live, key=lambda r: (r.cost.total_usd if r.cost.total_usd is not None
                                    else r.cost.per_thousand_samples_usd, r.alias.key))


def excess_over_cheapest(row: Row, best: Row | None) -> float | None:
    """Share of ``row``'s spend the cheapest strategy would save: 1 - best / row; None for
    a row that does not fit in memory (it cannot be chosen)."""
    if best is None or row.cost is None or row.metrics.oom:
        return None
    key = (lambda c: c.total_usd) if row.cost.total_usd is not None else \
        (lambda c: c.per_thousand_samples_usd)
    return 1.0 - key(best.cost) / key(row.cost)


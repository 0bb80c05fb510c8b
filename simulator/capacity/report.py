"""The answer of ``clustersim capacity`` (:func:`capacity`): per strategy, the largest
model of a family that fits on the scenario's cluster, the first that does not, and the
folk claim's verdict (the module doc of :mod:`simulator.capacity` tells how)."""

from __future__ import annotations

from dataclasses import dataclass

from .. import progress
from ..accum import brief
from ..choices import DEFAULT_CAPACITY_STRATEGIES, FAMILIES
from ..errors import ConfigError
from ..hardware import LOW_PRECISIONS, check_training_precision, gpu_spec
from ..models import load_model
from ..pipeline import strategy_dict as strategy_dict_of
from ..scenario import Scenario
from ..strategies import parse_strategy
from ..topology.build import scenario_graph
from .claim import check_folk_claim
from .ladder import Rung, build_ladder
from .probe import GIB, Prober, parse_strategy_specs
from .search import StrategyResult, search, settings_of


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
    """The scenario's model family if it has a ladder, else llama.

    :raises ConfigError: a model that does not load (an unknown name is a mistake, not
        llama).
    """
    fam = load_model(scn.model).family
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
        host = [p for p in r.probes if not p.replayed and p.oom_at.startswith("host memory")]
        statics = [p for p in r.probes if not p.replayed and p not in host]
        if statics:
            notes.append(f"{r.spec.label}: {len(statics)} rung(s) rejected on static memory "
                         f"alone, without replay ({', '.join(p.rung.model.name for p in statics)})")
        if host:
            notes.append(f"{r.spec.label}: {len(host)} rung(s) rejected because the offloaded "
                         f"state does not fit the servers' host memory "
                         f"({', '.join(p.rung.model.name for p in host)}; "
                         f"simulator/data/host_memory.yaml)")
    return notes


def _extrapolation_notes(results: list[StrategyResult]) -> list[str]:
    """A note per strategy whose replayed rungs were extrapolated from a few micro-steps."""
    notes = []
    for r in results:
        done = [p for p in r.probes if p.extrapolated]
        if done:
            notes.append(f"{r.spec.label}: {len(done)} rung(s) {brief(done[0].extrapolated)}")
    return notes


def _host_notes(probers: dict, cluster: dict) -> list[str]:
    """A note when cpu_offload ran on a topology whose host memory is not in the catalog."""
    return [f"{spec.label}: cpu_offload: host memory not checked, "
            f"{cluster.get('topology')} has no figure in simulator/data/host_memory.yaml"
            for spec, pr in probers.items() if pr.host_unchecked]


def capacity(scn: Scenario, family: str | None = None,
             strategies: str | list[str] | tuple[str, ...] = DEFAULT_CAPACITY_STRATEGIES,
             source: str = "<scenario>", check_claim: bool = True) -> CapacityReport:
    """Largest fitting rung of ``family`` per strategy (see the module doc).

    :raises ConfigError: unknown family or strategy, a sharding the world cannot lay out,
        a scenario model that does not load (``model``).
    """
    specs = parse_strategy_specs(strategies)
    if scn.training.precision in LOW_PRECISIONS:    # this GPU's verdict on fp8/fp4, not the
        gpu = gpu_spec(scenario_graph(scn).graph["gpu"])   # strategies' list of precisions
        try:
            check_training_precision(gpu, scn.training.precision)
        except ConfigError as exc:
            raise exc.located(source) from None
    parse_strategy(strategy_dict_of(scn), source=source)    # the scenario's own keys
    try:                                  # a model that does not load is a mistake, even
        own = family_of(scn)              # where --family makes the ladder another's
    except ConfigError as exc:
        raise ConfigError(exc.reason, source=source, field="model") from None
    family = (family or own).lower()
    ladder = build_ladder(family, min_seq_len=scn.training.seq_len)
    notes = _position_notes(scn, family, ladder)
    probers = {s: Prober(scn, s, source) for s in specs}  # validate first
    results = [search(scn, s, ladder, source, probers[s])
               for s in progress.track(specs, len(specs), "capacity", "strategy")]
    cluster = _cluster_of(next(iter(probers.values())))
    notes += (_static_notes(results) + _extrapolation_notes(results)
              + _host_notes(probers, cluster))
    claim = None
    if check_claim:
        claim = check_folk_claim(scn, ladder, cluster, source,
                                 {r.spec.label: r for r in results}, probers)
    return CapacityReport(str(scn.name), family, cluster, settings_of(scn), ladder, results,
                          claim, notes)


"""The ``run`` command of a study: one training iteration per point, as ``clustersim run``."""

from __future__ import annotations

import json
from functools import lru_cache

from ..accum import brief
from ..errors import ConfigError
from ..models import load_model
from ..pipeline import build_setup, run_setup, strategy_dict
from ..scenario import Scenario
from ..strategies import parse_strategy
from ..topology.build import graph_gpus
from ..topology.loader import topology_from_dict
from .links import comm_summary
from .points import canonical

def check_common(scn: Scenario, topology: dict) -> None:
    """What every command needs: a known model and a topology that builds with the
    scenario's nodes and link overrides.

    :raises ConfigError: ``source`` ``topology`` or ``cluster.links`` for topology
        mistakes, ``field`` ``model`` for an unknown model.
    """
    try:
        load_model(scn.model)
    except ConfigError as exc:
        raise ConfigError(exc.reason, field="model") from None
    c = scn.cluster
    gpus = _topology_gpus(json.dumps(canonical(topology), sort_keys=True), c.nodes,
                          json.dumps(canonical(c.links), sort_keys=True))
    if c.gpus and c.gpus > gpus:
        raise ConfigError(f"the topology has {gpus} GPUs, cannot use {c.gpus}",
                          field="cluster.gpus")


@lru_cache(maxsize=64)
def _topology_gpus(topology: str, nodes: int | None, links: str) -> int:
    """GPUs of the topology built from its JSON text (each distinct one built once)."""
    G = topology_from_dict(json.loads(topology), source="topology", nodes=nodes,
                           links=json.loads(links) or None)
    return graph_gpus(G)


def check_point(scn: Scenario, topology: dict) -> None:
    """Checks of a ``run`` point before anything runs: model, topology, strategy."""
    check_common(scn, topology)
    parse_strategy(strategy_dict(scn))


def run_point(scn: Scenario, point: dict) -> list[dict]:
    """One iteration of ``scn``: its metrics and where communication time goes."""
    setup = build_setup(scn, f"point {point['id']}")
    result = run_setup(setup)
    m = result.metrics
    row = m.as_dict()
    row.pop("peak_memory_gib_per_class")
    row["gpus"] = row.pop("world_size")
    row["oom_at"] = "; ".join(f"{c}: {op}" for c, op in m.oom_at.items())
    row["global_batch"] = int(setup.trace.meta.get("global_batch", 0))
    row["exposed_comm_share"] = (m.exposed_comm_s / m.iteration_time_s
                                 if m.iteration_time_s > 0 else 0.0)
    row.update(comm_summary(result.timeline, setup.trace, setup.cluster, m.comm_s))
    row["extrapolated"] = brief(result.extrapolation.as_dict()) if result.extrapolation else ""
    return [row]

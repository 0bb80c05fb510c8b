"""The work of a study, counted from its axes and options before any point is resolved
(resolving 100,000 points alone takes two minutes), and the refusal past ``--max-work``
(docs/studies.md, "Work bound").

The unit is ``clustersim plan``'s (:mod:`simulator.workunits`, about a millisecond of one
core): a point's simulation costs a replay's flat price (no trace is built before the
count; :func:`simulator.workunits.replay_units`), 500 units plus one per 10 GPUs. The GPUs
are known before resolving only where an axis sets the servers
(``cluster.nodes``, ``topology.params.nodes``), counted at :data:`GPUS_PER_NODE` a server;
elsewhere a point counts as a small replay. Per command:

* ``run``: one simulation;
* ``compare``: one per strategy, twice with ``scaling``, and about :data:`CAPACITY_REPLAYS`
  more per strategy with ``capacity`` (bisection of the size ladder);
* ``reliability``: one step simulation plus :data:`TRIAL_UNITS` a trial (the shipped
  1,024-GPU job: 3.6 ms a trial), each trial 17 times with ``search`` (the configured
  interval, 13 grid points, Young's, Daly's and the configured one: the defaults).
"""

from __future__ import annotations

from ..errors import ConfigError
from ..workunits import replay_units
from .points import axis_values
from .spec import Study

MAX_WORK = 3_600_000            # units: about an hour of one core
NODE_KEYS = ("cluster.nodes", "topology.params.nodes")
GPUS_PER_NODE = 8               # most servers (DGX/HGX); a guess where an axis sets nodes
CAPACITY_REPLAYS = 7            # log2 of a ladder of ~100 rungs 15 % apart
TRIAL_UNITS = 4
SEARCH_RUNS = 17


def simulations(command: str, options: dict) -> int:
    """Simulations of one point (a replay each)."""
    if command != "compare":
        return 1
    n = len(options.get("strategies") or ())
    return n * (2 if options.get("scaling") else 1) + \
        (n * CAPACITY_REPLAYS if options.get("capacity") else 0)


def trial_units(command: str, options: dict) -> int:
    """Units of a reliability point's trials (0 for other commands)."""
    if command != "reliability":
        return 0
    return options["trials"] * TRIAL_UNITS * (SEARCH_RUNS if options.get("search") else 1)


def point_units(command: str, options: dict, params: dict) -> int:
    nodes = max((v for k, v in params.items() if k in NODE_KEYS and isinstance(v, int)
                 and not isinstance(v, bool)), default=0)
    replay = replay_units(nodes * GPUS_PER_NODE)
    return simulations(command, options) * replay + trial_units(command, options)


def check(study: Study, options: dict, source: str, most: int | None = None) -> None:
    """Refuse a study of more than ``most`` units (default :data:`MAX_WORK`).

    :raises ConfigError: one line naming the study file, the count and ``--max-work``.
    """
    most = MAX_WORK if most is None else most
    points = axis_values(study)
    units = sum(point_units(study.command, options, p) for p in points)
    if units <= most:
        return
    raise ConfigError(
        f"this study is about {units:,} units of work (a unit is about a millisecond): "
        f"{len(points):,} points of {study.command}, {simulations(study.command, options)} "
        f"simulation(s) each{_trials(study.command, options)}; more than {most:,} (split "
        f"the study, or raise --max-work)", source=source, field="axes")


def _trials(command: str, options: dict) -> str:
    if command != "reliability":
        return ""
    return f" and {options['trials']:,} trials" + (" x 17 intervals" if options.get("search")
                                                    else "")

"""Model parallelism: the parallel plan, its placement, and the trace generator.

:mod:`.plan` (the mesh [pp, dp_replicate, dp_shard, cp, tp] + ep), :mod:`.place` (ranks on
the topology), :mod:`.generate` (model + plan + training config -> Trace), the pipeline
schedules, and the framework translators under :mod:`.frameworks`. docs/parallelism.md
describes them.
"""

# The generator builds on simulator.strategies (CommonConfig, op emission), whose registry
# holds the parallel strategies: initialise it first, so that importing simulator.parallel.*
# before simulator.strategies runs the modules in the same order as the other way round.
import simulator.strategies  # noqa: F401  (isort: skip)

from .plan import ALIASES, CP_MODES, DIMS, DP_MODES, SCHEDULE_NAMES, ParallelPlan

__all__ = ["ALIASES", "CP_MODES", "DIMS", "DP_MODES", "SCHEDULE_NAMES", "ParallelPlan"]

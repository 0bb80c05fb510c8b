"""Model parallelism: the parallel plan, its placement, and the trace generator.

:mod:`.plan` (the mesh [pp, dp_replicate, dp_shard, cp, tp] + ep), :mod:`.place` (ranks on
the topology), :mod:`.generate` (model + plan + training config -> Trace), the pipeline
schedules, the memory model; the framework spellings that translate into a plan are
:mod:`simulator.strategies.frameworks`. docs/parallelism.md describes them.
"""

from .plan import ALIASES, CP_MODES, DIMS, DP_MODES, SCHEDULE_NAMES, ParallelPlan

__all__ = ["ALIASES", "CP_MODES", "DIMS", "DP_MODES", "SCHEDULE_NAMES", "ParallelPlan"]

"""Job-level reliability: failures, detection, restart and checkpoints over a whole run.

The training-step simulation gives the iteration time (once per distinct configuration:
healthy, each degraded fabric, each straggler factor); a fast event loop then runs the whole
job many times with seeded failures (docs/reliability.md). This package's ``__init__`` only
exports the scenario section's model, so that ``simulator.scenario`` can import it without
pulling in the pipeline.
"""

from .config import ReliabilityCfg

__all__ = ["ReliabilityCfg"]

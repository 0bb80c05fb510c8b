"""Typed results of trials: one :class:`TrialResult` per trial, :class:`Episode` per recovery.

Wall time splits exactly into the categories of :data:`CATEGORIES` (seconds):
``productive`` (iterations that survive, at the healthy iteration time), ``checkpoint``
(blocking saves, waits for the previous persist, persist slowdown), ``degraded`` (extra time
of iterations on a degraded fabric or behind a straggler), ``recompute`` (iterations lost
since the last durable checkpoint, at the healthy time: the work redone), ``detection``
(failure to detection, plus diagnostics), ``waiting`` (for a spare or a repaired node, the
hand-over and the scheduler), ``restart`` (killing and starting workers, communicator
initialisation) and ``restore`` (checkpoint load).
"""

from __future__ import annotations

from dataclasses import dataclass

CATEGORIES = ("productive", "checkpoint", "degraded", "recompute", "detection", "waiting",
              "restart", "restore")
LOSSES = CATEGORIES[1:]


@dataclass(frozen=True)
class Episode:
    """One recovery: from the first interrupting failure until the job is back where it was.

    ``downtime_s``: failure to training again (the last resume); ``recovery_s``: failure to
    progress regained (downtime plus recompute). Failures during it merge into it.
    """

    t0_s: float
    downtime_s: float
    recovery_s: float
    failures: int
    source: str            # primary | shared copy | scratch
    spare_wait_s: float = 0.0   # of the downtime, waiting for repaired servers: spares ran out


@dataclass(frozen=True)
class TrialResult:
    wall_s: float
    iterations: float      # progress at the end (iterations kept)
    seconds: tuple         # per CATEGORIES
    failures: tuple        # per failure class (events that hit a working component)
    interrupts: int
    episodes: tuple        # of Episode
    open_episodes: int     # a recovery still running when the job ended (censored)
    checkpoints: int
    events: int
    completed: bool
    timeline: tuple | None = None   # (t, progress, down) points, recorded trials only

    @property
    def ettr(self) -> float:
        return self.seconds[0] / self.wall_s if self.wall_s > 0 else 0.0

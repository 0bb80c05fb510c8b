"""Closed forms the simulation is checked against: Young, Daly, MTTF, expected ETTR.

All times in seconds. ``delta`` is the cost of one checkpoint (time the job is blocked),
``M`` the mean time to interrupt (MTTI) of the whole job, ``R`` the restart time after an
interrupt (detection to training again), ``tau`` the compute time between checkpoints.
Sources: ../shared/reference/FACTS.md section 2 (LLNL scr ``scr_ckpt_interval.py``).
"""

from __future__ import annotations

import math


def young_interval(delta: float, M: float) -> float:
    """Young (CACM 17(9), 1974): ``tau = sqrt(2 delta M)``."""
    _check(delta=delta, M=M)
    return math.sqrt(2.0 * delta * M)


def daly_interval(delta: float, M: float) -> float:
    """Daly (FGCS 22(3), 2006, eq. 37), the higher-order optimum.

    ``tau = sqrt(2 delta M) [1 + sqrt(delta/(2M))/3 + (delta/(2M))/9] - delta`` when
    ``delta < 2M``, else ``M``.
    """
    _check(delta=delta, M=M)
    if delta >= 2.0 * M:
        return M
    x = delta / (2.0 * M)
    return math.sqrt(2.0 * delta * M) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - delta


def mttf_s(rate_per_node_s: float, nodes: int) -> float:
    """Kokolis et al.'s job MTTF = 1 / (N_nodes r_f), failures independent per node."""
    if rate_per_node_s <= 0 or nodes <= 0:
        raise ValueError("rate and nodes must be > 0")
    return 1.0 / (nodes * rate_per_node_s)


def expected_wall_time(solve_s: float, tau: float, delta: float, R: float, M: float) -> float:
    """Daly's expected wall time for exponential interrupts (FGCS 2006, eq. 13):
    ``T_w = M e^(R/M) (e^((tau + delta)/M) - 1) T_s / tau``.

    Interrupts may hit anywhere: during compute, checkpoints and restarts; each one loses
    the work since the last completed checkpoint.
    """
    _check(tau=tau, M=M)
    return M * math.exp(R / M) * math.expm1((tau + delta) / M) * solve_s / tau


def expected_ettr(tau: float, delta: float, R: float, M: float) -> float:
    """Useful fraction of wall time under :func:`expected_wall_time`."""
    return 1.0 / expected_wall_time(1.0, tau, delta, R, M)


def _check(**values: float) -> None:
    for name, value in values.items():
        if not value > 0:
            raise ValueError(f"{name} must be > 0, got {value!r}")

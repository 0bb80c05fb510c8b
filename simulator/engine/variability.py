"""Rank-to-rank variability: every synchronising collective waits for the slowest rank.

A rank class stands for many ranks and runs the *typical* rank's times (the compute and
collective models are calibrated on typical GPUs). Real GPUs of one SKU differ: a rank's
time for an op of class ``K`` is ``typical x exp(sigma_K x Z)``, ``Z ~ N(0, 1)``, one ``Z``
per rank (a property of the GPU: manufacturing and power management; data and sources in
``simulator/data/variability.yaml``). Ranks that synchronise wait for the slowest, so a
class whose collectives tie together ``N`` ranks runs at ``exp(sigma_K x M_N)``, ``M_N``
the largest of ``N`` standard normal draws. ``M_N`` is sampled directly from its own
distribution, ``P(M_N <= x) = Phi(x) ** N``, by the inverse CDF: ``M_N = Phi^-1(U ** (1/N))``
with one uniform ``U`` per (seed, set of tied ranks). Nothing is done per rank (the set is
named by a hash of its rank list, computed once), so the cost does not grow with ``N``, and the expected step grows with it (``E[M_N] ~ sqrt(2 ln N)``).

``N`` of a class: the ranks of every communicator group it takes part in (its ranks wait
for those ranks, and they for theirs: FSDP's world, a pipeline stage's data-parallel
groups). One rank alone (``N = 1``) waits for no one: factor 1. Collectives themselves
vary with ``sigma_collective`` (0 unless a scenario sets it): the transfer time of the
slowest of the group's ranks, ``N`` = the group's size.

The factors are fixed for a run (the same slow GPU is slow on every op), so a step of
identical micro-steps stays periodic and is extrapolated as before (:mod:`simulator.accum`).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping
from functools import cache
from statistics import NormalDist

import numpy as np

from ..constants import read_data
from ..errors import ConfigError
from ..trace.schema import Trace

_NORMAL = NormalDist()
COMPUTE, COLLECTIVE = "compute", "collective"


@cache
def shipped_sigmas() -> dict[str, float]:
    """``op class -> sigma`` of ``simulator/data/variability.yaml``."""
    data = read_data("variability.yaml")
    return {k: float(v["sigma"]) for k, v in data["op_classes"].items()}


def resolve_sigmas(setting: str | Mapping[str, float]) -> dict[str, float] | None:
    """The sigmas a scenario's ``simulation.variability`` asks for; None for ``none``.

    ``default``: the shipped ones. A mapping overrides some: ``compute`` (every compute op
    class), ``collective``, or one compute op class by name (``matmul: 0.03``).

    :raises ConfigError: for another string or a negative sigma.
    """
    if isinstance(setting, str):
        if setting == "none":
            return None
        if setting == "default":
            return dict(shipped_sigmas())
        raise ConfigError(f"must be none, default or a mapping of op class to sigma, "
                          f"got {setting!r}", field="simulation.variability")
    if not isinstance(setting, Mapping):
        raise ConfigError(f"must be none, default or a mapping of op class to sigma, "
                          f"got {setting!r}", field="simulation.variability")
    out = dict(shipped_sigmas())
    for name, sigma in setting.items():
        if isinstance(sigma, bool) or not (isinstance(sigma, (int, float))
                                           and 0.0 <= sigma <= 1.0):
            raise ConfigError(f"sigma of {name!r} must be a number in [0, 1], got {sigma!r}",
                              field=f"simulation.variability.{name}")
        out[str(name)] = float(sigma)
    return out


def max_of_normals(u: float, n: int) -> float:
    """The largest of ``n`` standard normal draws, from one uniform ``u`` in (0, 1): the
    inverse CDF of ``Phi ** n``. ``1 - u ** (1/n)`` is formed as ``-expm1(ln u / n)`` so
    that it keeps its digits for large ``n``."""
    tail = -math.expm1(math.log(u) / n)
    return -_NORMAL.inv_cdf(tail)


# the trapezoid rule of :func:`expected_factor`: step and range of the integration variable
EXPECTATION_STEP, EXPECTATION_RANGE = 0.005, 9.0


@cache
def expected_factor(sigma: float, n: int) -> float:
    """The mean over seeds of the factor a class tied to ``n`` ranks runs at,
    ``E[exp(sigma M_n)]`` (1 below two ranks or at sigma 0, as :meth:`Variability._factor`):
    the integral of ``exp(sigma x)`` against ``M_n``'s density ``n phi(x) Phi(x)^(n-1)``,
    by the trapezoid rule on ``[-9, 9]`` (:data:`EXPECTATION_STEP`; the density is smooth
    and negligible outside). What ``clustersim plan``'s estimate takes where each replay
    draws one factor."""
    if n < 2 or sigma == 0.0:
        return 1.0
    steps = round(2 * EXPECTATION_RANGE / EXPECTATION_STEP)
    total = 0.0
    for i in range(steps + 1):
        x = -EXPECTATION_RANGE + i * EXPECTATION_STEP
        below = _NORMAL.cdf(x)
        if below > 0.0:
            weight = 0.5 if i in (0, steps) else 1.0
            total += weight * math.exp(sigma * x + (n - 1) * math.log(below)) * _NORMAL.pdf(x)
    return n * total * EXPECTATION_STEP


def class_sigma(sigmas: Mapping[str, float], op_class: str) -> float:
    """The sigma of compute op class ``op_class``: its own, else the ``compute`` one."""
    return sigmas.get(op_class, sigmas.get(COMPUTE, 0.0))


def draw_max(seed: int, key: str, n: int) -> float:
    """``M_n`` for (seed, key, n): deterministic, independent across keys and sizes."""
    rng = np.random.default_rng([int(seed), zlib.crc32(key.encode()), int(n)])
    u = float(rng.random())
    return max_of_normals(min(max(u, 1e-300), 1.0 - 1e-16), n)


def tied_ranks(trace: Trace) -> dict[str, tuple[int, ...]]:
    """Per rank class, the ranks its collectives tie it to (itself included; sorted), or
    just its own ranks when it takes part in no collective."""
    out = {}
    for cls in trace.classes:
        mine = set(cls.ranks)
        comms = {op.comm for op in cls.ops if op.kind == "collective"}
        tied: set[int] = set()
        for cid in sorted(comms):
            for group in trace.communicators[cid].groups:
                if not mine.isdisjoint(group):
                    tied.update(group)
        out[cls.id] = tuple(sorted(tied | mine)) if tied else ()
    return out


def synchronised_ranks(trace: Trace) -> dict[str, int]:
    """Per rank class, how many ranks its collectives tie it to (1: none)."""
    return {cid: max(len(r), 1) for cid, r in tied_ranks(trace).items()}


def group_key(ranks: tuple[int, ...]) -> str:
    """One name per set of tied ranks, so that classes cut from one group (a straggler
    split off, one class per rank in an imported trace) share its one draw."""
    return f"ranks:{zlib.crc32(np.asarray(ranks, dtype=np.int64).tobytes())}"


class Variability:
    """The factors of one replay: per class and compute op class, per communicator (each
    drawn once and kept)."""

    def __init__(self, sigmas: Mapping[str, float], seed: int,
                 class_groups: Mapping[str, tuple[int, ...]]):
        self.sigmas, self.seed = dict(sigmas), int(seed)
        self.class_ranks = {c: max(len(r), 1) for c, r in class_groups.items()}
        self._keys = {c: group_key(r) for c, r in class_groups.items() if len(r) > 1}
        self._memo: dict[tuple, float] = {}
        self._compute: dict[tuple[str, str], float] = {}    # (class, op class) -> factor
        self._collective: dict[str, float] = {}             # communicator -> factor

    @classmethod
    def for_trace(cls, trace: Trace, sigmas: Mapping[str, float], seed: int) -> Variability:
        return cls(sigmas, seed, tied_ranks(trace))

    def _factor(self, sigma: float, key: str, n: int) -> float:
        if n < 2 or sigma == 0.0:
            return 1.0
        memo = (sigma, key, n)
        if memo not in self._memo:
            self._memo[memo] = math.exp(sigma * draw_max(self.seed, key, n))
        return self._memo[memo]

    def compute_factor(self, cls_id: str, op_class: str) -> float:
        """Time factor of a compute op of ``op_class`` in class ``cls_id``: the slowest of
        the class's tied ranks (one draw per set of tied ranks, shared by its op classes
        and by every class of that set; kept per (class, op class): the replay asks once
        per compute op)."""
        found = self._compute.get((cls_id, op_class))
        if found is None:
            sigma = class_sigma(self.sigmas, op_class)
            n = self.class_ranks.get(cls_id, 1)
            found = self._compute[(cls_id, op_class)] = \
                self._factor(sigma, self._keys.get(cls_id, ""), n)
        return found

    def collective_factor(self, comm_id: str, group_size: int) -> float:
        """Time factor of a collective's transfer on communicator ``comm_id`` (its groups
        of ``group_size``: one size per communicator), kept per communicator (the replay
        asks once per collective)."""
        found = self._collective.get(comm_id)
        if found is None:
            found = self._collective[comm_id] = self._factor(
                self.sigmas.get(COLLECTIVE, 0.0), f"comm:{comm_id}", group_size)
        return found

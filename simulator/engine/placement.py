"""Placement: which cluster GPU each rank of a job runs on, the only place the two meet.

A Trace speaks of ranks 0..world_size-1; the cluster of GPUs by their index in
``Cluster.gpus``. The job asks its planner for collectives and transfers on GPUs, so it
maps every rank group through its placement first (:class:`~simulator.engine.planning.Plans`),
and the host copies of a rank through :meth:`Placement.gpu`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import ConfigError


@dataclass(frozen=True)
class Placement:
    """``gpus[rank]``: the cluster GPU (its index in ``Cluster.gpus``) of each job rank.

    :raises ConfigError: naming ``placement`` when a GPU is negative or taken twice.
    """

    gpus: tuple[int, ...]

    def __post_init__(self):
        if self.gpus and min(self.gpus) < 0:
            raise ConfigError(f"GPU {min(self.gpus)} is not a GPU index", field="placement")
        if len(set(self.gpus)) != len(self.gpus):
            raise ConfigError("a GPU holds two ranks", field="placement")

    @classmethod
    def first(cls, world_size: int) -> Placement:
        """Ranks 0..world_size-1 on the cluster's first GPUs, in order (one job alone on
        a machine)."""
        return cls(tuple(range(world_size)))

    @property
    def world_size(self) -> int:
        return len(self.gpus)

    def gpu(self, rank: int) -> int:
        """The GPU of job rank ``rank``."""
        return self.gpus[rank]

    def group(self, ranks: Iterable[int]) -> tuple[int, ...]:
        """The GPUs of job ranks ``ranks``, in their order."""
        return tuple(map(self.gpus.__getitem__, ranks))

    def check(self, n_gpus: int, world_size: int) -> None:
        """A placement of ``world_size`` ranks on a cluster of ``n_gpus`` GPUs.

        :raises ConfigError: naming ``placement`` where it does not fit.
        """
        if len(self.gpus) != world_size:
            raise ConfigError(f"places {len(self.gpus)} ranks, the job has {world_size}",
                              field="placement")
        if self.gpus and max(self.gpus) >= n_gpus:
            raise ConfigError(f"GPU {max(self.gpus)} is beyond the cluster's {n_gpus}",
                              field="placement")

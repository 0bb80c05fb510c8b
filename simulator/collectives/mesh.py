"""Rings over a full mesh: the GPUs of an AMD Instinct OAM platform (Infinity Fabric, one
direct link between every pair of GPUs, no switch).

Behind an NVSwitch every ring hop may use the GPU's whole NVLink bandwidth, so one ring
order serves every channel. On a mesh a ring hop uses the one link between two GPUs, and a
single ring would send on one of each GPU's 7 links and leave 6 idle. RCCL's rings on MI300X use several
orders so that their hops fall on different links (the AMD ROCm blog 'Understanding RCCL
Bandwidth and xGMI Performance on AMD Instinct MI300X': all_reduce reaches ~300+ GB/s bus
bandwidth where one 64 GB/s link per hop could not). The orders here are edge-disjoint
Hamiltonian cycles of the complete graph of the communicator's GPUs, each run in both
directions: ``floor((n - 1) / 2)`` cycles, so ``2 floor((n - 1) / 2)`` rings, each directed
link carrying at most one ring. For the 8 GPUs of a platform that is 3 cycles and 6 rings,
6 of each GPU's 7 links in each direction (K8 has no 4th Hamiltonian cycle disjoint from
3: 4 x 8 > 28 edges). Which exact rings RCCL builds is not read from its source: this is
the most links that whole rings can use, an assumption the rccl-tests comparison in
validation/collectives/rccl/ checks.
"""

from __future__ import annotations

from functools import cache

from ..cluster import Cluster
from ..hardware import SCALE_UP_CLASSES


def is_full_mesh(cluster: Cluster, gpus) -> bool:
    """Whether every pair of ``gpus`` (two or more) has a direct scale-up edge."""
    G = cluster.G
    return len(gpus) > 1 and all(
        G.has_edge(a, b) and G.edges[a, b].get("link_class") in SCALE_UP_CLASSES
        for i, a in enumerate(gpus) for b in gpus[i + 1:])


def mesh_orders(gpus) -> list[list]:
    """The ring orders of ``gpus`` on a full mesh (module docstring): each edge-disjoint
    Hamiltonian cycle forwards, then backwards; ``[gpus]`` for two GPUs."""
    n = len(gpus)
    if n < 3:
        return [list(gpus)]
    out = []
    for cycle in hamiltonian_decomposition(n):
        out.append([gpus[i] for i in cycle])
        out.append([gpus[cycle[0]]] + [gpus[i] for i in reversed(cycle[1:])])
    return out


SEARCH_STEPS = 20_000     # paths tried in the joint search before the greedy one


def mesh_paths(ends: list[tuple], gpus: list) -> list[list]:
    """Per ``(entry, exit)`` of ``ends`` (one per channel between servers), a path through
    all of ``gpus`` from entry to exit on the mesh, the channels on disjoint links where
    the mesh has enough of them, as each has its own NIC between servers: first a joint
    depth-first search for pairwise link-disjoint paths (8 channels of 8 GPUs use all 56
    directed links once each; found in a few dozen steps), then, if it fails within
    :data:`SEARCH_STEPS`, one path at a time on the least-taken links. Both search in GPU
    order, so the same input always gives the same paths."""
    joint = _disjoint_paths(ends, gpus)
    if joint is not None:
        return joint
    load: dict = {}
    out = []
    for entry, exit_ in ends:
        inner = [g for g in gpus if g not in (entry, exit_)]
        bound = 0
        while (path := _path(entry, exit_, inner, load, bound)) is None:
            bound += 1
        for a, b in zip(path, path[1:]):
            load[(a, b)] = load.get((a, b), 0) + 1
        out.append(path)
    return out


def _disjoint_paths(ends: list[tuple], gpus: list) -> list[list] | None:
    """Pairwise link-disjoint entry -> exit paths through all ``gpus`` for every channel,
    or None when the search finds none within :data:`SEARCH_STEPS` paths."""
    used: set = set()
    out: list = []
    steps = [0]

    def place(k: int) -> bool:
        if k == len(ends):
            return True
        entry, exit_ = ends[k]
        inner = [g for g in gpus if g not in (entry, exit_)]
        for path in _paths(entry, exit_, inner, used):
            steps[0] += 1
            if steps[0] > SEARCH_STEPS:
                return False
            links = list(zip(path, path[1:]))
            used.update(links)
            out.append(path)
            if place(k + 1):
                return True
            out.pop()
            used.difference_update(links)
        return False

    return out if place(0) else None


def _paths(entry, exit_, inner: list, used: set):
    """Every path entry -> all of ``inner`` -> exit on links outside ``used``, in order."""
    path = [entry]

    def extend():
        if len(path) == len(inner) + 1:
            if exit_ == entry:
                yield list(path)
            elif (path[-1], exit_) not in used:
                yield path + [exit_]
            return
        for v in inner:
            if v not in path and (path[-1], v) not in used:
                path.append(v)
                yield from extend()
                path.pop()

    yield from extend()


def _path(entry, exit_, inner: list, load: dict, bound: int) -> list | None:
    """A path entry -> every GPU of ``inner`` -> exit whose links carry at most ``bound``
    earlier paths; None if there is none."""
    path = [entry]

    def extend() -> bool:
        if len(path) == len(inner) + 1:
            if exit_ == entry or load.get((path[-1], exit_), 0) <= bound:
                path.extend([] if exit_ == entry else [exit_])
                return True
            return False
        for v in inner:
            if v not in path and load.get((path[-1], v), 0) <= bound:
                path.append(v)
                if extend():
                    return True
                path.pop()
        return False

    return path if extend() else None


@cache
def hamiltonian_decomposition(n: int) -> tuple[tuple[int, ...], ...]:
    """``floor((n - 1) / 2)`` edge-disjoint Hamiltonian cycles of the complete graph on
    ``0..n-1`` (each starts at 0), found by a depth-first search in index order, so the
    same ``n`` always gives the same cycles.

    :raises ValueError: for ``n < 3``.
    """
    if n < 3:
        raise ValueError(f"n(={n}) must be >= 3 for a Hamiltonian cycle")
    want = (n - 1) // 2
    used: set = set()
    cycles: list = []

    def edge(a: int, b: int) -> tuple[int, int]:
        return (a, b) if a < b else (b, a)

    def cycles_from(k: int) -> bool:
        if k == want:
            return True
        path = [0]

        def extend() -> bool:
            if len(path) == n:
                if edge(path[-1], 0) in used:
                    return False
                closed = [edge(a, b) for a, b in zip(path, path[1:] + [0])]
                used.update(closed)
                cycles.append(tuple(path))
                if cycles_from(k + 1):
                    return True
                cycles.pop()
                used.difference_update(closed)
                return False
            for v in range(1, n):
                if v not in path and edge(path[-1], v) not in used:
                    path.append(v)
                    if extend():
                        return True
                    path.pop()
            return False

        return extend()

    cycles_from(0)
    return tuple(cycles)


__all__ = ["hamiltonian_decomposition", "is_full_mesh", "mesh_orders", "mesh_paths"]

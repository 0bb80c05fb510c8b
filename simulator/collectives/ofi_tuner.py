"""aws-ofi-nccl's region tuner: the algorithm and protocol an AWS instance's runs really use.

On AWS, NCCL loads the tuner plugin that aws-ofi-nccl ships in its net plugin library (NCCL
2.20+ looks there when ``NCCL_TUNER_PLUGIN`` is unset). For the platforms it knows it holds
polygons in (message bytes, ranks) space, measured by AWS, each naming an algorithm and a
protocol; NCCL's choice is overridden by the first polygon that holds the point (inside or on
an edge), skipping those whose algorithm or protocol NCCL cannot run here, and left alone
outside every polygon and up to 2 instances (``region_get_coll_info_internal_v3``). The
polygons and the point test are aws-ofi-nccl 1.16.3's (``src/tuner/nccl_ofi_regions.cpp``),
in ``data/ofi_tuner.yaml``.
"""

from __future__ import annotations

import math
from functools import cache

from ..cluster import Cluster
from ..constants import read_data

MAX_SIZE = 100.0 * 1024 * 1024 * 1024       # TUNER_MAX_SIZE
MAX_RANKS = 1024.0 * 1024                   # TUNER_MAX_RANKS
_EPS = 1e-10


def extend_region(a, b, z=(MAX_SIZE, MAX_RANKS)) -> tuple[float, float]:
    """The farthest point on the line through ``a`` and ``b`` with z's x or z's y."""
    if a[0] == b[0]:
        return (a[0], z[1])
    if a[1] == b[1]:
        return (z[0], a[1])
    m = (a[1] - b[1]) / (a[0] - b[0])
    c = b[1] - m * b[0]
    zy = m * z[0] + c
    return (z[0], zy) if zy < z[1] else ((z[1] - c) / m, z[1])


def _intersect(x0, x1, y0, y1, want_point=False):
    """1 if segment x0->x1 crosses y0->y1, -1 if not, 0 if it meets them at y0 or y1
    (with the crossing point on the y line when ``want_point``)."""
    dx = (x1[0] - x0[0], x1[1] - x0[1])
    dy = (y1[0] - y0[0], y1[1] - y0[1])
    d = dy[0] * dx[1] - dy[1] * dx[0]
    if abs(d) < _EPS:
        return (0, None) if want_point else 0
    a = ((x0[0] * dx[1] - x0[1] * dx[0]) - (y0[0] * dx[1] - y0[1] * dx[0])) / d
    sect = (y0[0] + a * dy[0], y0[1] + a * dy[1])
    if a < -_EPS or a > 1 + _EPS:
        r = -1
    elif a < _EPS or a > 1 - _EPS:
        r = 0
    else:
        b = ((x0[0] * dy[1] - x0[1] * dy[0]) - (y0[0] * dy[1] - y0[1] * dy[0])) / d
        r = -1 if b < 0 or b > 1 else 1
    return (r, sect) if want_point else r


def _distance(x, y0, y1) -> float:
    """Distance from ``x`` to the segment y0->y1 along its normal (inf off the segment)."""
    dy = (y1[0] - y0[0], y1[1] - y0[1])
    r, s = _intersect(x, (x[0] + dy[1], x[1] - dy[0]), y0, y1, want_point=True)
    if r == -1 or s is None:
        return math.inf
    return math.hypot(s[0] - x[0], s[1] - x[1])


def inside(point, vertices) -> int:
    """1 inside the polygon, 0 on an edge, -1 outside (the plugin's ray casting)."""
    n = len(vertices)
    edges = [(vertices[i], vertices[(i + 1) % n]) for i in range(n)]
    if any(_distance(point, a, b) < _EPS for a, b in edges):
        return 0
    xs = [v[0] for v in vertices]
    ys = [v[1] for v in vertices] + [vertices[1][1]]
    if not (min(xs) <= point[0] <= max(xs) and min(ys) <= point[1] <= max(ys)):
        return -1
    far = (2.0 * MAX_SIZE, 2.0 * MAX_RANKS)
    crosses = sum(_intersect(point, far, a, b) == 1 for a, b in edges)
    return 1 if crosses % 2 else -1


def _vertex(v) -> tuple[float, float]:
    if isinstance(v, dict):
        x, y = extend_region(*v["extend"])
        return (float(v.get("x", x)), float(v.get("y", y)))
    return (MAX_SIZE if v[0] == "max_size" else float(v[0]), float(v[1]))


@cache
def _platforms() -> dict:
    out = {}
    for name, p in read_data("ofi_tuner.yaml")["platforms"].items():
        regions = {op: tuple((r["algo"], r["proto"], tuple(_vertex(v) for v in r["vertices"]))
                             for r in rs)
                   for op, rs in p.items()
                   if op not in ("link_type", "gpus_per_server", "nccl_tuner", "nccl_env")}
        out[name] = (p["link_type"], int(p["gpus_per_server"]), regions)
    return out


def gpus_per_server(platform: str) -> int:
    """GPUs per instance of ``platform`` (the plugin's branch encoded here)."""
    return _platforms()[platform][1]


@cache
def nccl_tuner_view(platform: str) -> dict | None:
    """What NCCL's own tuner sees on ``platform`` (its ``nccl_tuner`` block of
    ofi_tuner.yaml), or None where none is given."""
    return read_data("ofi_tuner.yaml")["platforms"][platform].get("nccl_tuner")


@cache
def nccl_env(platform: str) -> dict:
    """The NCCL environment aws-ofi-nccl sets on ``platform`` (its ``nccl_env`` block of
    ofi_tuner.yaml; empty where none is given)."""
    return dict(read_data("ofi_tuner.yaml")["platforms"][platform].get("nccl_env") or {})


def platform_of(cluster: Cluster) -> str | None:
    """The aws-ofi-nccl platform whose instances ``cluster`` is built of (None if none)."""
    types = {link_type for link_type, link_class in cluster.link_kinds if link_class == "net"}
    first = cluster.gpus[0] if cluster.gpus else None
    per_server = len(cluster.gpus_of_server(cluster.G.nodes[first]["server"])) if first else 0
    for name, (link_type, gpus, _) in _platforms().items():
        if link_type in types and per_server == gpus:
            return name
    return None


def region_choice(platform: str | None, op: str, size: int, n_ranks: int, n_nodes: int,
                  runnable) -> tuple[str, str] | None:
    """The (algorithm, protocol) the plugin imposes, or None where NCCL's own choice stands.
    ``runnable(algo, proto)``: whether NCCL could run that pair here."""
    if platform is None or n_nodes <= 2:
        return None
    link_type, gpus, regions = _platforms()[platform]
    if n_ranks != gpus * n_nodes:
        return None         # only the plugin's 8-GPUs-per-instance branch is encoded
    for algo, proto, vertices in regions.get(op, ()):
        if runnable(algo, proto) and inside((float(size), float(n_ranks)), vertices) >= 0:
            return algo, proto
    return None


__all__ = ["extend_region", "gpus_per_server", "inside", "nccl_env", "nccl_tuner_view", "platform_of",
           "region_choice"]

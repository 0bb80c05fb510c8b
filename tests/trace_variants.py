"""A small valid Trace, and malformed copies of it: the inputs of tests/test_trace_checks.py.

Each variant edits the document :func:`trace_document` writes (what ``trace.io`` puts on
disk) and names the field the one-line error must name.
"""

from __future__ import annotations

import copy
import math

from simulator.trace import Communicator, Op, RankClass, Trace
from simulator.trace.io import trace_to_dict


def _class_ops(peer: int, kind: str) -> list[Op]:
    return [
        Op(0, "compute", "compute", "fwd", phase="forward", flops=1e9, bytes_accessed=1e6,
           op_class="matmul", mem_alloc_bytes=1000),
        Op(1, "comm", "collective", "ar", collective="all_reduce", size_bytes=1 << 20,
           comm="world", deps=(0,), attrs={"algorithm": "ring", "protocol": "Simple"}),
        Op(2, "p2p", kind, "xfer", size_bytes=4096, peer=peer, deps=(0,)),
        Op(3, "copy", "memcpy", "h2d", size_bytes=1 << 20, attrs={"direction": "h2d"}),
        Op(4, "compute", "delay", "wait", duration_s=1e-4, attrs={"repeat": 2},
           mem_free_bytes=1000),
        Op(5, "compute", "compute", "upd", phase="optimizer", duration_s=1e-4),
        Op(6, "comm", "collective", "bc", collective="broadcast", size_bytes=1 << 16,
           comm="pairs", attrs={"root": 1}),
        Op(7, "host", "send", "to_host", size_bytes=4096, attrs={"host": 0, "nic": 0}),
    ]


def valid_trace() -> Trace:
    """8 ranks in two classes (0-3 send to 4-7), every op kind, pinned collective attrs."""
    return Trace(8, [RankClass("a", (0, 1, 2, 3), _class_ops(4, "send"),
                               static_memory_bytes=1 << 20),
                     RankClass("b", (4, 5, 6, 7), _class_ops(0, "recv"), slowdown=1.5)],
                 {"world": Communicator("world", (tuple(range(8)),)),
                  "pairs": Communicator("pairs", ((0, 4), (1, 5), (2, 6), (3, 7)))},
                 {"model": "toy"})


def trace_document() -> dict:
    return trace_to_dict(valid_trace())


def _op(i: int, **fields):
    """Set ``fields`` on op ``i`` of class a."""
    def edit(d):
        d["classes"][0]["ops"][i].update(fields)
    return edit


def _attr(i: int, **attrs):
    def edit(d):
        d["classes"][0]["ops"][i].setdefault("attrs", {}).update(attrs)
    return edit


def _chain(*edits):
    """Every edit of ``edits``, in turn."""
    def edit(d):
        for e in edits:
            e(d)
    return edit


def _cls(**fields):
    def edit(d):
        d["classes"][1].update(fields)
    return edit


def _comm(name: str, groups):
    def edit(d):
        d["communicators"][name] = groups
    return edit


def _top(**fields):
    def edit(d):
        d.update(fields)
    return edit


NAN, INF = math.nan, math.inf
# id -> (edit of the document, text the error line must contain: the field)
VARIANTS = {
    "negative-delay": (_op(4, duration_s=-1.0), "ops[4].duration_s"),
    "negative-size": (_op(1, size_bytes=-5), "ops[1].size_bytes"),
    "float-size": (_op(1, size_bytes=1.5), "ops[1].size_bytes"),
    "bool-size": (_op(3, size_bytes=True), "ops[3].size_bytes"),
    "string-size": (_op(3, size_bytes="4096"), "ops[3].size_bytes"),
    "unknown-protocol": (_attr(1, protocol="LL256"), "ops[1].attrs.protocol"),
    "unknown-algorithm": (_attr(1, algorithm="butterfly"), "ops[1].attrs.algorithm"),
    "algorithm-not-for-op": (_attr(6, algorithm="tree"), "ops[6].attrs.algorithm"),
    "unknown-collective": (_op(1, collective="all_scatter"), "ops[1].collective"),
    "root-outside-group": (_attr(6, root=2), "ops[6].attrs.root"),
    "float-root": (_attr(6, root=0.5), "ops[6].attrs.root"),
    "no-groups": (_comm("pairs", []), "communicators.pairs"),
    "empty-group": (_comm("world", [[]]), "communicators.world"),
    "rank-twice-in-group": (_comm("world", [[0, 1, 2, 3, 4, 5, 6, 6]]),
                            "communicators.world"),
    "duplicated-group": (_comm("pairs", [[0, 4], [0, 4], [2, 6], [3, 7]]),
                         "communicators.pairs"),
    "group-outside-world": (_comm("pairs", [[0, 4], [1, 5], [2, 6], [3, 9]]),
                            "communicators.pairs"),
    "negative-rank-in-group": (_comm("pairs", [[0, 4], [1, 5], [2, 6], [-1, 7]]),
                               "communicators.pairs"),
    "float-rank-in-group": (_comm("pairs", [[0, 4], [1, 5], [2, 6], [3, 7.5]]),
                            "communicators.pairs"),
    "groups-of-different-sizes": (_comm("pairs", [[0, 4], [1, 5], [2, 6, 3, 7]]),
                                  "communicators.pairs"),
    "unknown-comm": (_op(1, comm="nowhere"), "ops[1].comm"),
    "nan-duration": (_op(5, duration_s=NAN), "ops[5].duration_s"),
    "inf-duration": (_op(5, duration_s=INF), "ops[5].duration_s"),
    "inf-delay": (_op(4, duration_s=INF), "ops[4].duration_s"),
    "string-duration": (_op(5, duration_s="1 ms"), "ops[5].duration_s"),
    "nan-flops": (_op(0, flops=NAN), "ops[0].flops"),
    "negative-flops": (_op(0, flops=-1e9), "ops[0].flops"),
    "inf-bytes": (_op(0, bytes_accessed=INF), "ops[0].bytes_accessed"),
    "nan-slowdown": (_cls(slowdown=NAN), "classes[b].slowdown"),
    "inf-slowdown": (_cls(slowdown=INF), "classes[b].slowdown"),
    "zero-slowdown": (_cls(slowdown=0.0), "classes[b].slowdown"),
    "huge-repeat": (_attr(4, repeat=10 ** 30), "ops[4].attrs.repeat"),
    "float-repeat": (_attr(4, repeat=2.5), "ops[4].attrs.repeat"),
    "negative-repeat": (_attr(4, repeat=-1), "ops[4].attrs.repeat"),
    "repeat-on-collective": (_attr(1, repeat=3), "ops[1].attrs.repeat"),
    "unknown-dep": (_op(5, deps=[99]), "ops[5].deps"),
    "dep-cycle": (_op(0, deps=[4]), "ops[0].deps"),
    "self-dep": (_op(5, deps=[5]), "ops[5].deps"),
    "deps-not-a-list": (_op(5, deps=3), "ops[5].deps"),
    "bool-dep": (_op(5, deps=[True]), "ops[5].deps"),         # == 1, an op before it
    "float-dep": (_op(5, deps=[1.0]), "ops[5].deps"),         # == 1 too
    "unhashable-dep": (_op(5, deps=[[0]]), "ops[5].deps"),
    "unknown-kind": (_op(5, kind="matmul"), "ops[5].kind"),
    "list-stream": (_op(5, stream=["compute"]), "ops[5].stream"),
    "int-stream": (_op(5, stream=3), "ops[5].stream"),
    "empty-stream": (_op(5, stream=""), "ops[5].stream"),
    "string-op-id": (_op(5, id="5"), "ops[5].id"),
    "negative-static-memory": (_cls(static_memory_bytes=-1), "classes[b].static_memory_bytes"),
    "float-static-memory": (_cls(static_memory_bytes=1.5), "classes[b].static_memory_bytes"),
    "negative-alloc": (_op(0, mem_alloc_bytes=-10), "ops[0].mem_alloc_bytes"),
    "float-free": (_op(4, mem_free_bytes=0.5), "ops[4].mem_free_bytes"),
    "float-peer": (_op(2, peer=4.5), "ops[2].peer"),
    "unknown-precision": (_attr(0, precision="int4"), "ops[0].attrs.precision"),
    "unknown-launch": (_attr(0, launch="warp"), "ops[0].attrs.launch"),
    "list-launch": (_attr(0, launch=["graph"]), "ops[0].attrs.launch"),
    "unknown-op-class": (_op(0, op_class="fft"), "ops[0].op_class"),
    # a GEMM's shape (the compute model times by it) and a channel-parallel norm's
    "zero-gemm-dim": (_attr(0, m=0, n=64, k=64), "ops[0].attrs.m"),
    "string-gemm-dim": (_attr(0, m=64, n="64", k=64), "ops[0].attrs.n"),
    "shape-without-k": (_attr(0, m=64, n=64), "ops[0].attrs.k"),
    "zero-groups": (_attr(0, m=64, n=64, k=64, groups=0), "ops[0].attrs.groups"),
    "string-recorded-time": (_attr(1, recorded_s="1 ms"), "ops[1].attrs.recorded_s"),
    "negative-recorded-time": (_attr(1, recorded_s=-1.0), "ops[1].attrs.recorded_s"),
    "norm-passes": (_chain(_op(0, op_class="norm"), _attr(0, m=64, n=4096, k=7)),
                    "ops[0].attrs.k"),
    "negative-host": (_attr(7, host=-1), "ops[7].attrs.host"),
    "float-nic": (_attr(7, nic=0.5), "ops[7].attrs.nic"),
    "attrs-not-a-mapping": (_op(5, attrs=[1]), "ops[5].attrs"),
    "bad-direction": (_attr(3, direction="sideways"), "ops[3].attrs.direction"),
    "duplicate-class-id": (_cls(id="a"), "classes[a].id"),
    "rank-twice-in-class": (_cls(ranks=[4, 5, 6, 6]), "classes[b].ranks"),
    "float-world-size": (_top(world_size=8.5), "world_size"),
    "name-not-a-string": (_op(5, name=5), "ops[5].name"),
}


def broken_document(variant: str) -> dict:
    d = copy.deepcopy(trace_document())
    VARIANTS[variant][0](d)
    return d

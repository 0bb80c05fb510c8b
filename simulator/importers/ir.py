"""What an importer extracts from one rank's profile before it becomes Trace ops.

Both importers (PyTorch/Kineto and TensorFlow) reduce one rank's chosen iteration to a
:class:`RankTrace`: the host's time window, label annotations (layers and phases), device
ops (GPU kernels, copies) on streams, collectives (run by a GPU stream, or by a host
worker thread as gloo and TensorFlow do), and the intervals where the host was blocked
waiting for some of them. :mod:`simulator.importers.builder` turns it into ops with
dependencies. Times are seconds on the profile's clock; ``key`` ids are unique per rank.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field


@dataclass(slots=True)
class Span:
    """A named interval (an annotation); ``phase`` when the importer knows it."""

    name: str
    ts: float
    end: float
    phase: str | None = None


@dataclass(slots=True)
class DeviceOp:
    """A GPU kernel, copy or set on a stream, launched by the host at ``launch_ts``.
    ``waits_on``: keys of ops on other streams it waited for (cross-stream events)."""

    key: int
    stream: str
    name: str
    ts: float
    end: float
    launch_ts: float
    category: str = "other"
    waits_on: list[int] = field(default_factory=list)


@dataclass(slots=True)
class CommOp:
    """A collective. ``lane``: the stream it runs on (a GPU stream when ``on_device``, else
    a host worker lane); ``issue_ts``: when the host issued it (launched it, for a GPU
    kernel); ``size_bytes`` in nccl-tests terms."""

    key: int
    collective: str
    size_bytes: int
    pg: str
    ranks: tuple[int, ...] | None
    lane: str
    name: str
    ts: float
    end: float
    issue_ts: float
    attrs: dict = field(default_factory=dict)
    waits_on: list[int] = field(default_factory=list)
    on_device: bool = False


@dataclass(slots=True)
class Block:
    """The host was blocked from ``ts`` to ``end`` until the ops ``awaited`` finished."""

    ts: float
    end: float
    awaited: list[int]


@dataclass
class RankTrace:
    """One rank's chosen iteration. ``host_kind``: "delay" when GPUs do the compute (host
    time is launch overhead and framework work), "compute" for CPU-only training."""

    source: str
    rank: int | None
    world_size: int | None
    window: tuple[float, float]
    step: str
    annotations: list[Span]
    device_ops: list[DeviceOp]
    comms: list[CommOp]
    blocks: list[Block]
    host_kind: str
    meta: dict = field(default_factory=dict)
    pg_ranks: dict[str, tuple[int, ...]] = field(default_factory=dict)


def phase_of(name: str) -> str | None:
    """forward / backward / optimizer when an annotation or op name says so."""
    n = name.lower()
    if "optimizer" in n or "zero_grad" in n or n.startswith(("sgd", "adam", "lamb")):
        return "optimizer"
    if "backward" in n or n.startswith("gradient_tape/"):
        return "backward"
    if "forward" in n:
        return "forward"
    return None


def clean_label(name: str) -> str:
    """``## forward ##`` -> ``forward``; ``nn.Module: Linear_0`` -> ``Linear_0``."""
    name = name.strip()
    if name.startswith("##") and name.endswith("##"):
        name = name.strip("#").strip()
    if name.startswith("nn.Module:"):
        name = name[len("nn.Module:"):].strip()
    return name


class Labels:
    """Innermost annotation (layer) and phase at any time, from possibly nested spans.

    Time is cut at every annotation boundary into elementary intervals; each carries the
    innermost covering annotation (latest start, then shortest) and the innermost phase.
    """

    def __init__(self, spans: list[Span]):
        bounds = sorted({t for s in spans for t in (s.ts, s.end)})
        self.bounds = bounds
        self.labels: list[tuple[str, str]] = []
        order = sorted(spans, key=lambda s: (s.ts, -s.end))
        active: list[Span] = []
        i = 0
        for a in bounds[:-1]:
            active = [s for s in active if s.end > a]
            while i < len(order) and order[i].ts <= a:
                if order[i].end > a:
                    active.append(order[i])
                i += 1
            inner = sorted(active, key=lambda s: (s.ts, -s.end))
            layer = clean_label(inner[-1].name) if inner else ""
            phase = next((p for s in reversed(inner) if (p := s.phase or phase_of(s.name))),
                         "")
            self.labels.append((layer, phase))

    def at(self, t: float) -> tuple[str, str]:
        """(layer, phase) at time ``t``; ("", "") outside every annotation."""
        i = bisect.bisect_right(self.bounds, t) - 1
        if 0 <= i < len(self.labels):
            return self.labels[i]
        return "", ""

    def boundaries(self, lo: float, hi: float) -> list[float]:
        """Label-change times strictly inside (lo, hi)."""
        out = []
        for i in range(bisect.bisect_right(self.bounds, lo), len(self.bounds)):
            t = self.bounds[i]
            if t >= hi:
                break
            before = self.labels[i - 1] if i > 0 else ("", "")
            after = self.labels[i] if i < len(self.labels) else ("", "")
            if before != after:
                out.append(t)
        return out

"""One pass over a PyTorch profiler (Kineto) Chrome trace, keeping what the importer needs.

Kept per event, in compact tuples (times in microseconds, as Kineto writes them):
host events (``cpu_op``, ``user_annotation``, ``cuda_runtime``/``cuda_driver`` calls and
``nn.Module:`` python events) with the few arguments that matter (communication
arguments, shapes of collective inputs, launch correlation ids); GPU activity (``kernel``,
``gpu_memcpy``, ``gpu_memset``) with stream, correlation and NCCL arguments; the start of
each ``ac2g`` launch flow; thread names. The header gives ``distributedInfo`` (rank, world
size, process groups) and ``deviceProperties``.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ConfigError
from . import comms
from .jsonstream import read_chrome_trace

HOST_CATS = ("cpu_op", "user_annotation", "cuda_runtime", "cuda_driver", "python_function")
DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
COMM_ARGS = ("Collective name", "In msg nelems", "Out msg nelems", "dtype", "Group size",
             "Process Group Name", "Process Group Ranks", "Global rank start",
             "Global rank stride")
SHAPE_ARGS = ("Input Dims", "Input type")
STEP = re.compile(r"^ProfilerStep#(\d+)$")


@dataclass(slots=True)
class HostEvent:
    tid: object
    ts: float
    end: float
    name: str
    cat: str
    args: dict


@dataclass(slots=True)
class GpuEvent:
    stream: str
    ts: float
    end: float
    name: str
    cat: str
    corr: object
    args: dict


@dataclass
class KinetoProfile:
    """Everything read from one rank's file."""

    source: str
    header: dict
    host: list[HostEvent] = field(default_factory=list)
    gpu: list[GpuEvent] = field(default_factory=list)
    flows: dict = field(default_factory=dict)          # ac2g id -> (tid, ts)
    thread_names: dict = field(default_factory=dict)

    @property
    def steps(self) -> dict[int, HostEvent]:
        """ProfilerStep#N annotations by N."""
        out = {}
        for e in self.host:
            m = STEP.match(e.name) if e.cat == "user_annotation" else None
            if m:
                out[int(m.group(1))] = e
        return dict(sorted(out.items()))

    @property
    def distributed(self) -> dict:
        info = self.header.get("distributedInfo")
        return info if isinstance(info, dict) else {}

    @property
    def gpu_name(self) -> str | None:
        props = self.header.get("deviceProperties")
        if isinstance(props, list) and props and isinstance(props[0], dict):
            return props[0].get("name")
        return None


class _Collector:
    def __init__(self, profile: KinetoProfile):
        self.p = profile
        self.devices: set = set()

    def __call__(self, e: dict) -> None:
        ph, cat = e.get("ph"), e.get("cat")
        if ph == "X" and cat in HOST_CATS:
            self._host(e, cat)
        elif ph == "X" and cat in DEVICE_CATS:
            self._gpu(e, cat)
        elif ph == "s" and cat == "ac2g":
            self.p.flows[e.get("id")] = (e.get("tid"), _num(e.get("ts")))
        elif ph == "M" and e.get("name") == "thread_name":
            self.p.thread_names[(e.get("pid"), e.get("tid"))] = (e.get("args") or {}).get("name")

    def _host(self, e: dict, cat: str) -> None:
        name = str(e.get("name", ""))
        if cat == "python_function" and not name.startswith("nn.Module:"):
            return
        args = e.get("args") or {}
        keep = {}
        if cat in ("cuda_runtime", "cuda_driver"):
            keep = {"correlation": args.get("correlation")}
        elif name == "record_param_comms" or name.startswith(("c10d::", "gloo:")):
            keep = {k: args[k] for k in (*COMM_ARGS, *SHAPE_ARGS) if k in args}
        if cat == "cpu_op" and "External id" in args:      # links it to the kernels it launched
            keep["External id"] = args["External id"]
        ts = _num(e.get("ts"))
        self.p.host.append(HostEvent(e.get("tid"), ts, ts + _num(e.get("dur")), name, cat,
                                     keep))

    def _gpu(self, e: dict, cat: str) -> None:
        args = e.get("args") or {}
        name = str(e.get("name", ""))
        device = args.get("device", e.get("pid"))
        self.devices.add(device)
        stream = f"{device}:{args.get('stream', e.get('tid'))}"
        keep = {k: args[k] for k in COMM_ARGS if k in args} if "nccl" in name.lower() else {}
        if "External id" in args:                           # the cpu_op that launched it
            keep["External id"] = args["External id"]
        ts = _num(e.get("ts"))
        self.p.gpu.append(GpuEvent(stream, ts, ts + _num(e.get("dur")), name, cat,
                                   args.get("correlation"), keep))


def _num(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def read_kineto(path: str | Path) -> KinetoProfile:
    """Stream one Kineto trace file.

    :raises ConfigError: naming the file when it cannot be read, or holds neither CPU ops
        nor GPU activity (a Chrome trace that is not from the PyTorch profiler).
    """
    source = str(path)
    profile = KinetoProfile(source, {})
    collector = _Collector(profile)
    profile.header = read_chrome_trace(path, collector, ("distributedInfo", "deviceProperties",
                                                         "schemaVersion"))
    if not profile.host and not profile.gpu:
        raise ConfigError("not a PyTorch profiler trace: no cpu_op, user_annotation or GPU "
                          "kernel events", source=source)
    if len(collector.devices) == 1:             # one GPU per rank: streams by number only
        for g in profile.gpu:
            g.stream = g.stream.split(":", 1)[1]
    return profile


def group_ranks(args: dict) -> tuple[int, ...] | None:
    """Global ranks of a collective's process group from PyTorch's arguments."""
    ranks = comms.parse_ranks(args.get("Process Group Ranks"))
    if ranks:
        return ranks
    n, start = args.get("Group size"), args.get("Global rank start")
    if isinstance(n, int) and isinstance(start, int):
        return tuple(start + i * int(args.get("Global rank stride", 1)) for i in range(n))
    return None


def stream_names(p: KinetoProfile) -> dict[str, str]:
    """``nccl:<process group>`` for CUDA streams that run NCCL kernels (the same name on
    every rank, so the replay can match them), ``cuda:<stream>`` for the others."""
    pg_of: dict[str, str] = {}
    ordered = sorted(p.gpu, key=lambda g: g.ts)
    for g in ordered:
        if g.stream not in pg_of and comms.nccl_kernel(g.name)[0] is not None:
            pg_of[g.stream] = str(g.args.get("Process Group Name", "0"))
    names, used = {}, defaultdict(int)
    for g in ordered:
        if g.stream in names:
            continue
        if g.stream in pg_of:
            pg = pg_of[g.stream]
            used[pg] += 1
            names[g.stream] = f"nccl:{pg}" + (f"/{used[pg] - 1}" if used[pg] > 1 else "")
        else:
            names[g.stream] = f"cuda:{g.stream}"
    return names


def default_pg(info: dict) -> tuple[str, tuple[int, ...] | None]:
    """The default process group (name, ranks) from distributedInfo."""
    config = [c for c in info.get("pg_config") or [] if isinstance(c, dict)]
    pick = next((c for c in config if c.get("pg_desc") == "default_pg"),
                config[0] if len(config) == 1 else None)
    if pick is None:
        return "0", None
    return str(pick.get("pg_name", "0")), comms.parse_ranks(pick.get("ranks"))


def pg_ranks(info: dict) -> dict[str, tuple[int, ...]]:
    """Every process group's ranks from distributedInfo."""
    out = {}
    for c in info.get("pg_config") or []:
        ranks = comms.parse_ranks(c.get("ranks")) if isinstance(c, dict) else None
        if ranks:
            out[str(c.get("pg_name"))] = ranks
    return out


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
from .checked import MAX_RANKS, EventFields, distributed_info, header_list
from .jsonstream import read_chrome_trace, sniff

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
        """``distributedInfo`` (checked when the file was read)."""
        return self.header.get("distributedInfo") or {}

    @property
    def gpu_name(self) -> str | None:
        props = self.header.get("deviceProperties") or []
        name = props[0].get("name") if props else None
        return name if isinstance(name, str) else None


class _Collector:
    """Keeps what the importer needs of each event, every field read through its schema
    (:mod:`.checked`: a wrong type is one error naming the event and the field)."""

    def __init__(self, profile: KinetoProfile):
        self.p = profile
        self.devices: set = set()
        self.index = 0

    def __call__(self, e: dict) -> None:
        f = EventFields(e, self.p.source, self.index)
        self.index += 1
        ph, cat = f.text("ph"), f.text("cat")
        if ph == "X" and cat in HOST_CATS:
            self._host(f, cat)
        elif ph == "X" and cat in DEVICE_CATS:
            self._gpu(f, cat)
        elif ph == "s" and cat == "ac2g":
            self.p.flows[f.ident("id")] = (f.ident("tid"), f.number("ts"))
        elif ph == "M" and f.text("name") == "thread_name":
            self.p.thread_names[(f.ident("pid"), f.ident("tid"))] = f.args().text("name")

    def _host(self, f: EventFields, cat: str) -> None:
        name = f.text("name")
        if cat == "python_function" and not name.startswith("nn.Module:"):
            return
        args = f.args()
        keep = {}
        if cat in ("cuda_runtime", "cuda_driver"):
            keep = {"correlation": args.ident("correlation")}
        elif name == "record_param_comms" or name.startswith(("c10d::", "gloo:")):
            keep = _comm_args(args, (*COMM_ARGS, *SHAPE_ARGS))
        if cat == "cpu_op" and "External id" in args:      # links it to the kernels it launched
            keep["External id"] = args.ident("External id")
        ts = f.number("ts")
        self.p.host.append(HostEvent(f.ident("tid"), ts, ts + f.duration("dur"), name, cat,
                                     keep))

    def _gpu(self, f: EventFields, cat: str) -> None:
        args = f.args()
        name = f.text("name")
        device = args.ident("device") if "device" in args else f.ident("pid")
        self.devices.add(device)
        stream = f"{device}:{args.ident('stream') if 'stream' in args else f.ident('tid')}"
        keep = _comm_args(args, COMM_ARGS) if "nccl" in name.lower() else {}
        if "External id" in args:                           # the cpu_op that launched it
            keep["External id"] = args.ident("External id")
        ts = f.number("ts")
        self.p.gpu.append(GpuEvent(stream, ts, ts + f.duration("dur"), name, cat,
                                   args.ident("correlation"), keep))


_COUNT_ARGS = ("In msg nelems", "Out msg nelems", "Group size", "Global rank start",
               "Global rank stride")
_NAME_ARGS = ("Collective name", "dtype", "Process Group Name")


def _comm_args(args: EventFields, keys) -> dict:
    """The communication arguments among ``keys`` that ``args`` has, each checked."""
    out = {}
    for k in keys:
        if k not in args:
            continue
        if k in _COUNT_ARGS:
            out[k] = args.count(k, MAX_RANKS if k == "Group size" else None)
        else:
            out[k] = args.text(k) if k in _NAME_ARGS else args.get(k)
    return out


def read_kineto(path: str | Path, max_events: int | None = None) -> KinetoProfile:
    """Stream one Kineto trace file (at most ``max_events`` events; default: the limit).

    :raises ConfigError: naming the file when it cannot be read, holds a field of the wrong
        type (naming the event and field), is a TensorFlow profile, or holds neither CPU ops
        nor GPU activity (a Chrome trace that is not from the PyTorch profiler).
    """
    source = str(path)
    _not_tensorflow(Path(path), source)
    profile = KinetoProfile(source, {})
    collector = _Collector(profile)
    profile.header = read_chrome_trace(path, collector, ("distributedInfo", "deviceProperties",
                                                         "schemaVersion"), max_events)
    distributed_info(profile.header, source)
    header_list(profile.header, "deviceProperties", source)
    if not profile.host and not profile.gpu:
        raise ConfigError("not a PyTorch profiler trace: no cpu_op, user_annotation or GPU "
                          "kernel events", source=source)
    if len(collector.devices) == 1:             # one GPU per rank: streams by number only
        for g in profile.gpu:
            g.stream = g.stream.split(":", 1)[1]
    return profile


def _not_tensorflow(path: Path, source: str) -> None:
    """Refuse a TensorFlow profile (an XSpace protobuf) by name."""
    head = sniff(path, source).lstrip()
    if head[:1] in (b"{", b"["):
        return
    if ".xplane.pb" in path.name or (head[:1] == b"\x0a" and b"/host:" in head
                                     or b"/device:" in head):
        raise ConfigError("not a PyTorch trace: it is a TensorFlow profile (XSpace, "
                          "*.xplane.pb): import it with 'clustersim import tensorflow'",
                          source=source)


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


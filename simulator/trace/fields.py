"""What each field of a Trace may hold: the value checks behind :meth:`Trace.validate`.

Every field the engine reads is checked here, by the kind of op that reads it (the engine:
:mod:`simulator.engine.replay`, ``p2p``, ``memory``; the collective planner reads a
collective's ``algorithm``, ``protocol`` and ``root``; the compute model an op's
``op_class``, ``flops``, ``bytes_accessed`` and ``precision``). A check returns the reason
a value is wrong, or None; :mod:`simulator.trace.schema` says where. The checks are plain
type and range tests, cheap enough to run on every generated trace.

Limits (they keep the simulated time finite and the replay bounded): a ``repeat`` of at
most :data:`MAX_REPEAT`, a ``duration_s`` of at most :data:`MAX_DURATION_S`, a class
``slowdown`` of at most :data:`MAX_SLOWDOWN`, a ``size_bytes`` of at most
:data:`MAX_SIZE_BYTES`, a world of at most :data:`MAX_RANKS` ranks.
"""

from __future__ import annotations

import math
import numbers

from simulator.choices import ALGOS_FOR_OP, OPS, PROTOS, STAR_OPS
from simulator.compute.launch import LAUNCHES
from simulator.compute.model import BACKWARD_PASSES, FORWARD_PASSES, OP_CLASSES
from simulator.precision import OP_PRECISIONS

MAX_REPEAT = 1_000_000
MAX_DURATION_S = 1e9          # about 32 years
MAX_SLOWDOWN = 1e6
MAX_SIZE_BYTES = 1 << 50      # 1 PiB in one transfer or collective: far past any real one
MAX_RANKS = 1 << 20           # ranks in a world or a process group: far more than any cluster
DIRECTIONS = ("h2d", "d2h")
REPEATED_KINDS = ("compute", "memcpy", "delay")   # the kinds attrs["repeat"] applies to


def is_int(value) -> bool:
    """An integer, bools excluded (numpy integers count)."""
    return type(value) is int or (isinstance(value, numbers.Integral)
                                  and not isinstance(value, bool))


def is_number(value) -> bool:
    """An int or a float, bools excluded (numpy numbers count)."""
    return type(value) in (float, int) or (isinstance(value, numbers.Real)
                                           and not isinstance(value, bool))


def count(value, high: int | None = None) -> str | None:
    """An integer >= 0 (and <= ``high``)."""
    if not is_int(value):
        return f"must be an integer, got {value!r}"
    if value < 0:
        return f"must be >= 0, got {value}"
    if high is not None and value > high:
        return f"must be <= {high}, got {value}"
    return None


def amount(value, high: float | None = None) -> str | None:
    """A finite number >= 0 (and <= ``high``)."""
    if not is_number(value) or not math.isfinite(value) or value < 0:
        return f"must be a finite number >= 0, got {value!r}"
    if high is not None and value > high:
        return f"must be <= {high:g}, got {value!r}"
    return None


def slowdown(value) -> str | None:
    """A class's compute scale: a finite number in (0, MAX_SLOWDOWN]."""
    if not is_number(value) or not math.isfinite(value) or value <= 0:
        return f"must be a finite number > 0, got {value!r}"
    if value > MAX_SLOWDOWN:
        return f"must be <= {MAX_SLOWDOWN:g}, got {value!r}"
    return None


def text(value, empty: bool = True) -> str | None:
    """A string (non-empty unless ``empty``)."""
    if not isinstance(value, str):
        return f"must be a string, got {value!r}"
    if not empty and not value:
        return "must not be empty"
    return None


def op_problem(op, comm_sizes: dict[str, int]) -> tuple[str, str] | None:
    """(field, reason) of the first field of ``op`` the engine cannot use, or None.

    ``comm_sizes``: communicator id -> ranks per instance group. Ids, deps and the
    send/recv pairing are the schema's to check (they need the other ops).
    """
    if not _plain(op):
        for name, reason in _common(op):
            if reason:
                return name, reason
    check = _BY_KIND.get(op.kind)
    return check(op, comm_sizes) if check else None


def _plain(op) -> bool:
    """The fields every op has, as generators write them (the fast path: exact types and
    chained comparisons, which are false for NaN); False sends the op to :func:`_common`,
    which names the field."""
    d = op.duration_s
    return (type(op.stream) is str and op.stream != "" and type(op.name) is str
            and type(op.layer) is str and type(op.phase) is str
            and type(op.size_bytes) is int and 0 <= op.size_bytes <= MAX_SIZE_BYTES
            and type(op.mem_alloc_bytes) is int and op.mem_alloc_bytes >= 0
            and type(op.mem_free_bytes) is int and op.mem_free_bytes >= 0
            and type(op.flops) in _NUMBERS and 0 <= op.flops < math.inf
            and type(op.bytes_accessed) in _NUMBERS and 0 <= op.bytes_accessed < math.inf
            and (d is None or (type(d) in _NUMBERS and 0 <= d <= MAX_DURATION_S))
            and type(op.attrs) is dict and "repeat" not in op.attrs)


_NUMBERS = (float, int)


def _common(op):
    yield "stream", text(op.stream, empty=False)
    yield "name", text(op.name)
    yield "layer", text(op.layer)
    yield "phase", text(op.phase)
    yield "mem_alloc_bytes", count(op.mem_alloc_bytes)
    yield "mem_free_bytes", count(op.mem_free_bytes)
    yield "flops", amount(op.flops)
    yield "bytes_accessed", amount(op.bytes_accessed)
    if op.duration_s is not None:
        yield "duration_s", amount(op.duration_s, MAX_DURATION_S)
    yield "size_bytes", count(op.size_bytes, MAX_SIZE_BYTES)
    if not isinstance(op.attrs, dict):
        yield "attrs", f"must be a mapping, got {op.attrs!r}"
        return
    if "repeat" in op.attrs:
        yield "attrs.repeat", (count(op.attrs["repeat"], MAX_REPEAT)
                               if op.kind in REPEATED_KINDS else
                               f"applies to {', '.join(REPEATED_KINDS)} ops, not {op.kind}")


NORM_PASSES = (FORWARD_PASSES, BACKWARD_PASSES)


def _compute(op, comm_sizes):
    if op.duration_s is not None:
        return None                      # a measured time: op_class and precision unused
    if op.op_class not in OP_CLASSES:
        return "op_class", (f"unknown op class {op.op_class!r}; valid: "
                            f"{', '.join(OP_CLASSES)} (or give duration_s)")
    precision = op.attrs.get("precision")
    if precision is not None and precision not in OP_PRECISIONS:
        return "attrs.precision", (f"unknown precision {precision!r}; valid: "
                                   f"{', '.join(OP_PRECISIONS)}")
    launch = op.attrs.get("launch", "")
    if launch not in LAUNCHES:
        return "attrs.launch", (f"unknown launch {str(launch)[:60]!r}; valid: eager (''), "
                                f"{', '.join(LAUNCHES[1:])}")
    return _shape(op) if "m" in op.attrs or "n" in op.attrs or "k" in op.attrs else None


def _shape(op):
    """A compute op's ``m, n, k`` (a GEMM's or an attention kernel's dimensions; a
    channel-parallel norm's channels, elements per channel and passes) and ``groups``: given
    together, each an integer >= 1; a norm's passes those the ``channel_norm`` law knows."""
    attrs = op.attrs
    for key in ("m", "n", "k", *(("groups",) if "groups" in attrs else ())):
        if key not in attrs:
            return f"attrs.{key}", "missing: m, n and k go together"
        value = attrs[key]
        if not is_int(value) or value < 1:
            return f"attrs.{key}", f"must be an integer >= 1, got {value!r}"
    if not isinstance(attrs.get("transa", False), bool):
        return "attrs.transa", f"must be true or false, got {str(attrs['transa'])[:60]!r}"
    if op.op_class == "norm" and attrs["k"] not in NORM_PASSES:
        return "attrs.k", (f"a channel-parallel norm makes {' or '.join(map(str, NORM_PASSES))}"
                           f" passes over its tensors, got {attrs['k']}")
    return None


# per collective, the algorithms an op may pin (auto, NCCL's, star where it applies), and
# the protocols: built once, the check runs once per collective op
_VALID_ALGOS = {name: ("auto", *algos, *(("star",) if name in STAR_OPS else ()))
                for name, algos in ALGOS_FOR_OP.items()}
_VALID_PROTOS = ("auto", *PROTOS)


def _collective(op, comm_sizes):
    if op.collective not in OPS:
        return "collective", f"unknown collective {op.collective!r}; valid: {', '.join(OPS)}"
    if op.comm not in comm_sizes:
        return "comm", f"unknown communicator {op.comm!r}"
    attrs = op.attrs
    algo = attrs.get("algorithm", "auto")
    valid = _VALID_ALGOS[op.collective]
    if algo not in valid:
        return "attrs.algorithm", (f"algorithm {algo!r} does not implement {op.collective}; "
                                   f"valid: {', '.join(valid)}")
    proto = attrs.get("protocol", "auto")
    if proto not in _VALID_PROTOS:
        return "attrs.protocol", (f"unknown protocol {proto!r}; valid: "
                                  f"{', '.join(_VALID_PROTOS)}")
    if "recorded_s" in attrs:       # an imported collective's measured time
        reason = amount(attrs["recorded_s"], MAX_DURATION_S)
        if reason:
            return "attrs.recorded_s", reason
    if "root" in attrs:
        size = comm_sizes[op.comm]
        reason = count(attrs["root"], size - 1)
        if reason:
            return "attrs.root", (f"{reason} (a position in the communicator's groups of "
                                  f"{size} ranks)")
    return None


def _send_recv(op, comm_sizes):
    attrs = op.attrs
    if "host" not in attrs:
        return None if is_int(op.peer) else ("peer", f"must be an integer, got {op.peer!r}")
    for name in ("host", "nic"):
        if name in attrs:
            reason = count(attrs[name])
            if reason:
                return f"attrs.{name}", reason
    return None


def _memcpy(op, comm_sizes):
    direction = op.attrs.get("direction")
    if direction is not None and direction not in DIRECTIONS:
        return "attrs.direction", f"must be one of {', '.join(DIRECTIONS)}, got {direction!r}"
    return None


_BY_KIND = {"compute": _compute, "collective": _collective, "send": _send_recv,
            "recv": _send_recv, "memcpy": _memcpy}


def all_ints(values) -> bool:
    """Every value an integer (bools excluded); C-speed for a list of plain ints."""
    return set(map(type, values)) <= {int} or all(map(is_int, values))


def group_problem(groups, world_size: int) -> str | None:
    """Why a communicator's instance groups cannot run a collective, or None: no group, an
    empty group, groups of different sizes, a rank that is not an integer in the world, or
    a rank in two places."""
    if not groups:
        return "has no group of ranks"
    size = len(groups[0])
    for i, group in enumerate(groups):
        if not group:
            return f"group {i} is empty"
        if len(group) != size:
            return (f"groups of different sizes: group 0 has {size} ranks, group {i} has "
                    f"{len(group)} (every instance of a communicator has the same size)")
        if not (all_ints(group) and min(group) >= 0 and max(group) < world_size):
            r = next(r for r in group if not (is_int(r) and 0 <= r < world_size))
            return f"group {i} has rank {r!r}, not a rank of the world of {world_size}"
    if len(set().union(*groups)) == size * len(groups):
        return None
    seen: set = set()
    for i, group in enumerate(groups):
        for r in group:
            if r in seen:
                return f"rank {r} is in it twice (group {i})"
            seen.add(r)
    return None

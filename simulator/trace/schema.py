"""The Trace: per-rank-class ops with streams and dependencies, and communicators.

Strategy generators (DDP, FSDP, TensorFlow strategies) and importers (profiler traces) both
produce a :class:`Trace`; the replay engine only replays Traces. :meth:`Trace.validate` is
the one check of the contract: the file reader and the engine both call it. It checks the
structure here and every value the engine reads (:mod:`simulator.trace.fields`), and raises a
:class:`TraceError` naming the rank class, the op and the field.

Symmetry is part of the contract. Ranks that run the same program are one
:class:`RankClass`, and its ops are written once. A generated FSDP trace on 4,096 GPUs has
one class; an imported profiler trace has one class per rank. A class that must be told
apart (a straggler) is split off into its own class.

Ops (shaped like Chakra's execution-trace node, with units in the field names):

* ``compute``: ``flops`` and ``bytes_accessed`` (HBM traffic), or a measured ``duration_s``;
  ``op_class`` picks the efficiency curve (``matmul``, ``attention``, ``elementwise``,
  ``norm``, ``optimizer``, ``conv``...).
* ``collective``: ``collective`` (all_reduce, all_gather, ...), ``size_bytes`` in nccl-tests
  terms (the full buffer for all_gather/reduce_scatter), and ``comm``: the id of a
  :class:`Communicator`. Every instance group of the communicator runs it at once.
* ``send`` / ``recv`` between ranks: ``size_bytes`` and ``peer``, the global rank of the
  partner of the class's first member; the member ``ranks[0] + d`` pairs with ``peer + d``
  (members map by offset). The k-th send from rank a to rank b with ``attrs["tag"]`` (a
  string or an integer; absent: no tag) matches the k-th recv on b from a with the same
  tag, k counted in list order; the two must have the same ``size_bytes``. With ``attrs["host"]`` they are copies to or from
  a server's host memory instead, and have no partner op.
* ``memcpy``: host-device copies (``size_bytes``, ``attrs["direction"]`` h2d or d2h).
* ``delay``: a fixed ``duration_s`` (CPU work, data loading, checkpoint stalls).

Ops of one (class, stream) run in list order, like a CUDA stream; ``deps`` add cross-stream
edges (op ids of the same class). A class starts the iteration holding
``static_memory_bytes`` (parameters, gradients, optimizer state); ``mem_alloc_bytes`` is
allocated when an op starts and ``mem_free_bytes`` released when it ends; the engine tracks
the sum per class.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from simulator.errors import ConfigError
from simulator.trace.fields import (MAX_RANKS, all_ints, count, group_problem, is_int,
                                    op_problem, slowdown, text)
from simulator.trace.matching import (peer_ops, peers_fit, ranks_array,
                                      transfers_match)

KINDS = ("compute", "collective", "send", "recv", "memcpy", "delay")
_TRANSFERS = ("send", "recv")


class TraceError(ConfigError, ValueError):
    """A Trace that breaks its contract: one line naming the rank class, the op and the
    field (``field``: ``classes[<class id>].ops[<position>].<field>``, or ``classes`` for
    what spans classes); the file reader adds the file."""

    def __init__(self, message: str, *, field: str = "classes"):
        super().__init__(message, field=field)


# (sender rank, receiver rank, tag, k): the k-th transfer of that pair with that tag
TransferKey = tuple[int, int, object, int]


@dataclass(slots=True)
class Op:
    """One operation of a rank class."""

    id: int
    stream: str
    kind: str
    name: str
    layer: str = ""
    phase: str = ""                  # forward | backward | optimizer | comm | other
    flops: float = 0.0
    bytes_accessed: float = 0.0
    op_class: str = ""
    duration_s: float | None = None
    collective: str = ""
    size_bytes: int = 0
    comm: str = ""
    peer: int = -1
    deps: tuple[int, ...] = ()
    mem_alloc_bytes: int = 0
    mem_free_bytes: int = 0
    attrs: dict = field(default_factory=dict)

    @property
    def is_peer_transfer(self) -> bool:
        """A send or recv between two ranks (not a copy to or from host memory)."""
        return self.kind in ("send", "recv") and "host" not in self.attrs


@dataclass(frozen=True)
class Communicator:
    """A process group, possibly replicated: ``groups`` are the global ranks of each
    instance that runs the collective at the same time (e.g. one per node for an
    intra-node all-gather of HYBRID_SHARD, one group for a global all_reduce)."""

    id: str
    groups: tuple[tuple[int, ...], ...]

    @property
    def size(self) -> int:
        return len(self.groups[0])


@dataclass
class RankClass:
    """Ranks that run the same ops. ``slowdown`` scales their compute (stragglers);
    ``static_memory_bytes`` is what each rank holds before the first op (sharded
    parameters, gradients, optimizer state)."""

    id: str
    ranks: tuple[int, ...]
    ops: list[Op]
    slowdown: float = 1.0
    static_memory_bytes: int = 0

    def peer_of(self, op: Op, rank: int) -> int:
        """The partner of member ``rank`` in the send/recv ``op`` (members map by offset)."""
        return op.peer + (rank - self.ranks[0])


def transfer_keys(cls: RankClass) -> dict[int, list[TransferKey]]:
    """Op id -> the transfers of each send/recv between ranks, one per member in
    ``cls.ranks`` order (see the module doc for the matching rule)."""
    return {op.id: op_transfer_keys(cls, op, tag, k) for op, tag, k in peer_ops(cls)}


def op_transfer_keys(cls: RankClass, op: Op, tag, k: int) -> list[TransferKey]:
    """The transfers of one send/recv ``op`` of ``cls`` (its members' ``k``-th of that kind
    to or from that peer with ``tag``, :func:`~simulator.trace.matching.peer_ops`)."""
    shift = op.peer - cls.ranks[0] if cls.ranks else 0     # peer_of(op, r) is r + shift
    if op.kind == "send":
        return [(r, r + shift, tag, k) for r in cls.ranks]
    return [(r + shift, r, tag, k) for r in cls.ranks]


def _where(cls: RankClass, op: Op) -> str:
    return f"rank class {cls.id}, op {op.id} ({op.name})"


def _op_error(at: tuple, field: str, reason: str) -> TraceError:
    """The error of ``field`` of op ``at`` = (class, position in its list, op)."""
    cls, index, op = at
    return TraceError(f"{_where(cls, op)}: {reason}",
                      field=f"classes[{cls.id}].ops[{index}].{field}")


def _ordinal(k: int) -> str:
    """'1st', '2nd', ... for the k-th (from 0) transfer of a pair."""
    n = k + 1
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


@dataclass
class Trace:
    """A whole iteration: rank classes and the communicators their collectives use."""

    world_size: int
    classes: list[RankClass]
    communicators: dict[str, Communicator]
    meta: dict = field(default_factory=dict)   # model, strategy, batch, tokens, flops...

    def validate(self) -> None:
        """Check the contract and every field the engine reads (:mod:`simulator.trace.fields`);
        once it passed, :attr:`validated` is true for this object.

        :raises TraceError: (a ``ValueError``) naming the rank class, the op and the field.
        """
        if not is_int(self.world_size) or self.world_size < 1:
            raise TraceError(f"must be an integer >= 1, got {self.world_size!r}",
                             field="world_size")
        if self.world_size > MAX_RANKS:
            raise TraceError(f"must be at most {MAX_RANKS:,} ranks, got {self.world_size:,}",
                             field="world_size")
        comm_sizes = self._validate_communicators()
        seen_ranks: set[int] = set()
        class_ids: set = set()
        for cls in self.classes:
            self._validate_class(cls, class_ids)
            if set(cls.ranks) & seen_ranks:
                raise TraceError(f"rank class {cls.id}: ranks overlap another class")
            seen_ranks |= set(cls.ranks)
            self._validate_ops(cls, comm_sizes)
        if len(seen_ranks) != self.world_size or seen_ranks != set(range(self.world_size)):
            raise TraceError(f"rank classes cover {len(seen_ranks)} ranks, "
                             f"world size is {self.world_size}")
        self._validate_transfers()
        self._validated = True      # read by the pipeline (not a field: not copied by replace)

    @property
    def validated(self) -> bool:
        """Whether :meth:`validate` passed on this very object (a copy or a
        ``dataclasses.replace`` of it is not; a change made in place after it is not seen)."""
        return getattr(self, "_validated", False)

    def _validate_communicators(self) -> dict[str, int]:
        """Communicator id -> ranks per group, each checked (:func:`fields.group_problem`)."""
        out = {}
        for cid, comm in self.communicators.items():
            reason = group_problem(comm.groups, self.world_size)
            if reason:
                raise TraceError(f"communicator {cid}: {reason}", field=f"communicators.{cid}")
            out[cid] = comm.size
        return out

    @staticmethod
    def _validate_class(cls: RankClass, class_ids: set) -> None:
        where = f"classes[{cls.id}]"
        if text(cls.id, empty=False) or cls.id in class_ids:
            raise TraceError(f"rank class {cls.id!r}: "
                             f"{text(cls.id, empty=False) or 'two rank classes have this id'}",
                             field=f"{where}.id")
        class_ids.add(cls.id)
        bad = None if all_ints(cls.ranks) else next(r for r in cls.ranks if not is_int(r))
        if bad is not None or len(set(cls.ranks)) != len(cls.ranks):
            raise TraceError(f"rank class {cls.id}: " + (
                f"rank {bad!r} is not an integer" if bad is not None else
                "a rank is listed twice"), field=f"{where}.ranks")
        for name, reason in (("slowdown", slowdown(cls.slowdown)),
                             ("static_memory_bytes", count(cls.static_memory_bytes))):
            if reason:
                raise TraceError(f"rank class {cls.id}: {reason}", field=f"{where}.{name}")

    def _validate_ops(self, cls: RankClass, comm_sizes: dict[str, int]) -> None:
        ids = set()
        ranks = ranks_array(cls.ranks)
        for index, op in enumerate(cls.ops):
            if not (type(op.id) is int or is_int(op.id)):
                raise _op_error((cls, index, op), "id", f"id must be an integer, got {op.id!r}")
            if op.kind not in KINDS:
                raise _op_error((cls, index, op), "kind", f"unknown kind {op.kind!r}; valid: "
                                                          f"{', '.join(KINDS)}")
            if op.id in ids:
                raise _op_error((cls, index, op), "id", "duplicate op id")
            deps = op.deps
            if type(deps) is not tuple or deps:     # most ops have none, most others one
                if not (type(deps) is tuple and len(deps) == 1 and type(deps[0]) is int
                        and deps[0] in ids):      # (what _check_deps passes, checked first)
                    self._check_deps((cls, index, op), ids)
            problem = op_problem(op, comm_sizes)
            if problem:
                raise _op_error((cls, index, op), *problem)
            if op.kind in _TRANSFERS and op.is_peer_transfer:
                self._validate_peer((cls, index, op), ranks)
            ids.add(op.id)

    @staticmethod
    def _check_deps(at: tuple, before: set) -> None:
        """``deps`` name ops listed before the op (so that they can never form a cycle)."""
        deps = at[2].deps
        if not isinstance(deps, tuple) or not all_ints(deps):
            raise _op_error(at, "deps", f"deps must be a list of op ids, got {deps!r}")
        if before.issuperset(deps):
            return
        missing = [d for d in deps if d not in before]
        all_ids = {o.id for o in at[0].ops if is_int(o.id)}
        unknown = [d for d in missing if d not in all_ids]
        why = ("no op of the class has that id" if unknown else
               "deps must name earlier ops, so that they cannot form a cycle")
        raise _op_error(at, "deps", f"depends on op(s) {unknown or missing} not defined "
                                    f"before it ({why})")

    def _validate_peer(self, at: tuple, ranks) -> None:
        cls, _, op = at
        if not cls.ranks:
            raise _op_error(at, "peer", f"a class without ranks has no one to {op.kind}")
        tag = op.attrs.get("tag")
        if tag is not None and (isinstance(tag, bool) or not isinstance(tag, (str, int))):
            raise _op_error(at, "attrs.tag", f"tag must be a string or an integer, got {tag!r}")
        if peers_fit(ranks, op.peer - cls.ranks[0], self.world_size):
            return
        to = "to" if op.kind == "send" else "from"
        for r in cls.ranks:
            p = cls.peer_of(op, r)
            if 0 <= p < self.world_size and p != r:
                continue
            offset = "" if r == cls.ranks[0] else f" (peer {op.peer} + offset {r - cls.ranks[0]})"
            what = "itself" if p == r else f"outside the world of {self.world_size} ranks"
            raise _op_error(at, "peer", f"rank {r} would {op.kind} {to} rank {p}{offset}, "
                                        f"{what}")

    def _validate_transfers(self) -> None:
        """Every send between ranks has its recv and the other way round (checked op by op,
        :mod:`simulator.trace.matching`; member by member only to word an error)."""
        if transfers_match(self.classes, self.world_size):
            return
        ends: dict[str, dict[TransferKey, tuple[RankClass, Op]]] = {"send": {}, "recv": {}}
        for cls in self.classes:
            by_id = {op.id: op for op in cls.ops}
            for op_id, keys in transfer_keys(cls).items():
                for key in keys:
                    ends[by_id[op_id].kind][key] = (cls, by_id[op_id])
        for kind, other in (("send", "recv"), ("recv", "send")):
            for key, (cls, op) in ends[kind].items():
                match = ends[other].get(key)
                src, dst, tag, k = key
                if match is None:
                    tagged = "" if tag is None else f" with tag {tag!r}"
                    raise TraceError(
                        f"{_where(cls, op)}: the {_ordinal(k)} {kind} from rank {src} to rank "
                        f"{dst}{tagged} has no matching {other} on rank "
                        f"{dst if kind == 'send' else src}")
                if kind == "send" and match[1].size_bytes != op.size_bytes:
                    raise TraceError(f"{_where(cls, op)}: sends {op.size_bytes} bytes to rank "
                                     f"{dst}, whose recv ({_where(*match)}) expects "
                                     f"{match[1].size_bytes}")

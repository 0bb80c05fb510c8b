"""The Trace: per-rank-class ops with streams and dependencies, and communicators.

Strategy generators (DDP, FSDP, TensorFlow strategies) and importers (profiler traces) both
produce a :class:`Trace`; the replay engine only replays Traces.

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
* ``send`` / ``recv``: ``size_bytes`` and ``peer`` (a rank-class-relative peer is not
  supported: peers are global ranks of the class's first member).
* ``memcpy``: host-device copies (``size_bytes``, ``attrs["direction"]`` h2d or d2h).
* ``delay``: a fixed ``duration_s`` (CPU work, data loading, checkpoint stalls).

Ops of one (class, stream) run in list order, like a CUDA stream; ``deps`` add cross-stream
edges (op ids of the same class). ``mem_alloc_bytes`` is allocated when the op starts and
``mem_free_bytes`` released when it ends; the engine tracks the sum per class.
"""

from __future__ import annotations

from dataclasses import dataclass, field

KINDS = ("compute", "collective", "send", "recv", "memcpy", "delay")


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
    """Ranks that run the same ops. ``slowdown`` scales their compute (stragglers)."""

    id: str
    ranks: tuple[int, ...]
    ops: list[Op]
    slowdown: float = 1.0


@dataclass
class Trace:
    """A whole iteration: rank classes and the communicators their collectives use."""

    world_size: int
    classes: list[RankClass]
    communicators: dict[str, Communicator]
    meta: dict = field(default_factory=dict)   # model, strategy, batch, tokens, flops...

    def validate(self) -> None:
        """Check the contract; raise ``ValueError`` naming the class and op."""
        seen_ranks: set[int] = set()
        for cls in self.classes:
            if set(cls.ranks) & seen_ranks:
                raise ValueError(f"rank class {cls.id}: ranks overlap another class")
            seen_ranks |= set(cls.ranks)
            ids = set()
            for op in cls.ops:
                where = f"rank class {cls.id}, op {op.id} ({op.name})"
                if op.kind not in KINDS:
                    raise ValueError(f"{where}: unknown kind {op.kind!r}")
                if op.id in ids:
                    raise ValueError(f"{where}: duplicate op id")
                missing = [d for d in op.deps if d not in ids]
                if missing:
                    raise ValueError(f"{where}: depends on op(s) {missing} not defined before it")
                if op.kind == "collective" and op.comm not in self.communicators:
                    raise ValueError(f"{where}: unknown communicator {op.comm!r}")
                ids.add(op.id)
        if seen_ranks != set(range(self.world_size)):
            raise ValueError(f"rank classes cover {len(seen_ranks)} ranks, "
                             f"world size is {self.world_size}")

"""Communication of one step split by what it is for: tensor parallel (TP), pipeline
parallel (PP), data parallel (DP/FSDP), expert parallel (EP), context parallel (CP).

Each collective's record names its communicator (``tp.s0``, ``shard``, ``world``; the part
before the first dot says the mesh dimension, :data:`KIND_OF`); a pipeline's activations
and gradients between stages are send/recv on ``pp_*`` streams. Times are of the rank
class the step's breakdown describes (:func:`~simulator.metrics.summary.critical_class`):
``busy_s`` the union of that kind's ops, ``exposed_s`` the part of it under no compute.
Kinds run at once (TP under FSDP's prefetch), so the kinds' times add up to more than
``comm_s`` where they overlap each other.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..engine.records import COMM_KINDS, Timeline
from .summary import COMPUTE_KINDS, critical_class, union_length

TP, PP, DP, EP, CP = ("tensor parallel (TP)", "pipeline parallel (PP)",
                      "data parallel (DP/FSDP)", "expert parallel (EP)",
                      "context parallel (CP)")
TIED, P2P, OTHER = "tied embeddings (first and last stage)", "point-to-point", "other"
ORDER = (TP, PP, DP, EP, CP, TIED, P2P, OTHER)

# a communicator's name up to its first dot -> what it is for. parallel plans: tp/etp, cp,
# ep, dp/shard/replicate/edp (strategies/parallel/generate.COMM_DIMS), ep_nvl/ep_rail (its
# DOMAIN_COMMS, the flex dispatcher's), embedding (tied);
# FSDP: shard/replicate/reshard; DDP, Horovod, TensorFlow: world, hier (tf_mirrored)
KIND_OF = {"tp": TP, "etp": TP, "cp": CP, "ep": EP, "ep_nvl": EP, "ep_rail": EP, "dp": DP,
           "shard": DP, "replicate": DP, "reshard": DP, "edp": DP, "world": DP, "hier": DP,
           "embedding": TIED}


@dataclass(frozen=True)
class CommKind:
    """One kind's communication in the step (seconds; bytes per rank)."""

    kind: str
    busy_s: float
    exposed_s: float
    size_bytes: int
    ops: int

    def as_dict(self) -> dict:
        return asdict(self)


def kind_of(kind: str, comm: str, stream: str) -> str:
    """What a communication record is for (its op kind, communicator and stream)."""
    if kind in ("send", "recv"):
        return PP if stream.startswith("pp_") else P2P
    return KIND_OF.get(comm.split(".", 1)[0], OTHER)


def comm_by_kind(tl: Timeline) -> list[CommKind]:
    """The critical class's communication per kind, in :data:`ORDER`; kinds it has none of
    are left out."""
    cls = critical_class(tl)
    recs = [r for r in tl.records if r.cls == cls]
    compute = [(r.start_s, r.end_s) for r in recs if r.kind in COMPUTE_KINDS]
    under = union_length(compute)
    spans: dict[str, list[tuple[float, float]]] = {}
    sizes: dict[str, int] = {}
    for r in recs:
        if r.kind in COMM_KINDS:
            k = kind_of(r.kind, r.comm, r.stream)
            spans.setdefault(k, []).append((r.start_s, r.end_s))
            sizes[k] = sizes.get(k, 0) + r.size_bytes
    out = []
    for k in (k for k in ORDER if k in spans):
        busy = union_length(spans[k])
        hidden = busy + under - union_length(spans[k] + compute)
        out.append(CommKind(k, busy, max(busy - hidden, 0.0), sizes[k], len(spans[k])))
    return out


def comm_kind_lines(kinds: list[CommKind]) -> list[str]:
    """``tensor parallel (TP): 0.512 s, 0.104 s of it not under compute; 1,120 op(s) of
    12.3 GB`` per kind, as ``run`` prints them (bytes: the ops' message sizes added up,
    one GPU's)."""
    return [f"{k.kind}: {k.busy_s:.4g} s, {k.exposed_s:.4g} s of it not under compute; "
            f"{k.ops:,} op(s) of {k.size_bytes / 1e9:.3g} GB" for k in kinds]

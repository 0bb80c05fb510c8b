"""Expert parallelism: how routed tokens load the EP ranks, the all-to-all volumes, and the
MoE block one EP rank runs.

An EP group of ``ep`` ranks holds the ``E`` experts of every MoE block, ``E / ep`` each
(experts ``j E / ep`` ... on EP rank ``j``). Each rank routes its ``t`` tokens to ``k``
experts, so the group assigns ``A = ep t k`` token copies; :class:`ExpertLoad` says how they
spread over the experts:

* ``balanced``: ``A / E`` each;
* ``zipf``: the ``i``-th most loaded expert gets a share proportional to ``i^-s``
  (``zipf_s``), which expert is the ``i``-th drawn by a seeded permutation (``seed``);
* ``measured``: ``counts``, tokens per expert from a real run (scaled to ``A``).

No expert can take a token twice (top-k picks distinct experts), so a share above ``ep t``
is capped there and its excess spread over the others. With a ``capacity_factor`` ``c``
an expert keeps at most ``c A / E`` copies (GShard's capacity) and drops the rest (counted).

The dispatch all-to-all sends each rank's ``t k`` copies of ``h`` elements to the experts'
ranks, the combine brings them back: ``t k h e`` bytes per rank, of which ``(ep - 1) / ep``
leave the rank when the routing is even. Unevenly routed, the busiest EP rank receives
``T_max h e`` (``T_max`` the most copies an EP rank's experts keep), and every rank of the
group waits for it at each all-to-all and for its grouped GEMMs: the block is costed for
that rank, and the all-to-all's nccl-tests size is ``T_max h e`` (a uniform all-to-all in
which every rank receives what the busiest one does). Four token all-to-alls per MoE block
and micro-batch: dispatch and combine forward, their gradients backward; beside them, as
Megatron-LM's all-to-all dispatcher runs them (:data:`EP_COLLECTIVES`), the all-gather of
each rank's tokens per expert (``ep E`` int64) before the dispatch and the all-to-all of
the permuted router probabilities (``T_max`` fp32) after it, and its gradient backward.

Megatron-Core's flex dispatcher (``moe_token_dispatcher_type: flex``, DeepEP's normal-mode
kernels or HybridEP: :func:`flex_sizes`) is hierarchical over the ``N`` NVLink domains the
EP group spans, ``d = ep / N`` EP ranks each: a token crosses the inter-domain network
(IB/RoCE) once per remote domain holding at least one of its ``k`` experts
(:func:`remote_domains`), to the EP rank with the same local index there (its rail
peer), which forwards it over NVLink to the expert ranks of its domain; the combine
reduces inside the domain over NVLink and sends each token back once per domain. Two
all-to-alls per dispatch or combine, run side by side (DeepEP and HybridEP pipeline the
RDMA and NVLink stages chunk by chunk): one among the ``d`` EP ranks of one domain
(``ep_nvl``) that carries the ``T_max`` copies landing on each rank (``T_max h e`` as the
all-to-all dispatcher's, the copies forwarded from the other domains included), and one
among the ``N`` rail peers (``ep_rail``) that carries the deduplicated tokens:
``N t p h e`` (``p`` the chance that one remote domain holds one of a token's experts),
so that ``t (N - 1) p h e`` leave each rank over the network, against ``t k (N - 1) / N
h e`` from the all-to-all dispatcher. The fp32 router probabilities of each copy travel
with the dispatched tokens (dispatch and its gradient, not the combine), so there is no
separate probability all-to-all; in place of the count all-gather, a small exchange of
each rank's tokens per rank and per expert (``(ep + E)`` int32: DeepEP's
``notify_dispatch``, HybridEP's metadata preprocessing) that the CPU waits for before it
launches the dispatch, as it waits for the counts above. Inside one domain (``N = 1``)
the flex dispatcher's all-to-alls are the token all-to-alls above with the
probabilities' bytes in the dispatch's. Not modelled: the SMs DeepEP's kernels occupy
(20-24) beside the GEMMs, the permute fused into its kernels, and DeepEP's
deduplication of copies bound to the same rank.

Expert tensor parallelism (``etp`` ranks split each expert, Megatron-Core's
``expert_tensor_parallel_size``; :mod:`.plan` lays out the groups): after the dispatch
each rank all-gathers over its expert-tensor-parallel group the copies its ``etp`` peers
received (``etp T_max h e`` bytes gathered), runs its ``1 / etp`` slice of its experts on
all of them, and reduce-scatters the outputs back before the combine
(``MoEAlltoAllTokenDispatcher``: ``gather_from_sequence_parallel_region`` before the sort
and ``reduce_scatter_to_sequence_parallel_region`` before the unsort, on the expert-tensor
group); backward mirrors it. Each rank routes its own tokens (``b s / (cp tp)`` with
sequence parallelism).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Annotated, Literal, NamedTuple

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from simulator.errors import ConfigError
from simulator.models.moe import PROB_BYTES, expert_width, moe_block_cost
from simulator.models.ops import ID_BYTES, LayerCost
from simulator.models.spec import ModelSpec

from ..base import OpHooks

DISTRIBUTIONS = ("balanced", "zipf", "measured")
FLEX_COUNT_BYTES = 4        # DeepEP's token counts per rank and per expert: int32
# The EP and expert-TP collectives of one MoE block, in issue order, as Megatron-LM's
# all-to-all token dispatcher (megatron/core/transformer/moe/token_dispatcher.py) runs
# them, each an :class:`EpCollective`.
# ``counts``: ``preprocess`` all-gathers each rank's tokens per expert over the EP group
# (the all-to-all's split sizes; the permute does not wait for it, the dispatch does);
# ``tokens``: the dispatched token copies (and their gradients); ``probs``: the permuted
# fp32 router probabilities, a second all-to-all after the tokens
# (``dispatch_all_to_all``), and their gradients back; ``etp``: the expert-tensor group's
# all-gather of its peers' copies after the dispatch and reduce-scatter before the
# combine, mirrored backward.
# the kernels that first read the dispatched tokens: the second permutation, else the
# experts' up (gate-up) GEMM, or an FP8 cast of its input; not the activation, which a
# selective recompute of moe_act reruns alone on the tokens already received (no dispatch)
DISPATCH_FEEDS = ("moe_sort_chunks", "moe_expert_gate_up", "moe_expert_up")


class EpCollective(NamedTuple):
    """One EP or expert-TP collective of an MoE block (:data:`EP_COLLECTIVES`)."""

    phase: str                   # forward or backward
    # the kernels it precedes (a name containing one: an FP8 cast of a GEMM's input too)
    feeds: tuple[str, ...]
    name: str
    kind: str                    # the collective
    size: str                    # which size of :class:`EpSizes`
    comm: str                    # the communicator


EP_COLLECTIVES = tuple(EpCollective(*row) for row in (
    ("forward", ("moe_permute",), "moe_token_counts", "all_gather", "counts", "ep"),
    ("forward", DISPATCH_FEEDS, "moe_dispatch", "all_to_all", "tokens",
     "ep"),
    ("forward", DISPATCH_FEEDS, "moe_dispatch_probs", "all_to_all",
     "probs", "ep"),
    ("forward", DISPATCH_FEEDS, "moe_expert_gather", "all_gather", "etp",
     "etp"),
    ("forward", ("moe_unsort_chunks", "moe_unpermute"), "moe_expert_scatter",
     "reduce_scatter", "etp", "etp"),
    ("forward", ("moe_unpermute",), "moe_combine", "all_to_all", "tokens", "ep"),
    ("backward", ("moe_unsort_chunks.bwd", "moe_expert_bias.bwd", "moe_expert_down.dgrad"),
     "moe_combine.bwd", "all_to_all", "tokens", "ep"),
    ("backward", ("moe_expert_bias.bwd", "moe_expert_down.dgrad"), "moe_expert_scatter.bwd",
     "all_gather", "etp", "etp"),
    ("backward", ("moe_permute.bwd",), "moe_expert_gather.bwd", "reduce_scatter", "etp",
     "etp"),
    ("backward", ("moe_permute.bwd",), "moe_dispatch.bwd", "all_to_all", "tokens", "ep"),
    ("backward", ("moe_permute.bwd",), "moe_dispatch_probs.bwd", "all_to_all", "probs",
     "ep")))
# the flex dispatcher's (module doc), :data:`EP_COLLECTIVES` with ``notify`` in place of
# ``counts`` (the CPU waits for it), no ``probs``, and each token all-to-all in two:
# ``rail_*`` across the NVLink domains (``ep_rail``, a stream of its own, issued beside the
# other) and ``flex_*`` inside one (``ep_nvl``, on the ``ep`` stream: the expert-TP
# collectives chain after it)


def _flex_rows(rows):
    for row in rows:
        if row.size == "counts":
            yield row._replace(name="moe_dispatch_notify", kind="all_to_all", size="notify")
        elif row.size == "tokens":
            step = "dispatch" if "dispatch" in row.name else "combine"
            yield row._replace(name=row.name.replace(step, f"{step}_rail"),
                               size=f"rail_{step}", comm="ep_rail")
            yield row._replace(size=f"flex_{step}", comm="ep_nvl")
        elif row.size != "probs":
            yield row


FLEX_COLLECTIVES = tuple(_flex_rows(EP_COLLECTIVES))
RAIL_STREAM = "ep_rail"     # the flex dispatcher's inter-domain all-to-alls
WAITS_FOR = {"tokens", "probs", "etp", "flex_dispatch", "flex_combine", "rail_dispatch",
             "rail_combine"}      # the kernel after it waits (not for the counts)
BESIDE = {"rail_dispatch", "rail_combine"}    # after the carrier as the others, not one
# the token copies themselves, one after the other
CARRIES_TOKENS = {"tokens", "etp", "flex_dispatch", "flex_combine"}
HOST_WAITS = {"counts", "notify"}         # what the CPU waits for before the dispatch


class ExpertLoad(BaseModel):
    """Tokens per expert (the imbalance knob); see the module doc."""

    model_config = ConfigDict(extra="forbid")

    distribution: Literal["balanced", "zipf", "measured"] = "balanced"
    zipf_s: Annotated[float, Field(gt=0.0)] = 1.0
    seed: Annotated[int, Field(strict=True, ge=0)] = 0
    counts: list[Annotated[int, Field(strict=True, ge=0)]] | None = None


@dataclass(frozen=True)
class EpLoad:
    """Token copies per EP rank of one MoE block (kept after capacity), and the drops."""

    per_rank: tuple[float, ...]
    dropped: float

    @property
    def slowest(self) -> float:
        """Copies the busiest EP rank's experts process: what the group waits for."""
        return max(self.per_rank)

    @property
    def imbalance(self) -> float:
        """Busiest over mean rank load (1 = even)."""
        return self.slowest * len(self.per_rank) / sum(self.per_rank)


def expert_shares(load: ExpertLoad, num_experts: int, *, field: str = "strategy.moe_load"
                  ) -> np.ndarray:
    """Share of the routed copies each expert gets (sums to 1), before any cap.

    Raises
    ------
    ConfigError
        ``measured`` without ``counts`` of one entry per expert, or all zero.
    """
    if load.distribution == "balanced":
        return np.full(num_experts, 1.0 / num_experts)
    if load.distribution == "zipf":
        weights = np.arange(1, num_experts + 1, dtype=float) ** -load.zipf_s
        order = np.random.default_rng(load.seed).permutation(num_experts)
        shares = np.empty(num_experts)
        shares[order] = weights / weights.sum()
        return shares
    counts = load.counts or []
    if len(counts) != num_experts or not sum(counts):
        raise ConfigError(f"measured counts need one token count per expert ({num_experts}), "
                          f"not all zero; got {len(counts)} entries", field=f"{field}.counts")
    return np.asarray(counts, dtype=float) / sum(counts)


def _cap_each(loads: np.ndarray, cap: float) -> np.ndarray:
    """Loads with none above ``cap``, the excess spread over the others by their share."""
    loads = loads.copy()
    for _ in range(len(loads)):
        over = loads > cap * (1 + 1e-12)
        if not over.any():
            break
        excess = float((loads[over] - cap).sum())
        loads[over] = cap
        room = ~over & (loads < cap)
        if not room.any():
            break
        weights = loads[room] if loads[room].sum() > 0 else np.ones(int(room.sum()))
        loads[room] += excess * weights / weights.sum()
    return loads


def ep_loads(model: ModelSpec, tokens: int, ep: int, load: ExpertLoad | None = None
             ) -> EpLoad:
    """Kept token copies per EP rank for ``tokens`` routed by each of the ``ep`` ranks."""
    load = load or ExpertLoad()
    n, k = model.num_experts, model.top_k
    group_tokens = ep * tokens
    copies = _cap_each(expert_shares(load, n) * group_tokens * k, float(group_tokens))
    kept = copies
    if model.capacity_factor is not None:
        kept = np.minimum(copies, model.capacity_factor * group_tokens * k / n)
    per_rank = kept.reshape(ep, n // ep).sum(axis=1)
    return EpLoad(tuple(float(x) for x in per_rank), float((copies - kept).sum()))


def remote_domains(num_experts: int, top_k: int, domains: int) -> float:
    """Expected distinct remote NVLink domains one token's ``top_k`` experts reach, under
    balanced routing with ``num_experts`` spread evenly over ``domains`` domains
    (``E / N`` each) and the ``k`` experts a uniform draw of distinct ones:
    ``(N - 1) (1 - C(E - E / N, k) / C(E, k))``, each remote domain missed only when all
    ``k`` experts fall outside its ``E / N``."""
    if domains == 1:
        return 0.0
    outside = num_experts - num_experts // domains
    return (domains - 1) * (1 - math.comb(outside, top_k) / math.comb(num_experts, top_k))


def dispatch_bytes(model: ModelSpec, tokens: int, e: int) -> int:
    """Bytes of one rank's dispatch (or combine) buffer: ``t k h e`` (``L`` for ``h`` under
    LatentMoE)."""
    return tokens * model.top_k * expert_width(model) * e


def leaving_bytes(model: ModelSpec, tokens: int, e: int, ep: int) -> float:
    """Bytes of an evenly routed dispatch that leave the rank: ``t k h e (ep - 1) / ep``."""
    return dispatch_bytes(model, tokens, e) * (ep - 1) / ep


def all_to_all_size_bytes(model: ModelSpec, loads: EpLoad, e: int) -> int:
    """nccl-tests size of each EP all-to-all: ``T_max h e`` (``t k h e`` when even; ``L``
    for ``h`` under LatentMoE)."""
    return math.ceil(loads.slowest - 1e-9) * expert_width(model) * e


def expert_gather_size_bytes(model: ModelSpec, loads: EpLoad, e: int, etp: int) -> int:
    """nccl-tests size of each expert-tensor-parallel all-gather (and reduce-scatter): the
    ``etp`` peers' copies, ``etp T_max h e``."""
    return etp * all_to_all_size_bytes(model, loads, e)


def ep_block_cost(model: ModelSpec, b: int, s: int, e: int, flash: bool, loads: EpLoad,
                  ep: int, k: int | None = None, tp: int = 1, sp: bool = False,
                  cp: int = 1, etp: int = 1) -> LayerCost:
    """The MoE block of the busiest EP rank: ``E / ep`` experts, each split over ``etp``
    ranks, over the ``etp T_max`` copies its expert-tensor group gathered, sorted by local
    expert after the dispatch and back before the combine when the rank holds more than
    one (:func:`simulator.models.moe.sort_chunks_ops`)."""
    local = model.num_experts // ep
    return moe_block_cost(model, b, s, e, flash, k, tp, sp, cp,
                          expert_tokens=etp * loads.slowest, local_experts=local,
                          sort_chunks=ep > 1 and local > 1, etp=etp)


@dataclass(frozen=True)
class EpSizes:
    """nccl-tests sizes of one MoE block's EP and expert-TP collectives
    (:data:`EP_COLLECTIVES`; 0 leaves a collective out)."""

    tokens: int = 0           # each token all-to-all: ``T_max h e``
    probs: int = 0            # the probabilities' all-to-all: ``T_max`` fp32
    counts: int = 0           # the all-gather of tokens per expert: ``ep E`` int64
    etp: int = 0              # each expert-TP all-gather / reduce-scatter: ``etp T_max h e``
    # the flex dispatcher's (:func:`flex_sizes`; 0 under the all-to-all dispatcher)
    notify: int = 0           # the exchange of tokens per rank and expert: ``(ep + E)`` int32
    flex_dispatch: int = 0    # inside a domain: ``T_max (h e + 4)`` (with the probabilities)
    flex_combine: int = 0     # inside a domain: ``T_max h e``
    rail_dispatch: int = 0    # across domains: ``N ceil(p T_max / k) h e + T_max 4``
    rail_combine: int = 0     # across domains: ``N ceil(p T_max / k) h e``

    @property
    def dispatches(self) -> bool:
        """Whether tokens are dispatched to other EP ranks (EP above 1)."""
        return bool(self.tokens or self.flex_dispatch)


def ep_sizes(model: ModelSpec, loads: EpLoad, e: int, etp: int = 1) -> EpSizes:
    """The sizes of :class:`EpSizes` for ``loads`` (``ep`` = its ranks; none of the EP
    collectives when that is 1) and ``etp`` expert-TP ranks (none when 1)."""
    ep = len(loads.per_rank)
    copies = math.ceil(loads.slowest - 1e-9)
    gather = expert_gather_size_bytes(model, loads, e, etp) if etp > 1 else 0
    if ep == 1:
        return EpSizes(etp=gather)
    return EpSizes(tokens=all_to_all_size_bytes(model, loads, e), probs=copies * PROB_BYTES,
                   counts=ep * model.num_experts * ID_BYTES, etp=gather)


def flex_sizes(model: ModelSpec, loads: EpLoad, e: int, domains: int, etp: int = 1
               ) -> EpSizes:
    """The flex dispatcher's sizes (module doc) for ``loads`` over an EP group spanning
    ``domains`` NVLink domains (``ep / domains`` ranks each; none of the EP collectives
    when ``ep`` is 1). The busiest rank's ``T_max`` copies stand for ``T_max / k`` tokens,
    each sent to the ``N - 1`` rail peers with chance ``p`` (:func:`remote_domains` over
    ``N - 1``): ``ceil(p T_max / k)`` tokens per peer, ``N`` peers in the nccl-tests size
    (its own share stays home); the ``T_max`` fp32 probabilities ride with the dispatch,
    ``T_max / N`` to each peer."""
    base = ep_sizes(model, loads, e, etp)
    if not base.tokens:
        return base
    ep, n, k = len(loads.per_rank), domains, model.top_k
    sizes = EpSizes(etp=base.etp, notify=(ep + model.num_experts) * FLEX_COUNT_BYTES,
                    flex_dispatch=base.tokens + base.probs, flex_combine=base.tokens)
    if n == 1:
        return sizes
    p = remote_domains(model.num_experts, k, n) / (n - 1)
    per_peer = math.ceil(p * loads.slowest / k - 1e-9) * expert_width(model) * e
    return replace(sizes, rail_combine=n * per_peer, rail_dispatch=n * per_peer + base.probs)


class EPHooks(OpHooks):
    """Issues one rank class's EP and expert-TP collectives (:data:`EP_COLLECTIVES`) before
    the kernels they feed, on stream ``ep``; the kernel waits for the ones that bring it
    tokens or probabilities (Megatron-LM without communication overlap: the expert GEMMs
    wait for their tokens, the unpermute for the combine). Collectives that carry the
    token copies follow one another within one gap between kernels (the expert-TP gather
    sends what the dispatch received); the kernel waits for the last of them.
    ``issue(kind, size_bytes, deps, name, phase, comm)`` adds a collective on the
    communicator ``comm`` (``ep`` or ``etp``) and returns its op id; ``last_compute()`` the
    latest compute op (its input). ``size_bytes``: :class:`EpSizes`."""

    def __init__(self, issue, last_compute, *, size_bytes: EpSizes,
                 counts_ops: dict[str, int] | None = None):
        self.issue, self.last_compute = issue, last_compute
        self.sizes = size_bytes
        self.done: set[tuple[str, str]] = set()     # collectives of the current pass issued
        # phase -> the latest token-count all-gather issued (shared by a stage's hooks: a
        # block's pieces, :mod:`.a2a_overlap`, are emitted by different hooks)
        self.counts_ops = {} if counts_ops is None else counts_ops

    def start_layer(self, layer) -> None:
        self.done = set()

    def host_syncs(self, cost, phase: str) -> bool:
        """The forward's kernels that the dispatched tokens feed (its first: the host
        sync): Megatron-Core's dropless MoE needs each expert's token count on the host
        before it launches the dispatch, and the CPU launches nothing more until the
        counts are there (:meth:`host_sync_waits`; the permute before it was launched
        already)."""
        return phase in ("forward", "recompute") and self.sizes.dispatches and any(
            f in cost.name for f in DISPATCH_FEEDS)

    def host_sync_waits(self, cost, phase: str, deps: tuple) -> tuple:
        """What the CPU waits for at the host sync: the token-count all-gather of this
        pass (and so every kernel before it on the stream), not the dispatch all-to-all
        that follows. Megatron-Core's ``MoEAlltoAllTokenDispatcher`` copies the counts to
        the host on a side stream once ``preprocess`` has gathered them
        (``cuda_dtoh_point``) and, dropless with EP above 1, waits for that copy's event at
        ``cuda_sync_point`` ``before_ep_alltoall``: after launching the permute, before
        launching the all-to-all, whose split sizes it needs on the host. The flex
        dispatcher's exchange of counts (``notify``) likewise: DeepEP's ``dispatch`` waits
        on the CPU for the received counts before it launches the token kernel
        (``fused_a2a.py``: "the CPU will wait for GPU's signal to arrive"), HybridEP's
        dropless dispatch for its metadata in pinned memory (``non_blocking`` false without
        ``num_permuted_tokens``)."""
        op = self.counts_ops.get(phase)
        return deps if op is None else (op,)

    def before(self, cost, phase: str) -> tuple:
        phase_of = "forward" if phase == "recompute" else phase
        waits, carrier = [], None
        rows = FLEX_COLLECTIVES if self.sizes.flex_dispatch else EP_COLLECTIVES
        for row in rows:
            which = row.size
            size = getattr(self.sizes, which)
            if row.phase != phase_of or (phase, row.name) in self.done or not size \
                    or not any(f in cost.name for f in row.feeds):
                continue
            self.done.add((phase, row.name))
            chained = which in CARRIES_TOKENS and carrier is not None
            deps = (carrier,) if carrier is not None and (chained or which in BESIDE) \
                else (self.last_compute(),)
            stream = {"stream": RAIL_STREAM} if row.comm == "ep_rail" else {}
            op = self.issue(row.kind, size, deps, f"{row.name}.{cost.name}", phase, row.comm,
                            **stream)
            if which in HOST_WAITS:
                self.counts_ops[phase] = op
            if chained:
                waits.remove(carrier)
            if which in CARRIES_TOKENS:
                carrier = op
            if which in WAITS_FOR:
                waits.append(op)
        return tuple(waits)

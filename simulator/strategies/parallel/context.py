"""Context parallelism: a sequence split over ``cp`` ranks, and the traffic of the attention
between them, as ring attention, as an all-gather of K and V, or as all-to-alls of Q, K, V
and O (Ulysses).

Causal load balancing (Megatron-LM / TransformerEngine): the sequence is cut into ``2 cp``
chunks of ``s / (2 cp)`` tokens and CP rank ``c`` holds chunks ``c`` and ``2 cp - 1 - c``,
so every rank has the same number of unmasked query-key pairs (:func:`causal_pairs`).

Per block and micro-batch a rank's K/V block is ``2 b (s / cp) kv_width e`` bytes (K and V
of its ``s / cp`` tokens, ``kv_width = kv_heads / tp x head_dim``).

* ``ring`` (TransformerEngine's P2P context parallelism, ``AttnFuncWithCPAndKVP2P``):
  ``cp`` attention steps; at step ``i`` the rank attends its queries to the K/V block of
  rank ``c - i`` while it forwards that block to the next rank and receives the next
  block, so the transfer hides behind the step's attention. Forward: ``cp - 1`` blocks sent
  per rank. Backward, as TE's loop runs it: exchange ``i`` goes out before step ``i``'s
  attention backward and is waited for after it (where the step's dK/dV are added to the
  received ones): the K/V block alone at step 0, the K/V block with the dK/dV accumulated
  so far at steps ``1 .. cp - 2``, the dK/dV alone (home to their owner) at step
  ``cp - 1``: ``2 (cp - 1)`` blocks sent, each exchange behind a step's attention.
* ``allgather`` (Llama 3's context parallelism): an all-gather of K and V on the CP group
  before the attention (nccl-tests size ``2 b s kv_width e``, the whole sequence's K/V;
  ``(cp - 1) / cp`` of it leaves each rank) and a reduce-scatter of dK/dV of the same size
  after its backward.
* ``a2a`` (DeepSpeed-Ulysses, TransformerEngine's ``cp_comm_type="a2a"``,
  ``AttnFuncWithCPAndQKVOA2A``): before the attention Q, K and V are each all-to-all'd on the
  CP group, so that a rank holds the whole sequence for ``1 / cp`` of its heads; the kernel
  runs over all ``s`` tokens with ``heads / tp / cp`` query and ``kv_heads / tp / cp`` KV
  heads, and its output O is all-to-all'd back to the rank's ``s / cp`` tokens. Backward:
  dO all-to-all'd before the attention backward, dQ, dK and dV after it: 4 all-to-alls
  forward, 4 backward, each of the rank's ``s / cp``-token tensor (nccl-tests size, the
  per-rank buffer: ``b (s / cp) width e``, of which ``(cp - 1) / cp`` leaves the rank;
  :func:`a2a_sizes`). Nothing overlaps them: the kernel waits for Q, K and V, the next
  kernel for O (and for dQ, dK, dV in backward). The kernel's FLOPs and shape (``b heads /
  (tp cp)`` query rows of ``s`` tokens, keys per query over the whole sequence) are those
  of the other modes' kernel (``b heads / tp`` rows of ``s / cp`` tokens): only the K/V it
  reads are ``1 / cp`` of the whole sequence's (:func:`a2a_heads`). Needs ``heads / tp``
  and ``kv_heads / tp`` divisible by ``cp`` (TransformerEngine asserts it).

The attention kernels are split evenly over the ring steps: the cost convention counts the
full score square, under which every step does the same work (with causal masking and the
load balancing above, so do real kernels, up to the diagonal step). Each step is a kernel
of its own over one K/V block, so its queries attend to ``1 / cp`` of the keys they attend
to over the whole sequence, and it is timed as an attention kernel of that shape is
(TransformerEngine's P2P context parallelism calls the flash kernel once per step). Each ring step's
exchange is written as an all-gather on the CP group moving exactly the step's bytes to the
ring neighbour (:func:`ring_step_size_bytes`): the trace's rank classes are per pipeline
stage, and a send/recv partner must be the same rank offset for every member, which a
ring's wrap-around is not. Ring attention and ``a2a`` need the fused (flash) attention
kernel (TransformerEngine disables its unfused attention under context parallelism).
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

from simulator.models.ops import LayerCost
from simulator.models.spec import ModelSpec

from ..base import OpHooks

STREAM = "cp"


def chunk_ranges(cp_index: int, cp: int, seq_len: int) -> tuple[range, range]:
    """The two ranges of token positions CP rank ``cp_index`` holds."""
    n = seq_len // (2 * cp)
    a, b = cp_index, 2 * cp - 1 - cp_index
    return range(a * n, (a + 1) * n), range(b * n, (b + 1) * n)


def causal_pairs(ranges) -> int:
    """Unmasked (query, key) pairs of causal attention for the queries in ``ranges`` (of
    token positions): a query at position ``q`` sees the ``q + 1`` keys up to itself."""
    return sum((r.stop * (r.stop + 1) - r.start * (r.start + 1)) // 2 for r in ranges)


def kv_width(model: ModelSpec, tp: int = 1) -> int:
    """Elements of K (or V) per token on one of ``tp`` tensor-parallel ranks."""
    return model.kv_heads // tp * model.head_dim


def kv_block_bytes(model: ModelSpec, batch: int, seq_len: int, cp: int, e: int,
                   tp: int = 1) -> int:
    """K and V of one rank's ``s / cp`` tokens: ``2 b (s / cp) kv_width e``."""
    return 2 * batch * (seq_len // cp) * kv_width(model, tp) * e


class RingBytes(NamedTuple):
    """Bytes a rank sends per block with ring attention."""

    forward: int         # ``cp - 1`` K/V blocks
    backward: int        # ``2 (cp - 1)`` blocks: K/V, K/V with their dK/dV, dK/dV home


def ring_sent_bytes(model: ModelSpec, batch: int, seq_len: int, cp: int, e: int,
                    tp: int = 1) -> RingBytes:
    """Bytes a rank sends per block with ring attention, forward and backward."""
    block = kv_block_bytes(model, batch, seq_len, cp, e, tp)
    return RingBytes(forward=(cp - 1) * block,
                     backward=2 * (cp - 1) * block)


def allgather_size_bytes(model: ModelSpec, batch: int, seq_len: int, e: int,
                         tp: int = 1) -> int:
    """nccl-tests size of the K/V all-gather (and the dK/dV reduce-scatter):
    ``2 b s kv_width e``."""
    return 2 * batch * seq_len * kv_width(model, tp) * e


def ring_step_size_bytes(sent_bytes: int, cp: int) -> int:
    """nccl-tests size of the all-gather that stands for one ring step in which every rank
    sends ``sent_bytes`` to the next: a ring all-gather of ``S`` moves ``(cp - 1) S / cp``
    per rank, to its ring neighbour, so ``S = sent cp / (cp - 1)``."""
    return -(-sent_bytes * cp // (cp - 1))


class A2ASizes(NamedTuple):
    """nccl-tests sizes (the per-rank buffer) of the ``a2a`` mode's all-to-alls: Q (and dQ),
    K or V (and dK, dV), O (and dO), each of the rank's ``s / cp`` tokens."""

    q: int
    kv: int
    o: int


def a2a_sizes(model: ModelSpec, batch: int, seq_len: int, cp: int, e: int,
              tp: int = 1) -> A2ASizes:
    """``b (s / cp) width e`` for Q (``heads / tp x head_dim``), K and V (each
    :func:`kv_width`) and O (the attention output's width on a TP rank)."""
    t = batch * (seq_len // cp)
    o = model.heads * model.v_dim if model.is_mla else model.q_width
    return A2ASizes(q=t * (model.q_width // tp) * e, kv=t * kv_width(model, tp) * e,
                    o=t * (o // tp) * e)


def a2a_heads(layer: LayerCost, cp: int, gather_bytes: int) -> LayerCost:
    """``layer`` with its attention kernels as ``a2a`` runs them: over the whole sequence
    on ``1 / cp`` of the heads. The FLOPs and shape (``m`` rows of batch x heads x
    queries, ``n`` keys per query, ``k`` head_dim) are those of the kernel of ``s / cp``
    queries over all the rank's heads; the K/V it reads (``gather_bytes``, the whole
    sequence's on all the rank's KV heads, :func:`allgather_size_bytes`) shrink to
    ``1 / cp``, once forward and for K/V and dK/dV backward."""
    cut = gather_bytes * (cp - 1) / cp

    def heads(kernels, times: int):
        return tuple(replace(c, bytes_accessed=c.bytes_accessed - times * cut)
                     if c.op_class == "attention" else c for c in kernels)

    return replace(layer, forward=heads(layer.forward, 1), backward=heads(layer.backward, 2))


def ring_backward_blocks(step: int, cp: int) -> int:
    """K/V-sized blocks ring exchange ``step`` of the backward sends: the K/V block alone
    first, the dK/dV alone (home) last, both in between (TE's ``send_tensor[0]``,
    ``[1]`` and the whole buffer)."""
    return 2 if 0 < step < cp - 1 else 1


def cp_sliced(layer: LayerCost, cp: int, mode: str, gather_bytes: int) -> LayerCost:
    """``layer``'s attention kernels as context parallelism ``mode`` runs them: ``cp`` ring
    steps (:func:`ring_slices`), the whole sequence on ``1 / cp`` of the heads under
    ``a2a`` (:func:`a2a_heads`; ``gather_bytes``: :func:`allgather_size_bytes`), as they
    are under ``allgather`` or without CP. What the trace generator and ``clustersim
    plan``'s estimate both run."""
    if cp > 1 and mode == "ring":
        return ring_slices(layer, cp)
    if cp > 1 and mode == "a2a":
        return a2a_heads(layer, cp, gather_bytes)
    return layer


def ring_slices(layer: LayerCost, cp: int) -> LayerCost:
    """``layer`` with each attention kernel (``attn_core`` and its backward) cut into
    ``cp`` equal ring steps ``<name>.ring<i>``, each over one K/V block: ``1 / cp`` of the
    FLOPs, bytes and keys per query (``n``) of the whole kernel."""
    def cut(kernels):
        out = []
        for c in kernels:
            if c.op_class != "attention":
                out.append(c)
                continue
            out += [replace(c, name=f"{c.name}.ring{i}", flops=c.flops / cp,
                            bytes_accessed=c.bytes_accessed / cp,
                            n=max(1, round(c.n / cp)) if c.n else 0) for i in range(cp)]
        return tuple(out)

    return replace(layer, forward=cut(layer.forward), backward=cut(layer.backward))


def _ring_index(name: str) -> int | None:
    head, _, tail = name.rpartition(".ring")
    return int(tail) if head and tail.isdigit() else None


class CPHooks(OpHooks):
    """Issues one rank class's context-parallel K/V traffic around its attention kernels.

    ``issue(kind, size_bytes, deps, name, phase)`` adds a collective on the CP group and
    returns its op id; ``last_compute()`` the latest compute op. ``ring``: the layers went
    through :func:`ring_slices`; step ``i``'s exchange is an all-gather of
    :func:`ring_step_size_bytes` on stream ``cp``. Forward: exchange ``i`` (the block that
    step ``i`` used goes on, the next arrives) starts when block ``i`` arrived, and step
    ``i + 1`` waits for it. Backward (TE's loop): exchange ``i`` of
    :func:`ring_backward_blocks` starts before step ``i``, once the kernels before it ran
    (step ``i - 1``'s gradients are in) and exchange ``i - 1`` arrived, and the next kernel
    waits for it. ``allgather``: an all-gather of K/V before the attention, a reduce-scatter of
    dK/dV after its backward that the next kernel waits for. ``a2a``: all-to-alls of
    ``a2a`` (:class:`A2ASizes`) of Q, K, V before the attention (which waits for them) and
    of O after it (the next kernel waits); backward of dO before, dQ, dK, dV after."""

    def __init__(self, issue, last_compute, *, mode: str, cp: int, block_bytes: int,
                 gather_bytes: int, a2a: A2ASizes | None = None):
        self.issue, self.last_compute = issue, last_compute
        self.mode, self.cp = mode, cp
        self.block, self.gather, self.a2a = block_bytes, gather_bytes, a2a
        self.arrived: tuple[int, ...] = ()   # what the next kernel waits for

    def _all_to_all(self, parts, deps, cost, phase: str) -> tuple[int, ...]:
        """One all-to-all per ``(tensor, size)`` of ``parts``, each after ``deps``."""
        return tuple(self.issue("all_to_all", size, deps, f"cp_a2a_{tensor}.{cost.name}",
                                phase) for tensor, size in parts)

    def _ring_comm(self, sent: int, deps, name: str, phase: str) -> int:
        return self.issue("all_gather", ring_step_size_bytes(sent, self.cp), deps, name,
                          phase)

    def before(self, cost, phase: str) -> tuple:
        forward = phase in ("forward", "recompute")
        due, self.arrived = self.arrived, ()
        if self.mode == "a2a":
            if cost.op_class != "attention":
                return due
            z = self.a2a
            parts = (("q", z.q), ("k", z.kv), ("v", z.kv)) if forward else (("do", z.o),)
            return due + self._all_to_all(parts, (self.last_compute(),), cost, phase)
        if self.mode == "allgather":
            if forward and cost.op_class == "attention":
                return due + (self.issue("all_gather", self.gather, (self.last_compute(),),
                                         f"cp_allgather_kv.{cost.name}", phase),)
            return due
        step = _ring_index(cost.name)
        if step is None:
            return due
        if forward and step < self.cp - 1:
            first = (self.last_compute(),) if step == 0 else ()
            self.arrived = (self._ring_comm(self.block, first, f"cp_ring.{cost.name}",
                                            phase),)
        elif not forward:
            sent = ring_backward_blocks(step, self.cp) * self.block
            self.arrived = (self._ring_comm(sent, (self.last_compute(), *due),
                                            f"cp_ring.{cost.name}", phase),)
        return due

    def after(self, cost, phase: str, op_id: int) -> None:
        forward = phase in ("forward", "recompute")
        if cost.op_class != "attention":
            return
        if self.mode == "a2a":
            z = self.a2a
            parts = (("o", z.o),) if forward else (("dq", z.q), ("dk", z.kv), ("dv", z.kv))
            self.arrived = self._all_to_all(parts, (op_id,), cost, phase)
            return
        if forward:
            return
        if self.mode == "allgather":
            self.arrived = (self.issue("reduce_scatter", self.gather, (op_id,),
                                       f"cp_reduce_scatter_dkv.{cost.name}", phase),)
        # ring: the backward's exchanges went out before each step (:meth:`before`)

    def flush(self) -> list[int]:
        out, self.arrived = list(self.arrived), ()
        return out

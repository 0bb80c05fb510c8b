"""Tensor and sequence parallelism: the collectives between a layer's kernels.

Megatron-LM's column/row-parallel layers (Shoeybi et al. 2019, arXiv 1909.08053, section 3):
a block runs one all-reduce of the ``b s h`` activations after the attention output
projection and one after the MLP down projection in forward, and one of the input
gradients after the QKV and the MLP up projections' input-gradient GEMMs in backward:
four all-reduces of ``b s h`` elements per block and micro-batch. With sequence
parallelism (Korthikanti et al. 2022, arXiv 2205.05198, section 4.2.2) each all-reduce
becomes a reduce-scatter (after the row-parallel GEMM) and an all-gather (before the next
column-parallel GEMM), the same bytes on the wire. Vocab-parallel embedding: an
all-reduce (SP: reduce-scatter) of its output; vocab-parallel loss: three all-reduces of
``b s`` fp32 values (max logit, target logit, sum of exponentials); the LM head's input
gradient is all-reduced (SP: reduce-scattered).

Timing. A forward collective blocks the next kernel. A backward one blocks the next kernel
that is not a weight-gradient GEMM (``*.wgrad``): Megatron overlaps the input-gradient
all-reduce with the weight-gradient GEMM (``LinearWithGradAccumulationAndAsyncCommunication``).
Without ``async_backward`` (Megatron-LM of 2021, ``async_tensor_model_parallel_allreduce:
false``; PyTorch's DTensor TP, as torchtitan runs it without async TP: autograd computes a
Linear's input and weight gradients in one node before the collective's node runs) it
blocks the next kernel, weight-gradient GEMM included.
With ``tp_overlap`` (torchtitan async TP, Megatron ``tp_comm_overlap``; both need sequence
parallelism) the forward all-gathers and reduce-scatters and the backward all-gathers of the
output gradient run alongside the GEMM they feed or follow: issued when that GEMM is (after
the kernel before it) and waited for by the first kernel after the GEMM. Transformer
Engine's userbuffers (its defaults, ``initialize_ub``: ``ring_exchange`` for the QKV and
MLP-up forward and the output and MLP-down input gradients, ``pipeline`` for the
output-projection and MLP-down forward) and PyTorch's async TP (``fused_all_gather_matmul``,
``fused_matmul_reduce_scatter``) split the GEMM into chunks and exchange each while the next
is computed, so the pair takes about the longer of the two; the chunks' fill and drain are
not modelled, nor the SMs a ``pipeline`` overlap takes from its GEMM (``num_sm``,
``set_sm_margin``). The backward reduce-scatter of an input gradient keeps the rule without
overlap: after its GEMM, hidden behind the weight-gradient GEMM (Transformer Engine's
``bulk`` default for the QKV and MLP-up input gradients; a frozen weight has none to hide
it), as does the re-gathered input the weight-gradient GEMM waits for. PyTorch's async TP
(``async_tp``) fuses the backward's GEMM and reduce-scatter too (its micro-pipeline pass
rewrites every matmul followed by a reduce-scatter in the compiled graph), so there the
input-gradient reduce-scatter also runs alongside its GEMM; and each fused matmul +
reduce-scatter ends with a reduction kernel of its own (:func:`async_tp_layer`).
Activation checkpointing's recomputed forward repeats the forward
collectives. Megatron-SP does not keep the all-gathered input of a column-parallel GEMM:
its backward all-gathers it again before the input-gradient GEMM and the weight-gradient
GEMM waits for it (``LinearWithGradAccumulationAndAsyncCommunication``), two more
all-gathers per block backward. A frozen weight (:mod:`simulator.models.finetune`) has no
weight-gradient GEMM, so its input is not gathered again (Transformer Engine gathers it only
when the weight requires a gradient).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

from simulator.models.ops import LayerCost, OpCost
from simulator.models.projections import closes, fused_name, opens

from ..base import OpHooks
STREAM = "tp"

# (layer kind, sequence parallel) -> {(phase, "before"|"after", kernel): collective, or
# (collective, "wgrad"): waited for by the next weight-gradient GEMM, not the kernel itself}
_BLOCK = {
    False: {("forward", "after", "attn_out"): "all_reduce",
            ("forward", "after", "mlp_down"): "all_reduce",
            ("backward", "after", "mlp_up.dgrad"): "all_reduce",
            ("backward", "after", "qkv_proj.dgrad"): "all_reduce",
            # a Mamba-2 layer (simulator/models/mamba.py): in_proj column-, out_proj row-parallel
            ("forward", "after", "mamba_out_proj"): "all_reduce",
            ("backward", "after", "mamba_in_proj.dgrad"): "all_reduce"},
    True: {("forward", "before", "mamba_in_proj"): "all_gather",
           ("forward", "after", "mamba_out_proj"): "reduce_scatter",
           ("backward", "before", "mamba_out_proj.dgrad"): "all_gather",
           ("backward", "before", "mamba_in_proj.dgrad"): ("all_gather", "wgrad"),
           ("backward", "after", "mamba_in_proj.dgrad"): "reduce_scatter",
           ("forward", "before", "qkv_proj"): "all_gather",
           ("forward", "after", "attn_out"): "reduce_scatter",
           ("forward", "before", "mlp_up"): "all_gather",
           ("forward", "after", "mlp_down"): "reduce_scatter",
           ("backward", "before", "mlp_down.dgrad"): "all_gather",
           ("backward", "before", "mlp_up.dgrad"): ("all_gather", "wgrad"),
           ("backward", "after", "mlp_up.dgrad"): "reduce_scatter",
           ("backward", "before", "attn_out.dgrad"): "all_gather",
           ("backward", "before", "qkv_proj.dgrad"): ("all_gather", "wgrad"),
           ("backward", "after", "qkv_proj.dgrad"): "reduce_scatter"},
}
_EMBED = {False: {("forward", "after", "embed_lookup"): "all_reduce"},
          True: {("forward", "after", "embed_lookup"): "reduce_scatter",
                 ("backward", "before", "embed_lookup.bwd"): "all_gather"}}
_HEAD = {False: {("backward", "after", "lm_head.dgrad"): "all_reduce"},
         True: {("forward", "before", "lm_head"): "all_gather",
                ("backward", "after", "lm_head.dgrad"): "reduce_scatter"}}
LOSS_REDUCES = 3          # vocab-parallel cross entropy: max, target logit, sum of exp
# multi-token prediction (simulator/models/mtp.py): its embedding lookup and its output layer
# and loss are the model's, with their collectives
POINTS = {"transformer_block": _BLOCK, "embedding": _EMBED, "head": _HEAD,
          "mtp_embedding": _EMBED, "mtp_head": _HEAD}


def kernel_key(name: str) -> str:
    """A kernel's name as the tables above spell it (SwiGLU's ``mlp_gate_up`` is the MLP
    up projection; MLA's first projection, ``q_down_proj``, takes the QKV projection's
    collectives, :mod:`simulator.models.mla`; a separate projection, ``qkv_proj.k``, its
    fused GEMM's, :mod:`simulator.models.projections`)."""
    return fused_name(name).replace("mlp_gate_up", "mlp_up").replace("q_down_proj", "qkv_proj")


def points(kind: str, sp: bool) -> dict:
    """The TP collectives of a layer of ``kind`` (see the module doc)."""
    table = POINTS.get(kind)
    return table[sp] if table else {}


def async_tp_layer(layer: LayerCost, tp: int, e: int) -> LayerCost:
    """``layer`` with PyTorch async TP's reduction kernels. Its fused matmul + reduce-scatter
    (``torch.distributed._symmetric_memory._fused_matmul_reduce_scatter_impl``) computes the
    GEMM one row block at a time, each block that another rank owns sent to it while the next
    is computed, into a stacked buffer of the ``tp`` partial results a rank owns; then one
    kernel sums them (``reduce_fn`` over the stacked partials): it reads the ``m x n`` partial
    output (``tp`` blocks of ``m / tp`` rows) and writes ``m / tp`` rows, ``e`` bytes an
    element, ``tp - 1`` adds an output element. One after each GEMM whose output the
    sequence-parallel layout reduce-scatters (the tables above: the output projection and the
    MLP down projection forward, the QKV and MLP-up input gradients backward, a Mamba layer's
    and the LM head's likewise); NCCL's reduce-scatter sums inside its own kernel instead."""
    table = points(layer.kind, True)

    def with_reduces(ops, stage: str) -> list[OpCost]:
        out = []
        for op in ops:
            out.append(op)
            if op.op_class == "matmul" and op.shape and \
                    closes(op.name, stage == "backward") and \
                    table.get((stage, "after", kernel_key(op.name))) == "reduce_scatter":
                elements = op.m * op.n
                out.append(OpCost(f"async_tp_reduce.{op.name}", "elementwise",
                                  elements * (tp - 1) / tp, e * elements * (1 + 1 / tp),
                                  launch=op.launch))
        return out

    return replace(layer, forward=with_reduces(layer.forward, "forward"),
                   backward=with_reduces(layer.backward, "backward"))


def gathered_input(kind: str):
    """A predicate on kernel names: whether a kernel of a ``kind`` layer reads an activation
    that the sequence-parallel layout all-gathers just before it (the QKV and MLP-up inputs
    forward, the output-gradient of the output projection and MLP down backward). Under FP8
    TP gathers (:meth:`~simulator.strategies.base.CommonConfig.fp8_tp_gathers`) that
    activation is cast before the gather, on the rank's ``1 / tp`` of its rows
    (:func:`simulator.models.fp8.fp8_layer`)."""
    table = points(kind, True)
    keys = frozenset(name for (stage, where, name), what in table.items()
                     if where == "before" and what == "all_gather")
    return lambda name: kernel_key(name) in keys


class _Point(NamedTuple):
    """The TP collectives around one kernel of a kind of layer, in one phase."""

    before: str | None       # issued before the kernel
    before_waiter: str       # what waits for it (see TPHooks._due)
    after: str | None        # issued after the kernel
    after_waiter: str
    pipelined: bool          # the after collective runs alongside the kernel (TP overlap)
    name: str                # the kernel's name as the tables spell it
    loss: bool               # the LM head's forward GEMM: the loss all-reduces follow


@dataclass(slots=True)
class _Pending:
    """A TP collective issued and not yet waited for."""

    op: int                  # its op id
    waiter: str              # next | non_wgrad | wgrad: what waits for it (TPHooks._due)


class TPHooks(OpHooks):
    """Issues a rank class's TP collectives around its kernels (one object per class, so
    a collective after a layer's last kernel is waited for by the next layer's first).

    ``issue(kind, size_bytes, deps, name, phase, layer)`` adds the collective and returns its op id;
    ``act_bytes`` is the ``b s h`` activation of one micro-batch in bytes (the full buffer,
    nccl-tests terms); ``loss_bytes`` the ``b s`` fp32 values of one loss all-reduce."""

    def __init__(self, issue, last_compute, *, sp: bool, overlap: bool, act_bytes: int,
                 loss_bytes: int, async_backward: bool = True, async_tp: bool = False,
                 block_gather_bytes: int | None = None):
        self.issue, self.last_compute = issue, last_compute
        self.sp, self.overlap, self.async_tp = sp, overlap, async_tp
        # a block's all-gathers where they move another dtype (FP8: one byte an element)
        self.block_gather_bytes = block_gather_bytes
        self.async_backward = async_backward
        self.act_bytes, self.loss_bytes = act_bytes, loss_bytes
        self.pending: list[_Pending] = []
        self.layer = self.kind = ""
        self.wgrads: frozenset = frozenset()    # the layer's weight-gradient GEMMs
        self._points: dict[tuple[str, str, str], _Point] = {}

    def start_layer(self, layer) -> None:
        self.layer, self.kind = layer.name, layer.kind
        self.wgrads = frozenset(kernel_key(op.name) for op in layer.backward
                                if op.name.endswith(".wgrad"))

    def _point(self, phase: str, name: str) -> _Point:
        """The collectives around kernel ``name`` in ``phase`` of a layer of the current
        kind: looked up in the tables once per (kind, phase, kernel), a rank class runs
        each kernel many times."""
        key = (self.kind, phase, name)
        point = self._points.get(key)
        if point is None:
            table = points(self.kind, self.sp)
            stage = "forward" if phase == "recompute" else phase
            # a group of separate projections takes its fused GEMM's collectives before its
            # first Linear and after its last (projections.py)
            backward, fused = stage == "backward", kernel_key(name)
            before = table.get((stage, "before", fused)) if opens(name, backward) else None
            before, waiter = before if isinstance(before, tuple) else (before, "next")
            after = table.get((stage, "after", fused)) if closes(name, backward) else None
            name = fused
            pipelined = self.overlap and after is not None and (
                stage == "forward" or self.async_tp)
            point = self._points[key] = _Point(
                before=before, before_waiter=waiter, after=after,
                after_waiter=("non_wgrad" if stage == "backward" and self.async_backward
                              and not pipelined else "next"),
                pipelined=pipelined, name=name,
                loss=name == "lm_head" and stage == "forward"
                and self.kind in ("head", "mtp_head"))
        return point

    def before(self, cost, phase: str) -> tuple:
        point = self._point(phase, cost.name)
        kind, waiter = point.before, point.before_waiter
        if waiter == "wgrad" and point.name.replace(".dgrad", ".wgrad") not in self.wgrads:
            kind = None                         # a frozen weight: no gather for its gradient
        if not kind and not point.pipelined and not self.pending:   # most kernels: nothing
            return ()
        deps = self._due(cost, phase) if self.pending else []
        if kind:
            op = self.issue(kind, self._bytes(kind), (self.last_compute(),),
                            f"{kind}.{self.layer}.{cost.name}", phase, self.layer)
            if waiter == "wgrad":
                self.pending.append(_Pending(op=op, waiter="wgrad"))
            elif self.overlap:      # alongside this GEMM: the kernel after it waits
                self.pending.append(_Pending(op=op, waiter="next"))
            else:
                deps.append(op)
        if point.pipelined:         # the collective after this GEMM, pipelined with it
            op = self.issue(point.after, self._bytes(point.after), (self.last_compute(),),
                            f"{point.after}.{self.layer}.{point.name}", phase, self.layer)
            self.pending.append(_Pending(op=op, waiter=point.after_waiter))
        return tuple(deps)

    def after(self, cost, phase: str, op_id: int) -> None:
        point = self._point(phase, cost.name)
        kind = point.after
        if kind and not point.pipelined:    # (pipelined: issued with the GEMM, in before)
            op = self.issue(kind, self._bytes(kind), (op_id,),
                            f"{kind}.{self.layer}.{point.name}", phase, self.layer)
            self.pending.append(_Pending(op=op, waiter=point.after_waiter))
        if point.loss:
            dep = op_id
            for i in range(LOSS_REDUCES):
                dep = self.issue("all_reduce", self.loss_bytes, (dep,),
                                 f"all_reduce.loss{i}", phase, self.layer)
            self.pending.append(_Pending(op=dep, waiter="next"))

    def _bytes(self, kind: str) -> int:
        """The ``b s h`` buffer a collective moves: a block's all-gathers
        ``block_gather_bytes`` where given (FP8 gathers,
        :meth:`~simulator.strategies.base.CommonConfig.fp8_tp_gathers`), the rest
        ``act_bytes``."""
        if kind == "all_gather" and self.block_gather_bytes is not None \
                and self.kind.endswith("block"):
            return self.block_gather_bytes
        return self.act_bytes

    def _due(self, cost, phase: str) -> list:
        """The pending collectives this kernel must wait for. Each waits for a kind of
        kernel: the ``next`` one, the next that is ``non_wgrad`` (weight-gradient GEMMs run
        before a backward collective is waited for) or the next ``wgrad``."""
        if not self.pending:        # (what ``before`` checks first)
            return []
        wgrad = phase == "backward" and cost.name.endswith(".wgrad")
        due, keep = [], []
        for item in self.pending:
            waiter = item.waiter
            if waiter != "next" and (waiter == "wgrad") != wgrad:
                keep.append(item)
            else:
                due.append(item.op)
        self.pending = keep
        return due

    def flush(self) -> list[int]:
        """Every pending collective (what a send to the next stage waits for)."""
        out = [item.op for item in self.pending]
        self.pending = []
        return out

"""Megatron-Core's MoE all-to-all overlap (``overlap_moe_expert_parallel_comm``,
Megatron-Bridge's ``moe_a2a_overlap``): the "combined 1F1B" schedule.

Megatron-Core (``megatron/core/pipeline_parallel/combined_1f1b.py``,
``models/common/model_chunk_schedule_plan.py`` at NVIDIA/Megatron-LM@d98e8a64) runs the
forward of one micro-batch and the backward of another as one pass, layer by layer: forward
layer ``i`` beside the backward of the other micro-batch's layer ``L - 1 - i``, each MoE
layer cut into four nodes, ``pre_dispatch_computation`` (attention, router, permute) and
``mlp`` (the experts) on the compute stream, ``moe_dispatch`` and ``moe_combine`` (the
all-to-alls) on a communication stream, issued in this order
(``TransformerLayerSchedulePlan.run``)::

    comm stream:    combine_bwd       | dispatch_fwd -> dispatch_bwd  | combine_fwd
    compute stream: pre_dispatch_fwd  | mlp_bwd -> mlp_fwd            | pre_dispatch_bwd

so each all-to-all of one micro-batch runs under a compute node of the other, and hides
when that node lasts longer. :func:`combined_actions` turns a schedule's passes into
Megatron's combined ones: without pipeline stages ``F0, F1+B0, ..., F(n-1)+B(n-2), B(n-1)``
(``combined_1f1b_schedule_for_no_pipelining``); with virtual stages each steady-state
forward with the backward issued after it. :func:`pieces` cuts one MoE block into the
nodes (the combine's unpermute goes with the combine); the trace generator emits them in
the order above (:meth:`.generate.StageBuilder.combined`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

from .schedules import Action


class Combined(NamedTuple):
    """A forward and a backward issued as one pass (``kind`` ``"FB"``)."""

    f: Action
    b: Action
    kind: str = "FB"

    @property
    def micro(self) -> int:
        return self.f.micro


def combined_actions(actions: list[Action], pp: int) -> list:
    """``actions`` (one rank's passes) with each forward and the backward of another
    micro-batch issued after it merged into a :class:`Combined` pass; without pipeline
    stages (``pp`` 1) the backwards first move one place later, as Megatron-Core's
    no-pipelining combined schedule issues them."""
    if pp == 1:
        actions = _shift_backwards(actions)
    out, i = [], 0
    while i < len(actions):
        a = actions[i]
        nxt = actions[i + 1] if i + 1 < len(actions) else None
        if a.kind == "F" and nxt is not None and nxt.kind == "B" \
                and (nxt.micro, nxt.chunk) != (a.micro, a.chunk):
            out.append(Combined(a, nxt))
            i += 2
        else:
            out.append(a)
            i += 1
    return out


def _shift_backwards(actions: list[Action]) -> list[Action]:
    """``F0 B0 F1 B1 ...`` as ``F0 F1 B0 F2 B1 ... B(n-1)``."""
    fs = [a for a in actions if a.kind == "F"]
    bs = [a for a in actions if a.kind == "B"]
    out = fs[:1]
    for f, b in zip(fs[1:], bs):
        out += [f, b]
    return out + bs[len(fs) - 1:]


class PassTracker:
    """A hook part that notes each kernel as the last of the combined pass's side being
    emitted (``builder.pass_key``), for :meth:`.generate.StageBuilder.last_compute`."""

    def __init__(self, builder):
        self.builder = builder

    def before(self, cost, phase: str) -> tuple:
        return ()

    def after(self, cost, phase: str, op_id: int) -> None:
        self.builder.pass_last[self.builder.pass_key] = op_id

    def host_syncs(self, cost, phase: str) -> bool:
        return False


class Pieces(NamedTuple):
    """One MoE block cut as Megatron-Core's schedule plan cuts it: ``pre`` (attention,
    router, permute), ``mlp`` (the dispatched tokens' kernels: sort, experts, unsort) and
    ``post`` (the combine's unpermute and what follows)."""

    pre: object
    mlp: object
    post: object


def _first(ops, starts) -> int:
    return next(i for i, op in enumerate(ops) if op.name.startswith(starts))


def pieces(layer) -> Pieces:
    """``layer`` (an MoE block) as its three nodes; the block's saved activations go with
    ``pre`` (made in its forward, freed at the end of its backward), its parameters stay
    with the whole block (the generator reduces its gradients once, after ``pre``'s
    backward)."""
    fwd, bwd = layer.forward, layer.backward
    f_mlp = _first(fwd, ("moe_sort_chunks", "moe_expert_"))
    f_post = _first(fwd, ("moe_unpermute",))
    b_mlp = _first(bwd, ("moe_unsort_chunks.bwd", "moe_expert_"))
    b_pre = _first(bwd, ("moe_permute.bwd",))

    def piece(f, b, act):
        return replace(layer, forward=f, backward=b, activation_bytes=act)
    return Pieces(pre=piece(fwd[:f_mlp], bwd[b_pre:], layer.activation_bytes),
                  mlp=piece(fwd[f_mlp:f_post], bwd[b_mlp:b_pre], 0),
                  post=piece(fwd[f_post:], bwd[:b_mlp], 0))


def emit_combined(b, f_ch, f_micro: int, b_ch, b_micro: int, first: bool,
                  last_micro: bool) -> None:
    """The ops of one :class:`Combined` pass on the :class:`.generate.StageBuilder` ``b``:
    forward ``f_micro`` of chunk ``f_ch`` and backward ``b_micro`` of ``b_ch``. The
    non-block layers (embedding, loss) and the layers one pass has beyond the other run
    alone (the loss's backward first, the remaining backward layers, then the remaining
    forward ones); each pair of blocks interleaves, MoE blocks node by node
    (:func:`_pair`). ``first``: the forward is the chunk's first; ``last_micro``: the
    backward is its last."""
    b.micro = f_micro
    f_deps = [b.recv_input(f_ch, f_micro)]
    b.micro = b_micro
    b_deps = [b.recv_grad(b_ch, b_micro)]
    b.pass_last = {}
    f_layers = list(enumerate(f_ch.layers))
    b_layers = list(reversed(list(enumerate(b_ch.layers))))
    f_blocks = [x for x in f_layers if x[1].kind.endswith("block")]
    b_blocks = [x for x in b_layers if x[1].kind.endswith("block")]
    pairs = list(zip(f_blocks, b_blocks))
    paired_f = {li for (li, _), _ in pairs}
    paired_b = {li for _, (li, _) in pairs}
    f_spans, b_spans = {}, {}
    f_lead = [x for x in f_layers if x[0] not in paired_f and x[0] < min(paired_f, default=0)]
    b_lead = [x for x in b_layers if x[0] not in paired_b and x[0] > max(paired_b, default=0)]
    for li, layer in b_lead:
        b_spans[li] = b.backward_layer(b_ch, li, layer, b_micro, last_micro, b_deps, "B")
        b_deps = []
    for li, layer in f_lead:
        f_spans[li] = b.forward_layer(f_ch, li, layer, f_micro, first, f_deps, "F")
        f_deps = []
    for (fi, f_layer), (bi, b_layer) in pairs:
        fs, bs = _pair(b, (f_ch, fi, f_layer, f_micro, first, f_deps),
                       (b_ch, bi, b_layer, b_micro, last_micro, b_deps))
        f_spans[fi], b_spans[bi] = fs, bs
        f_deps, b_deps = [], []
    for li, layer in b_layers:
        if li not in b_spans:
            b_spans[li] = b.backward_layer(b_ch, li, layer, b_micro, last_micro, b_deps, "B")
            b_deps = []
    for li, layer in f_layers:
        if li not in f_spans:
            f_spans[li] = b.forward_layer(f_ch, li, layer, f_micro, first, f_deps, "F")
            f_deps = []
    b.pass_key = None
    b.prev_start = min(s.first for s in (*f_spans.values(), *b_spans.values()))
    b.micro = f_micro
    b.send_output(f_ch, f_micro, f_spans[len(f_ch.layers) - 1].last)
    b.micro = b_micro
    b.send_grad(b_ch, b_micro, b_spans[0].last)


def _pair(b, f, bw):
    """Forward block ``f`` and backward block ``bw`` (each ``(chunk, index, layer, micro,
    first or last_micro, deps)``) in Megatron-Core's node order (module doc): the
    backward's combine, the forward's pre-dispatch, the backward's experts, the forward's
    experts, the backward's pre-dispatch, the forward's combine. A dense block pair (or a
    dense and an MoE block) runs forward, then backward. Returns their spans."""
    f_ch, fi, f_layer, f_micro, first, f_deps = f
    b_ch, bi, b_layer, b_micro, last_micro, b_deps = bw
    if not (getattr(f_layer, "ep_sizes", None) and getattr(b_layer, "ep_sizes", None)):
        fs = b.forward_layer(f_ch, fi, f_layer, f_micro, first, f_deps, "F")
        return fs, b.backward_layer(b_ch, bi, b_layer, b_micro, last_micro, b_deps, "B")
    fp, bp = pieces(f_layer), pieces(b_layer)
    post_b = b.backward_piece(b_ch, bi, b_layer, bp.post, b_micro, b_deps, start=True)
    pre_f = b.forward_piece(f_ch, fi, f_layer, fp.pre, f_micro, first, f_deps, start=True)
    b.backward_piece(b_ch, bi, b_layer, bp.mlp, b_micro, ())
    b.forward_piece(f_ch, fi, f_layer, fp.mlp, f_micro, first, ())
    pre_b = b.backward_piece(b_ch, bi, b_layer, bp.pre, b_micro, (), last_micro=last_micro)
    post_f = b.forward_piece(f_ch, fi, f_layer, fp.post, f_micro, first, (), end=True)
    return (type(pre_f)(first=pre_f.first, last=post_f.last),
            type(pre_b)(first=post_b.first, first_backward=post_b.first_backward,
                        last=pre_b.last))

"""Gradient clipping by global norm before the optimizer step (``grad_clip_norm``).

``torch.nn.utils.clip_grad_norm_`` (foreach path, the default on CUDA): one
``torch._foreach_norm`` pass reads every gradient this rank holds, the per-tensor norms are
stacked and reduced (negligible), and ``torch._foreach_mul_`` scales every gradient by the
clip coefficient, clamped to 1, whether or not it clips (a read and a write). With FSDP the
gradients are sharded DTensors: the squared norm is all-reduced over the shard group
(``total_norm.full_tensor()``, one fp32 scalar) before the scaling; DDP's gradients are
replicated, so its norm is local. torchtitan clips by default (``max_norm = 1.0``),
llm-foundry's configs through Composer's ``gradient_clipping`` algorithm (``clipping_type:
norm``, threshold 1.0). The gradients it reads are the ones the optimizer steps on: fp32
(``GRAD_BYTES``) for mixed precision with fp32 master weights.
"""

from __future__ import annotations

GRAD_BYTES = 4          # fp32 gradients of the master weights
NORM_FLOPS = 2          # multiply-add per element for the squared norm
NORM_BYTES = 4          # the scalar all-reduced


def emit_clip(ol, grads_per_rank: int, deps=(), comm: str | None = None,
              stream: str = "comm") -> int:
    """The norm pass, the norm's all-reduce on ``comm`` (None: a local norm) and the
    scaling pass; returns the last op."""
    common = dict(phase="optimizer", layer="root", attrs={"params": grads_per_rank})
    last = ol.add(stream="compute", kind="compute", name="grad_norm", op_class="elementwise",
                  flops=float(NORM_FLOPS * grads_per_rank),
                  bytes_accessed=float(GRAD_BYTES * grads_per_rank), deps=tuple(deps),
                  **common)
    if comm is not None:
        last = ol.add(stream=stream, kind="collective", collective="all_reduce", comm=comm,
                      size_bytes=NORM_BYTES, name="all_reduce.grad_norm", deps=(last,),
                      **common)
    return ol.add(stream="compute", kind="compute", name="grad_clip", op_class="elementwise",
                  flops=float(grads_per_rank),
                  bytes_accessed=float(2 * GRAD_BYTES * grads_per_rank), deps=(last,),
                  **common)

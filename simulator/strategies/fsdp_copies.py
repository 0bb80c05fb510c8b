"""FSDP2's copy kernels around its collectives (``fully_shard``; FSDP1 has none).

FSDP2 keeps each parameter as its own sharded tensor, so its collectives need flat
buffers (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py):

* after an all-gather, ``foreach_all_gather_copy_out`` splits the gathered buffer into the
  unsharded parameters (``split_with_sizes_copy``: read and write the unit, ``2 P w``
  bytes, frozen weights included as stored), on the default stream when the unit's pre-forward/pre-backward hook waits for
  the unshard, so the unit's first kernel waits for it;
* before a reduce-scatter, ``foreach_reduce`` concatenates the unsharded gradients into the
  reduce-scatter input (``chunk_cat``, casting to the reduce dtype: ``P (w + r)`` bytes) on
  the reduce-scatter stream.

The all-gather copy-in (the local shards into the input buffer) is ``1/N`` of that and
not modelled, nor the transient second copy of a unit during the copy-out. Memory-bound
elementwise kernels at the HBM efficiency of that class.

Two callers, one rule (:func:`copy_out` / :func:`copy_in`): the data-parallel generator
(:mod:`.fsdp`, :func:`first_dep` / :func:`before_reduce` per unit) and FSDP inside a
parallel plan (:mod:`.parallel.dp`, ``dp_mode: fsdp``, per layer and per part: the rank's
TP/EP shard of the layer's dense parameters over the shard group, its experts over the
expert-data-parallel group). Each copy is a kernel launch the host pays like any eager
kernel (:func:`launch`).
"""

from __future__ import annotations

from .host import dispatch_s


def copy_out_bytes(gathered: int) -> int:
    """Bytes ``foreach_all_gather_copy_out`` moves for ``gathered`` all-gathered bytes: it
    reads the gathered buffer and writes the unsharded parameters."""
    return 2 * gathered


def copy_in_bytes(padded: int, weight_bytes: int, reduce_bytes: int) -> int:
    """Bytes ``chunk_cat`` moves for a reduce-scatter of ``padded`` elements: it reads the
    gradients in the parameter dtype and writes the input in the reduce dtype."""
    return padded * (weight_bytes + reduce_bytes)


def launch(ol, cfg, kernel: str, layer: str, phase: str, micro: int) -> tuple:
    """The CPU's launch of a copy kernel (:mod:`.host`): FSDP's hooks launch it eagerly,
    the pre-forward hook from the Python thread, the pre- and post-backward hooks from
    the autograd thread, each one kernel of the host model's (``host.yaml``'s seconds per
    kernel of its ``phase``, whatever the model's kind), a ``delay`` on the ``host`` stream
    in the CPU's order that the copy waits for; () where it costs nothing
    (``host_dispatch: none``, or no ``cfg``)."""
    seconds = dispatch_s(cfg, phase) if cfg is not None else 0.0
    if seconds <= 0:
        return ()
    return (ol.add(stream="host", kind="delay", name=f"dispatch.{kernel}", layer=layer,
                   phase="host", duration_s=seconds,
                   attrs={"micro_step": micro, "dispatches": phase}),)


def copy_out(ol, dep: int, name: str, phase: str, gathered: int, micro: int,
             layer: str = "", cfg=None) -> int:
    """The copy-out of an all-gather ``dep`` of ``gathered`` bytes, on the compute stream
    (``layer``: the layer it belongs to, by default ``name``), after the CPU launches it
    (:func:`launch`, with the strategy's ``cfg``)."""
    kernel, layer = f"all_gather_copy_out.{name}", layer or name
    return ol.add(stream="compute", kind="compute", name=kernel, layer=layer, phase=phase,
                  op_class="elementwise", bytes_accessed=float(copy_out_bytes(gathered)),
                  deps=(dep, *launch(ol, cfg, kernel, layer, phase, micro)),
                  attrs={"micro_step": micro})


def copy_in(ol, stream: str, dep: int, name: str, padded: int, weight_bytes: int,
            reduce_bytes: int, micro: int, layer: str = "", cfg=None) -> int:
    """The ``chunk_cat`` after ``dep`` (the gradients' last kernel) on the reduce-scatter's
    ``stream``, which the reduce-scatter waits for (``layer`` and ``cfg`` as
    :func:`copy_out`)."""
    kernel, layer = f"reduce_scatter_copy_in.{name}", layer or name
    return ol.add(stream=stream, kind="compute", op_class="elementwise", name=kernel,
                  layer=layer, phase="backward",
                  deps=(dep, *launch(ol, cfg, kernel, layer, "backward", micro)),
                  attrs={"micro_step": micro},
                  bytes_accessed=float(copy_in_bytes(padded, weight_bytes, reduce_bytes)))


def first_dep(sched, u, micro: int, phase: str):
    """The op the first kernel of unit ``u`` waits for: its all-gather, or with FSDP2 the
    copy-out it triggers (issued once per gather)."""
    dep = sched.gathered.get(u.index)
    if not sched.fsdp2 or dep is None or not u.weighs or u.index in sched.copied:
        return dep
    op = copy_out(sched.ol, dep, u.name, phase, sched.gathered_bytes(u), micro, cfg=sched.cfg)
    sched.gathered[u.index] = op
    sched.copied.add(u.index)
    return op


def before_reduce(sched, u, op: int, micro: int) -> int:
    """With FSDP2, the ``chunk_cat`` of unit ``u``'s gradients after ``op``; else ``op``."""
    if not sched.fsdp2:
        return op
    return copy_in(sched.ol, "post_backward", op, u.name, sched.padded(u), sched.wb,
                   sched.rb, micro, cfg=sched.cfg)

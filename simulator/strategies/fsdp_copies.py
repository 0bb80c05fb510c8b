"""The copy kernels a sharding framework runs around its collectives, one named mechanism
per framework (:data:`MECHANISMS`): FSDP2's (``fully_shard``; FSDP1 has none), DeepSpeed
ZeRO-3's (below), or none (Megatron-FSDP's contiguous buffers).

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

DeepSpeed ZeRO-3 (``"deepspeed"``; deepspeedai/DeepSpeed, edaa722) gathers a module's
parameters coalesced (``all_gather_coalesced`` with more than one parameter:
runtime/zero/partition_parameters.py ``_all_gather_dtype``) into one flat buffer laid out
rank by rank, each rank's partition holding a slice of every parameter, so the parameters
are not views of it:

* ``AllGatherCoalescedHandle.wait`` rebuilds each parameter with a ``torch.cat`` of its
  slices (``param.data = torch.cat(partitions)``): ``2 P w`` bytes as FSDP2's copy-out, on
  the all-gather stream (the coordinator waits inside ``stream(allgather_stream)``,
  partitioned_param_coordinator.py ``fetch_sub_module``; the compute stream then waits for
  that stream);
* before a reduce-scatter, on its ``reduce_and_partition_stream`` (runtime/zero/stage3.py,
  runtime/comm/coalesced_collectives.py): each gradient copied into the contiguous bucket
  in the communication dtype (``__add_grad_to_ipg_bucket``, ``contiguous_gradients``:
  ``P (w + r)``), the buckets' gradients interleaved rank by rank (``reduce_scatter_
  coalesced``: ``torch.cat``, ``2 P r``) and pre-divided in place (``div_``, ``2 P r``):
  ``P (w + 5 r)``.

Its per-parameter ``torch.cat`` launches are one kernel here, as FSDP2's one foreach copy.

Two callers, one rule (:func:`copy_out` / :func:`copy_in`): the data-parallel generator
(:mod:`.fsdp`, :func:`first_dep` / :func:`before_reduce` per unit) and FSDP inside a
parallel plan (:mod:`.parallel.dp`, ``dp_mode: fsdp``, per layer and per part: the rank's
TP/EP shard of the layer's dense parameters over the shard group, its experts over the
expert-data-parallel group). Each copy is a kernel launch the host pays like any eager
kernel (:func:`launch`).
"""

from __future__ import annotations

from .host import dispatch_delay, dispatch_s


MECHANISMS = ("fsdp2", "deepspeed", "none")


def copy_out_bytes(gathered: int) -> int:
    """Bytes ``foreach_all_gather_copy_out`` moves for ``gathered`` all-gathered bytes: it
    reads the gathered buffer and writes the unsharded parameters."""
    return 2 * gathered


def copy_in_bytes(padded: int, weight_bytes: int, reduce_bytes: int,
                  copies: str = "fsdp2") -> int:
    """Bytes the ``copies`` mechanism moves before a reduce-scatter of ``padded`` elements:
    FSDP2's ``chunk_cat`` reads the gradients in the parameter dtype and writes the input
    in the reduce dtype; DeepSpeed's bucket copy does the same, then its interleaving cat
    and its pre-divide each read and write the bucket in the reduce dtype."""
    cat = padded * (weight_bytes + reduce_bytes)
    if copies == "deepspeed":
        return cat + 2 * (2 * padded * reduce_bytes)
    return cat


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
    return (dispatch_delay(ol, kernel, layer, seconds, phase, micro),)


def copy_out(ol, dep: int, name: str, phase: str, gathered: int, micro: int,
             layer: str = "", cfg=None, copies: str = "fsdp2") -> int:
    """The copy-out of an all-gather ``dep`` of ``gathered`` bytes by the ``copies``
    mechanism: FSDP2's on the compute stream, DeepSpeed's on the all-gather's own stream
    (``layer``: the layer it belongs to, by default ``name``), after the CPU launches it
    (:func:`launch`, with the strategy's ``cfg``)."""
    kernel, layer = f"all_gather_copy_out.{name}", layer or name
    stream = ol.ops[dep].stream if copies == "deepspeed" else "compute"
    return ol.add(stream=stream, kind="compute", name=kernel, layer=layer, phase=phase,
                  op_class="elementwise", bytes_accessed=float(copy_out_bytes(gathered)),
                  deps=(dep, *launch(ol, cfg, kernel, layer, phase, micro)),
                  attrs={"micro_step": micro, "copies": copies})


def copy_in(ol, stream: str, dep: int, name: str, padded: int, weight_bytes: int,
            reduce_bytes: int, micro: int, layer: str = "", cfg=None,
            copies: str = "fsdp2") -> int:
    """The copies of the ``copies`` mechanism after ``dep`` (the gradients' last kernel) on
    the reduce-scatter's ``stream``, which the reduce-scatter waits for (``layer`` and
    ``cfg`` as :func:`copy_out`)."""
    kernel, layer = f"reduce_scatter_copy_in.{name}", layer or name
    return ol.add(stream=stream, kind="compute", op_class="elementwise", name=kernel,
                  layer=layer, phase="backward",
                  deps=(dep, *launch(ol, cfg, kernel, layer, "backward", micro)),
                  attrs={"micro_step": micro, "copies": copies},
                  bytes_accessed=float(copy_in_bytes(padded, weight_bytes, reduce_bytes,
                                                     copies)))


def first_dep(sched, u, micro: int, phase: str):
    """The op the first kernel of unit ``u`` waits for: its all-gather, or with copies
    (``sched.copies``) the copy-out it triggers (issued once per gather)."""
    dep = sched.gathered.get(u.index)
    if sched.copies == "none" or dep is None or not u.weighs or u.index in sched.copied:
        return dep
    op = copy_out(sched.ol, dep, u.name, phase, sched.gathered_bytes(u), micro, cfg=sched.cfg,
                  copies=sched.copies)
    sched.gathered[u.index] = op
    sched.copied.add(u.index)
    return op


def before_reduce(sched, u, op: int, micro: int) -> int:
    """With copies, those of unit ``u``'s gradients after ``op``; else ``op``."""
    if sched.copies == "none":
        return op
    return copy_in(sched.ol, "post_backward", op, u.name, sched.padded(u), sched.wb,
                   sched.rb, micro, cfg=sched.cfg, copies=sched.copies)

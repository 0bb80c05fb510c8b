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
"""

from __future__ import annotations


def first_dep(sched, u, micro: int, phase: str):
    """The op the first kernel of unit ``u`` waits for: its all-gather, or with FSDP2 the
    copy-out it triggers (issued once per gather)."""
    dep = sched.gathered.get(u.index)
    if not sched.fsdp2 or dep is None or not u.weighs or u.index in sched.copied:
        return dep
    op = sched.ol.add(stream="compute", kind="compute", name=f"all_gather_copy_out.{u.name}",
                      layer=u.name, phase=phase, op_class="elementwise",
                      bytes_accessed=float(2 * sched.gathered_bytes(u)), deps=(dep,),
                      attrs={"micro_step": micro})
    sched.gathered[u.index] = op
    sched.copied.add(u.index)
    return op


def before_reduce(sched, u, op: int, micro: int) -> int:
    """With FSDP2, the ``chunk_cat`` of unit ``u``'s gradients after ``op``; else ``op``."""
    if not sched.fsdp2:
        return op
    return sched.ol.add(stream="post_backward", kind="compute", op_class="elementwise",
                        name=f"reduce_scatter_copy_in.{u.name}", layer=u.name,
                        phase="backward", deps=(op,), attrs={"micro_step": micro},
                        bytes_accessed=float(sched.padded(u) * (sched.wb + sched.rb)))

"""Context parallelism: a sequence split over ``cp`` ranks, and the K/V traffic of the
attention between them, as ring attention or as an all-gather of K and V.

Causal load balancing (Megatron-LM / TransformerEngine): the sequence is cut into ``2 cp``
chunks of ``s / (2 cp)`` tokens and CP rank ``c`` holds chunks ``c`` and ``2 cp - 1 - c``,
so every rank has the same number of unmasked query-key pairs (:func:`causal_pairs`).

Per block and micro-batch a rank's K/V block is ``2 b (s / cp) kv_width e`` bytes (K and V
of its ``s / cp`` tokens, ``kv_width = kv_heads / tp x head_dim``).

* ``ring`` (TransformerEngine's P2P context parallelism): ``cp`` attention steps; at step
  ``i`` the rank attends its queries to the K/V block of rank ``c - i`` while it forwards
  that block to the next rank and receives the next block, so the transfer hides behind
  the previous block's attention. Forward: ``cp - 1`` blocks sent per rank. Backward: the
  K/V blocks go round again together with their accumulating gradients dK/dV (``2`` blocks
  per step for ``cp - 1`` steps), and each dK/dV makes a last hop home to its owner (the
  next rank): ``2 (cp - 1) + 1 = 2 cp - 1`` blocks sent.
* ``allgather`` (Llama 3's context parallelism): an all-gather of K and V on the CP group
  before the attention (nccl-tests size ``2 b s kv_width e``, the whole sequence's K/V;
  ``(cp - 1) / cp`` of it leaves each rank) and a reduce-scatter of dK/dV of the same size
  after its backward.

The attention kernels are split evenly over the ring steps: the cost convention counts the
full score square, under which every step does the same work (with causal masking and the
load balancing above, so do real kernels, up to the diagonal step).
"""

from __future__ import annotations

from dataclasses import replace

from simulator.models.ops import OpCost
from simulator.models.spec import ModelSpec
from simulator.parallel.steps import Step, kernel

SEND, RECV = "cp_send", "cp_recv"        # streams: apart, so a ring never waits on itself


def chunk_ranges(cp_index: int, cp: int, seq_len: int) -> tuple[tuple[int, int], ...]:
    """The two token ranges ``[start, end)`` CP rank ``cp_index`` holds."""
    n = seq_len // (2 * cp)
    a, b = cp_index, 2 * cp - 1 - cp_index
    return (a * n, (a + 1) * n), (b * n, (b + 1) * n)


def causal_pairs(ranges) -> int:
    """Unmasked (query, key) pairs of causal attention for the queries in ``ranges``: a
    query at position ``q`` sees the ``q + 1`` keys up to itself."""
    return sum((end * (end + 1) - start * (start + 1)) // 2 for start, end in ranges)


def kv_width(model: ModelSpec, tp: int = 1) -> int:
    """Elements of K (or V) per token on one of ``tp`` tensor-parallel ranks."""
    return model.kv_heads // tp * model.head_dim


def kv_block_bytes(model: ModelSpec, batch: int, seq_len: int, cp: int, e: int,
                   tp: int = 1) -> int:
    """K and V of one rank's ``s / cp`` tokens: ``2 b (s / cp) kv_width e``."""
    return 2 * batch * (seq_len // cp) * kv_width(model, tp) * e


def ring_sent_bytes(model: ModelSpec, batch: int, seq_len: int, cp: int, e: int,
                    tp: int = 1) -> tuple[int, int]:
    """Bytes a rank sends per block with ring attention: (forward ``(cp - 1)`` blocks,
    backward ``(2 cp - 1)`` blocks)."""
    block = kv_block_bytes(model, batch, seq_len, cp, e, tp)
    return (cp - 1) * block, ((2 * cp - 1) * block if cp > 1 else 0)


def allgather_size_bytes(model: ModelSpec, batch: int, seq_len: int, e: int,
                         tp: int = 1) -> int:
    """nccl-tests size of the K/V all-gather (and the dK/dV reduce-scatter):
    ``2 b s kv_width e``."""
    return 2 * batch * seq_len * kv_width(model, tp) * e


def ring_offsets(cp_index: int, cp: int, stride: int) -> tuple[int, int]:
    """(send, recv) partner minus this rank on the ring; ``stride`` is the rank distance
    between CP neighbours (the product of the mesh dimensions inside cp)."""
    send = stride if cp_index < cp - 1 else -(cp - 1) * stride
    recv = -stride if cp_index > 0 else (cp - 1) * stride
    return send, recv


def _slices(kernels, cp: int, step: int) -> list[OpCost]:
    """The ``step``-th of ``cp`` equal slices of each attention kernel."""
    return [replace(c, name=f"{c.name}.ring{step}", flops=c.flops / cp,
                    bytes_accessed=c.bytes_accessed / cp) for c in kernels]


def ring_steps(kernels, cp: int, block_bytes: int, phase: str,
               offsets: tuple[int, int]) -> list[Step]:
    """The attention ``kernels`` of one block's ``phase`` as ring attention (module doc).

    Forward step ``i`` computes after block ``i`` arrived; the block goes on to the next
    rank as soon as it arrived. Backward step ``i`` sends its block with the dK/dV it
    accumulated once it has computed it; the last step sends the dK/dV alone, and the list
    ends with the receipt of the rank's own dK/dV, which what follows must wait for (in
    forward: with the last attention step). ``cp = 1``: the kernels alone."""
    if cp == 1:
        return [kernel(c) for c in kernels]
    send_to, recv_from = offsets
    out: list[Step] = []
    arrived = None                       # index of the recv that brought this step's block
    for i in range(cp):
        after = () if arrived is None else (arrived,)
        computed = []
        for cost in _slices(kernels, cp, i):
            out.append(kernel(cost, after if not computed else ()))
            computed.append(len(out) - 1)
        last = i == cp - 1
        if phase == "forward" and last:
            break
        size = block_bytes if phase == "forward" or last else 2 * block_bytes
        wait = after if phase == "forward" else (computed[-1],)
        out.append(Step(f"cp_ring.{phase}.send{i}", "send", stream=SEND, size_bytes=size,
                        peer_offset=send_to, after=wait))
        out.append(Step(f"cp_ring.{phase}.recv{i}", "recv", stream=RECV, size_bytes=size,
                        peer_offset=recv_from))
        arrived = len(out) - 1
    return out


def allgather_steps(kernels, size_bytes: int, phase: str) -> list[Step]:
    """The attention ``kernels`` after an all-gather of K/V (forward) or before a
    reduce-scatter of dK/dV (backward) on the CP group."""
    name, collective = (("cp_allgather_kv", "all_gather") if phase == "forward" else
                        ("cp_reduce_scatter_dkv", "reduce_scatter"))
    comm = Step(name, "collective", collective=collective, size_bytes=size_bytes, group="cp")
    compute = [kernel(c) for c in kernels]
    return [comm, *compute] if phase == "forward" else [*compute, comm]

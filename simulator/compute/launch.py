"""How a kernel is launched, and which per-kernel costs that brings (``OpCost.launch``; a
trace op's ``attrs["launch"]``).

Three per-kernel costs sit on top of a kernel's roofline time:

* ``kernel_launch_s`` (``compute.yaml``, 4 us): the GPU's gap between back-to-back queued
  kernels;
* the fitted stack's ``kernel_overhead_us`` (``training_fit.yaml``: 128 us on Hopper, 231
  on Ampere): fitted on eager runs, a stand-in for the eager work around each modelled
  kernel that the model does not emit (op-by-op kernels, hooks, allocator);
* host dispatch (``host.yaml``, :mod:`simulator.strategies.host`): the CPU's time to
  launch it, which the GPU waits for where the CPU falls behind. Its eager values were
  measured per kernel of the fused model (a real eager step launches several per one).

Which of them a kernel pays depends on how it is launched:

=============  ===============  ===============  ==========================================
launch         kernel_launch_s  stack overhead   host dispatch
=============  ===============  ===============  ==========================================
``""`` eager   yes              yes              eager (per fused-model kernel)
``piece``      yes              no               none: its fused op's dispatch counts it
``compiled``   yes              no               compiled (torch.compile's launcher)
``graph``      no               no               none (one graph launch per region)
=============  ===============  ===============  ==========================================

``piece``: one of the kernels an eager op is made of when the model code runs op by op
(:mod:`simulator.models.eager`); the stand-ins were fitted and measured per fused-model
kernel, so they are paid once per fused op (by the piece that keeps its name), not per
piece. ``compiled``: a kernel of a region torch.compile compiled (:mod:`simulator.models.
fusion`): Inductor's generated code has no eager op-by-op work around its kernels (the
H200 profiles of compiled GPT-2 medium and Llama-2-7B blocks match their modelled kernels
without the stand-in: ``validation/gpu``). ``graph``: replayed from a CUDA graph
(Megatron's ``cuda_graph_impl``): neither the CPU launch nor the per-call launch gap is
paid, as nccl-tests ``-G`` collectives (:func:`simulator.constants.with_cuda_graph`).
"""

from __future__ import annotations

from dataclasses import replace

from simulator.errors import ConfigError

EAGER, PIECE, COMPILED, GRAPH = "", "piece", "compiled", "graph"
LAUNCHES = (EAGER, PIECE, COMPILED, GRAPH)


def check_launch(launch: str) -> str:
    """``launch`` if it is one of :data:`LAUNCHES`, else a ConfigError."""
    if launch not in LAUNCHES:
        raise ConfigError(f"unknown launch {launch!r}; valid: eager (''), "
                          f"{', '.join(LAUNCHES[1:])}", field="launch")
    return launch


def pays_stack_overhead(launch: str) -> bool:
    """Whether a kernel so launched pays the fitted stack's per-kernel overhead."""
    return launch == EAGER


def pays_kernel_launch(launch: str) -> bool:
    """Whether a kernel so launched pays the GPU's per-kernel launch gap."""
    return launch != GRAPH


def dispatch_mode(launch: str, mode: str) -> str:
    """The host-dispatch row (``host.yaml``: eager, compiled) a kernel so launched costs
    under a strategy's ``host_dispatch`` ``mode``; ``none``: no CPU time of its own."""
    if mode == "none" or launch in (PIECE, GRAPH):
        return "none"
    return "compiled" if launch == COMPILED else mode


def graphed(layer):
    """``layer`` (a :class:`~simulator.models.ops.LayerCost`) with every kernel replayed
    from a CUDA graph, when it is a transformer block (what Megatron's
    ``cuda_graph_impl`` captures); any other layer as it is."""
    if not layer.kind.endswith("block"):
        return layer
    return replace(layer, forward=tuple(replace(o, launch=GRAPH) for o in layer.forward),
                   backward=tuple(replace(o, launch=GRAPH) for o in layer.backward))


__all__ = ["COMPILED", "EAGER", "GRAPH", "LAUNCHES", "PIECE", "check_launch",
           "dispatch_mode", "graphed", "pays_kernel_launch", "pays_stack_overhead"]

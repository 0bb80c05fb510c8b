"""Host-side (CPU) dispatch time of an eager PyTorch step, and the GPU waiting for it.

An eager step launches every kernel from Python (forward) or from the autograd engine's
thread (backward), each launch costing CPU time (``simulator/data/host.yaml``, measured on
the repository's H200 profiles). The CPU runs ahead of the GPU, so the GPU waits only
where the CPU falls behind: per layer and phase the CPU spends ``kernels x dispatch``
seconds, and the layer's last kernel cannot start before the CPU has launched it. In the
trace that is one ``delay`` op per layer and phase on a ``host`` stream (the CPU's work
in order, never waiting for the GPU), on which the layer's last kernel depends: the GPU
finishes a layer no earlier than the CPU has dispatched everything up to it, i.e. the
step is max(GPU time, CPU time) at layer granularity, without an op per kernel.

``strategy.host_dispatch`` (every PyTorch strategy; TensorFlow's graphs: ``none`` only):
``eager`` (the default), ``compiled`` (every kernel through torch.compile's launcher) or
``none`` (the GPU never waits for the host: the time before this model existed).
Whatever it says, a kernel's own launch (:mod:`simulator.compute.launch`) decides for that
kernel: a ``compiled`` one (a block under ``training.compile``) costs the compiled launch,
a ``piece`` of an op-by-op eager op or a kernel replayed from a CUDA ``graph`` nothing of
its own.
"""

from __future__ import annotations

import functools
from collections import Counter

from simulator.compute.checks import check_keys, check_source, check_time
from simulator.compute.launch import dispatch_mode
from simulator.yamlio import read_yaml
from ..yamlio import data_file

FILE = "host.yaml"
# The layers of the profiles the constants come from (a transformer's); a convolution
# network's kernels have no measurement and pay none (the H200 ResNet-50 profile's step
# is its GPU time: validation/gpu)
MEASURED_KINDS = frozenset({"transformer_block", "embedding", "head"})
MODES = ("eager", "compiled")
PHASES = ("forward", "backward", "recompute")


@functools.cache
def dispatch_table() -> dict[str, dict[str, float]]:
    """{mode: {phase: seconds per kernel}} of the shipped ``host.yaml``."""
    src = f"simulator/data/{FILE}"
    data = read_yaml(data_file(FILE), "host dispatch")
    check_keys(data, set(MODES), set(MODES), src, None)
    out = {}
    for mode in MODES:
        check_keys(data[mode], set(PHASES), set(PHASES), src, mode)
        out[mode] = {}
        for phase in PHASES:
            entry = data[mode][phase]
            where = f"{mode}.{phase}"
            check_keys(entry, {"value", "source"}, {"value", "source"}, src, where)
            check_source(entry["source"], src, where)
            out[mode][phase] = check_time(entry["value"], src, f"{where}.value")
    return out


def dispatch_s(cfg, phase: str, launch: str = "") -> float:
    """CPU seconds a kernel launched as ``launch`` costs in ``phase`` under a strategy
    config (0: the GPU never waits for the host: ``host_dispatch: none``)."""
    return mode_dispatch_s(cfg.host_dispatch, phase, launch)


def mode_dispatch_s(host_dispatch: str, phase: str, launch: str = "") -> float:
    """CPU seconds a kernel launched as ``launch`` costs in ``phase`` under a strategy's
    ``host_dispatch`` mode (eager, compiled, none)."""
    mode = dispatch_mode(launch, host_dispatch)
    if mode == "none":
        return 0.0
    return dispatch_table()[mode][phase]


def layer_dispatch_s(kind: str, costs, host_dispatch: str, phase: str) -> float:
    """CPU seconds of launching ``costs`` (OpCosts) of a layer of ``kind`` in ``phase``
    under ``host_dispatch``: each kernel by its launch, in the layers of the measured kinds
    only (:data:`MEASURED_KINDS`). What the trace's host stream spends
    (:func:`simulator.strategies.base._emit_costs`) and ``clustersim plan``'s estimate takes."""
    if kind not in MEASURED_KINDS:
        return 0.0
    counts = Counter(getattr(c, "launch", "") for c in costs)
    return sum(n * mode_dispatch_s(host_dispatch, phase, launch)
               for launch, n in counts.items())


def dispatch_delay(ol, name: str, layer: str, seconds: float, phase: str, micro: int,
                   deps: tuple = ()) -> int:
    """The CPU's ``seconds`` of launching ``name``'s kernels of ``phase``: a ``delay`` on
    the ``host`` stream, in the CPU's order, that the kernel it launches waits for."""
    return ol.add(stream="host", kind="delay", name=f"dispatch.{name}", layer=layer,
                  phase="host", duration_s=seconds, deps=deps,
                  attrs={"micro_step": micro, "dispatches": phase})


__all__ = ["FILE", "MEASURED_KINDS", "MODES", "PHASES", "dispatch_delay", "dispatch_s",
           "dispatch_table", "layer_dispatch_s", "mode_dispatch_s"]

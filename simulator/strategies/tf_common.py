"""What the TensorFlow strategies and Horovod share: their constants, the Keras training step
of one replica, the gradient packing rules, and the checks TensorFlow makes.

The Keras step (``Model.fit`` -> ``train_step``) runs forward, ``tape.gradient`` (backward)
and then ``optimizer.apply_gradients``, which reduces the gradients
(``all_reduce_sum_gradients``) before updating (FACTS.md section 4). By default each pack
is therefore reduced after the whole backward pass; with ``overlap: true`` a pack starts as
soon as its last gradient exists (what graph execution could do; FACTS.md section 6 leaves
the question open, so both are kept).

Gradient accumulation (``grad_accum`` k): the first k-1 micro-steps carry no communication
and are identical, so they are written once with ``attrs["repeat"] = k - 1`` (the engine
runs such an op k-1 times back to back); the last micro-step is written out.

Granularity: a layer is the finest unit the cost model has, so its parameters act as one
variable (one tensor) for packing and placement; TensorFlow packs and places per variable.
Keras mixed precision keeps variables and gradients in float32, so ``param_dtype`` defaults
to fp32 and gradients travel in fp32 unless ``reduce_dtype`` says otherwise.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Literal, NamedTuple

from pydantic import Field, field_validator

from simulator.errors import ConfigError
from simulator.trace import Communicator, RankClass, Trace
from simulator.yamlio import read_yaml

from .base import (CLASS_ID, CommonConfig, OpList, World, bandwidth_value, build_meta,
                   emit_backward, emit_forward)
from .grads import GradReady, tensors
from .optim import emit_optimizer
from ..yamlio import data_file


@functools.cache
def tf_constants() -> dict[str, dict[str, Any]]:
    """``simulator/data/tensorflow.yaml`` as {section: {key: value}} (sources dropped)."""
    path = data_file("tensorflow.yaml")
    data = read_yaml(path, "TensorFlow constants")
    return {section: {k: v["value"] for k, v in entries.items()}
            for section, entries in data.items()}


def constant(section: str, key: str) -> Any:
    return tf_constants()[section][key]


class TFConfig(CommonConfig):
    """Options of every TensorFlow strategy (and Horovod); ``NAME`` is the registry name."""

    NAME: ClassVar[str] = ""
    # TensorFlow applies each variable's update in one kernel (ResourceApplyAdam, ...)
    optimizer_impl: str = "fused"
    # a tf.function graph's executor launches the kernels, not Python op by op (host.py)
    host_dispatch: Literal["eager", "compiled", "none"] = "none"

    def _check(self) -> None:
        if self.name != self.NAME:
            raise ConfigError(f"expected {self.NAME!r}, got {self.name!r}", field="strategy.name")
        if self.optimizer_impl != "fused":
            raise ConfigError(f"TensorFlow applies each variable's update in one fused kernel; "
                              f"only 'fused', got {self.optimizer_impl!r}",
                              field="strategy.optimizer_impl")
        if self.host_dispatch != "none":
            raise ConfigError("TensorFlow runs the step as tf.function graphs whose executor "
                              "launches the kernels (no Python dispatch per op): only 'none'",
                              field="strategy.host_dispatch")
        self._check_tf()

    def _check_tf(self) -> None:
        """Checks of one strategy: raise ConfigError naming ``strategy.<field>``."""

    def default_param_dtype(self) -> str:
        return "fp32"


class HostUpdateConfig(TFConfig):
    """A strategy that updates variables on a host CPU (central storage, parameter servers):
    ``cpu_update_bytes_per_s`` of optimizer traffic (``"10 GB/s"`` or bytes/s)."""

    cpu_update_bytes_per_s: float | str = Field(
        default_factory=lambda: constant("host", "cpu_update_bytes_per_s"),
        validate_default=True)

    @field_validator("cpu_update_bytes_per_s")
    @classmethod
    def _bandwidth(cls, v):
        return bandwidth_value(v)


def require_single_host(world: World, label: str) -> None:
    """MirroredStrategy and CentralStorageStrategy run in one process on one machine."""
    if world.world_size > world.gpus_per_node:
        nodes = -(-world.world_size // world.gpus_per_node)
        raise ConfigError(f"{label} runs in one process on one machine; {world.world_size} "
                          f"GPUs span {nodes} nodes (use tf_multiworker or horovod)",
                          field="strategy.name")


# ----------------------------------------------------------------------------- packs
@dataclass(frozen=True)
class Pack:
    """Gradients reduced together: ``grads`` (keys of :func:`grad_variables`, in pack order),
    ``size_bytes``; ``ready`` is the gradient that completes the pack, the one created first
    (backward runs from the last variable to the first)."""

    index: int
    grads: tuple
    size_bytes: int

    @property
    def ready(self):
        return min(self.grads)


def _packs(groups: list[list[int]], sizes: dict[int, int]) -> list[Pack]:
    return [Pack(i, tuple(g), sum(sizes[j] for j in g)) for i, g in enumerate(groups) if g]


def per_variable(order: list[int], sizes: dict[int, int]) -> list[Pack]:
    """One pack per variable (no packing)."""
    return _packs([[i] for i in order], sizes)


def group_by_size(order: list[int], sizes: dict[int, int], bytes_per_pack: int) -> list[Pack]:
    """``cross_device_utils.group_by_size``: 0 gives one pack; otherwise tensors join the
    current pack and a new one starts once the current pack exceeds ``bytes_per_pack``."""
    if bytes_per_pack == 0:
        return _packs([list(order)], sizes)
    groups: list[list[int]] = []
    last = 0
    for i in order:
        if not groups or last > bytes_per_pack:
            groups.append([])
            last = 0
        groups[-1].append(i)
        last += sizes[i]
    return _packs(groups, sizes)


def fuse(order: list[int], sizes: dict[int, int], threshold: int) -> list[Pack]:
    """Horovod tensor fusion: a buffer takes tensors while it stays within ``threshold``
    (a larger tensor goes alone); 0 disables fusion."""
    groups: list[list[int]] = []
    total = 0
    for i in order:
        if groups and threshold and total + sizes[i] <= threshold:
            groups[-1].append(i)
            total += sizes[i]
        else:
            groups.append([i])
            total = sizes[i]
    return _packs(groups, sizes)


def concat_and_split(order: list[int], params: dict[int, int], elem_bytes: int,
                     num_packs: int) -> list[Pack]:
    """``_ConcatAndSplitPacker(num_packs)``: every gradient concatenated and split into
    ``num_packs`` pieces of ``total // num_packs`` elements, the last taking the rest. The
    concat needs every gradient, so each piece waits for the whole backward pass."""
    total = sum(params[i] for i in order)
    split = total // num_packs
    counts = [split] * (num_packs - 1) + [total - split * (num_packs - 1)]
    return [Pack(k, tuple(order), c * elem_bytes) for k, c in enumerate(counts)]


# ------------------------------------------------------------------------- the step
def emit_micro_steps(ol: OpList, layers, cfg: CommonConfig,
                     on_grad: Callable[[tuple, int], None] | None = None,
                     forward_deps: dict[int, tuple] | None = None) -> None:
    """``grad_accum`` micro-steps of forward and backward (the first k-1 written once, with
    ``attrs["repeat"]``); ``on_grad(key, op)`` is called as each gradient of the last
    micro-step is complete (``key`` as :func:`grad_variables` gives it, ``op`` the kernel
    that completes it); the first forward of layer ``i`` waits for ``forward_deps[i]`` (its
    variables)."""
    k = cfg.grad_accum
    if k > 1:
        start = len(ol.ops)
        _forward_backward(ol, layers, cfg, 0, None, forward_deps)
        for op in ol.ops[start:]:
            op.attrs["repeat"] = k - 1
        forward_deps = None
    _forward_backward(ol, layers, cfg, k - 1, on_grad, forward_deps)


def _forward_backward(ol: OpList, layers, cfg: CommonConfig, micro: int, on_grad,
                      forward_deps) -> None:
    for i, layer in enumerate(layers):
        emit_forward(ol, layer, cfg, micro, (forward_deps or {}).get(i, ()))
    for idx in reversed(range(len(layers))):
        hooks = None if on_grad is None else \
            GradReady(layers[idx], lambda pos, op, idx=idx: on_grad((idx, pos), op))
        last = emit_backward(ol, layers[idx], cfg, micro, hooks=hooks).last
        if hooks is not None:
            hooks.finish(last)


PackEmitter = Callable[[OpList, Pack, tuple], int]


def emit_sync_step(ol: OpList, layers, cfg: CommonConfig, packs: list[Pack],
                   reduce_pack: PackEmitter, overlap: bool) -> list[int]:
    """Micro-steps and the reduction of every pack (``reduce_pack(ol, pack, deps)`` returns
    its last op): after the backward pass, or with ``overlap`` once the pack's last gradient
    is ready. Returns the last op of each pack, which the update waits for."""
    ready: dict = {}
    for p in packs:
        ready.setdefault(p.ready, []).append(p)
    ends: list[int] = []

    def on_grad(key, op: int) -> None:
        for p in ready.get(key, ()):
            ends.append(reduce_pack(ol, p, (op,)))

    emit_micro_steps(ol, layers, cfg, on_grad if overlap else None)
    if not overlap:
        after = (ol.last_on("compute"),)
        ends += [reduce_pack(ol, p, after) for p in packs]
    return ends


class Variables(NamedTuple):
    """A model's variables (or gradients) in forward (variable creation) order."""

    order: list                  # their keys, in that order
    params: dict                 # key -> parameters
    bytes: dict                  # key -> bytes of its gradient (or weight)


def grad_sizes(layers, elem_bytes: int) -> Variables:
    """The layers with parameters, by layer index, with their gradient bytes."""
    order = [i for i, layer in enumerate(layers) if int(layer.params) > 0]
    params = {i: int(layers[i].params) for i in order}
    return Variables(order=order, params=params,
                     bytes={i: params[i] * elem_bytes for i in order})


def grad_variables(layers, elem_bytes: int) -> Variables:
    """The gradient tensors, keyed ``(layer index, position)`` (:class:`~.grads.GradReady`
    positions: the weights a layer's kernels name, or the whole layer at 0), with their
    gradient bytes."""
    params = {(i, t.position): t.params for i, layer in enumerate(layers)
              for t in tensors(layer)}
    return Variables(order=list(params), params=params,
                     bytes={k: n * elem_bytes for k, n in params.items()})


def pack_meta(packs: list[Pack], layers) -> list[dict]:
    """Per pack: index, bytes, its gradients' count and the layers they belong to."""
    return [{"index": p.index, "size_bytes": p.size_bytes, "tensors": len(p.grads),
             "layers": [layers[i].name for i in dict.fromkeys(k[0] for k in p.grads)]}
            for p in packs]


def sync_trace(layers, cfg: CommonConfig, world: World, params: int, packs: list[Pack],
               reduce_pack: PackEmitter, overlap: bool, comms: dict[str, Communicator], /,
               **meta: Any) -> Trace:
    """The whole trace of a synchronous all-reduce strategy: micro-steps with the packs'
    reductions (:func:`emit_sync_step`), the optimizer step after them, and ``meta``
    (``strategy``, ``model``, ... as :func:`build_meta` takes them) with the static memory
    of a full replica. ``comms`` is read after emission (emitters may fill it). The
    arguments are positional-only, so ``meta`` may carry a key such as ``packs``."""
    from .ddp import static_bytes_per_param
    ol = OpList()
    ends = emit_sync_step(ol, layers, cfg, packs, reduce_pack, overlap)
    emit_optimizer(ol, cfg, params, deps=ends)
    info = build_meta(layers, cfg, world, **meta)
    return one_class_trace(ol, world, comms, info, params * static_bytes_per_param(cfg))


def one_class_trace(ol: OpList, world: World, comms: dict[str, Communicator],
                    meta: dict, static_memory_bytes: int) -> Trace:
    """The Trace of a synchronous strategy: every rank runs the same ops."""
    trace = Trace(world.world_size, [RankClass(CLASS_ID, world.ranks, ol.ops,
                                               static_memory_bytes=static_memory_bytes)],
                  comms, meta)
    trace.validate()
    return trace


def add_n(ol: OpList, stream: str, inputs: int, size_bytes: int, elem_bytes: int, deps,
          name: str) -> int:
    """A memory-bound ``add_n`` of ``inputs`` tensors of ``size_bytes`` (reads every input,
    writes one result)."""
    elements = size_bytes // max(elem_bytes, 1)
    return ol.add(stream=stream, kind="compute", name=f"add_n.{name}", phase="comm",
                  op_class="elementwise", flops=float((inputs - 1) * elements),
                  bytes_accessed=float((inputs + 1) * size_bytes), deps=deps,
                  attrs={"inputs": inputs})


def host_copy(ol: OpList, to_host: bool, stream: str, server: int, size_bytes: int,
              layer: str, deps=(), **attrs) -> int:
    """A copy between every GPU of the class and the host memory of ``server``: ``send``
    (push, GPU to host) or ``recv`` (pull, host to GPU); see :mod:`simulator.collectives.host`."""
    kind, verb = ("send", "push") if to_host else ("recv", "pull")
    return ol.add(stream=stream, kind=kind, name=f"{verb}.{layer}", layer=layer,
                  phase="comm", size_bytes=int(size_bytes), deps=deps,
                  attrs={"host": server, "nic": constant("parameter_server", "grpc_nic_index"),
                         **attrs})


def cpu_seconds(nbytes: float, cfg) -> float:
    """Seconds of host CPU streaming ``nbytes`` at ``cfg.cpu_update_bytes_per_s``."""
    return float(nbytes) / cfg.cpu_update_bytes_per_s

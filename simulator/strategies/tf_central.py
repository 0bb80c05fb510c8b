"""TensorFlow ``tf.distribute.experimental.CentralStorageStrategy``: variables in the host
CPU's memory, compute replicated on the machine's GPUs; with one GPU the variables sit on
it (``central_storage_strategy.py``, FACTS.md section 4).

One step (synchronous, every GPU one replica):

* each replica reads every variable from host memory (a ``recv`` host copy per layer on
  stream ``h2d``, all GPUs at once over their PCIe paths); a layer's forward waits for its
  variables;
* forward and backward (with accumulation, see ``tf_common``);
* each replica copies its gradients to the host (``send`` per layer on stream ``d2h``,
  after the backward pass as Keras' ``apply_gradients`` does): the reduction to one device,
  the CPU;
* the CPU sums the ``n`` gradients (``add_n``: reads ``n`` copies, writes one) and applies
  the optimizer (``CPU_OPT_STEP_BYTES`` per parameter), both ``delay`` ops on stream ``host``
  at ``cpu_update_bytes_per_s``.

GPU memory holds the variables' values read this step (weights) and the gradients; the
optimizer state lives on the CPU.
"""

from __future__ import annotations

from .base import OpList, World, build_meta, check_layers
from .optim import CPU_OPT_STEP_BYTES, emit_optimizer
from .ddp import static_bytes_per_param
from .tf_common import (HostUpdateConfig, cpu_seconds, emit_micro_steps, grad_sizes,
                        host_copy, one_class_trace, require_single_host)


class CentralStorageConfig(HostUpdateConfig):
    """``strategy: {name: tf_central_storage, cpu_update_bytes_per_s: "10 GB/s"}``."""

    NAME = "tf_central_storage"
    name: str = "tf_central_storage"


def tf_central_storage(layers, cfg: CentralStorageConfig, world: World, *, model: str = "",
                       tokens_per_sample: int = 0,
                       model_flops_per_sample: float | None = None):
    """The CentralStorageStrategy trace of one step.

    :raises ConfigError: (``strategy.name``) when the world spans several machines.
    """
    params = check_layers(layers)
    require_single_host(world, "CentralStorageStrategy")
    n = world.world_size
    ol = OpList()
    if n == 1:                                   # variables on the only GPU
        emit_micro_steps(ol, layers, cfg)
        emit_optimizer(ol, cfg, params, deps=(ol.last_on("compute"),))
        static = params * static_bytes_per_param(cfg)
    else:
        _central_step(ol, layers, cfg, n, params)
        static = params * (cfg.weight_bytes() + cfg.grad_reduce_bytes())
    meta = build_meta(layers, cfg, world, strategy="tf_central_storage", model=model,
                      tokens_per_sample=tokens_per_sample,
                      model_flops_per_sample=model_flops_per_sample,
                      variables_on="GPU" if n == 1 else "CPU",
                      host_bytes_per_replica_step=2 * params * cfg.weight_bytes() if n > 1 else 0,
                      on_worker_failure="restart")
    return one_class_trace(ol, world, {}, meta, static)


def _central_step(ol: OpList, layers, cfg: CentralStorageConfig, n: int, params: int) -> None:
    variables = grad_sizes(layers, cfg.grad_reduce_bytes())
    order, grads = variables.order, variables.bytes
    server = 0                                   # one machine: ranks 0..n-1 on server 0
    pulls = {i: (host_copy(ol, False, "h2d", server, int(layers[i].params) * cfg.weight_bytes(),
                           layers[i].name),) for i in order}
    emit_micro_steps(ol, layers, cfg, forward_deps=pulls)
    after = ol.last_on("compute")
    last = None
    for i in order[::-1]:
        last = host_copy(ol, True, "d2h", server, grads[i], layers[i].name, (after,))
    total = sum(grads.values())
    last = ol.add(stream="host", kind="delay", name="add_n.cpu", phase="optimizer",
                  duration_s=cpu_seconds((n + 1) * total, cfg), deps=(last, after),
                  attrs={"inputs": n})
    ol.add(stream="host", kind="delay", name=f"optimizer.{cfg.optimizer}.cpu",
           phase="optimizer",
           duration_s=cpu_seconds(params * CPU_OPT_STEP_BYTES[cfg.optimizer], cfg),
           deps=(last,), attrs={"params": params})

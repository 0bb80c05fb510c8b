"""TensorFlow 2 ``tf.distribute.experimental.ParameterServerStrategy`` with a
``ClusterCoordinator`` (``parameter_server_strategy_v2.py``, FACTS.md section 4).

Hosts. The coordinator only dispatches step functions and is not on the data path (not
modelled). Parameter servers keep the variables in host memory. With ``ps_placement:
dedicated`` the last ``num_ps`` machines of the world are parameter-server hosts (their
GPUs idle, their memory and NIC serve the variables) and every GPU of the other machines is
a worker task; ``colocated`` puts parameter server ``k`` in the host memory of machine
``k mod machines`` beside its workers; ``auto`` (default) is dedicated when the world has
more machines than parameter servers. Each worker task uses one GPU.

Variables. Each variable (here: a layer's parameters) goes to a parameter server
round-robin in creation order; a ``partitioner`` first splits it along its first axis
(``min_size``: ``MinSizePartitioner``, max(1, min(max_shards, ceil(bytes /
min_shard_bytes))) shards; ``fixed``: ``FixedShardsPartitioner``), each shard placed
round-robin in turn, the first shards one element larger when the split is uneven.

A worker step: read every variable from its server (``recv`` host copies; a layer's forward
waits for its shards), forward, backward, send every gradient to its server (``send``,
after the backward pass as Keras does, per layer with ``overlap: true``), and the server
applies the update on its CPU (a ``delay`` of ``CPU_OPT_STEP_BYTES`` per parameter at
``cpu_update_bytes_per_s`` after each push). Per worker and step that is the variables'
bytes pulled and the gradients' bytes pushed: 2 x params x 4 bytes. Copies to one server
share one stream (a gRPC channel); servers are served concurrently.

Asynchrony. Workers never wait for each other, so there is no rendezvous. Workers are
spread over up to ``async_phases`` rank classes that enter the training loop at different
points (class ``k`` at the op where ``k / phases`` of a step's FLOPs are done; the part of
the loop before the cut runs last, after the next step's reads), and each runs
``async_steps`` steps (``simulator/data/tensorflow.yaml``). Their transfers then interleave
on the parameter servers' links as those of independent workers do once they have drifted
apart; a hot server's NIC shows up as transfers that share its links. One iteration is
``async_steps`` steps of every worker (``meta["steps_per_iteration"]``; the global batch
counts them all), so throughput is the mean over those steps, start-up transient included.
Worker failures do not stop training (``on_worker_failure: continue`` in the meta); the
coordinator and the parameter servers must stay up. The parameter servers' update
``delay`` ops are counted in the workers' ``compute_s``.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from simulator.errors import ConfigError
from simulator.trace import RankClass, Trace

from .base import OpList, World, build_meta, check_layers, emit_backward, emit_forward
from .checkpointing import kept_bytes
from .optim import CPU_OPT_STEP_BYTES
from .tf_common import HostUpdateConfig, constant, cpu_seconds, grad_sizes, host_copy


class PartitionerConfig(BaseModel):
    """``partitioner: {kind: min_size, min_shard_bytes: 262144, max_shards: 2}`` or
    ``{kind: fixed, num_shards: 2}``."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    kind: Literal["min_size", "fixed"] = "min_size"
    min_shard_bytes: int = Field(
        default_factory=lambda: constant("parameter_server", "min_shard_bytes"), gt=0)
    max_shards: int = Field(default_factory=lambda: constant("parameter_server", "max_shards"),
                            ge=1)
    num_shards: int | None = Field(None, ge=1)

    def shards(self, params: int, elem_bytes: int) -> int:
        """How many shards a variable of ``params`` elements gets (at most one per element,
        the first-axis limit, unknown here)."""
        if self.kind == "fixed":
            return min(self.num_shards, params)
        return max(1, min(params, self.max_shards, math.ceil(params * elem_bytes /
                                                             self.min_shard_bytes)))


class PSConfig(HostUpdateConfig):
    """``strategy: {name: tf_ps, num_ps: 1, ps_placement: auto, partitioner: ..., overlap:
    false, cpu_update_bytes_per_s: "10 GB/s"}``."""

    NAME = "tf_ps"
    name: str = "tf_ps"
    num_ps: int = 1
    ps_placement: Literal["auto", "dedicated", "colocated"] = "auto"
    partitioner: PartitionerConfig | None = None
    overlap: bool = False

    def data_parallel_ranks(self, world: World) -> int:
        """The workers (a parameter server's GPUs take no micro-batch)."""
        return len(ps_layout(self, world).workers)

    def _check_tf(self) -> None:
        if self.num_ps < 1:
            raise ConfigError(f"ParameterServerStrategy needs at least one parameter server, "
                              f"got {self.num_ps}", field="strategy.num_ps")
        p = self.partitioner
        if p is not None:
            key = "num_shards" if p.kind == "fixed" else "max_shards"
            if p.kind == "fixed" and p.num_shards is None:
                raise ConfigError("a fixed partitioner needs num_shards",
                                  field="strategy.partitioner.num_shards")
            if getattr(p, key) > self.num_ps:
                raise ConfigError(f"{getattr(p, key)} shards for {self.num_ps} parameter "
                                  f"server(s): a variable's shards must sit on different "
                                  f"servers", field=f"strategy.partitioner.{key}")
        if self.grad_accum > 1:
            raise ConfigError("ParameterServerStrategy steps have no gradient accumulation "
                              "here (not simulated)", field="training.grad_accum")


@dataclass(frozen=True)
class Shard:
    layer: int
    ps: int          # parameter server task index
    params: int


@dataclass(frozen=True)
class PSLayout:
    """Worker ranks (one task per GPU) and the server (machine) of each parameter server."""

    workers: tuple[int, ...]
    ps_servers: tuple[int, ...]
    placement: str


def ps_layout(cfg: PSConfig, world: World) -> PSLayout:
    """:raises ConfigError: (``strategy.num_ps``) when dedicated hosts leave no worker."""
    machines = -(-world.world_size // world.gpus_per_node)
    placement = cfg.ps_placement
    if placement == "auto":
        placement = "dedicated" if machines > cfg.num_ps else "colocated"
    if placement == "colocated":
        return PSLayout(world.ranks, tuple(k % machines for k in range(cfg.num_ps)), placement)
    if machines <= cfg.num_ps:
        raise ConfigError(f"{cfg.num_ps} dedicated parameter-server host(s) leave no worker "
                          f"among the world's {machines} machine(s); add nodes or use "
                          f"ps_placement: colocated", field="strategy.num_ps")
    first_ps = machines - cfg.num_ps
    workers = tuple(r for r in world.ranks if r // world.gpus_per_node < first_ps)
    return PSLayout(workers, tuple(range(first_ps, machines)), placement)


def place_variables(layers, cfg: PSConfig) -> list[Shard]:
    """Shards of every variable, round-robin over the parameter servers in creation order."""
    variables = grad_sizes(layers, cfg.weight_bytes())
    shards, counter = [], 0
    for i in variables.order:
        n = variables.params[i]
        k = cfg.partitioner.shards(n, cfg.weight_bytes()) if cfg.partitioner else 1
        base, extra = divmod(n, k)
        for j in range(k):
            shards.append(Shard(i, counter % cfg.num_ps, base + (1 if j < extra else 0)))
            counter += 1
    return shards


def cut_points(layers, phases: int) -> list[int]:
    """Where class ``k`` enters the loop: a position in the compute sequence F0..F(L-1),
    B(L-1)..B0 after which ``k / phases`` of the step's FLOPs are done."""
    flops = [sum(c.flops for c in layer.forward) for layer in layers] + \
        [sum(c.flops for c in layer.backward) for layer in reversed(layers)]
    before = [0.0]
    for f in flops:
        before.append(before[-1] + f)
    total = before[-1]
    return [min(bisect.bisect_left(before, k * total / phases), len(flops) - 1)
            for k in range(phases)]


class _Cycle:
    """One worker step, entered at a cut point: the ops of one phase class."""

    def __init__(self, layers, cfg: PSConfig, shards: list[Shard], servers: tuple[int, ...]):
        self.layers, self.cfg, self.servers = layers, cfg, servers
        self.by_layer: dict[int, list[Shard]] = {}
        for s in shards:
            self.by_layer.setdefault(s.layer, []).append(s)
        self.ol = OpList()

    def push(self, i: int, dep: int) -> None:
        for s in self.by_layer.get(i, ()):
            stream = f"push.ps{s.ps}"
            op = host_copy(self.ol, True, stream, self.servers[s.ps],
                           s.params * self.cfg.grad_reduce_bytes(), self.layers[i].name, (dep,),
                           ps=s.ps)
            self.ol.add(stream=stream, kind="delay", name=f"ps_update.{self.layers[i].name}",
                        layer=self.layers[i].name, phase="optimizer", deps=(op,),
                        duration_s=cpu_seconds(s.params * CPU_OPT_STEP_BYTES[self.cfg.optimizer],
                                               self.cfg), attrs={"ps": s.ps})

    def pull_all(self, deps) -> dict[int, tuple[int, ...]]:
        pulls: dict[int, list[int]] = {}
        for i in sorted(self.by_layer):
            for s in self.by_layer[i]:
                pulls.setdefault(i, []).append(host_copy(
                    self.ol, False, f"pull.ps{s.ps}", self.servers[s.ps],
                    s.params * self.cfg.weight_bytes(), self.layers[i].name, deps, ps=s.ps))
        return {i: tuple(v) for i, v in pulls.items()}

    def run(self, seq, pulls=None) -> None:
        for kind, i in seq:
            if kind == "F":
                emit_forward(self.ol, self.layers[i], self.cfg, 0, (pulls or {}).get(i, ()))
                continue
            last = emit_backward(self.ol, self.layers[i], self.cfg, 0).last
            if self.cfg.overlap:
                self.push(i, last)

    def emit(self, cut: int, steps: int) -> list:
        """``steps`` worker steps entered at ``cut``; each step's reads wait for everything
        of the step before (its closure returns after the updates), and the part of the
        loop before the cut waits for those reads."""
        n = len(self.layers)
        seq = [("F", i) for i in range(n)] + [("B", i) for i in reversed(range(n))]
        pulls = None
        for step in range(steps):
            first = len(self.ol.ops)
            self.run(seq[cut:], pulls)
            if not self.cfg.overlap:
                after = self.ol.last_on("compute")
                for i in sorted(self.by_layer, reverse=True):
                    self.push(i, after)
            ends = {op.stream: op.id for op in self.ol.ops}      # last op of every stream
            pulls = self.pull_all(tuple(ends.values()))
            self.run(seq[:cut], pulls)
            for op in self.ol.ops[first:]:
                op.attrs["step"] = step
        return self.ol.ops


def held_at_entry(layers, cfg: PSConfig, cut: int) -> int:
    """Activation bytes a class entering at ``cut`` holds from the step before: layers whose
    forward lies before the cut and backward after it."""
    n = len(layers)
    return sum(kept_bytes(layer, cfg) for i, layer in enumerate(layers)
               if i < cut <= 2 * n - 1 - i)


def tf_ps(layers, cfg: PSConfig, world: World, *, model: str = "", tokens_per_sample: int = 0,
          model_flops_per_sample: float | None = None) -> Trace:
    """The ParameterServerStrategy trace: one step of every worker (see the module doc)."""
    params = check_layers(layers)
    layout = ps_layout(cfg, world)
    shards = place_variables(layers, cfg)
    n_workers = len(layout.workers)
    phases = min(n_workers, int(constant("parameter_server", "async_phases")))
    steps = int(constant("parameter_server", "async_steps"))
    cuts = cut_points(layers, phases)
    static = params * (cfg.weight_bytes() + cfg.grad_reduce_bytes())   # read copies + grads
    classes = []
    for k, cut in enumerate(cuts):
        ops = _Cycle(layers, cfg, shards, layout.ps_servers).emit(cut, steps)
        ranks = tuple(layout.workers[w] for w in range(k, n_workers, phases))
        classes.append(RankClass(f"phase{k}", ranks, ops, static_memory_bytes=static
                                 + held_at_entry(layers, cfg, cut)))
    per_ps = [sum(s.params for s in shards if s.ps == p) * cfg.weight_bytes()
              for p in range(cfg.num_ps)]
    meta = build_meta(layers, cfg, World(n_workers, world.gpus_per_node), strategy="tf_ps",
                      model=model, tokens_per_sample=tokens_per_sample,
                      model_flops_per_sample=model_flops_per_sample,
                      asynchronous=True, steps_per_iteration=steps, num_ps=cfg.num_ps,
                      ps_placement=layout.placement,
                      ps_servers=list(layout.ps_servers), workers=n_workers, phases=phases,
                      phase_cuts=cuts, ps_variable_bytes=per_ps, shards=len(shards),
                      pull_bytes_per_worker_step=params * cfg.weight_bytes(),
                      push_bytes_per_worker_step=params * cfg.grad_reduce_bytes(),
                      gpus_reserved=world.world_size, on_worker_failure="continue")
    meta["global_batch"] *= steps                 # one iteration: ``steps`` steps per worker
    meta["model_flops_per_iteration"] *= steps
    trace = Trace(n_workers, classes, {}, meta)
    trace.validate()
    return trace

"""Expert and context parallelism wired into the trace generator (:mod:`.generate`).

:func:`planned_layers` turns the rank's TP/SP/CP-sharded layer costs into the ones EP and
CP run: each MoE block becomes the busiest EP rank's (:func:`.moe.ep_block_cost`: ``E / ep``
experts, ``1 / etp`` of each, over the most token copies an EP rank keeps times ``etp``,
:mod:`.moe`), and with ring attention each block's attention is cut into ``cp`` steps
(:func:`.context.ring_slices`), with ``a2a`` it runs over the whole sequence on ``1 / cp``
of the heads (:func:`.context.a2a_heads`). The blocks carry the bytes their EP/CP traffic moves
(:class:`CommLayerCost`), so the hook factories of :data:`HOOK_FACTORIES` (the generator's
``HOOKS``) need nothing but the class's builder: :class:`.moe.EPHooks` issues the
all-to-alls on the stage's EP communicator and the expert-TP all-gathers and
reduce-scatters on its ``etp`` one (stream ``ep``), :class:`.context.CPHooks` the K/V
exchanges (or the ``a2a`` all-to-alls) on its CP communicator (stream ``cp``).

The strategy's ``moe_load`` (:class:`.moe.ExpertLoad`; balanced when absent) and
``moe_expert_capacity_factor`` (Megatron-LM's override of the model's capacity factor) set
the routing; its ``moe_token_dispatcher_type`` (Megatron's; ``alltoall`` when absent)
picks the all-to-all dispatcher or the flex one (:func:`.moe.flex_sizes`: two
all-to-alls per dispatch and combine, on the ``ep_nvl`` communicator of each EP group's
ranks in one NVLink domain and the ``ep_rail`` one of its ranks with the same local
index in each domain, :func:`.place.domain_groups`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

from simulator.errors import ConfigError
from simulator.models.moe import is_moe_block
from simulator.models.ops import LayerCost
from simulator.models.spec import ModelSpec
from simulator.models.window import keep_attention
from simulator.precision import precision_bytes

from .context import (A2ASizes, CPHooks, a2a_sizes, allgather_size_bytes, cp_sliced,
                      kv_block_bytes)
from .context import STREAM as CP_STREAM
from .moe import EPHooks, EpSizes, ExpertLoad, ep_block_cost, ep_loads, ep_sizes, flex_sizes
from .place import domain_groups
from .plan import ParallelPlan

EP_STREAM = "ep"


@dataclass(frozen=True)
class CommLayerCost(LayerCost):
    """A block with the nccl-tests sizes of its EP and expert-TP collectives
    (``ep_sizes``, :class:`.moe.EpSizes`) and the bytes of its CP K/V exchange
    (``kv_block_bytes``: the rank's K/V; ``kv_gather_bytes``: the all-gather of the whole
    sequence's; ``cp_a2a``: the ``a2a`` mode's all-to-alls)."""

    ep_sizes: EpSizes | None = None
    kv_block_bytes: int = 0
    kv_gather_bytes: int = 0
    cp_a2a: A2ASizes | None = None


@dataclass(frozen=True)
class Routing:
    """How a strategy routes an MoE layer's tokens: its ``moe_load`` (None: balanced) and
    Megatron-LM's ``moe_expert_capacity_factor`` override (None: the model's). The trace
    generator and ``clustersim plan``'s estimate take the same one (:meth:`of`)."""

    load: ExpertLoad | None = None
    capacity_factor: float | None = None

    @classmethod
    def of(cls, cfg) -> Routing:
        """A strategy config's routing (a config without these keys routes evenly)."""
        return cls(getattr(cfg, "moe_load", None),
                   getattr(cfg, "moe_expert_capacity_factor", None))

    def model(self, model: ModelSpec) -> ModelSpec:
        """``model`` with this routing's capacity factor, where it sets one."""
        if self.capacity_factor is None:
            return model
        return replace(model, capacity_factor=self.capacity_factor)


class EpBlock(NamedTuple):
    """The busiest EP rank's MoE block and the nccl-tests sizes of its EP and expert-TP
    collectives."""

    cost: LayerCost
    sizes: EpSizes

    def of(self, layer: LayerCost) -> LayerCost:
        """This block in the place of the MoE block ``layer``, whose own attention
        (windowed or full) and name it keeps."""
        return keep_attention(replace(self.cost, name=layer.name), layer)


def moe_tokens(plan: ParallelPlan, micro_batch: int, seq_len: int) -> int:
    """Tokens one rank routes per micro-batch: its ``b s / cp``, ``/ tp`` under sequence
    parallelism (the MoE layer runs on the rank's sequence shard)."""
    t = micro_batch * (seq_len // plan.cp)
    return t // plan.tp if plan.sequence_parallel and plan.tp > 1 else t


def is_flex(cfg) -> bool:
    """Whether ``cfg`` runs Megatron-Core's flex token dispatcher (DeepEP / HybridEP)."""
    return getattr(cfg, "moe_token_dispatcher_type", "alltoall") == "flex"


def planned_layers(layers: list[LayerCost], model: ModelSpec, plan: ParallelPlan, cfg, *,
                   seq_len: int, flash: bool, autocast: bool = False,
                   gpus_per_node: int | None = None) -> list[LayerCost]:
    """``layers`` (the generator's :func:`~.generate.parallel_layers`) as EP, expert TP
    and CP run them (see the module doc); unchanged without ``ep``, ``etp`` or ``cp``
    above 1. ``gpus_per_node``: the NVLink domain's GPUs, which the flex dispatcher's
    all-to-alls follow (None: one domain holds every EP group).

    Raises
    ------
    ConfigError
        Ring attention or ``a2a`` without flash attention (they need the fused kernel).
    """
    split = model.is_moe and (plan.ep > 1 or plan.expert_tp > 1)
    if not split and plan.cp == 1:
        return layers
    if plan.cp > 1 and plan.cp_mode in ("ring", "a2a") and not flash:
        what = "ring attention" if plan.cp_mode == "ring" else "a2a (Ulysses) attention"
        raise ConfigError(f"{what} (context parallelism) runs the fused attention "
                          "kernel: set flash_attention: true", field="training.flash_attention")
    e = precision_bytes(cfg.precision)
    k = precision_bytes("fp32") if autocast else e
    b, tp = cfg.micro_batch, plan.tp
    extra = {}
    if plan.cp > 1:
        extra = {"kv_block_bytes": kv_block_bytes(model, b, seq_len, plan.cp, e, tp),
                 "kv_gather_bytes": allgather_size_bytes(model, b, seq_len, e, tp)}
        if plan.cp_mode == "a2a":
            extra["cp_a2a"] = a2a_sizes(model, b, seq_len, plan.cp, e, tp)
    moe = None
    if split:
        routing = Routing.of(cfg)
        domains = None
        if is_flex(cfg):
            domains = 1 if gpus_per_node is None else \
                domain_groups(plan.groups("ep"), gpus_per_node).domains
        moe = expert_block(routing.model(model), plan, micro_batch=b, seq_len=seq_len, e=e,
                           flash=flash, k=k, load=routing.load, flex_domains=domains)
    return [_planned(layer, moe, plan, extra) for layer in layers]


def expert_block(model: ModelSpec, plan: ParallelPlan, *, micro_batch: int, seq_len: int,
                 e: int, flash: bool, k: int | None = None, load=None,
                 flex_domains: int | None = None) -> EpBlock:
    """The MoE block of the busiest EP rank of ``plan`` (:func:`.moe.ep_block_cost`) and
    the sizes of its EP and expert-TP collectives: the all-to-all dispatcher's
    (:func:`.moe.ep_sizes`), or the flex one's over ``flex_domains`` NVLink domains
    (:func:`.moe.flex_sizes`). ``load``: the routing (:class:`.moe.ExpertLoad`; None:
    balanced). What the trace generator and ``clustersim plan``'s estimate both run."""
    loads = ep_loads(model, moe_tokens(plan, micro_batch, seq_len), plan.ep, load)
    etp = plan.expert_tp
    sizes = ep_sizes(model, loads, e, etp) if flex_domains is None else \
        flex_sizes(model, loads, e, flex_domains, etp)
    tp, sp = plan.tp, plan.sequence_parallel and plan.tp > 1
    return EpBlock(cost=ep_block_cost(model, micro_batch, seq_len, e, flash, loads, plan.ep,
                                      k, tp, sp, plan.cp, etp), sizes=sizes)


def _planned(layer: LayerCost, moe: EpBlock | None, plan: ParallelPlan,
             extra: dict) -> LayerCost:
    if not layer.kind.endswith("block"):
        return layer
    sizes = None
    if moe is not None and is_moe_block(layer):
        # the busiest EP rank's MoE half; the block's own attention (windowed or full)
        layer, sizes = moe.of(layer), moe.sizes
    layer = cp_sliced(layer, plan.cp, plan.cp_mode, extra.get("kv_gather_bytes", 0))
    fields = {f: getattr(layer, f) for f in LayerCost.__dataclass_fields__}
    return CommLayerCost(**fields, ep_sizes=sizes, **extra)


class _PerLayer:
    """A hook that takes its sizes from each layer (:class:`CommLayerCost`) and is silent
    on layers without that traffic; ``make(layer, issue)`` builds the layer's hook, whose
    collectives :meth:`issue` adds on ``stream`` (and the communicator of that name)."""

    def __init__(self, builder, stream: str, make):
        self.builder, self.stream, self.make, self.hook = builder, stream, make, None
        self.layer = ""
        self.carry: list[int] = []     # what the previous layer's hook left pending

    def issue(self, kind: str, size: int, deps, name: str, phase: str,
              comm: str | None = None, stream: str | None = None) -> int:
        """A collective on ``stream`` (default: the hook's) and the stage's communicator
        ``comm`` (default: the one named as the hook's stream)."""
        b = self.builder
        return b.collective(kind, stream or self.stream, comm or self.stream, size, deps,
                            name, phase, b.micro, layer=self.layer)

    def last_compute(self) -> int | None:
        return self.builder.last_compute()

    def start_layer(self, layer) -> None:
        self.carry += self.flush()
        self.layer = layer.name
        self.hook = self.make(layer)
        if self.hook is not None and hasattr(self.hook, "start_layer"):
            self.hook.start_layer(layer)

    def before(self, cost, phase: str) -> tuple:
        carry, self.carry = tuple(self.carry), []
        return carry + (self.hook.before(cost, phase) if self.hook else ())

    def after(self, cost, phase: str, op_id: int) -> None:
        if self.hook:
            self.hook.after(cost, phase, op_id)

    def host_syncs(self, cost, phase: str) -> bool:
        return bool(self.hook) and self.hook.host_syncs(cost, phase)

    def host_sync_waits(self, cost, phase: str, deps: tuple) -> tuple:
        return self.hook.host_sync_waits(cost, phase, deps) if self.hook else deps

    def flush(self) -> list[int]:
        carry, self.carry = self.carry, []
        return carry + (self.hook.flush() if self.hook and hasattr(self.hook, "flush") else [])


def ep_hooks(builder) -> _PerLayer | None:
    """The EP all-to-alls and expert-TP collectives of a stage class (none without expert
    parallelism or expert tensor parallelism)."""
    if builder.plan.ep == 1 and builder.plan.expert_tp == 1:
        return None
    counts: dict[str, int] = {}     # phase -> the latest token-count all-gather (EPHooks)
    hooks = _PerLayer(builder, EP_STREAM, lambda layer: EPHooks(
        hooks.issue, hooks.last_compute, size_bytes=layer.ep_sizes, counts_ops=counts)
        if getattr(layer, "ep_sizes", None) else None)
    return hooks


def cp_hooks(builder) -> _PerLayer | None:
    """The CP K/V exchanges (or all-to-alls) of a stage class (none without context
    parallelism)."""
    plan = builder.plan
    if plan.cp == 1:
        return None
    hooks = _PerLayer(builder, CP_STREAM, lambda layer: CPHooks(
        hooks.issue, hooks.last_compute, mode=plan.cp_mode, cp=plan.cp,
        block_bytes=layer.kv_block_bytes, gather_bytes=layer.kv_gather_bytes,
        a2a=layer.cp_a2a)
        if getattr(layer, "kv_block_bytes", 0) else None)
    return hooks


HOOK_FACTORIES = {"ep": ep_hooks, "cp": cp_hooks}

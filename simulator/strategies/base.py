"""What every strategy generator shares: the world, common config, op emission, meta.

A strategy is a function ``(layers, cfg, world, *, model="", tokens_per_sample=0,
model_flops_per_sample=None) -> Trace``. ``layers`` are the per-layer costs of ONE
micro-batch (``layer_costs(model, batch=cfg.micro_batch, ...)``); the generator repeats them
``cfg.grad_accum`` times and adds the communication and the optimizer step.

Memory conventions (bytes per parameter, ZeRO arXiv:1910.02054 §3.1):

* fp32 optimizer moments: Adam 8 (m, v), SGD 4 (momentum);
* plus a 4-byte fp32 master copy when the model weights are kept in 16 bits, so
  mixed-precision Adam is 2 + 2 + 12 = 16 bytes per parameter (K = 12), and fp32 Adam
  4 + 4 + 8 = 16 as well.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields
from typing import TYPE_CHECKING, Annotated, Any, Callable, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from simulator.errors import TYPE_TAGS, ConfigError, validation_error
from simulator.compute.pricing import kernel_attrs
from simulator.precision import Dtype, Precision, precision_bytes, storage_dtype
from simulator.trace import Op
from simulator.units import UnitError, parse_bandwidth

from .checkpointing import SelectiveOption, ac_mode, recompute_plan
from .host import dispatch_delay, dispatch_s, layer_dispatch_s
from .optim_precision import OptimizerDtypes, state_bytes as precision_state_bytes

if TYPE_CHECKING:   # the contract of docs/training-interfaces.md section 1
    from simulator.models import LayerCost
    from simulator.models.ops import MainGrad

OPT_MOMENT_BYTES = {"adam": 8, "sgd": 4}     # fp32 optimizer state without master weights
MASTER_BYTES = 4                             # fp32 master weights of a 16-bit model
FP32 = 4                                     # bytes of an fp32 value
CLASS_ID = "all"

OptimizerImpl = Literal["foreach", "fused"]   # the kernels of a GPU step (optim.py)


@dataclass(frozen=True)
class World:
    """``world_size`` ranks 0..N-1; rank r sits on node ``r // gpus_per_node``."""

    world_size: int
    gpus_per_node: int

    def __post_init__(self):
        for name in ("world_size", "gpus_per_node"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"must be a positive integer, got {value!r}", field=name)

    @property
    def ranks(self) -> tuple[int, ...]:
        return tuple(range(self.world_size))


class CommonConfig(BaseModel):
    """Options every data-parallel strategy has. Validation errors are :class:`ConfigError`
    naming ``strategy.<field>``."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    name: str
    precision: Precision = "bf16"   # compute precision
    micro_batch: int = Field(1, gt=0)        # samples per GPU per micro-step
    grad_accum: int = Field(1, ge=1)         # micro-steps per optimizer step
    # none | full | selective (checkpointing.py); true = full, false = none
    activation_checkpointing: bool | Literal["none", "full", "selective"] = False
    selective_ac_option: SelectiveOption | Annotated[int, Field(ge=1)] | None = None
    activation_offload: bool = False         # checkpointed block inputs kept in host memory
    optimizer: Literal["adam", "sgd"] = "adam"   # sgd = with momentum
    optimizer_impl: OptimizerImpl = "foreach"    # PyTorch's default on CUDA; or fused
    param_dtype: Dtype | None = None         # weights used in compute (see each strategy)
    reduce_dtype: Dtype | None = None        # gradient communication; None: param_dtype
    # the CPU's kernel launches the GPU may wait for (host.py, data/host.yaml): eager
    # (PyTorch: every kernel launched from Python or the autograd engine), compiled
    # (torch.compile's launcher) or none (the GPU never waits: TensorFlow's graphs)
    host_dispatch: Literal["eager", "compiled", "none"] = "eager"

    def __init__(self, **data: Any):
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise validation_error(exc, prefix="strategy", depth=2, skip=TYPE_TAGS) from None

    @model_validator(mode="after")
    def _cross_checks(self):
        # a ConfigError is not a ValueError: pydantic lets it through
        if self.activation_offload and self.ac_mode == "none":
            raise ConfigError("offloads the inputs activation checkpointing keeps; set "
                              "activation_checkpointing: true", field="strategy.activation_offload")
        if self.selective_ac_option is not None and self.ac_mode != "selective":
            raise ConfigError("applies to activation_checkpointing: selective only",
                              field="strategy.selective_ac_option")
        if self.activation_offload and not isinstance(self.selective_policy, int) \
                and self.ac_mode == "selective":
            raise ConfigError("offloads whole-block checkpoints only: use activation_"
                              "checkpointing: full or selective_ac_option: N (every Nth "
                              "block)", field="strategy.activation_offload")
        self._check()
        return self

    def _check(self) -> None:
        """Cross-field checks (subclasses); raise ConfigError naming the field."""

    @property
    def ac_mode(self) -> str:
        """``none``, ``full`` or ``selective`` (:mod:`.checkpointing`; booleans normalised)."""
        return ac_mode(self.activation_checkpointing)

    @property
    def selective_policy(self) -> str | int:
        """``"op"`` (default), ``"attention"`` or N (every Nth block) for selective mode."""
        return "op" if self.selective_ac_option is None else self.selective_ac_option

    def data_parallel_ranks(self, world: World) -> int:
        """How many micro-batches one micro-step of this strategy runs at once on ``world``:
        its data-parallel ranks (every rank; a plan's ``dp``: what tensor, pipeline and
        context parallelism leave). A global batch is micro_batch x grad_accum x this."""
        plan = getattr(self, "plan", None)       # the framework spellings' parallel plan
        return plan(world.world_size).dp if plan is not None else world.world_size

    def weight_bytes(self) -> int:
        """Bytes per element of the weights the kernels read."""
        return precision_bytes(self.param_dtype or self.default_param_dtype())

    def grad_reduce_bytes(self) -> int:
        return precision_bytes(self.reduce_dtype) if self.reduce_dtype else self.weight_bytes()

    def default_param_dtype(self) -> str:
        return storage_dtype(self.precision)

    def main_grad(self) -> MainGrad | None:
        """The gradient buffer the weight gradients accumulate into over the micro-batches,
        as a kernel sees it (:func:`simulator.models.ops.accumulated_wgrad`); None: each
        GEMM writes a gradient of its own (PyTorch's autograd, the default)."""
        return None

    def with_main_grad(self, layers: list[LayerCost]) -> list[LayerCost]:
        """``layers`` with their weight gradients accumulating into :meth:`main_grad`
        (unchanged without one): the one rule every generator of this config applies."""
        main_grad = self.main_grad()
        if main_grad is None:
            return layers
        from simulator.models.ops import accumulated_wgrad    # models load when used
        e = precision_bytes(self.precision)
        return [accumulated_wgrad(layer, main_grad, e) for layer in layers]

    def fp8_tp_gathers(self, recipe: str | None) -> bool:
        """Whether the blocks' tensor-parallel all-gathers move FP8 activations under
        ``recipe`` (cast before the gather, on the rank's shard): no, they gather the
        16-bit activations and each rank casts the gathered tensor."""
        return False

    def check_fp8(self, recipe: str | None) -> None:
        """Refuse (ConfigError) a setting of this config that needs an FP8 recipe the step
        does not run (``recipe``: the step's FP8 recipe, None without FP8): none here."""

    def fp8_weight_gathers(self, recipe: str | None, plan=None) -> bool:
        """Whether the data-parallel sharding of ``plan`` gathers the blocks' FP8 GEMM
        weights in FP8 under ``recipe`` (torchao's float8 all-gather under FSDP, Megatron's
        FP8 parameters; :func:`simulator.models.fp8.fp8_layer`): no, in the parameters'
        dtype, each forward GEMM casting its weight."""
        return False

    def fp8_weight_reuse(self, recipe: str) -> int:
        """Micro-batches of a step that share one FP8 cast of each weight under ``recipe``
        (:func:`simulator.models.fp8.fp8_layer`): 1, every micro-batch casts its weights."""
        return 1

    def optimizer_dtypes(self) -> OptimizerDtypes | None:
        """The precision-aware optimizer's dtypes (:mod:`.optim_precision`), or None: fp32
        state, the kernels of ``optimizer_impl`` (the Megatron spelling sets them)."""
        return None

    def optimizer_state_bytes(self, fp8_recipe: str | None = None) -> int:
        """Bytes per parameter of the optimizer's own state, sharded by a distributed
        optimizer: fp32 master weights and moments, or those of :meth:`optimizer_dtypes`
        (under the training's ``fp8_recipe``)."""
        dtypes = self.optimizer_dtypes()
        if dtypes is None:
            return MASTER_BYTES + OPT_MOMENT_BYTES[self.optimizer]
        return precision_state_bytes(dtypes, weight_bytes=self.weight_bytes(),
                                     fp8_recipe=fp8_recipe)


def bandwidth_value(v) -> float:
    """A positive bytes/s value from a number or a string with its unit ("10 GB/s")."""
    try:
        value = parse_bandwidth(v) if isinstance(v, str) else float(v)
    except UnitError as exc:
        raise ValueError(str(exc)) from None
    if not value > 0:
        raise ValueError("must be positive")
    return value


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


# ------------------------------------------------------------------------ op emission
def op_maker(name: str, params: tuple[str, ...], cls: type = Op, **fixed: Any) -> Callable:
    """A typed constructor of Ops (of any dataclass ``cls``): a function ``name`` whose
    parameters are the fields ``params`` (to be called by keyword), with the fields
    ``fixed`` set to the values given here and every other field to its default.

    Why not ``Op(field=...)``: CPython 3.11 packs the keywords of a call to a class into a
    dict, once per op, and a rank class builds an op per kernel it runs. The generated
    function passes Op's fields in the order :func:`dataclasses.fields` gives them (as the
    dataclass's own ``__init__`` is generated), so no reordering of Op's fields can put a
    value in another field, as it could where the fields were written out by position."""
    names = {f.name for f in fields(cls)}
    unknown = (set(params) | set(fixed)) - names
    if unknown or set(params) & set(fixed):
        raise TypeError(f"op_maker {name}: {sorted(unknown) or sorted(set(params) & set(fixed))}"
                        f" not fields of {cls.__name__}, or given twice")
    namespace: dict[str, Any] = {"_cls": cls}
    args = []
    for f in fields(cls):
        if f.name in params:
            args.append(f.name)
        elif f.name in fixed or f.default is not MISSING:
            namespace[f"_{f.name}"] = fixed[f.name] if f.name in fixed else f.default
            args.append(f"_{f.name}")
        elif f.default_factory is not MISSING:
            namespace[f"_{f.name}"] = f.default_factory
            args.append(f"_{f.name}()")
        else:
            raise TypeError(f"op_maker {name}: field {f.name!r} has no default; give it")
    exec(f"def {name}({', '.join(params)}):\n    return _cls({', '.join(args)})\n", namespace)
    return namespace[name]


_compute_op = op_maker("compute_op", ("id", "name", "layer", "phase", "flops",
                                      "bytes_accessed", "op_class", "deps", "attrs"),
                       stream="compute", kind="compute")
_collective_op = op_maker("collective_op", ("id", "stream", "name", "layer", "phase",
                                            "collective", "size_bytes", "comm", "deps",
                                            "mem_alloc_bytes", "mem_free_bytes", "attrs"),
                          kind="collective")


@dataclass(frozen=True, slots=True)
class _Kernel:
    """What every compute op of one kernel of one layer in one phase shares (its other
    fields are the op's id, deps and micro-step). ``cost`` is kept so that no other
    object takes its id while the entry lives."""

    cost: Any
    name: str
    flops: float
    bytes_accessed: float
    op_class: str
    attrs: dict          # {"micro_step": 0, m, n, k...}: the keys of every such op
    shape_key: tuple = ()    # attrs but the micro-step, (name, type, value) in order


class OpList:
    """Ops of one rank class, numbered in issue order.

    ``shared_attrs`` (a dict, possibly shared by the OpLists of several classes): the
    kernels' ``attrs`` of equal content are one dict, kept there by (the template's other
    keys, micro-step), rather than a copy per op (a 3-D plan's classes run each kernel of
    each layer once per micro-batch, with the same attrs). Only for generators that never
    change an op's attrs after building it (the shared dict is every such op's).
    """

    def __init__(self, shared_attrs: dict | None = None):
        self.ops: list[Op] = []
        self._kernels: dict[tuple, _Kernel] = {}     # (id(cost), layer, phase) -> template
        self._shared = shared_attrs

    def add(self, *, deps=(), **fields: Any) -> int:
        """A new op of these ``fields`` (Op's), numbered next (:func:`_dep_ids`)."""
        n = len(self.ops)
        self.ops.append(Op(id=n, deps=_dep_ids(deps), **fields))
        return n

    def kernel(self, cost, layer: str, phase: str, micro: int, deps: tuple) -> int:
        """The compute op of the kernel ``cost`` (an OpCost) of ``layer``. Its fields other
        than ``deps`` and the micro-step are the same each time that kernel of that layer
        runs in that phase: they are built once (a rank class runs each many times)."""
        key = (id(cost), layer, phase)
        k = self._kernels.get(key)
        if k is None:
            shape = kernel_attrs(cost)
            k = self._kernels[key] = _Kernel(
                cost=cost, name=cost.name, flops=float(cost.flops),
                bytes_accessed=float(cost.bytes_accessed), op_class=cost.op_class,
                attrs={"micro_step": 0, **shape},
                shape_key=tuple((name, type(v), v) for name, v in shape.items()))
        n = len(self.ops)
        shared = self._shared
        if shared is None:
            attrs = k.attrs.copy()          # the same keys in the same order, copied rather
            attrs["micro_step"] = micro     # than merged
        else:
            attrs = shared.get((k.shape_key, micro))
            if attrs is None:
                attrs = shared[(k.shape_key, micro)] = k.attrs.copy()
                attrs["micro_step"] = micro
        self.ops.append(_compute_op(id=n, name=k.name, layer=layer, phase=phase,
                                    flops=k.flops, bytes_accessed=k.bytes_accessed,
                                    op_class=k.op_class, deps=_dep_ids(deps), attrs=attrs))
        return n

    def micro_attrs(self, micro: int) -> dict:
        """``{"micro_step": micro}``: the one dict of the shared attrs where this list has
        them (what a kernel without shape attrs holds), else a new one."""
        shared = self._shared
        if shared is None:
            return {"micro_step": micro}
        attrs = shared.get(((), micro))
        if attrs is None:
            attrs = shared[((), micro)] = {"micro_step": micro}
        return attrs

    def collective(self, *, stream: str, collective: str, comm: str, size_bytes: int, deps,
                   name: str, phase: str, layer: str, attrs: dict, mem_alloc_bytes: int = 0,
                   mem_free_bytes: int = 0) -> int:
        """A new ``collective`` op (``collective``: all_gather...; ``comm``: the
        communicator's id), numbered next: what :meth:`add` makes of these fields, without
        its ``**fields`` mapping."""
        n = len(self.ops)
        self.ops.append(_collective_op(id=n, stream=stream, name=name, layer=layer,
                                       phase=phase, collective=collective,
                                       size_bytes=size_bytes, comm=comm, deps=_dep_ids(deps),
                                       mem_alloc_bytes=mem_alloc_bytes,
                                       mem_free_bytes=mem_free_bytes, attrs=attrs))
        return n

    def last_on(self, stream: str) -> int | None:
        for op in reversed(self.ops):
            if op.stream == stream:
                return op.id
        return None

    def alloc(self, op_id: int, nbytes: int) -> None:
        self.ops[op_id].mem_alloc_bytes += int(nbytes)

    def free(self, op_id: int, nbytes: int) -> None:
        self.ops[op_id].mem_free_bytes += int(nbytes)


def _dep_ids(deps) -> tuple[int, ...]:
    """``deps`` (op ids or None) as an op's ``deps``: sorted, each once, without None."""
    if type(deps) is tuple and len(deps) < 2:      # most ops: at most one
        return () if not deps or deps[0] is None else deps
    return tuple(sorted({d for d in deps if d is not None}))


class OpHooks:
    """Called around each kernel a layer emits (FSDP units smaller than a layer gather
    before the kernel that uses their weight and reshard or reduce after it)."""

    def before(self, cost, phase: str) -> tuple:
        """Ops the kernel ``cost`` must wait for (issued now, before it)."""
        return ()

    def after(self, cost, phase: str, op_id: int) -> None:
        """The kernel was issued as ``op_id``."""

    def host_syncs(self, cost, phase: str) -> bool:
        """Whether the CPU waits for the GPU before launching ``cost``: for the ops the
        kernel waits for (:meth:`before`), as a ``.tolist()`` of device data does, unless
        :meth:`host_sync_waits` names others."""
        return False

    def host_sync_waits(self, cost, phase: str, deps: tuple) -> tuple:
        """The ops the CPU waits for at a host sync before launching ``cost``
        (:meth:`host_syncs`): by default ``deps``, the ops the kernel itself waits for."""
        return deps


def _emit_costs(ol: OpList, layer, costs, phase: str, micro: int, deps=(),
                hooks: OpHooks | None = None, cfg: CommonConfig | None = None) -> list[int]:
    """One compute op per OpCost; ``deps`` on the first. Returns the op ids in order.
    With ``cfg`` the CPU's dispatch of the kernels (:func:`.host.dispatch_s` of each, by
    how it is launched), when above 0, is a ``delay`` on the ``host`` stream that the last
    kernel waits for (:mod:`.host`)."""
    ids = []
    costs = tuple(costs or ())
    host_s = 0.0 if cfg is None else layer_dispatch_s(layer.kind, costs, cfg.host_dispatch,
                                                      phase)
    sync, ends = _host_segments(costs, phase, hooks, cfg, host_s)
    waited: tuple = ()
    for i, c in enumerate(costs):
        extra = hooks.before(c, phase) if hooks else ()
        if i == sync:       # the CPU waits for what this kernel (or its hook) says
            waited = tuple(hooks.host_sync_waits(c, phase, tuple(extra)))
        if i in ends:                   # issued just before the segment's last kernel
            extra = (*extra, dispatch_delay(ol, f"{layer.name}.{phase}", layer.name,
                                            ends[i], phase, micro, waited))
        ids.append(ol.kernel(c, layer.name, phase, micro,
                             (tuple(deps) if i == 0 else ()) + tuple(extra)))
        if hooks:
            hooks.after(c, phase, ids[-1])
    if not ids:      # a layer without kernels still marks its place
        ids.append(ol.add(stream="compute", kind="compute", name=f"{layer.name}.{phase}",
                          layer=layer.name, phase=phase, op_class="elementwise",
                          deps=tuple(deps), attrs={"micro_step": micro}))
    return ids


def _host_segments(costs, phase: str, hooks: OpHooks | None, cfg, host_s: float
                   ) -> tuple[int | None, dict[int, float]]:
    """The CPU's dispatch of a layer's ``host_s`` seconds, cut at its host sync: (the
    kernel the CPU waits before launching, the first for which :meth:`OpHooks.host_syncs`
    holds, or None; {last kernel of each part: its CPU seconds}). Without a sync one part,
    the whole layer, ends at its last kernel, and so with the sync at the first kernel
    (a layer's piece, :mod:`simulator.strategies.parallel.a2a_overlap`), whose one part
    waits; without CPU time none."""
    if host_s <= 0:
        return None, {}
    sync = next((i for i, c in enumerate(costs) if hooks is not None
                 and hooks.host_syncs(c, phase)), None)
    if sync is None or sync == 0:   # (0: a piece of a layer that starts at the sync, whose
        return sync, {len(costs) - 1: host_s}    # whole dispatch waits: .a2a_overlap)
    parts = ((0, sync), (sync, len(costs)))
    return sync, {b - 1: sum(dispatch_s(cfg, phase, getattr(c, "launch", ""))
                             for c in costs[a:b]) for a, b in parts}


def spread(ol: OpList, ids: list[int], nbytes: int, how: str) -> None:
    """Allocate (``how='alloc'``, at each op's start) or free (``'free'``, at its end)
    ``nbytes`` over the ops ``ids`` in proportion to their FLOPs (equal shares when none
    has FLOPs): tensors appear as the kernels that produce them run and die as the kernels
    that consume them finish, not all at once. The rounding remainder goes to the first op
    when allocating and to the last when freeing, so the running total never dips below
    the exact one."""
    nbytes = int(nbytes)
    if nbytes <= 0:
        return
    weights = [max(0.0, ol.ops[i].flops) for i in ids]
    total = sum(weights)
    if total <= 0:
        weights, total = [1.0] * len(ids), float(len(ids))
    shares = [int(nbytes * w / total) for w in weights]
    rest = nbytes - sum(shares)
    shares[0 if how == "alloc" else -1] += rest
    act = ol.alloc if how == "alloc" else ol.free
    for i, b in zip(ids, shares):
        if b:
            act(i, b)


def _offload_copy(ol: OpList, layer, phase: str, micro: int, direction: str, deps=()) -> int:
    """A checkpointed block's saved input copied to (``d2h``) or from (``h2d``) host memory
    on the compute stream, as ``checkpoint_wrapper(offload_to_cpu=True)`` (fairscale) and
    ``torch.autograd.graph.save_on_cpu`` copy it."""
    return ol.add(stream="compute", kind="memcpy", name=f"{direction}.{layer.name}",
                  layer=layer.name, phase=phase, size_bytes=int(layer.output_bytes),
                  deps=tuple(deps), attrs={"direction": direction, "micro_step": micro,
                                           "activation_offload": True})


class Span(NamedTuple):
    """The ops a layer's forward emitted: its first and its last."""

    first: int
    last: int


class BackwardSpan(NamedTuple):
    """The ops a layer's backward emitted: its first (a host copy or the recompute, when
    there is one), its first backward kernel and its last."""

    first: int
    first_backward: int
    last: int


def emit_forward(ol: OpList, layer, cfg: CommonConfig, micro: int, deps=(),
                 hooks: OpHooks | None = None) -> Span:
    """Forward ops of a layer. Its saved activations appear op by op (:func:`spread`); a
    checkpointed layer keeps only its output after the last op, and with
    ``activation_offload`` not even that: it goes to host memory."""
    ids = _emit_costs(ol, layer, layer.forward, "forward", micro, deps, hooks, cfg)
    spread(ol, ids, layer.activation_bytes, "alloc")
    plan = recompute_plan(layer, cfg)
    if plan is not None:
        ol.free(ids[-1], max(0, layer.activation_bytes - plan.kept_bytes))
        if cfg.activation_offload and plan.full:
            ids.append(_offload_copy(ol, layer, "forward", micro, "d2h"))
            ol.free(ids[-1], min(layer.output_bytes, layer.activation_bytes))
    return Span(first=ids[0], last=ids[-1])


def emit_backward(ol: OpList, layer, cfg: CommonConfig, micro: int, deps=(),
                  grad_bytes: int = 0, hooks: OpHooks | None = None) -> BackwardSpan:
    """(Recompute +) backward ops of a layer. Recomputed activations appear op by op, the
    saved ones die op by op as backward consumes them, and ``grad_bytes`` of (unsharded)
    gradients appear op by op as autograd produces them (:func:`spread`). A whole
    recomputed block materialises all its activations again (its kept output too, a
    second copy); a partly recomputed one only what its forward freed."""
    held = layer.activation_bytes
    first = None
    plan = recompute_plan(layer, cfg)
    if plan is not None:
        if cfg.activation_offload and plan.full:
            first = _offload_copy(ol, layer, "backward", micro, "h2d", deps)
            ol.alloc(first, plan.kept_bytes)
            deps = ()
        costs = [layer.forward[i] for i in plan.ops]
        rids = _emit_costs(ol, layer, costs, "recompute", micro, deps, hooks, cfg)
        first = rids[0] if first is None else first
        if plan.full:
            spread(ol, rids, layer.activation_bytes, "alloc")
            held = plan.kept_bytes + layer.activation_bytes
        else:
            spread(ol, rids, layer.activation_bytes - plan.kept_bytes, "alloc")
        deps = ()
    ids = _emit_costs(ol, layer, layer.backward, "backward", micro, deps, hooks, cfg)
    spread(ol, ids, grad_bytes, "alloc")
    spread(ol, ids, held, "free")
    return BackwardSpan(first=ids[0] if first is None else first, first_backward=ids[0],
                        last=ids[-1])


def check_layers(layers) -> int:
    """Total parameter count; ConfigError for an empty model."""
    if not layers:
        raise ConfigError("the model has no layers", field="model")
    return sum(int(layer.params) for layer in layers)


def frozen_bytes(layers) -> int:
    """Bytes of the frozen weights of ``layers`` (a fine-tuning's base,
    :mod:`simulator.models.finetune`): held whole where weights are not sharded."""
    return sum(int(getattr(layer, "frozen_bytes", 0)) for layer in layers)


def build_meta(layers, cfg: CommonConfig, world: World, *, strategy: str, model: str,
               tokens_per_sample: float, model_flops_per_sample: float | None, **extra: Any) -> dict:
    """The ``Trace.meta`` keys of the contract (plus strategy details in ``extra``)."""
    global_batch = cfg.micro_batch * cfg.grad_accum * world.world_size
    if model_flops_per_sample is None:   # layers are one micro-batch: forward + backward
        per_micro = sum(c.flops for layer in layers for c in (*layer.forward, *layer.backward))
        model_flops_per_sample = per_micro / cfg.micro_batch
    return {"model": model, "strategy": strategy, "precision": cfg.precision,
            "global_batch": global_batch, "micro_batch": cfg.micro_batch,
            "grad_accum": cfg.grad_accum, "tokens_per_sample": _count(tokens_per_sample),
            "model_flops_per_iteration": float(model_flops_per_sample) * global_batch,
            "params": sum(int(layer.params) + int(getattr(layer, "frozen_params", 0))
                          for layer in layers),
            **_trainable(layers), **extra}


def _trainable(layers) -> dict:
    """``trainable_params`` where some weights are frozen (a fine-tuning), else nothing."""
    if not any(getattr(layer, "frozen_params", 0) for layer in layers):
        return {}
    return {"trainable_params": sum(int(layer.params) for layer in layers)}


def _count(x: float) -> int | float:
    """A whole number as an int (fixed-length samples); a mean over real lengths as a float."""
    return int(x) if float(x).is_integer() else float(x)

"""torchtitan: the ``[parallelism]`` and ``[activation_checkpoint]`` tables of its job TOML,
spelled as torchtitan spells them (``torchtitan/config/job_config.py``), in a scenario
(``strategy: {name: torchtitan, parallelism: {...}, activation_checkpoint: {...}}``) or
in the TOML itself (``clustersim run --config job.toml``), and their translation into one
:class:`~simulator.strategies.parallel.plan.ParallelPlan`. The tables are read as they
are and validated once, by :class:`TorchtitanConfig`, whichever way they came in.

=================================  ==========================================================
torchtitan                         plan
=================================  ==========================================================
data_parallel_replicate_degree     dp_replicate
data_parallel_shard_degree         dp_shard (-1: the GPUs left over)
tensor_parallel_degree             tp, with sequence parallelism (torchtitan always shards
                                   norms and dropout along the sequence under TP)
pipeline_parallel_degree           pp
pipeline_parallel_schedule         GPipe, 1F1B, Interleaved1F1B, ZBVZeroBubble -> schedule;
                                   multi-stage schedules hold 2 stages per rank unless
                                   pipeline_parallel_layers_per_stage says otherwise;
                                   Interleaved1F1B runs in lockstep, as torch's
                                   PipelineScheduleMulti does (plan.lockstep)
context_parallel_degree            cp; context_parallel_rotate_method allgather -> cp_mode
                                   allgather, alltoall -> ring (KV passed rank to rank)
expert_parallel_degree             ep
enable_async_tensor_parallel       tp_overlap and async_tp (PyTorch's async TP: forward and
                                   backward GEMMs fused with their SP collectives, each
                                   fused reduce-scatter ending with its reduction kernel);
                                   without it (DTensor's TP) tp_async_backward false: an
                                   input gradient's reduce-scatter waits for the
                                   weight-gradient GEMM, since autograd computes a
                                   Linear's two gradients in one node (``mm``'s entry in
                                   PyTorch's tools/autograd/derivatives.yaml) before the
                                   all-gather's backward runs, and what follows needs it
fsdp_reshard_after_forward         without PP: always or default -> dp_mode fsdp; never ->
                                   dp_mode fsdp with reshard_after_forward false (FSDP2's
                                   reshard_after_forward=False on every block: gathered
                                   once a micro-batch, kept from forward to backward,
                                   reduce-scattered after each backward). With PP:
                                   never or default (torchtitan's default there) ->
                                   dp_mode fsdp, which under a pipeline
                                   is FSDP2 as torch.distributed.pipelining runs it (one
                                   all-gather of a block per step, kept until its one
                                   reduce-scatter, with FSDP2's copy kernels); always is
                                   refused (an all-gather every micro-batch: not modelled)
disable_loss_parallel              accepted; the loss is not modelled apart from the head
=================================  ==========================================================

``dp_shard = 1`` is torchtitan's DDP (``replicate``; nothing at all with ``dp_replicate = 1``):
dp_mode ddp.
``[activation_checkpoint] mode`` (none | full | selective) and ``selective_ac_option``
(``op`` or every Nth block) become the common ``activation_checkpointing`` fields.

The job TOML (:func:`read_file`) gives, besides those two tables:

* ``[parallelism] pipeline_parallel_microbatch_size`` -> ``training.micro_batch`` when
  pipelining;
* ``[training]`` ``local_batch_size`` (older ``batch_size``), ``global_batch_size``,
  ``seq_len``, ``mixed_precision_param`` / ``mixed_precision_reduce``;
* ``[model]`` ``name`` + ``flavor`` -> a catalog model (``simulator/data/config_models.yaml``);
* ``[optimizer]`` ``name`` (AdamW/Adam -> adam, SGD -> sgd);
* torch.compile -> ``training.compile``: ``[compile] enable`` with ``components`` naming
  ``model`` (torchtitan since 2025; compiling only the loss is listed as not modelled), or
  the older ``[training] compile``;
* Float8 -> ``training.precision: fp8`` and ``training.fp8_recipe``: ``[model] converters``
  naming ``float8`` (or ``quantize.linear.float8``, its later spelling), or the 2024
  ``[float8] enable_float8_linear``, with ``recipe_name`` (``[float8]`` or
  ``[quantize.linear.float8]``) ``tensorwise`` (unset), ``rowwise`` or
  ``rowwise_with_gw_hp``. Another recipe or converter (MX, grouped-GEMM float8) is refused
  in one line: not modelled. ``enable_fsdp_float8_all_gather`` -> the strategy's field of that name:
  under the tensorwise recipe FSDP all-gathers the blocks' Linear weights in FP8, each rank
  casting its shard first (torchao's float8 all-gather; torchtitan leaves it out under
  ``recipe_name`` rowwise, and so is it listed there). The other float8 options
  (``precompute_float8_dynamic_scale_for_fsdp``, ``force_recompute_fp8_weight_in_bwd``,
  the filters) are listed as not modelled.

Everything else (job, metrics, checkpoint, lr, dataset...) is listed as ignored.
"""

from __future__ import annotations

import sys
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from simulator.errors import ConfigError
from simulator.inputs import check_finite, decode_text, read_bytes
from simulator.models.fp8 import TE_CAST_BYTES
from simulator.precision import is_half

from ..base import CommonConfig, World
from ..parallel.moe import ExpertLoad
from ..parallel.plan import ParallelPlan
from .names import catalog_model
from .pieces import ConfigPieces, Doc, check_depth, flat_keys, precision_of
from .translate import (ac_fields, build_framework, data_parallel_trace, has_ac_modes,
                        pure_data_parallel)

if sys.version_info >= (3, 11):
    import tomllib
else:                                    # pragma: no cover - Python 3.10
    import tomli as tomllib

SCHEDULES = {"GPipe": "gpipe", "1F1B": "1f1b", "Interleaved1F1B": "interleaved_1f1b",
             "ZBVZeroBubble": "zbv"}
MULTI_STAGE = ("Interleaved1F1B", "ZBVZeroBubble")
_STRICT = ConfigDict(extra="forbid", strict=True, frozen=True)


class Parallelism(BaseModel):
    """torchtitan's ``[parallelism]`` table (the keys modelled here)."""

    model_config = _STRICT
    data_parallel_replicate_degree: int = Field(1, ge=1)
    data_parallel_shard_degree: int = Field(-1, ge=-1)
    tensor_parallel_degree: int = Field(1, ge=1)
    pipeline_parallel_degree: int = Field(1, ge=1)
    pipeline_parallel_schedule: Literal[tuple(SCHEDULES)] = "1F1B"
    pipeline_parallel_layers_per_stage: int | None = Field(None, ge=1)
    pipeline_parallel_split_points: list[str] | None = None   # "layers.N": a stage begins
    context_parallel_degree: int = Field(1, ge=1)
    context_parallel_rotate_method: Literal["allgather", "alltoall"] = "allgather"
    expert_parallel_degree: int = Field(1, ge=1)
    enable_async_tensor_parallel: bool = False
    disable_loss_parallel: bool = False
    fsdp_reshard_after_forward: Literal["default", "always", "never"] = "default"


class ActivationCheckpoint(BaseModel):
    """torchtitan's ``[activation_checkpoint]`` table."""

    model_config = _STRICT
    mode: Literal["none", "full", "selective"] = "selective"     # torchtitan's defaults
    selective_ac_option: str = "2"      # "op", or every Nth block as a number string


class TorchtitanConfig(CommonConfig):
    """``strategy: {name: torchtitan, ...}``."""

    name: str = "torchtitan"
    parallelism: Parallelism = Field(default_factory=Parallelism)
    activation_checkpoint: ActivationCheckpoint | None = None
    # torchao's float8 all-gather under FSDP2 ([float8] / [quantize.linear.float8]
    # enable_fsdp_float8_all_gather): the tensorwise recipe's weights gathered in FP8
    enable_fsdp_float8_all_gather: bool = False
    # clustersim's routing-imbalance knob, as Megatron's (parallel/moe.py; torchtitan's job
    # TOML has no key for it, a scenario sets it): torchtitan's MoE routes without a
    # capacity (dropless), so it has no capacity factor
    moe_load: ExpertLoad = ExpertLoad()
    _layers: int = PrivateAttr(0)       # the model's blocks, once the build knows them

    def for_layers(self, layers: int) -> "TorchtitanConfig":
        """This config for a model of ``layers`` blocks: :meth:`plan` then resolves
        ``pipeline_parallel_layers_per_stage`` without being told."""
        out = self.model_copy()
        out._layers = layers
        return out

    @model_validator(mode="before")
    @classmethod
    def _checkpointing(cls, data: Any) -> Any:
        """``activation_checkpoint`` as the common checkpointing fields (a malformed table
        is left to its own field's validation)."""
        ac = data.get("activation_checkpoint") if isinstance(data, dict) else None
        if not isinstance(ac, dict):
            return data
        if "activation_checkpointing" in data:
            raise ConfigError("set activation_checkpoint (torchtitan's table) or "
                              "activation_checkpointing, not both",
                              field="strategy.activation_checkpointing")
        mode, option = ac.get("mode", "selective"), ac.get("selective_ac_option", "2")
        if mode not in ("none", "full", "selective") or not isinstance(option, str):
            return data
        option = int(option) if option.isdigit() else option
        return {**data, **ac_fields(mode, option if mode == "selective" else None,
                                    "strategy.activation_checkpoint.mode")}

    def _check(self) -> None:
        if self.name != "torchtitan":
            raise ConfigError(f"expected 'torchtitan', got {self.name!r}", field="strategy.name")

    def plan(self, world: World | int, layers: int = 0) -> ParallelPlan:
        """The plan on ``world`` ranks (``data_parallel_shard_degree: -1`` takes the rest)
        of a model of ``layers`` blocks (for ``pipeline_parallel_layers_per_stage``)."""
        n = world.world_size if isinstance(world, World) else int(world)
        layers = layers or self._layers
        p = self.parallelism
        shard = p.data_parallel_shard_degree
        fixed = (p.data_parallel_replicate_degree * p.tensor_parallel_degree
                 * p.pipeline_parallel_degree * p.context_parallel_degree)
        if shard == -1:
            if n % fixed:
                raise ConfigError(f"{n} GPUs are not a multiple of replicate x tp x pp x cp "
                                  f"= {fixed}", field="strategy.parallelism")
            shard = n // fixed
        elif shard == 0:
            raise ConfigError("must be -1 (the rest) or >= 1",
                              field="strategy.parallelism.data_parallel_shard_degree")
        pp, vp = p.pipeline_parallel_degree, self._virtual_stages(layers)
        self._check_mixed_precision(shard)
        dp_mode = self._dp_mode(shard)
        return ParallelPlan(
            pp=pp, dp_replicate=p.data_parallel_replicate_degree, dp_shard=shard,
            cp=p.context_parallel_degree, tp=p.tensor_parallel_degree,
            ep=p.expert_parallel_degree, vp=vp, stage_blocks=self._stage_blocks(layers, pp * vp),
            sequence_parallel=p.tensor_parallel_degree > 1,
            schedule=SCHEDULES[p.pipeline_parallel_schedule], dp_mode=dp_mode,
            reshard_after_forward=not (dp_mode == "fsdp" and pp == 1
                                       and p.fsdp_reshard_after_forward == "never"),
            lockstep=p.pipeline_parallel_schedule == "Interleaved1F1B",
            tp_overlap=p.enable_async_tensor_parallel, async_tp=p.enable_async_tensor_parallel,
            tp_async_backward=False,
            cp_mode="allgather" if p.context_parallel_rotate_method == "allgather" else "ring")

    def _check_mixed_precision(self, shard: int) -> None:
        """torchtitan's mixed precision is FSDP's (over dp_shard x cp: ``fsdp_enabled``),
        with AMP for DDP or one GPU only (``maybe_enable_amp``): TP or PP without either
        trains in fp32, refused here below it."""
        p = self.parallelism
        sharded = shard > 1 or p.context_parallel_degree > 1
        if sharded or (p.tensor_parallel_degree == 1 and p.pipeline_parallel_degree == 1):
            return
        if self.precision not in ("fp32", "tf32"):
            raise ConfigError(f"torchtitan runs tensor or pipeline parallelism without FSDP "
                              f"(data_parallel_shard_degree 1, no CP) in fp32: its mixed "
                              f"precision is FSDP's, and AMP only for DDP or one GPU "
                              f"(maybe_enable_amp); shard with FSDP or set "
                              f"training.precision fp32, not {self.precision}",
                              field="strategy.parallelism.data_parallel_shard_degree")

    def check_fp8(self, recipe: str | None) -> None:
        """torchtitan runs torchao's Float8Linear recipes, not Transformer Engine's
        (:data:`~simulator.choices.TORCHAO_ONLY_STRATEGIES`); ``enable_fsdp_float8_all_gather``
        needs the tensorwise one (without it the setting would change nothing)."""
        if recipe in TE_CAST_BYTES:
            raise ConfigError(f"{recipe} is Transformer Engine's FP8 recipe; torchtitan runs "
                              f"torchao's Float8Linear: tensorwise (its default, and this "
                              f"strategy's where fp8_recipe is unset), rowwise or "
                              f"rowwise_with_gw_hp", field="training.fp8_recipe")
        if self.enable_fsdp_float8_all_gather and recipe != "tensorwise":
            why = ("training.precision is not fp8" if recipe is None else
                   f"torchtitan builds the {recipe} recipe without it")
            raise ConfigError(f"needs training.precision fp8 with fp8_recipe tensorwise "
                              f"(torchao's float8 all-gather): {why}",
                              field="strategy.enable_fsdp_float8_all_gather")

    def fp8_weight_gathers(self, recipe: str | None, plan=None) -> bool:
        """``enable_fsdp_float8_all_gather`` under the tensorwise recipe: torchtitan builds
        ``Float8LinearConfig(enable_fsdp_float8_all_gather=...)`` only without a
        ``recipe_name`` and only where FSDP shards (``dp_shard_enabled``: ``plan``'s
        ``dp_mode`` fsdp over ``dp_shard`` > 1 ranks); the rowwise recipe's config has no FP8
        all-gather. Each rank then casts its weight shard to FP8
        before the all-gather (``WeightWithDynamicFloat8CastTensor.fsdp_pre_all_gather``),
        so the gather moves one byte a weight and no forward GEMM casts its weight."""
        return (self.enable_fsdp_float8_all_gather and recipe == "tensorwise" and plan is not None
                and plan.dp_mode == "fsdp" and plan.dp_shard > 1)

    def fp8_tp_gathers(self, recipe: str | None) -> bool:
        """Float8 tensorwise under TP all-gathers FP8: torchtitan's ``apply_tp`` takes
        torchao's float8 TP styles whenever the float8 recipe is tensorwise
        (``enable_float8_tensorwise_tp``), and ``Float8ColwiseParallel`` casts a column-parallel
        GEMM's input to FP8 before it redistributes it (``torchao/float8/
        float8_tensor_parallel.py``), ``Float8RowwiseParallel`` the output gradient likewise in
        backward. The rowwise recipe keeps the plain (bf16) TP styles."""
        return recipe == "tensorwise"

    def plan_fields(self) -> dict[str, str]:
        """Plan attribute -> the field a user wrote it as (for ParallelPlan.check)."""
        base = "strategy.parallelism."
        return {"tp": base + "tensor_parallel_degree", "pp": base + "pipeline_parallel_degree",
                "vp": base + "pipeline_parallel_layers_per_stage",
                "cp": base + "context_parallel_degree", "ep": base + "expert_parallel_degree",
                "sequence_parallel": base + "tensor_parallel_degree",
                "size": base + "data_parallel_shard_degree",
                "schedule": base + "pipeline_parallel_schedule",
                "micro_batches": "training.grad_accum"}

    def _stage_blocks(self, layers: int, stages: int) -> tuple[int, ...]:
        """The blocks of each model stage where torchtitan's split is not the even one:
        ``pipeline_parallel_split_points`` as given, else (blocks that do not split evenly)
        torchtitan's weighted split (:func:`weighted_split`); empty where it is even."""
        p = self.parallelism
        if stages == 1 or not layers:
            return ()
        if p.pipeline_parallel_split_points is not None:
            return split_point_blocks(p.pipeline_parallel_split_points, stages, layers)
        if p.pipeline_parallel_layers_per_stage is None and layers % stages:
            return weighted_split(stages, layers)
        return ()

    def _virtual_stages(self, layers: int) -> int:
        p = self.parallelism
        if p.pipeline_parallel_schedule not in MULTI_STAGE:
            return 1
        if p.pipeline_parallel_layers_per_stage is None or not layers:
            return 2
        stages, rest = divmod(layers, p.pipeline_parallel_layers_per_stage)
        if rest or stages % p.pipeline_parallel_degree:
            raise ConfigError(f"{layers} layers do not make whole stages of "
                              f"{p.pipeline_parallel_layers_per_stage} over "
                              f"{p.pipeline_parallel_degree} pipeline ranks",
                              field="strategy.parallelism.pipeline_parallel_layers_per_stage")
        return stages // p.pipeline_parallel_degree

    def _dp_mode(self, shard: int) -> str:
        p = self.parallelism
        # torchtitan shards with FSDP over dp_shard x cp whenever either is above 1
        # (parallelize_llama: ``dp_shard_enabled or cp_enabled``, the mesh "dp_shard_cp")
        if shard == 1 and p.context_parallel_degree == 1:
            return "ddp"         # nothing sharded: DDP (replicate), or no data parallelism
        reshard = p.fsdp_reshard_after_forward
        if p.pipeline_parallel_degree == 1:
            return "fsdp"        # never: reshard_after_forward false (plan)
        # under PP torchtitan's default is never (parallelize_llama: no per-microbatch
        # all-gathers); torch.distributed.pipelining then runs FSDP2 without resharding or
        # reducing between micro-batches (stage.py, backward_maybe_with_nosync:
        # set_reshard_after_backward(False), set_requires_gradient_sync(False), the
        # post-backward by hand after the last one): one all-gather of a block per step,
        # kept until its one reduce-scatter, which is dp_mode fsdp under a pipeline, FSDP2's
        # copy kernels included (simulator/strategies/parallel/dp.py)
        if reshard == "always":
            raise ConfigError("'always' with pipeline parallelism (FSDP2 all-gathering a "
                              "block again every micro-batch) is not modelled; 'never' or "
                              "'default' is", field="strategy.parallelism."
                              "fsdp_reshard_after_forward")
        return "fsdp"


SPLIT_FIELD = "strategy.parallelism.pipeline_parallel_split_points"


def weighted_split(stages: int, layers: int, input_weight: int = 1,
                   output_weight: int = 1) -> tuple[int, ...]:
    """Blocks per model stage as torchtitan's ``generate_llm_fqn_per_model_part`` lays them
    out: the embedding and the norm + output count as ``input_weight`` and
    ``output_weight`` layers, the ``layers + weights`` spread evenly with the remainder to
    the first stages, the weights then taken off the first and last stage (126 blocks on
    8 stages: 15, 16 x 6, 15).

    :raises ConfigError: where torchtitan refuses the split (a stage left without a layer,
        or a weight above the layers per stage).
    """
    effective = layers + input_weight + output_weight
    per, extra = divmod(effective, stages)
    if per == 0 or input_weight > per or output_weight > per:
        raise ConfigError(f"{layers} layers (+ embedding and output as {input_weight} and "
                          f"{output_weight}) do not fill {stages} pipeline stages",
                          field="strategy.parallelism.pipeline_parallel_degree")
    out = [per + (1 if s < extra else 0) for s in range(stages)]
    out[0] -= input_weight
    out[-1] -= output_weight
    return tuple(out)


def split_point_blocks(points: list[str], stages: int, layers: int) -> tuple[int, ...]:
    """Blocks per model stage from torchtitan's ``pipeline_parallel_split_points``: each
    ``layers.N`` begins a stage at block N.

    :raises ConfigError: for a point that is not ``layers.N``, points out of order or out
        of the model, or not one fewer than the stages.
    """
    starts = []
    for point in points:
        prefix, _, index = str(point).partition(".")
        if prefix != "layers" or not index.isdigit():
            raise ConfigError(f"{point!r} is not a block name like 'layers.16'",
                              field=SPLIT_FIELD)
        starts.append(int(index))
    if len(starts) != stages - 1:
        raise ConfigError(f"{len(starts)} split points make {len(starts) + 1} stages; the "
                          f"pipeline has {stages}", field=SPLIT_FIELD)
    bounds = [0, *starts, layers]
    if any(b <= a for a, b in zip(bounds, bounds[1:])):
        raise ConfigError(f"split points {points} are not increasing blocks inside the "
                          f"model's {layers}", field=SPLIT_FIELD)
    return tuple(b - a for a, b in zip(bounds, bounds[1:]))


def torchtitan(layers, cfg: TorchtitanConfig, world: World, **kw) -> Any:
    """The trace of one iteration (:func:`.translate.build_framework`). Where FSDP does
    not shard (DDP, no model parallelism) torchtitan keeps fp32 parameters and runs the
    step under ``torch.autocast`` (``maybe_enable_amp``: "FSDP handles mixed precision
    internally", else AMP for DDP or one device), as PyTorch DDP does here."""
    spec = kw.get("spec")
    plan = cfg.plan(world.world_size, spec.layers if spec is not None else 0)
    if plan.dp_mode == "ddp" and pure_data_parallel(plan):
        kw["autocast"] = kw.get("autocast") or is_half(cfg.precision)
    return build_framework(layers, cfg, world, data_parallel_trace, **kw)


# ------------------------------------------------------------------ the job TOML
# the tables' keys a TOML gives the strategy: the config's own fields
PARALLELISM_KEYS = tuple(Parallelism.model_fields)
AC_KEYS = tuple(ActivationCheckpoint.model_fields)
OPTIMIZERS = {"adamw": "adam", "adam": "adam", "sgd": "sgd"}
GLOBAL_BATCH_KEY = "training.global_batch_size"


def file_key(field: str) -> str:
    """A strategy field as the TOML spells it (the same dotted key)."""
    return field


def load_toml(path) -> dict:
    """The checked document of a TOML file (bounded size and depth, UTF-8, finite)."""
    source = str(path)
    text = decode_text(read_bytes(path, "torchtitan config", "config_bytes"), source,
                       "torchtitan config")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"not valid TOML: {exc}", source=source) from None
    except RecursionError:
        raise ConfigError("not valid TOML: nested too deeply", source=source) from None
    return check_finite(check_depth(data, source), source)


def read_file(path) -> ConfigPieces:
    """The scenario pieces of a torchtitan job TOML."""
    data = load_toml(path)
    doc = Doc(str(path))
    out = ConfigPieces("torchtitan", str(path), strategy={"name": "torchtitan"})
    seen: set[str] = set()
    for section, reader in (("parallelism", _parallelism), ("activation_checkpoint", _ac),
                            ("training", _training), ("model", _model),
                            ("optimizer", _optimizer)):
        if section in data:
            seen |= reader(doc.table(data[section], section), doc, out)
    seen |= _compile(data, doc, out) | _float8(data, doc, out)
    if "activation_checkpoint" not in data:
        _default_ac(out)
    for key in flat_keys(data):
        if key not in seen:
            out.ignore(key)
    return out


def _default_ac(out: ConfigPieces) -> None:
    """No ``[activation_checkpoint]``: torchtitan's default, selective every 2nd block,
    where this build has selective checkpointing."""
    if has_ac_modes():
        out.strategy["activation_checkpoint"] = {}
        out.notes.append("no [activation_checkpoint]: torchtitan's default, selective "
                         "every 2nd block")
    else:
        out.notes.append("no [activation_checkpoint]: torchtitan's default (selective) is "
                         "not in this build; the scenario's checkpointing is kept")


def _parallelism(table: dict, doc: Doc, out: ConfigPieces) -> set[str]:
    par: dict[str, Any] = {}
    for key in PARALLELISM_KEYS:
        if key in table:
            par[key] = table[key]
            out.use(f"parallelism.{key}")
    pp = table.get("pipeline_parallel_degree", 1)     # checked by Parallelism
    if "pipeline_parallel_microbatch_size" in table:
        key = "parallelism.pipeline_parallel_microbatch_size"
        if isinstance(pp, int) and pp > 1:
            out.training["micro_batch"] = doc.integer(
                table["pipeline_parallel_microbatch_size"], key)
            out.use(key)
        else:
            out.ignore(key, "no pipeline")
    out.strategy["parallelism"] = par
    return {f"parallelism.{k}" for k in par} | {"parallelism.pipeline_parallel_microbatch_size"}


def _ac(table: dict, doc: Doc, out: ConfigPieces) -> set[str]:
    ac = {k: table[k] for k in AC_KEYS if k in table}
    for key in ac:
        out.use(f"activation_checkpoint.{key}")
    out.strategy["activation_checkpoint"] = ac
    return {f"activation_checkpoint.{k}" for k in ac}


def _training(table: dict, doc: Doc, out: ConfigPieces) -> set[str]:
    used: set[str] = set()
    local = next((k for k in ("local_batch_size", "batch_size") if k in table), None)
    if local is not None:
        local_batch = doc.integer(table[local], f"training.{local}")
        used.add(f"training.{local}")
        mb = out.training.get("micro_batch")
        if mb is None:                       # no pipeline: the local batch is one micro-batch
            out.training["micro_batch"] = local_batch
        elif local_batch % mb:
            raise doc.fail(f"training.{local}", f"{local_batch} is not a multiple of "
                           f"parallelism.pipeline_parallel_microbatch_size {mb}")
        out.local_batch = local_batch
    if "global_batch_size" in table:
        gbs = table["global_batch_size"]
        if not (isinstance(gbs, int) and gbs == -1):         # -1: local batch x dp
            out.global_batch = doc.integer(gbs, "training.global_batch_size")
        used.add("training.global_batch_size")
    if "seq_len" in table:
        out.training["seq_len"] = doc.integer(table["seq_len"], "training.seq_len")
        used.add("training.seq_len")
    if "mixed_precision_param" in table:
        out.training["precision"] = precision_of(table["mixed_precision_param"], doc,
                                                 "training.mixed_precision_param")
        used.add("training.mixed_precision_param")
    if "mixed_precision_reduce" in table:
        out.strategy["reduce_dtype"] = precision_of(table["mixed_precision_reduce"], doc,
                                                    "training.mixed_precision_reduce")
        used.add("training.mixed_precision_reduce")
    for key in sorted(used):
        out.use(key)
    return used


def _model(table: dict, doc: Doc, out: ConfigPieces) -> set[str]:
    if "name" not in table:
        return set()
    name = doc.text(table["name"], "model.name")
    flavor = doc.text(table.get("flavor", ""), "model.flavor")
    found = catalog_model("torchtitan", f"{name}/{flavor}")
    out.model, out.model_note = found.model, found.note
    keys = {"model.name"} | ({"model.flavor"} if "flavor" in table else set())
    for key in sorted(keys):
        (out.use if out.model else out.ignore)(key)
    return keys


def _nested(data: dict, dotted: str):
    """The value at the dotted key ``dotted`` of ``data`` (None where a level is missing)."""
    for part in dotted.split("."):
        if not isinstance(data, dict) or part not in data:
            return None
        data = data[part]
    return data


def _names(doc: Doc, value, key: str) -> list[str]:
    """``value`` checked as a TOML list of names (``model.converters``, ``components``)."""
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise doc.fail(key, f"must be a list of names, got {value!r}")
    return value


def _compile(data: dict, doc: Doc, out: ConfigPieces) -> set[str]:
    """``[compile] enable`` / ``components``, or the older ``[training] compile``."""
    table = doc.table(data["compile"], "compile") if "compile" in data else {}
    if "enable" in table:
        on = doc.boolean(table["enable"], "compile.enable")
        out.use("compile.enable")
        # unset components: torchtitan's default, the model and the loss
        parts = _names(doc, table.get("components", ["model", "loss"]), "compile.components")
        if "components" in table:
            if on and "model" not in parts:
                out.ignore("compile.components", "compiling the loss alone is not modelled")
            else:
                out.use("compile.components")
        out.training["compile"] = on and "model" in parts
        return {"compile.enable", "compile.components"}
    legacy = _nested(data, "training.compile")
    if legacy is not None:
        out.training["compile"] = doc.boolean(legacy, "training.compile")
        out.use("training.compile")
        return {"training.compile"}
    return set()


FLOAT8_CONVERTERS = ("float8", "quantize.linear.float8")
FLOAT8_TABLES = ("float8", "quantize.linear.float8")     # where recipe_name is, by version
# torchtitan's float8 recipe_name values modelled: each is training.fp8_recipe's of that name
FLOAT8_RECIPES = ("tensorwise", "rowwise", "rowwise_with_gw_hp")
FSDP_FLOAT8 = "enable_fsdp_float8_all_gather"     # the tensorwise recipe's FSDP FP8 gathers


def _float8(data: dict, doc: Doc, out: ConfigPieces) -> set[str]:
    """torchao's Float8Linear as torchtitan converts the model to it (module doc)."""
    converters = _nested(data, "model.converters")
    if converters is not None:
        _names(doc, converters, "model.converters")
    other = [c for c in converters or [] if c not in FLOAT8_CONVERTERS]
    if other:
        raise doc.fail("model.converters", f"{other[0]!r} is not modelled (clustersim runs "
                       f"torchao's float8 Linear: {' or '.join(FLOAT8_CONVERTERS)})")
    tables = {name: doc.table(found, name) for name in FLOAT8_TABLES
              if (found := _nested(data, name)) is not None}
    legacy = tables.get("float8", {}).get("enable_float8_linear")
    on = bool(converters) or (legacy is not None and doc.boolean(
        legacy, "float8.enable_float8_linear"))
    seen = set()
    if converters is not None:
        seen.add("model.converters")
        out.use("model.converters")
    # recipe_name, absent: Float8LinearConfig's default; gather: (key, value) of the FP8
    # all-gather
    named, gather = None, None
    for name, table in tables.items():
        for key in table:
            full = f"{name}.{key}"
            seen.add(full)
            if key == "recipe_name" and on:
                named = doc.text(table[key], full)
                if named not in FLOAT8_RECIPES:
                    raise doc.fail(full, f"{named!r} is not modelled (recipes: "
                                   f"{', '.join(FLOAT8_RECIPES)})")
                out.use(full)
            elif key == "enable_float8_linear":
                out.use(full)
            elif key == FSDP_FLOAT8 and on:
                gather = (full, doc.boolean(table[key], full))
            else:
                out.ignore(full, "not modelled" if on else "float8 is off")
    recipe = named or "tensorwise"
    if on:
        out.training.update(precision="fp8", fp8_recipe=recipe)
        if named is None:
            out.notes.append("float8 recipe_name not given: tensorwise (torchao's default)")
    if gather is not None:
        if recipe == "tensorwise":
            out.strategy[FSDP_FLOAT8] = gather[1]
            out.use(gather[0])
        else:        # torchtitan builds the rowwise recipe's config without it
            out.ignore(gather[0], f"torchtitan ignores it under recipe_name {recipe}")
    return seen


def _optimizer(table: dict, doc: Doc, out: ConfigPieces) -> set[str]:
    if "name" not in table:
        return set()
    name = doc.text(table["name"], "optimizer.name")
    if name.lower() not in OPTIMIZERS:
        out.ignore("optimizer.name", f"{name} is not modelled; Adam's memory is used")
        return {"optimizer.name"}
    out.strategy["optimizer"] = OPTIMIZERS[name.lower()]
    out.use("optimizer.name")
    return {"optimizer.name"}

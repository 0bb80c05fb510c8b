"""Megatron-LM: its arguments, spelled as Megatron spells them, in a scenario
(``strategy: {name: megatron, ...}``) or an argument file (``clustersim run --config
gpt3.args``), and their translation into one
:class:`~simulator.strategies.parallel.plan.ParallelPlan`. This module is the one place
that knows Megatron's spelling: the config's fields are Megatron's argument names
(``--tensor-model-parallel-size`` is ``tensor_model_parallel_size``), validated once, by
:class:`MegatronConfig`, whichever way they came in.

Megatron-LM (``megatron/training/arguments.py``, ``megatron/core/parallel_state.py``):
the data-parallel size is what is left, ``world / (tp x pp x cp)``; ranks are ordered
``tp-cp-ep-dp-pp`` (TP innermost), the plan's default order; the routed experts have
their own mesh over the same ranks, ``expert_tensor_parallel_size`` (default: the tensor
size) x ``expert_model_parallel_size`` x the expert-data-parallel rest, ordered
``tp-ep-dp-pp`` (:mod:`~simulator.strategies.parallel.plan`). The interleaved 1F1B
schedule runs when ``virtual_pipeline_model_parallel_size`` is set, 1F1B otherwise;
``use_distributed_optimizer`` is ZeRO-1 (``zero1``), ``use_torch_fsdp2`` FSDP2,
``use_megatron_fsdp`` Megatron-FSDP (ZeRO-3 on contiguous buffers: FSDP2's traffic without
its copy kernels; Megatron-LM turns the distributed optimizer on with it), else
Megatron's DDP. Megatron accumulates and reduces gradients in fp32 with bf16 weights
(``accumulate_allreduce_grads_in_fp32``; ``grad_reduce_in_bf16`` for 16-bit) and
defaults to ``overlap_grad_reduce: false``. ``recompute_granularity: full`` checkpoints
every block (``recompute_method: block`` with ``recompute_num_layers: N``: the first N
blocks of each chunk); ``selective`` recomputes the attention core only (the common
``activation_checkpointing: selective`` with ``selective_ac_option: attention``,
:mod:`simulator.strategies.checkpointing`): without flash attention it frees the ``a s^2``
scores; with flash attention it frees little and costs the core's forward again.
``recompute_modules`` (Megatron-Core's list, default ``["core_attn"]``; ``--recompute-modules
core_attn moe_act`` in an argument file) names what ``selective`` recomputes: ``core_attn``,
``layernorm``, ``mlp``, ``moe_act``, ``shared_experts``, ``mla_up_proj``
(:mod:`simulator.strategies.checkpointing` says what each drops and reruns); ``moe``
(the whole MoE layer) is refused, as are unknown names, ``mla_up_proj`` without multi-head
latent attention and ``moe_act`` without MoE layers (Megatron-Core's ``__post_init__``
refuses both).
``cuda_graph_impl: local | transformer_engine`` (or ``enable_cuda_graph: true``) replays
each transformer layer's kernels from a CUDA graph: they pay no per-kernel launch gap
(:mod:`simulator.compute.launch`, ``graph``); the embedding, head and optimizer launch
as before. ``use_precision_aware_optimizer`` with ``main_grads_dtype``,
``main_params_dtype``, ``exp_avg_dtype``, ``exp_avg_sq_dtype`` (and
``store_param_remainders``, default true) is Megatron-Core's precision-aware optimizer: the
distributed optimizer's shard holds master weights and moments in those dtypes and the
step runs Transformer Engine's FusedAdam (:mod:`simulator.strategies.optim_precision`);
left out, the state is fp32 as before. ``moe_token_dispatcher_type: flex`` (with
``moe_flex_dispatcher_backend`` ``deepep`` or ``hybridep``, or the deprecated
``moe_enable_deepep``) runs Megatron-Core's flex token dispatcher, hierarchical over the
NVLink domains (:func:`simulator.strategies.parallel.moe.flex_sizes`); ``alltoall`` (the
default here) the all-to-all dispatcher; ``allgather`` is refused.

The argument file holds the arguments as ``pretrain_gpt.py`` takes them: on one line or
many, with ``\\`` continuations, ``#`` comments and shell quoting; anything before the first
``--`` (``torchrun ... pretrain_gpt.py``) is skipped. Read:

* the arguments of :data:`ARGUMENT_FIELDS` -> the strategy's fields of those names,
  parsed by the field's type and validated with the rest of the strategy
  (``--tensor-model-parallel-size 8`` -> ``tensor_model_parallel_size: 8``);
  ``--num-layers-per-virtual-pipeline-stage N`` -> ``virtual_pipeline_model_parallel_size``
  (the layers over ``pp x N``), ``--num-virtual-stages-per-pipeline-rank N`` -> the same
  field, ``N`` itself; ``--pipeline-model-parallel-layout`` (a custom split, e.g.
  ``"Et*3|(tt|)*29,t|L"``, :mod:`.megatron_layout`) gives its own virtual stages, so at
  most one of the three is given, as Megatron-LM's ``arguments.py`` requires;
  ``--recompute-activations`` -> ``recompute_granularity: selective``;
  ``--cross-entropy-loss-fusion`` and ``--cross-entropy-fusion-impl`` -> the loss fields,
  and, where the file leaves them out, Megatron-LM's defaults (:data:`FILE_DEFAULTS`: the
  unfused loss, ``native``), not the strategy's (Megatron-Bridge's fused ``te``);
* ``--seq-length``, ``--micro-batch-size``, ``--global-batch-size``, ``--bf16``/``--fp16``,
  ``--use-flash-attn`` -> training fields and the global batch;
* ``--num-layers``, ``--hidden-size``, ``--num-attention-heads``, ``--ffn-hidden-size``,
  ``--num-query-groups`` -> the catalog model of those sizes, if there is one.

Every other flag (data, optimizer, logging, checkpointing...) is listed as ignored.

In a scenario, Megatron-Core's ``fp8_dot_product_attention`` (a TransformerConfig field, no
argument of ``pretrain_gpt.py``) is ``training.fp8_attention``
(:data:`simulator.choices.MEGATRON_TRAINING_SPELLINGS`, read by the scenario before any
strategy module loads).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from pydantic import Field, model_validator

from simulator.errors import ConfigError
from simulator.inputs import decode_text, read_bytes
from simulator.models.fp8 import PER_TENSOR, TE_CAST_BYTES
from simulator.models.mamba import check_graph_scope
from simulator.models.nvfp4 import NVFP4
from simulator.models.ops import MainGrad

from ..base import CommonConfig
from ..checkpointing import MEGATRON_MODULES, MODULES_NOT_MODELLED
from ..optim_precision import OptimDtype, OptimizerDtypes, check as check_optimizer_dtypes
from ..parallel.moe import ExpertLoad
from ..parallel.plan import ParallelPlan
from .megatron_layout import check_layout_mtp, layout_blocks

if TYPE_CHECKING:      # the argument file's modules load when a file is read (start-up)
    from .pieces import ConfigPieces, Doc

# short spellings people write, and what Megatron calls them
SHORT = {"tp": "tensor_model_parallel_size", "pp": "pipeline_model_parallel_size",
         "vp": "virtual_pipeline_model_parallel_size", "cp": "context_parallel_size",
         "ep": "expert_model_parallel_size", "etp": "expert_tensor_parallel_size",
         "sp": "sequence_parallel",
         "dp": "(none: the data-parallel size is what is left of the GPUs)",
         "schedule": "virtual_pipeline_model_parallel_size (interleaved) or nothing (1F1B)"}
FIELDS = {"tp": "tensor_model_parallel_size", "pp": "pipeline_model_parallel_size",
          "vp": "virtual_pipeline_model_parallel_size", "cp": "context_parallel_size",
          "ep": "expert_model_parallel_size", "etp": "expert_tensor_parallel_size",
          "sequence_parallel": "sequence_parallel",
          "first_stage_layers": "decoder_first_pipeline_num_layers",
          "last_stage_layers": "decoder_last_pipeline_num_layers",
          "embedding_in_split": "account_for_embedding_in_pipeline_split",
          "loss_in_split": "account_for_loss_in_pipeline_split",
          "stage_blocks": "pipeline_model_parallel_layout"}
# the pipeline-split arguments Megatron-Core refuses beside a custom layout
# torch.nn.parallel.DistributedDataParallel's bucket_cap_mb default (25 MiB of gradients)
TORCH_DDP_BUCKET_BYTES = 25 << 20
LAYOUT_EXCLUDES = ("decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers",
                   "account_for_embedding_in_pipeline_split",
                   "account_for_loss_in_pipeline_split")
CP_COMM = {"p2p": "ring", "all_gather": "allgather", "a2a": "a2a"}


class MegatronConfig(CommonConfig):
    """``strategy: {name: megatron, tensor_model_parallel_size: 8, ...}``."""

    name: str = "megatron"
    tensor_model_parallel_size: int = Field(1, ge=1)
    pipeline_model_parallel_size: int = Field(1, ge=1)
    virtual_pipeline_model_parallel_size: int | None = Field(None, ge=2)
    context_parallel_size: int = Field(1, ge=1)
    expert_model_parallel_size: int = Field(1, ge=1)
    expert_tensor_parallel_size: int | None = Field(None, ge=1)   # None: tensor's (Megatron)
    sequence_parallel: bool = False
    use_distributed_optimizer: bool = False
    use_torch_fsdp2: bool = False
    # Megatron-FSDP (--use-megatron-fsdp, data_parallel_sharding_strategy optim_grads_params,
    # Megatron-Bridge's FSDP rows): parameters, gradients and optimizer state sharded over the
    # data-parallel ranks, gathered and reduce-scattered layer by layer in contiguous buffers
    use_megatron_fsdp: bool = False
    overlap_grad_reduce: bool = False
    overlap_param_gather: bool = False
    bucket_size: int | None = Field(None, ge=1)        # parameters per gradient bucket
    grad_reduce_in_bf16: bool = False
    tp_comm_overlap: bool = False
    # Megatron-Core's EP all-to-all overlap (Megatron-Bridge's moe_a2a_overlap): the
    # combined 1F1B schedule, simulator/strategies/parallel/a2a_overlap.py
    overlap_moe_expert_parallel_comm: bool = False
    # Megatron-LM before Megatron-Core (--DDP-impl, as SC21's examples/sc21/run_table_1.sh
    # sets it): local, Megatron's own DDP (the gradients reduced after the last
    # micro-batch's backward unless overlap_grad_reduce), or torch, PyTorch's
    # DistributedDataParallel: 25 MiB buckets all-reduced during that backward, in the
    # parameters' 16-bit dtype (Megatron accumulates in fp32 only with its own DDP)
    DDP_impl: Literal["local", "torch"] = "local"
    # the input-gradient all-reduce overlapped with the weight-gradient GEMM (Megatron-LM
    # since 2022; --no-async-tensor-model-parallel-allreduce, or the code of 2021 as SC21
    # ran it: false). Sequence parallelism overlaps its reduce-scatter there either way.
    async_tensor_model_parallel_allreduce: bool = True
    # a2a+p2p (hierarchical CP) is read so that plan() refuses it by name
    cp_comm_type: Literal["p2p", "all_gather", "a2a", "a2a+p2p"] = "p2p"
    recompute_granularity: Literal["full", "selective"] | None = None
    recompute_method: Literal["uniform", "block"] | None = None
    recompute_num_layers: int | None = Field(None, ge=1)
    # Megatron-Core's TransformerConfig.recompute_modules (None: its default ["core_attn"])
    recompute_modules: list[str] | None = None
    decoder_first_pipeline_num_layers: int | None = Field(None, ge=1)
    decoder_last_pipeline_num_layers: int | None = Field(None, ge=1)
    pipeline_model_parallel_layout: str | None = None     # "Et*3|(tt|)*29,m|L"
    moe_expert_capacity_factor: float | None = Field(None, gt=0)   # overrides the model's
    moe_load: ExpertLoad = ExpertLoad()     # clustersim's routing-imbalance knob (parallel/moe.py)
    # TransformerConfig.moe_token_dispatcher_type: alltoall (MoEAlltoAllTokenDispatcher) or
    # flex (MoEFlexTokenDispatcher over DeepEP or HybridEP, its moe_flex_dispatcher_backend:
    # priced alike, simulator/strategies/parallel/moe.py flex_sizes); allgather is refused
    # (not modelled). Megatron-Core's default is allgather; here alltoall, as before the
    # field. moe_enable_deepep (deprecated in Megatron-Core) is flex with deepep and, as
    # there, needs flex; the backend without flex is ignored, as Megatron-Core does.
    moe_token_dispatcher_type: Literal["alltoall", "allgather", "flex"] = "alltoall"
    moe_flex_dispatcher_backend: Literal["deepep", "hybridep"] = "deepep"
    moe_enable_deepep: bool = False
    account_for_embedding_in_pipeline_split: bool = False
    account_for_loss_in_pipeline_split: bool = False
    # CUDA graphs of the transformer layers (--enable-cuda-graph, the older spelling of
    # --cuda-graph-impl local; transformer_engine: TE's make_graphed_callables): their
    # kernels replay from a graph (simulator/compute/launch.py: no per-kernel launch gap)
    enable_cuda_graph: bool = False
    cuda_graph_impl: Literal["none", "local", "transformer_engine"] = "none"
    # --cuda-graph-scope (TransformerConfig.cuda_graph_scope): which layers cuda_graph_impl
    # graphs, none named: every layer; of Megatron-Core's scopes only mamba (a hybrid's
    # Mamba layers whole, simulator/models/mamba.py in_graph_scope), the others refused
    cuda_graph_scope: list[str] = []
    # TransformerConfig.disable_parameter_transpose_cache: Megatron-Core's TE layers then
    # pass is_first_microbatch=None and Transformer Engine casts each weight to FP8 on
    # every micro-batch (Megatron-Bridge's fine-tuning recipes set it; pretraining does not)
    disable_parameter_transpose_cache: bool = False
    # --fp8-param-gather (NeMo's fp8_params, MLPerf's FP8_PARAMS): Transformer Engine's FP8
    # primary weights (fp8_model_init), the distributed optimizer's (or FSDP's) parameter
    # all-gather moving FP8 under a per-tensor recipe (simulator/models/fp8.py fp8_layer,
    # dp_fp8_weights); under MXFP8 the all-gather moves bf16 (fp8_weight_gathers)
    fp8_param_gather: bool = False
    # TransformerConfig.cross_entropy_loss_fusion (Megatron-Core 0.8 on; its default false,
    # Megatron-Bridge's GPTModelProvider true) and cross_entropy_fusion_impl (core 0.12 on;
    # its default native, Megatron-Bridge's performance scripts te): false runs the
    # vocab-parallel cross entropy op by op in fp32, native as four TorchScript-fused
    # kernels, te as Transformer Engine's one pass (simulator/models/cross_entropy.py); the
    # defaults here are Bridge's performance runs' (true, te), as before the fields
    cross_entropy_loss_fusion: bool = True
    cross_entropy_fusion_impl: Literal["native", "te"] = "te"
    # Megatron-LM's gradient_accumulation_fusion (on unless --no-gradient-accumulation-fusion;
    # Megatron-Bridge's providers turn it on where the fused kernel exists): each
    # weight-gradient GEMM accumulates into the main_grad buffer itself (Transformer
    # Engine's fuse_wgrad_accumulation), simulator/models/ops.py accumulated_wgrad. None: on,
    # except under use_torch_fsdp2 or DDP_impl torch, which run without it (Megatron-LM's
    # arguments.py asserts it off with FSDP2; torch DDP keeps no main_grad)
    gradient_accumulation_fusion: bool | None = None
    # Megatron-Core's precision-aware optimizer (OptimizerConfig; Transformer Engine's
    # FusedAdam with these dtypes, simulator/strategies/optim_precision.py): the
    # distributed optimizer's master weights and Adam moments, and the step's gradients
    use_precision_aware_optimizer: bool = False
    main_grads_dtype: OptimDtype = "fp32"
    main_params_dtype: OptimDtype = "fp32"
    exp_avg_dtype: OptimDtype = "fp32"
    exp_avg_sq_dtype: OptimDtype = "fp32"
    store_param_remainders: bool = True
    # TransformerConfig.use_transformer_engine_op_fuser: TEGroupedMLP runs its experts
    # through Transformer Engine's fused ops, whose GroupedLinear adds the second expert
    # GEMM's probability-scaled bias (scale_bias) in the grouped GEMM: no bias pass of its
    # own (simulator/models/moe.py op_fused_experts)
    use_transformer_engine_op_fuser: bool = False

    @property
    def cross_entropy(self) -> str:
        """The loss's kernels: ``unfused``, ``native`` or ``te``."""
        return self.cross_entropy_fusion_impl if self.cross_entropy_loss_fusion else "unfused"

    @property
    def cuda_graphs(self) -> bool:
        """Whether the transformer layers replay from CUDA graphs."""
        return self.enable_cuda_graph or self.cuda_graph_impl != "none"

    @model_validator(mode="before")
    @classmethod
    def _spellings(cls, data: Any):
        if isinstance(data, dict):
            for key, megatron in SHORT.items():
                if key in data:
                    raise ConfigError(f"unknown key {key!r}: Megatron spells it {megatron}",
                                      field=f"strategy.{key}")
            granularity = data.get("recompute_granularity")
            if granularity == "full":
                data = {**data, "activation_checkpointing": "full"}
            elif granularity == "selective":
                data = {**data, "activation_checkpointing": "selective",
                        "selective_ac_option": "attention"}
        return data

    def _check(self) -> None:
        if self.name != "megatron":
            raise ConfigError(f"expected 'megatron', got {self.name!r}", field="strategy.name")
        if self.fp8_param_gather and not (self.use_distributed_optimizer or self.use_torch_fsdp2
                                          or self.use_megatron_fsdp):
            raise ConfigError("gathers the parameters in FP8: set use_distributed_optimizer "
                              "(or use_torch_fsdp2, use_megatron_fsdp), as Megatron-LM requires",
                              field="strategy.fp8_param_gather")
        if self.overlap_param_gather and not self.use_distributed_optimizer:
            raise ConfigError("overlaps the distributed optimizer's parameter all-gather; "
                              "set use_distributed_optimizer: true",
                              field="strategy.overlap_param_gather")
        if self.DDP_impl == "torch":
            self._check_torch_ddp()
        if self.use_megatron_fsdp and self.use_torch_fsdp2:
            raise ConfigError("Megatron-FSDP and PyTorch's FSDP2 are two ways to shard the "
                              "same data parallelism: set one",
                              field="strategy.use_megatron_fsdp")
        check_graph_scope(self.cuda_graph_scope, self.cuda_graphs)
        if self.recompute_method and self.recompute_granularity != "full":
            raise ConfigError("applies to recompute_granularity: full",
                              field="strategy.recompute_method")
        if self.recompute_modules is not None:
            self._check_recompute_modules()
        if self.pipeline_model_parallel_layout is not None:
            self._check_layout()
        if self.overlap_moe_expert_parallel_comm:
            self._check_a2a_overlap()
        self._check_dispatcher()
        self._check_optimizer_dtypes()
        if self.gradient_accumulation_fusion:
            self._check_fusion()

    def _check_fusion(self) -> None:
        """Gradient-accumulation fusion writes Megatron's own DDP's main_grad: refused under
        FSDP2 (Megatron-LM's arguments.py: "--use-torch-fsdp2 is not supported with
        gradient accumulation fusion") and PyTorch DDP (no main_grad)."""
        for other, on in (("use_torch_fsdp2", self.use_torch_fsdp2),
                          ("DDP_impl: torch", self.DDP_impl == "torch")):
            if on:
                raise ConfigError(f"accumulates into Megatron's main_grad, which {other} "
                                  f"does not keep; set it false",
                                  field="strategy.gradient_accumulation_fusion")

    def _check_dispatcher(self) -> None:
        """Megatron-Core's rules for the token dispatcher (``TransformerConfig``'s
        ``__post_init__``: ``moe_enable_deepep`` needs flex and no other backend), and the
        all-gather dispatcher, not modelled."""
        if self.moe_token_dispatcher_type == "allgather":
            raise ConfigError("allgather (MoEAllGatherTokenDispatcher) is not modelled; "
                              "valid: alltoall, flex",
                              field="strategy.moe_token_dispatcher_type")
        if not self.moe_enable_deepep:
            return
        if self.moe_token_dispatcher_type != "flex":
            raise ConfigError("DeepEP runs in the flex token dispatcher: set "
                              "moe_token_dispatcher_type: flex (Megatron-Core's rule)",
                              field="strategy.moe_enable_deepep")
        if self.moe_flex_dispatcher_backend == "hybridep":
            raise ConfigError("the flex dispatcher takes one backend: moe_enable_deepep with "
                              "moe_flex_dispatcher_backend hybridep (Megatron-Core's rule)",
                              field="strategy.moe_enable_deepep")

    def _check_optimizer_dtypes(self) -> None:
        """Megatron-Core's rules for the optimizer dtypes (:func:`simulator.strategies.optim_precision.check`);
        the precision-aware step is Transformer Engine's FusedAdam, one fused kernel, so an
        ``optimizer_impl: foreach`` beside it is refused, and FSDP2 is not modelled with it
        (Megatron-Bridge's performance scripts turn it off under FSDP)."""
        check_optimizer_dtypes(self._given_dtypes(),
                               aware=self.use_precision_aware_optimizer,
                               optimizer=self.optimizer,
                               distributed=self.use_distributed_optimizer)
        if not self.use_precision_aware_optimizer:
            return
        field = "strategy.use_precision_aware_optimizer"
        for fsdp in ("use_torch_fsdp2", "use_megatron_fsdp"):
            if getattr(self, fsdp):
                raise ConfigError(f"not modelled with {fsdp}", field=field)
        if "optimizer_impl" in self.model_fields_set and self.optimizer_impl != "fused":
            raise ConfigError(f"runs Transformer Engine's FusedAdam, one fused kernel, not "
                              f"{self.optimizer_impl}", field="strategy.optimizer_impl")

    def optimizer_dtypes(self) -> OptimizerDtypes | None:
        """The precision-aware optimizer's dtypes, None without it (fp32 state)."""
        if not self.use_precision_aware_optimizer:
            return None
        return self._given_dtypes()

    def _given_dtypes(self) -> OptimizerDtypes:
        """The dtype fields as given (checked with or without the precision-aware flag)."""
        return OptimizerDtypes(
            main_grads=self.main_grads_dtype, main_params=self.main_params_dtype,
            exp_avg=self.exp_avg_dtype, exp_avg_sq=self.exp_avg_sq_dtype,
            store_param_remainders=self.store_param_remainders)

    def _check_recompute_modules(self) -> None:
        """The names as Megatron-Core's ``TransformerConfig.__post_init__`` allows them
        (:data:`~simulator.strategies.checkpointing.MEGATRON_MODULES`), less the ones not
        modelled."""
        field = "strategy.recompute_modules"
        if self.recompute_granularity != "selective":
            raise ConfigError("applies to recompute_granularity: selective (set it, as "
                              "Megatron-Bridge does beside recompute_modules)", field=field)
        unknown = [m for m in self.recompute_modules if m not in MEGATRON_MODULES]
        if unknown:
            raise ConfigError(f"unknown module {unknown[0]!r}; valid: "
                              f"{', '.join(MEGATRON_MODULES)}", field=field)
        for module, why in MODULES_NOT_MODELLED.items():
            if module in self.recompute_modules:
                raise ConfigError(f"{module!r}: {why}", field=field)

    def _check_a2a_overlap(self) -> None:
        """Megatron-Core's asserts for the EP all-to-all overlap (TransformerConfig's
        ``__post_init__``), and recomputation, which the simulator does not cut into the
        combined schedule's nodes."""
        field = "strategy.overlap_moe_expert_parallel_comm"
        if self.expert_model_parallel_size == 1:
            raise ConfigError("needs expert parallelism (expert_model_parallel_size above 1)",
                              field=field)
        if self.pipeline_model_parallel_size > 1 and self.layout()[0] == 1:
            raise ConfigError("with pipeline stages Megatron-Core needs virtual stages "
                              "(virtual_pipeline_model_parallel_size)", field=field)
        if self.ac_mode != "none" or self.activation_offload:
            raise ConfigError("not modelled with recomputation or activation offload",
                              field=field)
        if self.precision not in ("bf16", "fp16", "fp8"):
            raise ConfigError(f"Megatron-Core runs it with a bf16 or fp16 model, not "
                              f"{self.precision}", field=field)

    def _check_torch_ddp(self) -> None:
        """PyTorch DDP as Megatron-LM wrapped it: never with the distributed optimizer or
        FSDP (Megatron asserts its own DDP there), and modelled without a pipeline only
        (SC21 ran it so; with one, Megatron's 1F1B did not skip the synchronisation of the
        micro-batches before the last, which is not modelled)."""
        for other in ("use_distributed_optimizer", "use_torch_fsdp2", "use_megatron_fsdp"):
            if getattr(self, other):
                raise ConfigError(f"{other} needs Megatron's own DDP (DDP_impl: local)",
                                  field="strategy.DDP_impl")
        if self.pipeline_model_parallel_size > 1:
            raise ConfigError("PyTorch DDP is modelled without pipeline parallelism only "
                              "(pipeline_model_parallel_size 1, as SC21 ran it)",
                              field="strategy.DDP_impl")

    def _check_layout(self) -> None:
        """The layout read once (:mod:`.megatron_layout`), against the other pipeline-split
        arguments as Megatron-Core checks them."""
        given = [k for k in LAYOUT_EXCLUDES if getattr(self, k)]
        if given:
            raise ConfigError(f"cannot be set with {', '.join(given)} (Megatron-Core "
                              f"refuses both)", field="strategy.pipeline_model_parallel_layout")
        vp, _ = self.layout()
        set_vp = self.virtual_pipeline_model_parallel_size
        if set_vp is not None and set_vp != vp:
            raise ConfigError(f"the layout makes {vp} virtual stages per pipeline rank, "
                              f"virtual_pipeline_model_parallel_size says {set_vp}",
                              field="strategy.pipeline_model_parallel_layout")

    def check_fp8(self, recipe: str | None) -> None:
        """Megatron runs Transformer Engine's FP8 recipes, not torchao's; ``fp8_param_gather``
        needs one (training.precision fp8; NVFP4 parameters are not modelled)."""
        if recipe not in (None, NVFP4, *TE_CAST_BYTES):      # torchao's
            raise ConfigError(f"{recipe} is torchao's Float8Linear recipe; Megatron runs "
                              f"Transformer Engine's: delayed (Megatron-LM's --fp8-recipe "
                              f"default, and this strategy's where fp8_recipe is unset), "
                              f"current (--fp8-recipe tensorwise) or mxfp8",
                              field="training.fp8_recipe")
        if self.fp8_param_gather and recipe not in TE_CAST_BYTES:
            why = ("training.precision is not fp8" if recipe is None else
                   "NVFP4 parameters are not modelled" if recipe == NVFP4 else
                   f"fp8_recipe {recipe} is torchao's, not Transformer Engine's")
            raise ConfigError(f"keeps Transformer Engine FP8 parameters: needs "
                              f"training.precision fp8 with a Transformer Engine recipe "
                              f"({', '.join(TE_CAST_BYTES)}): {why}",
                              field="strategy.fp8_param_gather")

    def fp8_weight_gathers(self, recipe: str | None, plan=None) -> bool:
        """``fp8_param_gather`` under a per-tensor recipe (delayed, current): the blocks' GEMM
        weights held and all-gathered in FP8 (Megatron-Core's distributed optimizer quantizes
        each rank's updated shard and all-gathers FP8; :func:`simulator.models.fp8.fp8_layer`).
        Not under MXFP8: Megatron-Core all-gathers an MXFP8 parameter in bf16, into a part of
        the gradient buffer (``reuse_grad_buf_for_mxfp8_param_ag``, which Megatron-Bridge
        requires with it: ``ParamAndGradBuffer``'s ``shared_buffer``), and casts the gathered
        weights to MXFP8 once a step (``_post_param_sync``), as the first micro-batch's
        cached casts do without FP8 parameters; the weight's MXFP8 copies, row- and
        column-wise with their scales (2 + 2/32 bytes), stand where the bf16 parameter buffer
        would (2 bytes). So the step is priced as without the setting."""
        return self.fp8_param_gather and recipe in PER_TENSOR

    def fp8_weight_reuse(self, recipe: str) -> int:
        """Micro-batches sharing one FP8 cast of each weight: all of a step's, under a
        Transformer Engine recipe (``forward_step`` marks a model chunk's first micro-batch,
        ``TELinear.forward`` passes ``is_first_microbatch`` and TE caches the FP8 weight and
        its transpose until the optimizer step), unless
        ``disable_parameter_transpose_cache``; torchao's ``tensorwise`` casts every time."""
        if recipe not in (*TE_CAST_BYTES, NVFP4) or self.disable_parameter_transpose_cache:
            return 1
        return self.grad_accum

    def layout(self) -> tuple[int, tuple[int, ...]]:
        """The virtual stages and each model stage's blocks of
        ``pipeline_model_parallel_layout`` (1 and none without one)."""
        if self.pipeline_model_parallel_layout is None:
            return self.virtual_pipeline_model_parallel_size or 1, ()
        return layout_blocks(self.pipeline_model_parallel_layout,
                             self.pipeline_model_parallel_size)

    def check_model(self, model) -> None:
        """The layout's multi-token-prediction layers against the model's, and the
        recomputed modules the model must have as Megatron-Core's ``__post_init__``
        requires them (``mla_up_proj`` needs multi_latent_attention, ``moe_act``
        moe_grouped_gemm, which only an MoE model sets); one line each."""
        if self.pipeline_model_parallel_layout is not None:
            check_layout_mtp(self.pipeline_model_parallel_layout, model.mtp_layers)
        modules = self.recompute_modules or ()
        needs = (("mla_up_proj", model.is_mla, "multi-head latent attention"),
                 ("moe_act", model.is_moe, "MoE layers (grouped-GEMM experts)"))
        for module, has, what in needs:
            if module in modules and not has:
                raise ConfigError(f"{module!r} needs {what}, which {model.name} does not "
                                  f"have", field="strategy.recompute_modules")

    def main_grad(self) -> MainGrad | None:
        """Megatron's own DDP's ``main_grad`` (fp32, or bf16 under ``grad_reduce_in_bf16``),
        accumulated into by the GEMM under gradient-accumulation fusion, else by a kernel of
        its own; FSDP2 and PyTorch DDP keep none."""
        if self.use_torch_fsdp2 or self.DDP_impl == "torch":
            return None
        fused = self.gradient_accumulation_fusion is not False
        return MainGrad(bytes=self.grad_reduce_bytes(), fused=fused)

    def grad_reduce_bytes(self) -> int:
        if self.reduce_dtype or self.DDP_impl == "torch":
            return super().grad_reduce_bytes()
        return 2 if self.grad_reduce_in_bf16 else 4

    def _bucket_params(self, dp: int) -> int:
        """Parameters per gradient bucket: ``bucket_size``, else PyTorch DDP's 25 MiB of
        gradients (``bucket_cap_mb``), else Megatron-Core's max(40M, 1M x dp)."""
        if self.bucket_size:
            return self.bucket_size
        if self.DDP_impl == "torch":
            return TORCH_DDP_BUCKET_BYTES // self.grad_reduce_bytes()
        return max(40_000_000, 1_000_000 * dp)

    def plan_fields(self) -> dict[str, str]:
        """Plan attribute -> the key the user wrote (for one-line errors)."""
        return {**{k: f"strategy.{v}" for k, v in FIELDS.items()}, "size": "cluster.gpus",
                "cp_mode": "strategy.cp_comm_type",
                "schedule": "strategy.virtual_pipeline_model_parallel_size",
                "micro_batches": "training.grad_accum"}

    def plan(self, world_size: int) -> ParallelPlan:
        """The plan on ``world_size`` GPUs (the data-parallel size is what is left)."""
        tp, pp, cp = (self.tensor_model_parallel_size, self.pipeline_model_parallel_size,
                      self.context_parallel_size)
        if world_size % (tp * pp * cp):
            raise ConfigError(f"tensor {tp} x pipeline {pp} x context {cp} = {tp * pp * cp} "
                              f"does not divide the job's {world_size} GPUs",
                              field="cluster.gpus")
        dp = world_size // (tp * pp * cp)
        if self.tp_comm_overlap and tp > 1 and not self.sequence_parallel:
            raise ConfigError("tensor-parallel communication overlap pipelines each "
                              "sequence-parallel all-gather and reduce-scatter with its GEMM: "
                              "it needs sequence_parallel (Megatron-LM asserts the same)",
                              field="strategy.tp_comm_overlap")
        if self.cp_comm_type not in CP_COMM:
            raise ConfigError(f"cp_comm_type {self.cp_comm_type} (hierarchical context "
                              f"parallelism: a2a inside groups, p2p across) is not modelled; "
                              f"valid: {', '.join(CP_COMM)}", field="strategy.cp_comm_type")
        mode = ("fsdp" if self.use_torch_fsdp2 or self.use_megatron_fsdp else
                "zero1" if self.use_distributed_optimizer else "ddp")
        vp, blocks = self.layout()
        sharded = mode != "ddp"
        return ParallelPlan(
            pp=pp, tp=tp, cp=cp, dp_shard=dp if sharded else 1,
            dp_replicate=1 if sharded else dp, ep=self.expert_model_parallel_size,
            etp=self.expert_tensor_parallel_size or 0, vp=vp,
            sequence_parallel=self.sequence_parallel and tp > 1,
            schedule="interleaved_1f1b" if vp > 1 else "1f1b", dp_mode=mode,
            tp_overlap=self.tp_comm_overlap, cp_mode=CP_COMM[self.cp_comm_type],
            tp_async_backward=(self.async_tensor_model_parallel_allreduce
                               or self.sequence_parallel),
            overlap_grad_reduce=self.overlap_grad_reduce or self.DDP_impl == "torch",
            overlap_param_gather=self.overlap_param_gather,
            bucket_params=self._bucket_params(dp),
            first_stage_layers=self.decoder_first_pipeline_num_layers or 0,
            last_stage_layers=self.decoder_last_pipeline_num_layers or 0,
            embedding_in_split=self.account_for_embedding_in_pipeline_split,
            loss_in_split=self.account_for_loss_in_pipeline_split, stage_blocks=blocks,
            moe_a2a_overlap=self.overlap_moe_expert_parallel_comm,
            fsdp_copies="none" if self.use_megatron_fsdp else "fsdp2")


# ------------------------------------------------------------------ the argument file
# The strategy fields an argument file gives, each as Megatron's argument of that name
# (:func:`flag`); the others (moe_load, bucket_size...) are set in a scenario, and
# cp_comm_type, a list in Megatron-LM, is read as CP_COMM_TYPE below.
ARGUMENT_FIELDS = (
    "tensor_model_parallel_size", "pipeline_model_parallel_size",
    "virtual_pipeline_model_parallel_size", "context_parallel_size",
    "expert_model_parallel_size", "expert_tensor_parallel_size", "sequence_parallel",
    "use_distributed_optimizer", "DDP_impl",
    "overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap", "use_torch_fsdp2",
    "use_megatron_fsdp",
    "overlap_moe_expert_parallel_comm", "moe_token_dispatcher_type",
    "moe_flex_dispatcher_backend", "moe_enable_deepep",
    "account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split",
    "decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers",
    "pipeline_model_parallel_layout",
    "recompute_granularity", "recompute_method", "recompute_num_layers",
    "enable_cuda_graph", "cuda_graph_impl",
    "cross_entropy_loss_fusion", "cross_entropy_fusion_impl",
    "use_precision_aware_optimizer", "main_grads_dtype", "main_params_dtype", "exp_avg_dtype",
    "exp_avg_sq_dtype", "fp8_param_gather")
# What an argument file means by leaving an argument out, where Megatron-LM's default
# (megatron/training/arguments.py) is not the strategy field's (Megatron-Bridge's): without
# --cross-entropy-loss-fusion the loss runs unfused, and --cross-entropy-fusion-impl is native
FILE_DEFAULTS = {"cross_entropy_loss_fusion": False, "cross_entropy_fusion_impl": "native"}


class Flag(NamedTuple):
    """What an argument gives: a field (of the strategy or of training), and how its words
    are parsed: ``"switch"`` (no value), ``int`` or ``str``."""

    field: str
    kind: Any


TRAINING_FLAGS = {"--seq-length": Flag(field="seq_len", kind=int),
                  "--micro-batch-size": Flag(field="micro_batch", kind=int),
                  "--use-flash-attn": Flag(field="flash_attention", kind="switch")}
MODEL_FLAGS = {"--num-layers": "layers", "--hidden-size": "hidden",
               "--num-attention-heads": "heads", "--ffn-hidden-size": "ffn_hidden",
               "--num-query-groups": "kv_heads"}
PRECISION_FLAGS = {"--bf16": "bf16", "--fp16": "fp16"}
# Transformer Engine's low precision (Megatron-LM's arguments.py): --fp8-format turns FP8 GEMMs
# on (e4m3 and hybrid cost the same here: one byte an element either way), --fp8-recipe names
# the recipe (its tensorwise is Transformer Engine's current scaling; delayed by default);
# --fp4-format turns NVFP4 GEMMs on (its one recipe, nvfp4)
FP8_FORMATS = ("e4m3", "hybrid")
FP8_RECIPE_NAMES = {"delayed": "delayed", "tensorwise": "current", "mxfp8": "mxfp8"}
FP8_RECIPES_NOT_MODELLED = {"blockwise": "Transformer Engine's Float8BlockScaling, 1x128 and "
                                         "128x128 blocks"}
FP4_FORMATS = ("e2m1",)
FP4_RECIPES = ("nvfp4",)
LOW_PRECISION_FLAGS = ("--fp8-format", "--fp8-recipe", "--fp4-format", "--fp4-recipe")
VIRTUAL_STAGE_LAYERS = "--num-layers-per-virtual-pipeline-stage"
VIRTUAL_STAGES = "--num-virtual-stages-per-pipeline-rank"
GLOBAL_BATCH_KEY = "--global-batch-size"
RECOMPUTE_MODULES = "--recompute-modules"
# nargs="+" in Megatron-LM's arguments.py: one type for every layer, or one per layer
CP_COMM_TYPE = "--cp-comm-type"
NO_WGRAD_FUSION = "--no-gradient-accumulation-fusion"      # store_false in arguments.py
MAX_ARGS = 10_000            # a real pretrain_gpt.py command line has about 100


def flag(field: str) -> str:
    """Megatron's argument for the config field ``field``: ``--tensor-model-parallel-size``."""
    return "--" + field.replace("_", "-")


def _kind(field: str):
    """How the words of the argument of the strategy field ``field`` are parsed, from the
    field's type (the value itself is checked by :class:`MegatronConfig`)."""
    annotation = MegatronConfig.model_fields[field].annotation
    if annotation is bool:
        return "switch"
    return int if annotation is int or int in getattr(annotation, "__args__", ()) else str


STRATEGY_FLAGS = {flag(f): Flag(field=f, kind=_kind(f)) for f in ARGUMENT_FIELDS}


def file_key(field: str) -> str:
    """A strategy field (``tensor_model_parallel_size``, or a dotted key below one) as an
    argument file spells it, for errors."""
    head = field.split(".")[0]
    return flag(head) if head in (*ARGUMENT_FIELDS, "recompute_modules", "cp_comm_type") \
        else field


def split_args(path) -> list[str]:
    """The shell words of an argument file (continuations joined, comments dropped)."""
    import shlex
    source = str(path)
    text = decode_text(read_bytes(path, "Megatron argument file", "config_bytes"), source,
                       "Megatron argument file")
    try:
        words = shlex.split(text.replace("\\\r\n", " ").replace("\\\n", " "), comments=True)
    except ValueError as exc:            # an unclosed quote
        raise ConfigError(f"cannot split into arguments: {exc}", source=source) from None
    if len(words) > MAX_ARGS:
        raise ConfigError(f"{len(words):,} arguments; at most {MAX_ARGS:,}", source=source)
    return words


class Argument(NamedTuple):
    """One ``--flag`` of an argument file and the words that follow it."""

    name: str
    values: list[str]


class Arguments(NamedTuple):
    """An argument file's flags in order, and the words before the first (the launcher and
    script: everything up to a ``*.py`` word, whose own options are not Megatron's)."""

    flags: list[Argument]
    prefix: list[str]


def parse_flags(words: list[str]) -> Arguments:
    """The flags of an argument file's words."""
    script = [i for i, w in enumerate(words) if w.endswith(".py") and not w.startswith("-")]
    first = script[-1] + 1 if script else 0          # after `torchrun ... pretrain_gpt.py`
    start = next((i for i, w in enumerate(words) if i >= first and w.startswith("--")),
                 len(words))
    flags: list[Argument] = []
    for word in words[start:]:
        if word.startswith("--"):
            name, eq, value = word.partition("=")
            flags.append(Argument(name=name, values=[value] if eq else []))
        else:
            flags[-1].values.append(word)
    return Arguments(flags=flags, prefix=words[:start])


def read_file(path) -> ConfigPieces:
    """The scenario pieces of a Megatron-LM argument file."""
    from .pieces import ConfigPieces, Doc
    source = str(path)
    args = parse_flags(split_args(path))
    doc = Doc(source)
    out = ConfigPieces("megatron", source, strategy={"name": "megatron"})
    if args.prefix:
        out.ignore(" ".join(args.prefix), "the command before the arguments")
    sizes: dict[str, int] = {}
    low: dict[str, str] = {}
    seen: set[str] = set()
    for arg in args.flags:
        if arg.name in seen and arg.name in _KNOWN:
            raise doc.fail(arg.name, "given twice")
        seen.add(arg.name)
        _one(arg.name, arg.values, doc, out, sizes, low)
    _low_precision(low, doc, out)
    for field, value in FILE_DEFAULTS.items():
        if field not in out.strategy:
            out.strategy[field] = value
            out.notes.append(f"{flag(field)} not given: {field} {value} (Megatron-LM's "
                             f"default)")
    _model(sizes, out)
    return out


def _words(name: str, values: list[str], kind, doc: Doc):
    """The value of argument ``name``: True for a switch, else its one word as ``kind``."""
    if kind == "switch":
        if values:
            raise doc.fail(name, f"is a switch and takes no value, got {' '.join(values)!r}")
        return True
    if len(values) != 1:
        raise doc.fail(name, f"takes one value, got {len(values)}")
    if kind is int:
        try:
            return int(values[0])
        except ValueError:
            raise doc.fail(name, f"must be a whole number, got {values[0]!r}") from None
    return values[0]


def _one(name: str, values: list[str], doc: Doc, out: ConfigPieces, sizes: dict,
         low: dict) -> None:
    if name in STRATEGY_FLAGS:
        arg = STRATEGY_FLAGS[name]
        out.strategy[arg.field] = _words(name, values, arg.kind, doc)
    elif name == RECOMPUTE_MODULES:      # nargs="*" in Megatron-LM's arguments.py
        out.strategy["recompute_modules"] = list(values)
    elif name == CP_COMM_TYPE:
        if len(set(values)) != 1:
            raise doc.fail(name, f"one type for every layer is modelled, got "
                                 f"{' '.join(values) or 'none'}")
        out.strategy["cp_comm_type"] = values[0]
    elif name == NO_WGRAD_FUSION:
        _words(name, values, "switch", doc)
        out.strategy["gradient_accumulation_fusion"] = False
    elif name == "--recompute-activations":
        _words(name, values, "switch", doc)
        out.strategy.setdefault("recompute_granularity", "selective")
    elif name == VIRTUAL_STAGE_LAYERS:
        out.strategy["_layers_per_virtual_stage"] = doc.integer(
            _words(name, values, int, doc), name)
    elif name == VIRTUAL_STAGES:
        out.strategy["_virtual_stages"] = doc.integer(_words(name, values, int, doc), name)
    elif name in TRAINING_FLAGS:
        arg = TRAINING_FLAGS[name]
        value = _words(name, values, arg.kind, doc)
        out.training[arg.field] = value if arg.kind == "switch" else doc.integer(value, name)
    elif name == GLOBAL_BATCH_KEY:
        out.global_batch = doc.integer(_words(name, values, int, doc), name)
    elif name in PRECISION_FLAGS:
        _words(name, values, "switch", doc)
        if "precision" in out.training:
            raise doc.fail(name, "--bf16 and --fp16 are both given")
        out.training["precision"] = PRECISION_FLAGS[name]
    elif name in MODEL_FLAGS:
        sizes[MODEL_FLAGS[name]] = doc.integer(_words(name, values, int, doc), name)
    elif name in LOW_PRECISION_FLAGS:
        low[name] = _words(name, values, str, doc)
        return                          # used or ignored by _low_precision
    else:
        out.ignore(name)
        return
    out.use(name)


def _low_precision(low: dict[str, str], doc: Doc, out: ConfigPieces) -> None:
    """``--fp8-format``/``--fp8-recipe`` as ``training.precision: fp8`` and its
    ``fp8_recipe`` (Megatron-LM's default, delayed, where the file gives none),
    ``--fp4-format``/``--fp4-recipe`` as ``fp4``; each on a ``--bf16`` step, the one the
    simulator models around low-precision GEMMs. A recipe without its format changes
    nothing in Megatron-LM, and is listed as ignored."""
    choices = {"--fp8-format": FP8_FORMATS, "--fp4-format": FP4_FORMATS,
               "--fp8-recipe": (*FP8_RECIPE_NAMES, *FP8_RECIPES_NOT_MODELLED),
               "--fp4-recipe": FP4_RECIPES}
    for name, value in low.items():
        if value not in choices[name]:
            raise doc.fail(name, f"must be one of {', '.join(choices[name])}, got {value!r}")
    fp8, fp4 = low.get("--fp8-format"), low.get("--fp4-format")
    if fp8 and fp4:
        raise doc.fail("--fp4-format", "and --fp8-format are both given: one low-precision "
                                       "format a step")
    for fmt, recipe in (("--fp8-format", "--fp8-recipe"), ("--fp4-format", "--fp4-recipe")):
        if recipe in low and fmt not in low:
            out.ignore(recipe, f"without {fmt} the step has no such GEMMs")
    if not (fp8 or fp4):
        return
    given = "--fp8-format" if fp8 else "--fp4-format"
    if out.training.get("precision") != "bf16":
        raise doc.fail(given, "low-precision GEMMs are modelled in a bf16 step: add --bf16 "
                              "(not --fp16, not fp32)")
    out.training["precision"] = "fp8" if fp8 else "fp4"
    out.use(given)
    if fp4:
        if "--fp4-recipe" in low:
            out.use("--fp4-recipe")
        return
    recipe = low.get("--fp8-recipe")
    if recipe in FP8_RECIPES_NOT_MODELLED:
        raise doc.fail("--fp8-recipe", f"{recipe} ({FP8_RECIPES_NOT_MODELLED[recipe]}) is not "
                                       f"modelled: {', '.join(FP8_RECIPE_NAMES)}")
    if recipe is None:
        out.notes.append("--fp8-recipe not given: delayed (Megatron-LM's default)")
    else:
        out.use("--fp8-recipe")
    out.training["fp8_recipe"] = FP8_RECIPE_NAMES[recipe or "delayed"]


def _virtual_stages(sizes: dict, out: ConfigPieces) -> None:
    """``--num-layers-per-virtual-pipeline-stage N`` as the virtual stages it makes (a
    pipeline size below 1 is left to the config to refuse), or
    ``--num-virtual-stages-per-pipeline-rank N`` as it says (1: none); no more than one of
    them and ``--pipeline-model-parallel-layout``, as Megatron-LM's ``arguments.py``
    requires (the layout gives its own)."""
    per = out.strategy.pop("_layers_per_virtual_stage", None)
    stages = out.strategy.pop("_virtual_stages", None)
    given = [name for name, on in ((VIRTUAL_STAGE_LAYERS, per is not None),
                                   (VIRTUAL_STAGES, stages is not None),
                                   (flag("pipeline_model_parallel_layout"),
                                    "pipeline_model_parallel_layout" in out.strategy)) if on]
    if len(given) > 1:
        raise ConfigError(f"no more than one of {', '.join(given)} (Megatron-LM's rule)",
                          source=out.source, field=given[-1])
    if stages is not None and stages > 1:
        out.strategy["virtual_pipeline_model_parallel_size"] = stages
    pp = out.strategy.get("pipeline_model_parallel_size", 1)
    if per is None or not (isinstance(pp, int) and pp >= 1):
        return
    uneven = [flag(f) for f in ("decoder_first_pipeline_num_layers",
                                "decoder_last_pipeline_num_layers") if f in out.strategy]
    if uneven:
        raise ConfigError(f"cannot size the virtual stages of an uneven split ({uneven[0]}); "
                          f"give {VIRTUAL_STAGES} (Megatron-LM's rule)",
                          source=out.source, field=VIRTUAL_STAGE_LAYERS)
    layers = sizes.get("layers")
    if layers is None or layers % (pp * per):
        raise ConfigError(f"needs --num-layers divisible by the pipeline size {pp} x {per}",
                          source=out.source, field=VIRTUAL_STAGE_LAYERS)
    out.strategy["virtual_pipeline_model_parallel_size"] = layers // (pp * per)


def _model(sizes: dict, out: ConfigPieces) -> None:
    """The catalog model of the given sizes (Megatron's defaults fill ffn = 4h and query
    groups = heads); the size flags move to ignored when they name none."""
    _virtual_stages(sizes, out)
    if not sizes:
        return
    if {"layers", "hidden", "heads"} <= set(sizes):
        full = {"ffn_hidden": 4 * sizes["hidden"], "kv_heads": sizes["heads"], **sizes}
        from .names import model_by_sizes
        found = model_by_sizes(full)
        out.model, out.model_note = found.model, found.note
    else:
        out.model_note = ("--num-layers, --hidden-size and --num-attention-heads are needed "
                          "to name a model; the scenario's model is simulated")
    if out.model is None:
        flags = [f for f, k in MODEL_FLAGS.items() if k in sizes]
        out.used = [k for k in out.used if k not in flags]
        out.ignored += flags


_KNOWN = set(STRATEGY_FLAGS) | set(TRAINING_FLAGS) | set(MODEL_FLAGS) | set(PRECISION_FLAGS) | {
    "--recompute-activations", VIRTUAL_STAGE_LAYERS, VIRTUAL_STAGES, GLOBAL_BATCH_KEY,
    RECOMPUTE_MODULES, CP_COMM_TYPE, NO_WGRAD_FUSION, *LOW_PRECISION_FLAGS}

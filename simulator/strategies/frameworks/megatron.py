"""``strategy: {name: megatron, ...}``: Megatron-LM's arguments, spelled as Megatron spells
them, translated into one :class:`~simulator.strategies.parallel.plan.ParallelPlan`.

Megatron-LM (``megatron/training/arguments.py``, ``megatron/core/parallel_state.py``):
the data-parallel size is what is left, ``world / (tp x pp x cp)``; ranks are ordered
``tp-cp-ep-dp-pp`` (TP innermost), the plan's default order. The interleaved 1F1B
schedule runs when ``virtual_pipeline_model_parallel_size`` is set, 1F1B otherwise;
``use_distributed_optimizer`` is ZeRO-1 (``zero1``), ``use_torch_fsdp2`` FSDP2, else
Megatron's DDP. Megatron accumulates and reduces gradients in fp32 with bf16 weights
(``accumulate_allreduce_grads_in_fp32``; ``grad_reduce_in_bf16`` for 16-bit) and
defaults to ``overlap_grad_reduce: false``. ``recompute_granularity: full`` checkpoints
every block (``recompute_method: block`` with ``recompute_num_layers: N``: the first N
blocks of each chunk); ``selective`` recomputes the attention core only (the common
``activation_checkpointing: selective`` with ``selective_ac_option: attention``,
:mod:`simulator.strategies.checkpointing`): without flash attention it frees the ``a s^2``
scores; with flash attention it frees little and costs the core's forward again.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from simulator.errors import ConfigError

from ..base import CommonConfig
from ..parallel.moe import ExpertLoad
from ..parallel.plan import ParallelPlan

# short spellings people write, and what Megatron calls them
SHORT = {"tp": "tensor_model_parallel_size", "pp": "pipeline_model_parallel_size",
         "vp": "virtual_pipeline_model_parallel_size", "cp": "context_parallel_size",
         "ep": "expert_model_parallel_size", "sp": "sequence_parallel",
         "dp": "(none: the data-parallel size is what is left of the GPUs)",
         "schedule": "virtual_pipeline_model_parallel_size (interleaved) or nothing (1F1B)"}
FIELDS = {"tp": "tensor_model_parallel_size", "pp": "pipeline_model_parallel_size",
          "vp": "virtual_pipeline_model_parallel_size", "cp": "context_parallel_size",
          "ep": "expert_model_parallel_size", "sequence_parallel": "sequence_parallel",
          "first_stage_layers": "decoder_first_pipeline_num_layers",
          "last_stage_layers": "decoder_last_pipeline_num_layers",
          "embedding_in_split": "account_for_embedding_in_pipeline_split",
          "loss_in_split": "account_for_loss_in_pipeline_split"}
CP_COMM = {"p2p": "ring", "all_gather": "allgather"}


class MegatronConfig(CommonConfig):
    """``strategy: {name: megatron, tensor_model_parallel_size: 8, ...}``."""

    name: str = "megatron"
    tensor_model_parallel_size: int = Field(1, ge=1)
    pipeline_model_parallel_size: int = Field(1, ge=1)
    virtual_pipeline_model_parallel_size: int | None = Field(None, ge=2)
    context_parallel_size: int = Field(1, ge=1)
    expert_model_parallel_size: int = Field(1, ge=1)
    sequence_parallel: bool = False
    use_distributed_optimizer: bool = False
    use_torch_fsdp2: bool = False
    overlap_grad_reduce: bool = False
    overlap_param_gather: bool = False
    bucket_size: int | None = Field(None, ge=1)        # parameters per gradient bucket
    grad_reduce_in_bf16: bool = False
    tp_comm_overlap: bool = False
    cp_comm_type: Literal["p2p", "all_gather"] = "p2p"
    recompute_granularity: Literal["full", "selective"] | None = None
    recompute_method: Literal["uniform", "block"] | None = None
    recompute_num_layers: int | None = Field(None, ge=1)
    decoder_first_pipeline_num_layers: int | None = Field(None, ge=1)
    decoder_last_pipeline_num_layers: int | None = Field(None, ge=1)
    moe_expert_capacity_factor: float | None = Field(None, gt=0)   # overrides the model's
    moe_load: ExpertLoad = ExpertLoad()     # clustersim's routing-imbalance knob (parallel/moe.py)
    account_for_embedding_in_pipeline_split: bool = False
    account_for_loss_in_pipeline_split: bool = False

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
        if self.overlap_param_gather and not self.use_distributed_optimizer:
            raise ConfigError("overlaps the distributed optimizer's parameter all-gather; "
                              "set use_distributed_optimizer: true",
                              field="strategy.overlap_param_gather")
        if self.recompute_method and self.recompute_granularity != "full":
            raise ConfigError("applies to recompute_granularity: full",
                              field="strategy.recompute_method")

    def grad_reduce_bytes(self) -> int:
        if self.reduce_dtype:
            return super().grad_reduce_bytes()
        return 2 if self.grad_reduce_in_bf16 else 4

    def plan_fields(self) -> dict[str, str]:
        """Plan attribute -> the key the user wrote (for one-line errors)."""
        return {**{k: f"strategy.{v}" for k, v in FIELDS.items()}, "size": "cluster.gpus",
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
        mode = ("fsdp" if self.use_torch_fsdp2 else
                "zero1" if self.use_distributed_optimizer else "ddp")
        vp = self.virtual_pipeline_model_parallel_size or 1
        sharded = mode != "ddp"
        return ParallelPlan(
            pp=pp, tp=tp, cp=cp, dp_shard=dp if sharded else 1,
            dp_replicate=1 if sharded else dp, ep=self.expert_model_parallel_size, vp=vp,
            sequence_parallel=self.sequence_parallel and tp > 1,
            schedule="interleaved_1f1b" if vp > 1 else "1f1b", dp_mode=mode,
            tp_overlap=self.tp_comm_overlap, cp_mode=CP_COMM[self.cp_comm_type],
            overlap_grad_reduce=self.overlap_grad_reduce,
            overlap_param_gather=self.overlap_param_gather,
            bucket_params=self.bucket_size or max(40_000_000, 1_000_000 * dp),
            first_stage_layers=self.decoder_first_pipeline_num_layers or 0,
            last_stage_layers=self.decoder_last_pipeline_num_layers or 0,
            embedding_in_split=self.account_for_embedding_in_pipeline_split,
            loss_in_split=self.account_for_loss_in_pipeline_split)

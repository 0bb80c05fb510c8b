"""torchao's float8 all-gather under FSDP2 (torchtitan's ``enable_fsdp_float8_all_gather``,
tensorwise recipe): each rank casts its shard of a Float8Linear weight to FP8 before the
all-gather (``WeightWithDynamicFloat8CastTensor.fsdp_pre_all_gather``), so FSDP gathers
one byte a GEMM weight instead of the parameters' two, and no forward GEMM casts its
weight. torchtitan builds it only without a ``recipe_name`` and where FSDP shards
(``dp_shard_enabled``)."""

from __future__ import annotations

import math

import pytest

from simulator.errors import ConfigError
from simulator.models import load_model
from simulator.models.fp8 import CAST_BYTES
from simulator.pipeline import build_setup
from simulator.scenario import scenario_from_dict

GPT2 = load_model("gpt2-small")
H, S = GPT2.hidden, 1024
GEMM_WEIGHTS = 3 * H * H + H * H + 4 * H * H + 4 * H * H   # qkv, proj, fc, fc2: 12 h^2


def _ops(flag: bool, tp: int = 1, shard: int = 8, replicate: int = 1,
         recipe: str = "tensorwise", **extra):
    scn = scenario_from_dict({
        "name": "t", "model": "gpt2-small", "cluster": {"topology": "dgx-h100"},
        "simulation": {"variability": "none"},
        "training": {"micro_batch": 1, "seq_len": S, "grad_accum": 1, "precision": "fp8",
                     "fp8_recipe": recipe, **extra},
        "strategy": {"name": "torchtitan", "enable_fsdp_float8_all_gather": flag,
                     "parallelism": {"data_parallel_shard_degree": shard,
                                     "data_parallel_replicate_degree": replicate,
                                     "tensor_parallel_degree": tp}}})
    return build_setup(scn, extrapolate_steps=False).trace.classes[0].ops


def _block_gathers(ops) -> set[int]:
    """Sizes of block.0's FSDP all-gathers (1-D FSDP's and a plan's dp_gather stream)."""
    return {op.size_bytes for op in ops if op.kind == "collective"
            and op.collective == "all_gather" and "block.0" in op.name
            and op.stream in ("unshard", "dp_gather")}


def _cast(ops, name: str) -> float:
    return next(op.bytes_accessed for op in ops if op.name == f"float8_cast.{name}")


def test_fsdp_gathers_the_blocks_gemm_weights_at_one_byte():
    (plain,), (fp8,) = _block_gathers(_ops(False)), _block_gathers(_ops(True))
    # the padded flat parameter at bf16, less one byte for each GEMM weight element
    params = plain // 2
    assert params % 8 == 0 and params - 8 < GEMM_WEIGHTS + 13 * H <= params
    assert fp8 == plain - 8 * math.ceil(GEMM_WEIGHTS / 8)
    # under TP2 x FSDP4 the rank's TP shard of the block over the 4 FSDP ranks
    (plain,), (fp8,) = (_block_gathers(_ops(f, tp=2, shard=4)) for f in (False, True))
    assert fp8 == plain - 4 * math.ceil(GEMM_WEIGHTS // 2 / 4)


def test_a_forward_gemm_casts_only_its_activation():
    m, k, n = S, H, 3 * H                     # qkv_proj: x [m, k], w [k, n]
    assert _cast(_ops(False), "qkv_proj") == CAST_BYTES * (m * k + k * n)
    assert _cast(_ops(True), "qkv_proj") == CAST_BYTES * m * k
    # backward is as before: the output gradient's cast (the weight's transpose apart)
    assert _cast(_ops(True), "qkv_proj.dgrad") == _cast(_ops(False), "qkv_proj.dgrad")


def test_nothing_changes_where_fsdp_does_not_shard():
    """torchtitan enables it only where FSDP shards (``dp_shard_enabled``): DDP replicas
    gather nothing. (With TP or PP and no FSDP torchtitan trains in fp32, refused here in
    fp8: tests/test_fp8_framework_recipe.py.)"""
    def view(ops):
        return [(op.name, op.bytes_accessed, op.size_bytes) for op in ops]
    case = {"shard": 1, "replicate": 8}
    assert view(_ops(True, **case)) == view(_ops(False, **case))


@pytest.mark.parametrize("training, why", [
    ({"precision": "bf16"}, "training.precision is not fp8"),
    ({"fp8_recipe": "rowwise"}, "torchtitan builds the rowwise recipe without it")])
def test_the_setting_without_the_tensorwise_recipe_is_refused_in_one_line(training, why):
    scn = scenario_from_dict({
        "name": "t", "model": "gpt2-small", "cluster": {"topology": "dgx-h100"},
        "training": {"micro_batch": 1, "seq_len": S, "precision": "fp8", **training},
        "strategy": {"name": "torchtitan", "enable_fsdp_float8_all_gather": True}})
    with pytest.raises(ConfigError) as info:
        build_setup(scn)
    assert info.value.field == "strategy.enable_fsdp_float8_all_gather"
    assert why in str(info.value) and "\n" not in str(info.value)


def test_a_fine_tuned_frozen_base_is_refused_in_one_line():
    with pytest.raises(ConfigError) as info:
        _ops(True, finetune={"mode": "lora", "rank": 8})
    assert info.value.field == "strategy" and "frozen base" in str(info.value)
    assert "\n" not in str(info.value)

"""Transformer Engine's FP8 under Megatron: current scaling's casts, and the FP8 weight cast
shared by a step's micro-batches (Megatron-Core passes ``is_first_microbatch`` to TE)."""

from __future__ import annotations

import pytest

from simulator.models.costs import layer_costs
from simulator.models.spec import load_model
from simulator.strategies.frameworks.megatron import MegatronConfig
from simulator.strategies.fsdp_config import FSDPConfig

T = 1024
MODEL = load_model("llama-2-7b")


def _forward_cast(recipe: str, reuse: int = 1, name: str = "qkv_proj"):
    block = layer_costs(MODEL, 1, T, "fp8", fp8_recipe=recipe, fp8_weight_reuse=reuse)[1]
    return next(o for o in block.forward if o.name == f"te_cast_transpose.{name}")


def test_current_scaling_reads_the_tensor_once_more_than_delayed():
    h = MODEL.hidden
    elements = T * h + h * 3 * h          # x [T, h] and w [h, 3h] of the QKV projection
    # delayed: read 2, write the FP8 copy and its transpose (1 + 1) bytes per element
    assert _forward_cast("delayed").bytes_accessed == 4 * elements
    # current: the amax pass reads the bf16 tensor (2) before the same cast-transpose
    assert _forward_cast("current").bytes_accessed == 6 * elements


def test_current_scaling_backward_casts_the_output_gradient_only():
    block = layer_costs(MODEL, 1, T, "fp8", fp8_recipe="current")[1]
    casts = [o.name for o in block.backward if "cast" in o.name or "transpose" in o.name]
    assert casts and all(n.startswith("te_cast_transpose.") and n.endswith(".dgrad")
                         for n in casts)


@pytest.mark.parametrize("recipe, per", [("delayed", 4), ("current", 6)])
def test_a_shared_weight_cast_counts_its_share_per_micro_batch(recipe, per):
    h = MODEL.hidden
    x, w = T * h, h * 3 * h
    assert _forward_cast(recipe, reuse=8).bytes_accessed == per * (x + w / 8)
    # the input is cast on every micro-batch whatever the reuse
    assert _forward_cast(recipe, reuse=8).bytes_accessed > per * x


def test_tensorwise_ignores_the_reuse():
    a = layer_costs(MODEL, 1, T, "fp8", fp8_weight_reuse=8)[1]
    b = layer_costs(MODEL, 1, T, "fp8")[1]
    assert a == b


def test_megatron_shares_the_weight_cast_under_transformer_engine_only():
    cfg = MegatronConfig(grad_accum=16)
    assert cfg.fp8_weight_reuse("delayed") == 16
    assert cfg.fp8_weight_reuse("current") == 16
    assert cfg.fp8_weight_reuse("mxfp8") == 16
    assert cfg.fp8_weight_reuse("tensorwise") == 1          # torchao casts every time
    off = MegatronConfig(grad_accum=16, disable_parameter_transpose_cache=True)
    assert off.fp8_weight_reuse("delayed") == 1
    assert FSDPConfig(grad_accum=16).fp8_weight_reuse("delayed") == 1   # no is_first_microbatch


def _forward_cast_bytes(strategy: dict, grad_accum: int) -> float:
    """Bytes of the forward cast kernels of one step of Llama 3 8B at seq 1,024 on one
    DGX H100 (the first rank class), FP8 current scaling."""
    from simulator.pipeline import build_setup
    from simulator.scenario import scenario_from_dict
    scn = scenario_from_dict({
        "name": "te", "model": "llama-3-8b", "cluster": {"topology": "dgx-h100"},
        "strategy": strategy, "simulation": {"variability": "none"},
        "training": {"seq_len": 1024, "micro_batch": 1, "precision": "fp8",
                     "fp8_recipe": "current", "grad_accum": grad_accum}})
    setup = build_setup(scn, extrapolate_steps=False)
    return sum(o.bytes_accessed for o in setup.trace.classes[0].ops
               if o.name.startswith("te_cast_transpose.") and o.phase == "forward")


def test_a_megatron_step_casts_each_weight_once():
    """Megatron DDP (one rank holds every block): four micro-batches cast four inputs and
    each weight once; without the cache each weight four times, 3 x 6 bytes x the blocks'
    Linear weights more."""
    spec = load_model("llama-3-8b")
    block = layer_costs(spec, 1, 1024, "bf16")[1]
    per_block = sum(o.shape[1] * o.shape[2] for o in block.forward
                    if o.op_class == "matmul" and o.weight)     # w [k, n] of each Linear
    weights = spec.layers * per_block
    strategy = {"name": "megatron", "use_distributed_optimizer": True}
    cached = _forward_cast_bytes(strategy, 4)
    uncached = _forward_cast_bytes({**strategy, "disable_parameter_transpose_cache": True}, 4)
    assert uncached - cached == pytest.approx(3 * 6 * weights)
    # one micro-batch: nothing to share, the same casts either way
    assert _forward_cast_bytes(strategy, 1) == pytest.approx(
        _forward_cast_bytes({**strategy, "disable_parameter_transpose_cache": True}, 1))


def test_the_parallel_generator_shares_the_weight_cast_too():
    strategy = {"name": "megatron", "tensor_model_parallel_size": 2, "sequence_parallel": True,
                "use_distributed_optimizer": True}
    cached = _forward_cast_bytes(strategy, 4)
    uncached = _forward_cast_bytes({**strategy, "disable_parameter_transpose_cache": True}, 4)
    assert cached < uncached

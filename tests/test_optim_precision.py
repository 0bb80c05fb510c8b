"""Megatron-Core's precision-aware optimizer (simulator/strategies/optim_precision.py): the
bytes per parameter of master weights and moments, the step's HBM traffic, Megatron-Core's
refusals, and the megatron strategy with the fields left out costing what it did before."""

from __future__ import annotations

import pytest

from simulator.errors import ConfigError
from simulator.pipeline import build_setup
from simulator.scenario import scenario_from_dict
from simulator.strategies import optim_precision as op
from simulator.strategies.base import MASTER_BYTES, OPT_MOMENT_BYTES
from simulator.strategies.frameworks.files import read_config
from simulator.strategies.frameworks.megatron import MegatronConfig
from simulator.strategies.optim import (STEP_BYTES, config_step_bytes, config_temp_bytes,
                                        step_bytes, temp_bytes)

DIST = {"use_distributed_optimizer": True}
AWARE = {**DIST, "use_precision_aware_optimizer": True}
BF16_STATE = {**AWARE, "main_grads_dtype": "bf16", "exp_avg_dtype": "bf16",
              "exp_avg_sq_dtype": "bf16"}        # DeepSeek-V3's recipe


def _dtypes(**kw) -> op.OptimizerDtypes:
    return op.OptimizerDtypes(**kw)


@pytest.mark.parametrize("dtypes, weight_bytes, recipe, expected", [
    # fp32 master (4) + fp32 moments (4 + 4): Megatron's 12 = MASTER_BYTES + Adam's 8
    (_dtypes(store_param_remainders=False), 2, None, 4 + 4 + 4),
    # bf16 weights, fp32 master kept as int16 remainders: 2 + 4 + 4
    (_dtypes(), 2, None, 2 + 4 + 4),
    # DeepSeek-V3's recipe on bf16 weights: remainder 2 + bf16 moments 2 + 2
    (_dtypes(main_grads="bf16", exp_avg="bf16", exp_avg_sq="bf16"), 2, None, 2 + 2 + 2),
    # the same under MXFP8 (not delayed scaling): the distributed optimizer's own fp32
    # master weights 4 + 2 + 2
    (_dtypes(main_grads="bf16", exp_avg="bf16", exp_avg_sq="bf16"), 2, "mxfp8", 4 + 2 + 2),
    (_dtypes(exp_avg="bf16", exp_avg_sq="bf16"), 2, "current", 4 + 2 + 2),
    # delayed scaling keeps the precision-aware path: remainders again, 2 + 2 + 2
    (_dtypes(exp_avg="bf16", exp_avg_sq="bf16"), 2, "delayed", 2 + 2 + 2),
    # fp16 master weights (no remainders: those need fp32 masters) and fp8 moments: 2 + 1 + 1
    (_dtypes(main_params="fp16", exp_avg="fp8", exp_avg_sq="fp8"), 2, None, 2 + 1 + 1),
    (_dtypes(main_params="fp16", exp_avg="fp8", exp_avg_sq="fp8"), 2, "mxfp8", 2 + 1 + 1),
    # fp32 weights have no bf16 half to share: a full fp32 master 4 + 2 + 4
    (_dtypes(exp_avg="fp16"), 4, None, 4 + 2 + 4),
])
def test_state_bytes_per_parameter(dtypes, weight_bytes, recipe, expected):
    assert op.state_bytes(dtypes, weight_bytes=weight_bytes, fp8_recipe=recipe) == expected


def test_all_fp32_without_remainders_is_megatrons_twelve_bytes():
    assert op.state_bytes(_dtypes(store_param_remainders=False), weight_bytes=2) == \
        MASTER_BYTES + OPT_MOMENT_BYTES["adam"] == 12


@pytest.mark.parametrize("dtypes, recipe, expected_step, expected_temp", [
    # the fused kernel: gradient 4 + master read and written 2 x 4 + moments 2 x 2 x 4 = 28
    (_dtypes(), None, 4 + 8 + 16, 0),
    # bf16 gradients and moments: 2 + 8 + 16, plus per moment a cast in (2 + 4) and out
    # (4 + 2): 2 x 12; a fp32 temporary per moment, 2 x 4
    (_dtypes(main_grads="bf16", exp_avg="bf16", exp_avg_sq="bf16"), None,
     2 + 8 + 16 + 2 * (2 + 4 + 4 + 2), 2 * 4),
    # fp8 moments: per moment dequantize (1 + 4), aminmax (4), quantize (4 + 1) = 14
    (_dtypes(exp_avg="fp8", exp_avg_sq="fp8"), None, 4 + 8 + 16 + 2 * 14, 2 * 4),
    # fp16 master: cast (2 + 4), scale (4 + 4), aminmax 4, scale (4 + 4), cast (4 + 2) = 32
    (_dtypes(main_params="fp16"), None, 4 + 8 + 16 + 32, 4),
    # under MXFP8 the master is the distributed optimizer's fp32 copy: nothing to convert
    (_dtypes(exp_avg="bf16", exp_avg_sq="bf16"), "mxfp8", 4 + 8 + 16 + 2 * 12, 2 * 4),
])
def test_step_traffic_and_temporaries(dtypes, recipe, expected_step, expected_temp):
    assert op.step_bytes(dtypes, weight_bytes=2, fp8_recipe=recipe) == expected_step
    assert op.temp_bytes(dtypes, weight_bytes=2, fp8_recipe=recipe) == expected_temp


def test_fp32_step_is_optims_fused_adam():
    assert op.step_bytes(op.FP32, weight_bytes=2) == STEP_BYTES[("adam", "fused")] == 28


@pytest.mark.parametrize("fields, field, words", [
    ({"exp_avg_dtype": "bf16"}, "strategy.exp_avg_dtype",
     "can only be fp32 without use_precision_aware_optimizer"),
    ({**DIST, "main_grads_dtype": "bf16"}, "strategy.main_grads_dtype",
     "can only be fp32 without use_precision_aware_optimizer"),
    ({"use_precision_aware_optimizer": True}, "strategy.use_precision_aware_optimizer",
     "needs the distributed optimizer"),
    ({**AWARE, "optimizer": "sgd"}, "strategy.use_precision_aware_optimizer",
     "adam only"),
    ({**AWARE, "main_params_dtype": "bf16"}, "strategy.main_params_dtype",
     "bf16 is not one of fp32, fp16"),
    ({**AWARE, "main_grads_dtype": "fp8"}, "strategy.main_grads_dtype",
     "fp8 is not one of fp32, bf16"),
    ({**AWARE, "optimizer_impl": "foreach"}, "strategy.optimizer_impl", "FusedAdam"),
    ({"use_torch_fsdp2": True, "use_distributed_optimizer": True,
      "use_precision_aware_optimizer": True}, "strategy.use_precision_aware_optimizer",
     "use_torch_fsdp2"),
])
def test_megatron_refuses_what_megatron_core_refuses(fields, field, words):
    with pytest.raises(ConfigError) as exc:
        MegatronConfig(**fields)
    assert exc.value.field == field
    assert words in str(exc.value) and "\n" not in str(exc.value)


def test_an_unknown_dtype_is_refused_by_the_field_type():
    with pytest.raises(ConfigError) as exc:
        MegatronConfig(**AWARE, exp_avg_dtype="int8")
    assert "exp_avg_dtype" in str(exc.value)


def test_the_fields_left_out_price_the_state_and_step_as_before():
    cfg = MegatronConfig(**DIST)
    assert cfg.optimizer_state_bytes() == MASTER_BYTES + OPT_MOMENT_BYTES["adam"]
    assert cfg.optimizer_state_bytes("mxfp8") == MASTER_BYTES + OPT_MOMENT_BYTES["adam"]
    assert cfg.optimizer_dtypes() is None
    assert config_step_bytes(cfg) == step_bytes("adam", "foreach")
    assert config_temp_bytes(cfg) == temp_bytes("foreach")


def test_the_megatron_config_prices_its_dtypes_through_the_one_module():
    cfg = MegatronConfig(**BF16_STATE)
    dtypes = op.OptimizerDtypes(main_grads="bf16", exp_avg="bf16", exp_avg_sq="bf16")
    assert cfg.optimizer_dtypes() == dtypes
    for recipe in (None, "mxfp8"):
        assert cfg.optimizer_state_bytes(recipe) == op.state_bytes(dtypes, weight_bytes=2,
                                                                    fp8_recipe=recipe)
        assert config_step_bytes(cfg, recipe) == op.step_bytes(dtypes, weight_bytes=2,
                                                               fp8_recipe=recipe)


def _setup(strategy: dict):
    return build_setup(scenario_from_dict({
        "name": "optim", "model": "llama-3-8b", "cluster": {"topology": "dgx-h100"},
        "simulation": {"variability": "none"},
        "training": {"seq_len": 4096, "micro_batch": 1, "precision": "bf16"},
        "strategy": {"name": "megatron", "tensor_model_parallel_size": 2,
                     "sequence_parallel": True, **strategy}}, "x"), extrapolate_steps=False)


def _optimizer_op(setup):
    ops = [o for o in setup.trace.classes[0].ops if o.op_class == "optimizer"]
    assert len(ops) == 1
    return ops[0]


def test_the_trace_holds_and_moves_the_dtypes_bytes():
    """Llama 3 8B, TP2 x DP4 with the distributed optimizer: the rank's static memory drops
    by its optimizer shard x (12 - 6) bytes under DeepSeek's dtypes (bf16 weights: int16
    remainders), and its step moves 50 bytes a parameter instead of foreach's 80."""
    before, after = _setup(DIST), _setup(BF16_STATE)
    shard = _optimizer_op(before).attrs["params"]
    assert _optimizer_op(after).attrs["params"] == shard
    assert (before.trace.classes[0].static_memory_bytes
            - after.trace.classes[0].static_memory_bytes) == shard * (12 - (2 + 2 + 2))
    assert _optimizer_op(before).bytes_accessed == shard * step_bytes("adam", "foreach")
    assert _optimizer_op(after).bytes_accessed == shard * (2 + 8 + 16 + 2 * 12)
    assert _optimizer_op(after).mem_alloc_bytes == shard * 2 * 4


def test_all_fp32_dtypes_spelled_out_cost_what_the_fields_left_out_do():
    spelled = {**DIST, "main_grads_dtype": "fp32", "main_params_dtype": "fp32",
               "exp_avg_dtype": "fp32", "exp_avg_sq_dtype": "fp32"}
    a, b = _setup(DIST), _setup(spelled)
    assert a.trace.classes[0].static_memory_bytes == b.trace.classes[0].static_memory_bytes
    assert _optimizer_op(a).bytes_accessed == _optimizer_op(b).bytes_accessed


def test_an_argument_file_reads_megatron_lms_optimizer_dtype_flags(tmp_path):
    path = tmp_path / "run.args"
    path.write_text("--use-distributed-optimizer --use-precision-aware-optimizer "
                    "--main-grads-dtype bf16 --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16\n")
    pieces = read_config(path)
    assert pieces.strategy["use_precision_aware_optimizer"] is True
    assert pieces.strategy["exp_avg_dtype"] == "bf16"
    assert "--exp-avg-sq-dtype" in pieces.used


def _bridge_scenario(case: str) -> dict:
    from simulator.validation.parallel import cases, nemo
    spec, root = cases.load(), cases.default_root()
    for kind in ("bridge", "blackwell"):
        for row in nemo.table_rows(root, spec, kind):
            if nemo.case_id(kind, row) == case:
                return nemo.scenario_of(row, root, spec, "x", kind)["strategy"]
    raise AssertionError(case)


@pytest.mark.parametrize("case", [
    "parallel/bridge/gb200/26.08/deepseekv3-256gpu-mxfp8-gbs4096",
    "parallel/bridge/b200/26.02/deepseekv3-256gpu-mxfp8-gbs4096",
    "parallel/bridge/gb200/25.11/deepseekv3-w-o-mtp-256gpu-bf16-gbs4096",
    "parallel/bridge/b200/25.11/deepseekv3-w-mtp-256gpu-fp8-mx-gbs2048"])
def test_deepseek_rows_run_their_recipes_bf16_moments(case):
    """Megatron-Bridge's DeepSeek-V3 recipe (every release): precision-aware, fp32 master
    weights, bf16 main grads and moments (cases.yaml bridge_recipes)."""
    s = _bridge_scenario(case)
    assert s["use_precision_aware_optimizer"] is True
    assert (s["main_grads_dtype"], s["exp_avg_dtype"], s["exp_avg_sq_dtype"]) == \
        ("bf16", "bf16", "bf16")
    assert s.get("main_params_dtype", "fp32") == "fp32"
    MegatronConfig(**{k: v for k, v in s.items() if k != "name"})     # accepted


@pytest.mark.parametrize("case, aware", [
    # BF16 with Adam: the launcher's precision-aware optimizer with fp32 dtypes
    ("parallel/bridge/25.11/gpt-oss-120b-64gpu", True),
    ("parallel/bridge/gb200/25.11/qwen3-235b-a22b-256gpu-bf16-gbs8192", True),
    # not BF16: the fp32 optimizer as before
    ("parallel/bridge/gb200/26.06/gpt-oss-120b-64gpu-mxfp8-gbs1280", False),
    # Kimi K2's recipe turns it off (and trains with Muon, not modelled)
    ("parallel/bridge/gb300/26.06/kimi-k2-256gpu-mxfp8-gbs4096", False)])
def test_bf16_rows_run_the_launchers_precision_aware_optimizer(case, aware):
    s = _bridge_scenario(case)
    assert s.get("use_precision_aware_optimizer", False) is aware
    assert s.get("exp_avg_dtype", "fp32") == "fp32"


def test_an_argument_file_with_moments_but_no_flag_exits_2_in_one_line(capsys, tmp_path):
    from test_cli import run_main
    path = tmp_path / "bad.args"
    path.write_text("--use-distributed-optimizer --exp-avg-dtype bf16\n")
    code, out, err = run_main(capsys, "run", "--config", str(path))
    assert code == 2 and out == ""
    assert err.count("\n") == 1
    assert "--exp-avg-dtype" in err and "without use_precision_aware_optimizer" in err

"""Fine-tuning (simulator/models/finetune.py): FLOPs, memory and communication of full,
LoRA and QLoRA fine-tuning against the formulas written out here, in every strategy
(DDP, FSDP, Megatron with TP/CP, DeepSpeed ZeRO), and one price for every spelling."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest

from simulator.errors import ConfigError
from simulator.models import layer_costs, load_model, params_total
from simulator.models.costs import trainable_params
from simulator.models.finetune import NF4_BYTES_PER_PARAM, Finetune
from simulator.models.transformer import block_params
from simulator.pipeline import build_setup
from simulator.scenario import scenario_from_dict

R = 16
LORA = Finetune(mode="lora", rank=R, alpha=32.0, targets=("o", "qkv"), dropout=0.1)
B, S = 1, 512
BASE = load_model("llama-2-7b")
H, F = BASE.hidden, BASE.ffn_hidden
KV = BASE.kv_heads * BASE.head_dim
T = B * S                                     # tokens of the micro-batch


def _block(ft, precision="bf16", tp=1, sp=False, cp=1):
    model = BASE if ft is None else replace(BASE, finetune=ft)
    return layer_costs(model, B, S, precision, tp=tp, sp=sp, cp=cp)


def _gemm_flops(ops, names) -> float:
    return sum(op.flops for op in ops if op.name in names)


BASE_GEMMS = ("qkv_proj", "attn_out", "mlp_gate_up", "mlp_down")


# ------------------------------------------------------------------ FLOPs
def test_a_frozen_linears_backward_is_half_of_full_backward_gemm_flops():
    full, lora = _block(None)[1], _block(LORA)[1]
    grads = [f"{g}.{k}" for g in BASE_GEMMS for k in ("dgrad", "wgrad")]
    full_bwd = _gemm_flops(full.backward, grads)
    # full backward of a Linear (m, k) x (k, n): dgrad 2mkn + wgrad 2mkn
    per_token = 2 * H * (H + 2 * KV) + 2 * H * H + 2 * H * 2 * F + 2 * F * H
    assert full_bwd == pytest.approx(2 * T * per_token)
    assert _gemm_flops(lora.backward, grads) == pytest.approx(full_bwd / 2)
    assert not [op for op in lora.backward if op.name.endswith(".wgrad")
                and not op.name.split(".")[1].startswith("lora")]
    # forward GEMMs of the base are unchanged
    assert _gemm_flops(lora.forward, BASE_GEMMS) == _gemm_flops(full.forward, BASE_GEMMS)


def test_lora_adapter_gemms_forward_and_backward():
    lora = _block(LORA)[1]
    # qkv: A [h, r], B [r, h + 2 kv]; o: A [h, r], B [r, h]
    fwd = 2 * T * (H * R + R * (H + 2 * KV)) + 2 * T * (H * R + R * H)
    adapters_f = [op for op in lora.forward if ".lora_" in op.name and op.op_class == "matmul"]
    adapters_b = [op for op in lora.backward if ".lora_" in op.name and op.op_class == "matmul"]
    assert sum(op.flops for op in adapters_f) == pytest.approx(fwd)
    assert sum(op.flops for op in adapters_b) == pytest.approx(2 * fwd)   # dgrad + wgrad each
    # dropout 0.1 on each adapter's input (h wide for both): read x, write y and a mask
    drops = [op for op in lora.forward if op.name.endswith("lora_qkv.dropout")]
    assert drops and drops[0].bytes_accessed == pytest.approx((2 * 2 + 1) * T * H)
    # the adapters run in the step's 16-bit precision, not FP8 with the base
    fp8 = _block(LORA, precision="fp8")[1]
    assert {op.precision for op in fp8.forward if ".lora_" in op.name and
            op.op_class == "matmul"} == {"bf16"}
    assert {op.precision for op in fp8.forward if op.name in BASE_GEMMS} == {"fp8"}


def test_tensor_parallel_adapters_follow_their_base_gemms_shard():
    tp = 2
    lora = _block(LORA, tp=tp, sp=True)[1]
    # column-parallel qkv: A [h, r] whole, B [r, (h + 2 kv) / tp]; row-parallel o: A [h/tp, r], B [r, h]
    assert lora.params == H * R + R * (H + 2 * KV) // tp + (H // tp) * R + R * H


# ------------------------------------------------------------------ parameters and memory
def test_lora_parameters_and_frozen_bytes():
    full, lora = _block(None)[1], _block(LORA)[1]
    adapter = H * R + R * (H + 2 * KV) + H * R + R * H
    assert lora.params == adapter
    assert lora.frozen_params == full.params == block_params(BASE)
    assert lora.frozen_bytes == 2 * full.params            # bf16 base
    model = replace(BASE, finetune=LORA)
    assert trainable_params(model) == BASE.layers * adapter
    assert params_total(model) == params_total(BASE) + BASE.layers * adapter


def test_qlora_base_is_nf4_with_dequantisation_before_each_frozen_gemm():
    q = Finetune(mode="qlora", rank=R, alpha=16.0, targets=("qkv",))
    block = _block(q)[1]
    linear = H * (H + 2 * KV) + H * H + 2 * H * F + F * H
    norms = 2 * H
    assert NF4_BYTES_PER_PARAM == pytest.approx((4 + 8 / 64 + 32 / (64 * 256)) / 8)
    assert block.frozen_bytes == round(linear * NF4_BYTES_PER_PARAM) + 2 * norms
    deq = [op for op in (*block.forward, *block.backward) if op.name.startswith("dequant_nf4")]
    # four GEMMs forward, their four input-gradient GEMMs backward
    assert len(deq) == 8
    assert sum(op.bytes_accessed for op in deq) == pytest.approx(
        2 * linear * (NF4_BYTES_PER_PARAM + 2))


def test_frozen_weights_inputs_are_not_saved_unless_an_adapter_reads_them():
    full = _block(None)[1]
    no_drop = _block(replace(LORA, dropout=0.0))[1]
    # attention-only LoRA: the MLP's inputs (norm2 output, h; the SwiGLU output, f) are read
    # only by frozen GEMMs' weight gradients; A's output (r) is saved per adapter
    assert no_drop.activation_bytes == full.activation_bytes - 2 * T * (H + F) + 2 * 2 * T * R


def test_full_fine_tuning_with_frozen_embedding_and_first_blocks():
    ft = Finetune(mode="full", freeze_embedding=True, freeze_layers=2)
    layers = _block(ft)
    full = _block(None)
    assert layers[0].params == 0 and layers[0].backward == ()
    assert layers[0].frozen_params == full[0].params
    for i in (1, 2):       # nothing below them trains: no backward, nothing saved
        assert layers[i].backward == () and layers[i].activation_bytes == 0
        assert layers[i].params == 0 and layers[i].frozen_bytes == 2 * full[i].params
    assert layers[3].params == full[3].params and layers[3].backward == full[3].backward
    assert Finetune().trains_all and _block(Finetune()) == full


# ------------------------------------------------------------------ strategies
SCN = {"name": "ft", "model": "llama-2-7b", "cluster": {"topology": "dgx-a100"},
       "simulation": {"variability": "none"},
       "training": {"seq_len": S, "micro_batch": 1, "grad_accum": 1, "precision": "bf16"}}
SECTION = {"mode": "lora", "rank": R, "alpha": 32, "dropout": 0.1,
           "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}


def _trace(strategy: dict, section: dict | None = SECTION, training=None):
    data = copy.deepcopy(SCN)
    data["strategy"] = strategy
    data["training"].update(training or {})
    if section is not None:
        data["training"]["finetune"] = section
    return build_setup(scenario_from_dict(data), extrapolate_steps=False).trace


def _collective_bytes(trace, kind: str, name_part: str = "") -> int:
    return sum(op.size_bytes for cls in trace.classes[:1] for op in cls.ops
               if op.collective == kind and name_part in op.name)


def _hf_adapter_params(tp: int = 1) -> int:
    """q, k, v, o adapters on one rank: each A [k, r], B [r, n] (HF PEFT: separate q, k, v)."""
    qkv_n = (H + 2 * KV) // tp
    return BASE.layers * (3 * H * R + R * qkv_n + (H // tp) * R + R * H)


def test_ddp_reduces_only_adapter_gradients_and_holds_the_base():
    trace = _trace({"name": "ddp"})
    adapters = _hf_adapter_params()
    frozen = 2 * params_total(BASE)
    grad_bytes = 2      # DDP's all-reduce in the step's bf16 (autocast grads match params)
    reduced = _collective_bytes(trace, "all_reduce")
    assert reduced in (adapters * grad_bytes, adapters * 4)
    per = reduced // adapters
    # static: adapter weights, gradients, fp32 master + Adam (16 - w - g + ...), base bf16
    cls = trace.classes[0]
    from simulator.strategies.ddp import static_bytes_per_param
    from simulator.strategies import parse_strategy
    cfg = parse_strategy({"name": "ddp", "precision": "bf16", "micro_batch": 1})
    assert per == cfg.grad_reduce_bytes()
    assert cls.static_memory_bytes == adapters * static_bytes_per_param(cfg) + frozen
    assert trace.meta["trainable_params"] == adapters


def test_fsdp_gathers_the_frozen_base_and_reduce_scatters_only_adapters():
    trace = _trace({"name": "fsdp", "sharding": "FULL_SHARD"})
    full = _trace({"name": "fsdp", "sharding": "FULL_SHARD"}, section=None)
    n = 8
    adapter_units = _hf_adapter_params() // BASE.layers
    # reduce-scatter: per block its adapters, padded to 8 shards, in fp32 (FSDP's default
    # reduce dtype here) or bf16; the root (embedding, final norm, head) is frozen: none
    rs = [op for op in trace.classes[0].ops if op.collective == "reduce_scatter"]
    assert len(rs) == BASE.layers and not [op for op in rs if "root" in op.name]
    padded = -(-adapter_units // n) * n
    assert {op.size_bytes for op in rs} in ({padded * 4}, {padded * 2})
    # all-gathers: the same count as pre-training (frozen weights are gathered as any);
    # a block's gather is its bf16 base padded plus its adapters at param_dtype
    ag = [op for op in trace.classes[0].ops if op.collective == "all_gather"]
    ag_full = [op for op in full.classes[0].ops if op.collective == "all_gather"]
    assert len(ag) == len(ag_full)
    base = 2 * block_params(BASE)
    block_ag = {op.size_bytes for op in ag if "block" in op.name}
    assert len(block_ag) == 1
    size = block_ag.pop()
    assert size - (-(-base // n) * n) in (padded * 2, padded * 4)
    # static: 16 bytes per sharded adapter parameter + the base's shard
    static = trace.classes[0].static_memory_bytes
    units = BASE.layers * -(-adapter_units // n)
    frozen = sum(-(-b // n) for b in [base] * BASE.layers + [2 * (params_total(BASE) -
                                                                  BASE.layers * block_params(BASE))])
    assert static == 16 * units + frozen


def test_megatron_tp_cp_reduces_adapters_over_data_parallel_ranks_only():
    strategy = {"name": "megatron", "tensor_model_parallel_size": 2, "sequence_parallel": True,
                "context_parallel_size": 2, "use_distributed_optimizer": True}
    trace = _trace(strategy, section={**SECTION, "target_modules": ["linear_qkv",
                                                                       "linear_proj"]})
    tp = 2
    per_rank = BASE.layers * (H * R + R * (H + 2 * KV) // tp + (H // tp) * R + R * H)
    grads = _collective_bytes(trace, "reduce_scatter", "grads")
    assert grads == per_rank * 4            # Megatron's fp32 gradient buffer
    gathers = _collective_bytes(trace, "all_gather", "params")
    assert gathers == per_rank * 2          # the updated adapters, bf16
    # static: adapters (w + g) + 12 / d over the d = dp x cp ranks, plus the TP shard of
    # the bf16 base, whole on each rank
    cls = trace.classes[0]
    base = sum(layer.frozen_bytes for layer in layer_costs(
        replace(BASE, finetune=Finetune(mode="lora", rank=R, alpha=32.0,
                                        targets=("o", "qkv"), dropout=0.1)),
        1, S, "bf16", tp=tp, sp=True, cp=2))
    group = 8 // tp                         # gradients reduce over dp x cp ranks
    assert cls.static_memory_bytes == per_rank * (2 + 4) + -(-per_rank * 12 // group) + base


@pytest.mark.parametrize("stage", [1, 3])
def test_deepspeed_zero_reduces_only_adapters(stage):
    trace = _trace({"name": "deepspeed", "zero_optimization": {"stage": stage}})
    adapters = _hf_adapter_params()
    kinds = {op.collective for op in trace.classes[0].ops if op.collective}
    reduced = sum(op.size_bytes for op in trace.classes[0].ops
                  if op.collective in ("reduce_scatter", "all_reduce"))
    assert reduced > 0
    if stage == 3:   # ZeRO-3 = FSDP: per block, adapters padded to 8 shards
        assert reduced <= (adapters + 8 * BASE.layers) * 4
        assert "all_gather" in kinds
    else:            # ZeRO-1: adapters' buckets only, fp32 or bf16
        assert reduced in (adapters * 4, adapters * 2)


# ------------------------------------------------------------------ one path, one price
def _ops(trace):
    return [(op.name, op.kind, op.flops, op.bytes_accessed, op.collective, op.size_bytes)
            for cls in trace.classes for op in cls.ops]


def test_megatron_peft_spelling_is_training_finetune():
    strategy = {"name": "megatron", "tensor_model_parallel_size": 2, "sequence_parallel": True}
    native = _trace({**strategy, "peft": "lora",
                     "lora": {"dim": R, "alpha": 32, "dropout": 0.1,
                              "target_modules": ["linear_qkv", "linear_proj"]}}, section=None)
    ours = _trace(strategy, section={"mode": "lora", "rank": R, "alpha": 32, "dropout": 0.1,
                                     "target_modules": ["attention"]})
    assert _ops(native) == _ops(ours)
    assert native.classes[0].static_memory_bytes == ours.classes[0].static_memory_bytes


@pytest.mark.parametrize("name", ["fsdp", "ddp"])
def test_hf_peft_spelling_is_training_finetune(name):
    native = _trace({"name": name, "lora_config": {"r": R, "lora_alpha": 32,
                                                   "lora_dropout": 0.1,
                                                   "target_modules": ["q_proj", "k_proj",
                                                                      "v_proj", "o_proj"]}},
                    section=None)
    ours = _trace({"name": name})
    assert _ops(native) == _ops(ours)
    q4 = _trace({"name": name, "load_in_4bit": True,
                 "lora_config": {"r": R, "lora_alpha": 32, "lora_dropout": 0.1,
                                 "target_modules": "all-linear"}}, section=None)
    q4_ours = _trace({"name": name}, section={**SECTION, "mode": "qlora",
                                              "target_modules": ["all-linear"]})
    assert _ops(q4) == _ops(q4_ours)


@pytest.mark.parametrize("strategy, section, field", [
    ({"name": "fsdp", "peft": "lora"}, None, "strategy.peft"),
    ({"name": "megatron", "lora_config": {"r": 8}}, None, "strategy.lora_config"),
    ({"name": "megatron", "peft": "lora"}, SECTION, "training.finetune"),
    ({"name": "ddp"}, {**SECTION, "rank": 0}, "finetune.rank"),
    ({"name": "ddp"}, {**SECTION, "target_modules": ["w_qkv"]}, "training.finetune.target_modules"),
    ({"name": "ddp"}, {**SECTION, "colour": 1}, "training.finetune.colour"),
    ({"name": "ddp"}, {"mode": "full", "rank": 8}, "finetune.mode"),
    ({"name": "fsdp", "load_in_4bit": True}, None, "strategy.load_in_4bit"),
    ({"name": "fsdp", "wrap": "submodule"}, SECTION, "strategy.wrap"),
])
def test_settings_the_simulator_cannot_honour_are_refused_naming_the_field(strategy, section,
                                                                          field):
    with pytest.raises(ConfigError) as err:
        _trace(strategy, section=section)
    assert field in str(err.value)


@pytest.mark.parametrize("key, value, words", [
    ("rank", 2.5, "must be an integer, got 2.5"),
    ("rank", True, "must be an integer, got True"),
    ("alpha", "x", "must be a number, got 'x'"),
])
def test_a_count_that_is_not_an_integer_says_so(key, value, words):
    with pytest.raises(ConfigError) as err:
        _trace({"name": "ddp"}, section={**SECTION, key: value})
    assert words in str(err.value) and f"finetune.{key}" in str(err.value)


def test_moe_and_cnn_fine_tuning_is_refused():
    with pytest.raises(ConfigError, match="dense transformers"):
        layer_costs(replace(load_model("mixtral-8x7b"), finetune=LORA), 1, 128, "bf16")


def test_sequence_parallel_does_not_regather_a_frozen_gemms_input_in_backward():
    strategy = {"name": "megatron", "tensor_model_parallel_size": 2, "sequence_parallel": True}
    section = {**SECTION, "target_modules": ["linear_qkv", "linear_proj"]}

    def backward_gathers(trace):
        return [op.name for op in trace.classes[0].ops if op.collective == "all_gather"
                and op.phase == "backward" and ".block.0." in op.name]

    full = backward_gathers(_trace(strategy, section=None))
    lora = backward_gathers(_trace(strategy, section=section))
    # pre-training: dY of the row-parallel GEMMs (mlp_down, attn_out) and the inputs of the
    # column-parallel ones again for their weight gradients (mlp_gate_up, qkv_proj)
    assert len(full) == 4 and len(lora) == 2
    assert all("mlp_down" in n or "attn_out" in n for n in lora)


def test_tensorflow_strategies_refuse_fine_tuning():
    with pytest.raises(ConfigError, match="training.finetune"):
        _trace({"name": "tf_mirrored"})


def test_capacity_probes_a_ladder_model_as_the_scenario_fine_tunes_it():
    from simulator.capacity.probe import Prober, parse_strategy_specs
    data = copy.deepcopy(SCN)
    data["training"]["finetune"] = SECTION
    data["strategy"] = {"name": "ddp"}
    prober = Prober(scenario_from_dict(data), parse_strategy_specs("ddp")[0])
    model = load_model("llama-2-13b")
    trace = prober.setup_for(model).trace
    m = replace(model, finetune=Finetune(mode="lora", rank=R, alpha=32.0,
                                         targets=("k", "o", "q", "v"), dropout=0.1))
    assert trace.meta["trainable_params"] == trainable_params(m)
    # weights, gradients, fp32 master and Adam of the adapters; the bf16 base
    from simulator.strategies.ddp import static_bytes_per_param
    assert trace.classes[0].static_memory_bytes == (
        trainable_params(m) * static_bytes_per_param(prober.cfg)
        + 2 * (params_total(m) - trainable_params(m)))


def test_plan_refuses_a_fine_tuning_it_cannot_size():
    """plan prices LoRA (tests/test_plan_finetune.py); frozen first blocks make the
    blocks differ, which its one-block estimate cannot price."""
    from simulator.planner.search import search
    data = copy.deepcopy(SCN)
    data["training"]["finetune"] = {"mode": "full", "freeze_layers": 2}
    data["strategy"] = {"name": "megatron"}
    with pytest.raises(ConfigError, match="freeze_layers") as exc:
        search(scenario_from_dict(data), 8)
    assert exc.value.field == "training.finetune.freeze_layers"


def test_an_fp8_base_holds_one_byte_per_gemm_weight_and_casts_only_activations():
    fp8 = replace(LORA, base_precision="fp8")
    bf16_block = _block(LORA, precision="fp8")[1]
    block = _block(fp8, precision="fp8")[1]
    linear = H * (H + 2 * KV) + H * H + 2 * H * F + F * H
    assert block.frozen_bytes == linear * 1 + 2 * (2 * H)     # GEMM weights 1 B, norms 2 B
    casts = {op.name: op.bytes_accessed for op in bf16_block.forward
             if op.name.startswith("float8_cast.")}
    cast8 = {op.name: op.bytes_accessed for op in block.forward
             if op.name.startswith("float8_cast.")}
    # tensorwise: 5 bytes per element cast; the bf16 base casts x [t, k] and w [k, n], the
    # FP8 base x only: the difference is the weights, 5 bytes each
    assert sum(casts.values()) - sum(cast8.values()) == pytest.approx(5 * linear)
    with pytest.raises(ConfigError, match="base_precision"):
        _trace({"name": "ddp"}, section={**SECTION, "base_precision": "fp8"})
    with pytest.raises(ConfigError, match="base_precision"):
        Finetune(mode="qlora", rank=R, targets=("q",), base_precision="fp8")


def test_switching_strategy_keeps_a_frameworks_own_spelling():
    from simulator.compare.runner import with_strategy
    from simulator.choices import NAMED_STRATEGIES
    data = copy.deepcopy(SCN)
    data["strategy"] = {"name": "megatron", "peft": "lora",
                        "lora": {"dim": R, "alpha": 32, "dropout": 0.1,
                                 "target_modules": ["linear_qkv", "linear_proj"]}}
    switched = with_strategy(scenario_from_dict(data), NAMED_STRATEGIES["ddp"])
    assert "peft" not in switched.strategy and switched.strategy["name"] == "ddp"
    assert switched.training.finetune["target_modules"] == ["o", "qkv"]
    trace = build_setup(switched, extrapolate_steps=False).trace
    ours = _trace({"name": "ddp"}, section={"mode": "lora", "rank": R, "alpha": 32,
                                            "dropout": 0.1, "target_modules": ["attention"]})
    assert _ops(trace) == _ops(ours)


def test_identical_blocks_stay_one_ops_tuple():
    # generators and the variable-length mix price identical blocks once (by identity)
    layers = _block(LORA)
    assert layers[1].forward is layers[2].forward and layers[1].backward is layers[-2].backward
    assert [x.name for x in layers[1:3]] == ["block.0", "block.1"]

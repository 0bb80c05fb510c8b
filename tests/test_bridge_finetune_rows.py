"""Megatron-Bridge 26.06's LLAMA3_70B fine-tuning rows of the Blackwell table
(validation/parallel/cases.yaml ``bridge_tasks``): a LoRA row runs as its performance config
sets it, with the trainable parameters and gradient bytes of that setup written out here;
the SFT rows stay listed with their reason."""

from __future__ import annotations

import math
from dataclasses import replace
from types import SimpleNamespace

import pytest

from simulator.models import load_model
from simulator.models.costs import trainable_params
from simulator.models.finetune_spellings import from_section
from simulator.pipeline import build_setup
from simulator.scenario import scenario_from_dict
from simulator.validation.parallel import cases as pc
from simulator.validation.parallel.nemo import nemo_rows, scenario_of, table_rows

ROOT = pc.default_root()
LORA_CASE = "parallel/bridge/gb300/26.06/llama3-70b-8gpu-fp8-lora-gbs32"


@pytest.fixture(scope="module")
def spec():
    return pc.load(ROOT)


def _row(spec, case):
    from simulator.validation.parallel.nemo import case_id
    return next(r for r in table_rows(ROOT, spec, "blackwell")
                if case_id("blackwell", r) == case)


def test_a_lora_row_runs_its_performance_config(spec):
    sc = scenario_of(_row(spec, LORA_CASE), ROOT, spec, "x", "blackwell")
    st, tr = sc["strategy"], sc["training"]
    # llama3_70b_peft_config: dim 16, alpha 32; _peft_common: dropout 0; the perf config:
    # linear_qkv only; fp8_param_gather: the frozen base in FP8
    assert tr["finetune"] == {"mode": "lora", "rank": 16, "alpha": 32, "dropout": 0.0,
                              "target_modules": ["linear_qkv"], "base_precision": "fp8"}
    assert st["cross_entropy_loss_fusion"] is False and st["disable_parameter_transpose_cache"]
    assert (st["tensor_model_parallel_size"], st["pipeline_model_parallel_size"],
            st["virtual_pipeline_model_parallel_size"]) == (1, 2, 20)
    # GBS 32 on 8 GPUs as TP1 x PP2: data parallel 4, 32 / (1 x 4) = 8 micro-batches of 1
    assert (tr["grad_accum"], tr["micro_batch"], tr["seq_len"]) == (8, 1, 4096)
    assert "peft" not in st and "lora" not in st          # spelled once, as training.finetune


def test_the_lora_rows_trainable_parameters_and_reduced_gradient_bytes(spec):
    sc = scenario_of(_row(spec, LORA_CASE), ROOT, spec, "x", "blackwell")
    model = load_model("llama-3-70b")
    h, q, kv = model.hidden, model.heads * model.head_dim, model.kv_heads * model.head_dim
    assert (h, q, kv, model.layers) == (8192, 8192, 1024, 80)
    ft = from_section(sc["training"]["finetune"], swiglu=True)
    # one adapter per block on the fused QKV GEMM: A [8192, 16] + B [16, 8192 + 2 x 1024]
    per_block = 8192 * 16 + 16 * (8192 + 2 * 1024)
    assert per_block == 131072 + 163840 == 294912
    assert trainable_params(replace(model, finetune=ft)) == 80 * per_block == 23592960
    # the distributed optimizer reduce-scatters only the adapters' gradients, in bf16
    # (grad_reduce_in_fp32 false): a PP2 stage holds 40 blocks
    trace = build_setup(scenario_from_dict(sc), extrapolate_steps=False).trace
    grads = sum(op.size_bytes for op in trace.classes[0].ops
                if op.collective == "reduce_scatter" and "grads" in op.name)
    assert grads == 40 * per_block * 2 == 23592960


def test_lora_rows_are_simulated_and_sft_rows_keep_their_reason(spec):
    seen = []

    def simulate(scenario, case):
        seen.append(case)
        return SimpleNamespace(iteration_time_s=1.0, peak_memory_gib=50.0, oom=False)
    rows = [r for r in nemo_rows(ROOT, spec, simulate_fn=simulate, kinds=("blackwell",))
            if "-lora-" in r["case"] or "-sft-" in r["case"]]
    lora = [r for r in rows if "-lora-" in r["case"]]
    sft = [r for r in rows if "-sft-" in r["case"]]
    assert len(lora) == len(sft) == 4
    for r in lora:
        assert r["case"] in seen and not math.isnan(r["error"])
        assert "LoRA dim 16 alpha 32 on linear_qkv" in r["note"]
        assert "upper bound" in r["note"]
    for r in sft:
        assert r["case"] not in seen and math.isnan(r["error"])
        assert "SQuAD" in r["note"] and "not published" in r["note"]
    assert "LoRA" not in spec.nemo_not_modelled

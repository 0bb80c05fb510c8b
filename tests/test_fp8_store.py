"""Saved tensors kept in FP8 (simulator/models/fp8_store.py): Transformer Engine's FP8
attention keeps Q, K, V and O in FP8 (``training.fp8_attention``), Megatron-Core's
``activation_func_fp8_input_store`` the SwiGLU input (``training.fp8_activation_input``,
NeMo's ``FP8_ACT=1``). The bytes are checked against the formulas written out here, the
MLPerf v5.0 B200 LoRA row (TP1 CP1, every submitter's config sets ``FP8_ACT=1``) against its
180 GB, and the settings the simulator cannot honour are refused naming the field."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest

from simulator.errors import ConfigError
from simulator.models import layer_costs, load_model
from simulator.models.fp8_store import fp8_stored
from simulator.pipeline import build_setup, run_setup
from simulator.scenario import scenario_from_dict
from simulator.validation.finetune import DATA_V50, load_split, mlperf_rows, scenario_of

T, H, F, Q, KV = 8192, 8192, 28672, 8192, 8 * 128      # Llama 2 70B, one 8,192-token row
E = 2                                                    # bf16 bytes an element
LLAMA = load_model("llama-2-70b")


def _block(stores=(), tp=1, sp=False, model=LLAMA):
    layers = layer_costs(replace(model, fp8_stores=stores), 1, T, "fp8", True,
                         tp=tp, sp=sp, fp8_recipe="delayed")
    return next(layer for layer in layers if layer.kind == "transformer_block")


def _saved(block) -> dict:
    return {op.name: op.saved_bytes for op in block.forward if op.saved_bytes}


def test_the_swiglu_input_is_kept_in_one_byte_and_cast_twice():
    base, act = _block(), _block(("activation_input",))
    assert _saved(base)["mlp_gate_up"] == E * T * 2 * F          # 16-bit gate and up
    assert _saved(act)["mlp_gate_up"] == 1 * T * 2 * F           # 469,762,048 bytes
    assert base.activation_bytes - act.activation_bytes == (E - 1) * T * 2 * F
    names = [op.name for op in act.forward]
    assert names[names.index("swiglu") + 1] == "swiglu.fp8_store"
    bwd = [op.name for op in act.backward]
    assert bwd[bwd.index("swiglu.bwd") - 1] == "swiglu.fp8_load"
    for op in (act.forward[names.index("swiglu.fp8_store")],
               act.backward[bwd.index("swiglu.fp8_load")]):
        assert op.op_class == "elementwise"
        assert op.bytes_accessed == (2 + 1) * T * 2 * F          # read 16 bits, write 8
    assert len(act.forward) == len(base.forward) + 1
    assert {k: v for k, v in _saved(act).items() if k != "mlp_gate_up"} == \
        {k: v for k, v in _saved(base).items() if k != "mlp_gate_up"}


def test_fp8_attention_keeps_q_k_v_and_o_in_one_byte():
    base, att = _block(), _block(("attention",))
    assert _saved(base)["qkv_proj"] == E * T * (Q + 2 * KV)
    assert _saved(att)["qkv_proj"] == T * (Q + 2 * KV)
    assert _saved(att)["attn_core"] == T * Q
    assert base.activation_bytes - att.activation_bytes == (E - 1) * T * (2 * Q + 2 * KV)
    assert [op.name for op in att.forward] == [op.name for op in base.forward]   # no kernel


def test_under_tensor_parallelism_the_rank_keeps_its_shard():
    tp = 4
    block = _block(("attention", "activation_input"), tp=tp, sp=True)
    saved = _saved(block)
    assert saved["mlp_gate_up"] == T * 2 * F // tp
    assert saved["qkv_proj"] == T * (Q + 2 * KV) // tp and saved["attn_core"] == T * Q // tp


def test_no_store_and_16_bit_tensors_are_left_alone():
    layers = layer_costs(LLAMA, 1, 1024, "bf16", True)
    assert fp8_stored(layers, (), 2) is layers
    assert fp8_stored(layers, ("activation_input",), 1) is layers      # already 1 byte
    with pytest.raises(ValueError):
        fp8_stored(layers, ("weights",), 2)


# --- the MLPerf v5.0 B200 LoRA row ---------------------------------------------------------

B200_HBM = 180e9
GIB = 2 ** 30


def _row_scenario(system="nyx_n1_ngc25.04_nemo") -> dict:
    return scenario_of(mlperf_rows(data=DATA_V50)[system], load_split())


def _run(scn: dict):
    return run_setup(build_setup(scenario_from_dict(scn, scn["name"]), scn["name"])).metrics


def test_the_b200_row_fits_its_180_gb_with_the_configs_fp8_swiglu_input():
    scn = _row_scenario()
    assert scn["training"]["fp8_activation_input"] is True       # FP8_ACT=1 in its config
    assert scn["training"]["fp8_attention"] is True              # FP8_DPA=1
    m = _run(scn)
    assert not m.oom and m.peak_memory_gib * GIB < B200_HBM
    # without it: 80 blocks keep 2 t f more bytes, (80 x 8192 x 2 x 28672) / 2^30 = 35 GiB
    without = copy.deepcopy(scn)
    del without["training"]["fp8_activation_input"]
    w = _run(without)
    assert w.oom
    assert w.peak_memory_gib - m.peak_memory_gib == pytest.approx(80 * T * 2 * F / GIB, abs=0.01)


def test_the_table_marks_every_config_that_sets_it():
    rows = mlperf_rows(data=DATA_V50)
    marked = {s for s, r in rows.items() if r["fp8_act"] == "yes"}
    tp1cp1 = {s for s, r in rows.items() if r["gpu_model"] in ("B200", "GB200")
              and r["tp"] == "1" and r["cp"] == "1"}
    assert tp1cp1 <= marked                        # NVIDIA's TP1 CP1 configs: FP8_ACT=1
    assert not {s for s in marked if rows[s]["gpu_model"].startswith("MI")}   # AMD: no


def _lora(strategy: dict, model="llama-2-7b", **training) -> dict:
    return {"name": "t", "model": model, "cluster": {"topology": "dgx-h100", "gpus": 8},
            "strategy": strategy,
            "training": {"micro_batch": 1, "seq_len": 2048, "precision": "fp8",
                         "fp8_recipe": "delayed", "fp8_activation_input": True, **training}}


@pytest.mark.parametrize("strategy, model, words", [
    ({"name": "fsdp"}, "llama-2-7b", "megatron strategy"),
    ({"name": "megatron"}, "gpt3-1.3b", "gelu"),
])
def test_what_megatron_cannot_run_is_refused_naming_the_field(strategy, model, words):
    scn = _lora(strategy, model)
    with pytest.raises(ConfigError) as err:
        build_setup(scenario_from_dict(scn, "t"), "t")
    assert err.value.field.endswith("training.fp8_activation_input")
    assert words in str(err.value)


def test_megatrons_spelling_is_the_training_key():
    scn = _lora({"name": "megatron", "activation_func_fp8_input_store": True})
    del scn["training"]["fp8_activation_input"]
    assert scenario_from_dict(scn, "t").training.fp8_activation_input is True


class _Mirror:
    """A mirror of three files (the extractor reads ``files`` and ``read``)."""

    def __init__(self, files: dict):
        self.files, self._text = list(files), files

    def read(self, name: str) -> str:
        return self._text[name]


def test_the_extractor_reads_the_variable_the_nemo_config_maps():
    import importlib.util
    from simulator.validation.finetune import ROOT
    spec = importlib.util.spec_from_file_location("extract_v50", ROOT / "extract_mlperf_v50.py")
    extract = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(extract)
    impl = "X/benchmarks/llama2_70b_lora/implementations/nemo/"
    nvidia = "NVIDIA/benchmarks/llama2_70b_lora/implementations/n1/"
    conf = "  activation_func_fp8_input_store: ${oc.decode:${oc.env:%s,0}}\n"
    mirror = _Mirror({impl + "conf/megatron_gpt_peft_tuning_config.yaml": conf % "FP8_ACTIVATION",
                      nvidia + "conf/megatron_gpt_peft_tuning_config.yaml": conf % "FP8_ACT",
                      impl + "config_a.sh": "", "Y/benchmarks/llama2_70b_lora/"
                      "implementations/bare/config_b.sh": ""})
    assert extract.fp8_act(mirror, impl + "config_a.sh", {"FP8_ACTIVATION": "True"}) == "yes"
    assert extract.fp8_act(mirror, impl + "config_a.sh", {"FP8_ACT": "1"}) == ""   # not read
    bare = "Y/benchmarks/llama2_70b_lora/implementations/bare/config_b.sh"   # NVIDIA's conf
    assert extract.fp8_act(mirror, bare, {"FP8_ACT": "1"}) == "yes"
    assert extract.fp8_act(mirror, bare, {}) == ""


def test_compare_runs_it_where_the_strategy_has_it_and_says_why_not_elsewhere(capsys):
    """Megatron-Core's setting in a comparison: compare's reference check (a ddp run of
    everything but the strategy) leaves it out, the megatron row takes it, the fsdp row
    cannot run it and says so in its row."""
    import json
    from test_cli import run_main
    code, out, err = run_main(capsys, "compare", "llama2-70b-lora-mi300x", "--set",
                              "cluster.topology=dgx-b200", "--set",
                              "training.fp8_activation_input=true", "--strategies",
                              "megatron,fsdp", "--format", "json", "-q")
    assert code == 0, err
    rows = {r["strategy"]: r for r in json.loads(out)["rows"]}
    assert rows["megatron"]["status"] == "ok"
    assert rows["fsdp-full"]["status"] != "ok"
    assert "fp8_activation_input" in rows["fsdp-full"]["reason"]

"""Megatron on Blackwell (issue 40): the declared split, Megatron-Bridge's B200/GB200 rows as
the runs they describe, SimuMax's B200 runs, the MXFP8 recipe and the Blackwell fit."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from simulator.compute.training_fit import family_of, read_fit
from simulator.errors import ConfigError
from simulator.hardware import gpu_spec
from simulator.models import load_model
from simulator.models.fp8 import CAST_TRANSPOSE_BYTES, MX_CAST_BYTES, fp8_layer
from simulator.models.ops import LayerCost, OpCost
from simulator.validation.parallel import blackwell_fit, nemo, simumax
from simulator.validation.parallel import cases as pc
from simulator.validation.parallel.iteration import simulate

ROOT = pc.default_root()
SHARED = Path(__file__).resolve().parents[1].parent.parent / "shared" / "validation-data"


@pytest.fixture(scope="module")
def spec():
    return pc.load(ROOT)


@pytest.fixture(scope="module")
def rows(spec):
    return {nemo.case_id("blackwell", r): r for r in nemo.table_rows(ROOT, spec, "blackwell")}


def _simumax(spec, case):
    return next(r for r in pc.read_rows(ROOT, spec.files.simumax, simumax.COLUMNS)
                .to_dict("records") if r["case"] == case)


# ------------------------------------------------------------------- the split and the data
def test_the_declared_split_calibrates_only_simumaxs_dense_b200_rows(spec):
    split = spec.blackwell_split
    assert list(split.calibration) == [spec.files.simumax]          # no Bridge row
    df = pd.read_csv(ROOT / spec.files.simumax, keep_default_na=False)
    dense = df[(df.ep == 1) & (df.cp == 1) & (df.in_formal_table == "yes")]
    assert set(split.calibration[spec.files.simumax]) == set(dense.case)
    assert len(dense) == 24 and split.constants == ["matmul", "attention"]
    assert spec.files.bridge_blackwell in split.validation
    assert spec.calibrated and all(c.startswith(spec.files.simumax) for c in spec.calibrated)


@pytest.mark.parametrize("name", ["megatron_bridge_blackwell.csv", "simumax_b200_measured.csv"])
def test_the_blackwell_csvs_are_the_shared_files_unedited(name):
    assert (ROOT / name).is_file()
    df = pd.read_csv(ROOT / name)
    assert df.source.str.len().min() > 0
    original = SHARED / "training" / name
    if original.is_file():
        assert (ROOT / name).read_bytes() == original.read_bytes()


def test_one_row_per_table_row_with_a_unique_case(spec, rows):
    df = pd.read_csv(ROOT / spec.files.bridge_blackwell, keep_default_na=False)
    assert len(rows) == (df.variant == "primary").sum() == 240


@pytest.mark.parametrize("model,layers", [("llama-3-70b", 12), ("llama-3-70b", 8),
                                          ("llama-3-405b", 4)])
def test_truncated_models_are_the_catalog_model_cut(spec, model, layers):
    key = f"{model.replace('llama-3', 'llama3')}/{layers}"
    cut, whole = pc.model_for(ROOT, spec.simumax_models[key]), load_model(model)
    assert cut.layers == layers
    for field in ("hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "mlp", "norm"):
        assert getattr(cut, field) == getattr(whole, field)


def test_truncated_deepseek_v3_is_the_catalog_model_cut_with_one_dense_layer(spec):
    """The launcher's deepseek_v3 (NUM_LAYER 4, MOE_LAYER_FREQ ([0]*1+[1]*3)): the catalog
    model's widths, MLA and experts, 4 layers of which the first is dense, no MTP."""
    cut, whole = pc.model_for(ROOT, spec.simumax_models["deepseekv3/4"]), load_model("deepseek-v3")
    assert (cut.layers, cut.first_dense_layers, cut.mtp_layers) == (4, 1, 0)
    for field in ("hidden", "heads", "ffn_hidden", "vocab", "num_experts", "top_k",
                  "moe_ffn_hidden", "shared_experts", "q_lora_rank", "kv_lora_rank",
                  "qk_nope_dim", "qk_rope_dim", "v_dim"):
        assert getattr(cut, field) == getattr(whole, field), field


# ------------------------------------------------------------ Bridge rows as megatron runs
def test_topologies_are_the_real_systems():
    assert nemo.gpus_per_node("dgx-b200-superpod") == 8       # DGX B200
    assert nemo.gpus_per_node("gb200-nvl72") == 72             # one NVLink domain per rack


def test_a_gb200_row_becomes_the_run_it_describes(spec, rows):
    case = "parallel/bridge/gb200/26.04/llama3-70b-64gpu-mxfp8-gbs256"
    sc = nemo.scenario_of(rows[case], ROOT, spec, "x", "blackwell")
    assert sc["cluster"] == {"topology": "gb200-nvl72", "nodes": 1, "gpus": 64}
    st, tr = sc["strategy"], sc["training"]
    assert (st["tensor_model_parallel_size"], st["pipeline_model_parallel_size"],
            st["virtual_pipeline_model_parallel_size"]) == (2, 4, 5)
    assert tr["grad_accum"] == 256 // (1 * 64 // (2 * 4))       # GBS / (MBS x DP)
    assert (tr["precision"], tr["fp8_recipe"]) == ("fp8", "mxfp8")


@pytest.mark.parametrize("gpus,domain", [
    (8, 8), (64, 64), (72, 72),     # one tray count that fits one rack (18 trays): all of it
    (128, 64),                      # 32 trays: the largest divisor up to 18 is 16 -> 64 GPUs
    (256, 64),                      # 64 trays: 16 -> 64 GPUs per rack
    (96, 48)])                      # 24 trays: 12 -> 48 GPUs per rack
def test_gb200_jobs_fill_each_nvlink_domain_as_slurm_segment_does(gpus, domain):
    assert nemo.segment_gpus(gpus, 4, 72) == domain


def test_a_256_gpu_gb200_row_runs_64_gpus_per_rack(spec, rows):
    # Megatron-Bridge's launcher gives Slurm --segment 16 (trays) for 64 GB200 trays: four
    # racks of 64 GPUs, so each stage's EP32 group (32 consecutive ranks) sits in one rack
    case = "parallel/bridge/gb200/26.08/qwen3-235b-a22b-256gpu-mxfp8-gbs8192"
    sc = nemo.scenario_of(rows[case], ROOT, spec, "x", "blackwell")
    assert sc["cluster"] == {"topology": "gb200-nvl72", "nodes": 4,
                             "topology_set": {"params.node.gpus": 64}}
    from simulator.scenario import scenario_from_dict
    from simulator.topology.build import graph_gpus, scenario_graph
    assert graph_gpus(scenario_graph(scenario_from_dict(sc, "x"))) == 256


@pytest.mark.parametrize("case,graphs", [
    # the 26.06 presets (v0.5.0) run GB200's MXFP8 Qwen3 rows with full-iteration CUDA graphs
    ("parallel/bridge/gb200/26.06/qwen3-30b-a3b-8gpu-mxfp8-gbs512", "local"),
    ("parallel/bridge/gb200/26.08/qwen3-235b-a22b-256gpu-mxfp8-gbs8192", "local"),
    # GB300's and B300's presets from the same releases (v0.5.0: *_GB300_FP8_MX_V1 ...)
    ("parallel/bridge/gb300/26.06/qwen3-30b-a3b-8gpu-mxfp8-gbs512", "local"),
    ("parallel/bridge/gb300/26.08/qwen3-235b-a22b-256gpu-mxfp8-gbs8192", "local"),
    ("parallel/bridge/b300/26.06/qwen3-30b-a3b-8gpu-mxfp8-gbs512", "local"),
    ("parallel/bridge/b300/26.04/qwen3-30b-a3b-8gpu-mxfp8-gbs512", None),
    # 26.04's (v0.4.0) graph the router only: eager, as B200's and the dense rows
    ("parallel/bridge/gb200/26.04/qwen3-30b-a3b-8gpu-mxfp8-gbs512", None),
    ("parallel/bridge/b200/26.04/qwen3-30b-a3b-8gpu-mxfp8-gbs512", None),
    ("parallel/bridge/gb200/26.04/llama3-70b-64gpu-mxfp8-gbs256", None)])
def test_a_row_runs_its_releases_preset(spec, rows, case, graphs):
    sc = nemo.scenario_of(rows[case], ROOT, spec, "x", "blackwell")
    assert sc["strategy"].get("cuda_graph_impl") == graphs


@pytest.mark.parametrize("case,cluster", [
    # DGX B300: 8 GPUs a node, as DGX B200
    ("parallel/bridge/b300/26.04/qwen3-235b-a22b-256gpu-mxfp8-gbs8192",
     {"topology": "dgx-b300-superpod", "nodes": 32}),
    ("parallel/bridge/gb300/26.04/qwen3-30b-a3b-8gpu-mxfp8-gbs512",
     {"topology": "gb300-nvl72", "nodes": 1, "gpus": 8}),
    # GB300 trays hold 4 GPUs as GB200's: the launcher's --segment (keyed on 4 GPUs a node)
    # puts 256 GPUs in 4 racks of 64
    ("parallel/bridge/gb300/26.04/llama3-1-405b-256gpu-mxfp8-gbs1536",
     {"topology": "gb300-nvl72", "nodes": 4, "topology_set": {"params.node.gpus": 64}})])
def test_blackwell_ultra_rows_run_on_their_shipped_topologies(spec, rows, case, cluster):
    assert nemo.scenario_of(rows[case], ROOT, spec, "x", "blackwell")["cluster"] == cluster


def test_a_job_that_does_not_fill_its_trays_is_refused():
    with pytest.raises(ConfigError, match="trays of 4"):
        nemo.segment_gpus(130, 4, 72)


def test_a_b200_row_runs_on_dgx_b200_nodes(spec, rows):
    sc = nemo.scenario_of(rows["parallel/bridge/b200/25.11/llama3-1-405b-128gpu-fp8-cs-gbs64"],
                          ROOT, spec, "x", "blackwell")
    assert sc["cluster"] == {"topology": "dgx-b200-superpod", "nodes": 16}
    assert sc["strategy"]["context_parallel_size"] == 2
    assert sc["training"]["grad_accum"] == 64 // (1 * 128 // (4 * 8 * 2))
    assert sc["training"]["fp8_recipe"] == "current"


def test_rows_the_simulator_cannot_run_say_why(spec):
    out = {r["case"]: r for r in nemo.nemo_rows(ROOT, spec, kinds=("blackwell",),
                                                 simulate_fn=_refuse_all)}
    notes = {k: v["note"] for k, v in out.items()}
    # B300 and GB300 run on their shipped topologies (validation rows like B200's)
    assert notes["parallel/bridge/b300/26.04/qwen3-30b-a3b-8gpu-mxfp8-gbs512"] == (
        "not simulated: not run in this test")
    for case in ("parallel/bridge/gb300/26.04/llama3-70b-64gpu-nvfp4-gbs256",  # NVFP4 runs
                 "parallel/bridge/gb200/26.04/llama3-70b-64gpu-nvfp4-gbs256"):
        assert notes[case] == "not simulated: not run in this test"
    # LoRA rows are simulated (cases.yaml bridge_tasks); the SFT rows' sample lengths are not
    # published, so they are listed with that reason
    assert notes["parallel/bridge/gb200/26.06/llama3-70b-8gpu-fp8-lora-gbs32"] == (
        "not simulated: not run in this test")
    assert "sample lengths" in notes["parallel/bridge/gb200/26.06/llama3-70b-32gpu-fp8-sft-gbs32"]
    assert all(v["gpu"] in ("B200", "GB200", "B300", "GB300") for v in out.values())
    capped = spec.model_copy(update={"nemo_max_micro_batches": 256})
    big = {r["case"]: r["note"] for r in nemo.nemo_rows(ROOT, capped, kinds=("blackwell",),
                                                        simulate_fn=_refuse_all)}
    assert "384 micro-batches per pipeline" in big[       # GBS 1536 / (MBS 1 x DP 4)
        "parallel/bridge/gb200/26.04/llama3-1-405b-256gpu-fp8-gbs1536"]


def _refuse_all(scenario, case):
    raise ConfigError("not run in this test")


def test_a_gb200_llama3_8b_row_within_20_percent_of_its_measurement(spec, rows):
    row = next(r for r in nemo.nemo_rows(ROOT, spec, kinds=("blackwell",),
                                         simulate_fn=_only(
                                             "parallel/bridge/gb200/25.11/llama3-8b-8gpu"))
               if r["case"].startswith("parallel/bridge/gb200/25.11/llama3-8b-8gpu"))
    assert row["measured"] == 31508                   # tokens/s per GPU, the table's
    assert abs(row["error"]) < 0.20, row


def _only(prefix):
    def run(scenario, case):
        if not case.startswith(prefix):
            raise ConfigError("not run in this test")
        return simulate(scenario, case)
    return run


# ----------------------------------------------------------------------- SimuMax's runs
def test_a_simumax_row_is_megatron_as_its_launcher_set_it_up(spec):
    row = _simumax(spec, "llama3_405b_l4_tp2_pp1_dp4_mbc8_cef")
    sc = simumax.scenario_of(row, ROOT, spec, "x")
    assert sc["cluster"] == {"topology": "dgx-b200"}
    assert sc["strategy"]["sequence_parallel"] and sc["strategy"]["use_distributed_optimizer"]
    assert "recompute_granularity" not in sc["strategy"]        # recompute-num-layers 0
    assert sc["training"] == {"micro_batch": 1, "seq_len": 4096, "grad_accum": 8,
                              "precision": "bf16", "flash_attention": True}


def test_simumax_cp_rows_run_a2a(spec):
    case = "parallel/simumax/llama3_70b_l12_tp2_cp4_pp1_dp1_seq32768_mbc4_cef"
    out = {r["case"]: r for r in simumax.simumax_rows(ROOT, spec, simulate_fn=_only(case))}
    row = _simumax(spec, case.rpartition("/")[2])
    assert simumax.scenario_of(row, ROOT, spec, "x")["strategy"]["cp_comm_type"] == "a2a"
    cp = out[case]                                               # a2a CP: simulated
    assert cp["measured"] == 1758.0 and abs(cp["error"]) < 0.20, cp         # ms
    assert cp["note"].startswith("validation")


def test_a_simumax_moe_row_runs_its_experts_as_the_moe_launcher_set_them(spec):
    """run_pretrain_deepseekv2.sh: EP from the row, capacity factor 1 padded to capacity,
    the first of 4 layers dense, MLA, no MTP; the loss unfused (no
    --cross-entropy-loss-fusion in either launcher)."""
    row = _simumax(spec, "deepseekv3_l4_tp1_ep4_pp2_dp4_mbc8_cef")
    sc = simumax.scenario_of(row, ROOT, spec, "x")
    st = sc["strategy"]
    assert (st["expert_model_parallel_size"], st["pipeline_model_parallel_size"]) == (4, 2)
    assert st["moe_expert_capacity_factor"] == 1.0
    assert st["cross_entropy_loss_fusion"] is False
    model = load_model(sc["model"])
    assert (model.layers, model.first_dense_layers, model.num_experts, model.top_k) == \
        (4, 1, 256, 8)
    assert model.mtp_layers == 0 and model.is_mla
    step = simumax._rows(row, ROOT, spec, simulate, calibrating=False)[0]
    assert step["note"] == "validation; bf16 on one DGX B200"
    assert step["measured"] == 771.6 and abs(step["error"]) < 0.20, step   # ms


def test_a_calibration_run_at_the_measured_gemm_rate(spec):
    # no longer fitted: at SimuMax's measured GEMM rate this run simulates 9.7% fast (429.7
    # of 476.0 ms; training_fit.yaml's check rows), what the untuned run loses elsewhere
    row = _simumax(spec, "llama3_405b_l4_tp4_pp1_dp2_mbc4_cef")
    step, memory = simumax._rows(row, ROOT, spec, simulate, calibrating=True)
    assert step["measured"] == 476.0 and -0.12 < step["error"] < -0.09, step   # ms
    assert memory["measured"] == 52.89 and abs(memory["error"]) < 0.15, memory   # GiB
    assert step["note"].startswith("calibration")


# ------------------------------------------------------------------------------ MXFP8
def test_mxfp8_casts_each_tensor_once_with_a_scale_per_32_elements():
    m, n, k = 8192, 4096, 1024
    gemm = OpCost("fc1", "matmul", 2.0 * m * n * k, 0.0, weight="w", m=m, n=n, k=k)
    dgrad = OpCost("fc1.dgrad", "matmul", 2.0 * m * n * k, 0.0, weight="w", m=m, n=n, k=k)
    layer = LayerCost("b", "block", 0, forward=(gemm,), backward=(dgrad,),
                      activation_bytes=0, output_bytes=0)
    mx = fp8_layer(layer, "mxfp8")
    cast = mx.forward[0]
    assert MX_CAST_BYTES == CAST_TRANSPOSE_BYTES + 2 / 32 == 4.0625
    assert cast.bytes_accessed == (m * k + k * n) * 4.0625
    assert mx.backward[0].bytes_accessed == m * k * 4.0625
    delayed = fp8_layer(layer, "delayed")
    assert [o.name for o in mx.forward] == [o.name for o in delayed.forward]


def test_te_shares_a_weights_fp8_cast_among_a_steps_micro_batches():
    m, n, k = 4096, 28672, 8192
    gemm = OpCost("fc1", "matmul", 2.0 * m * n * k, 0.0, weight="w", m=m, n=n, k=k)
    layer = LayerCost("b", "block", 0, forward=(gemm,), backward=(), activation_bytes=0,
                      output_bytes=0)
    shared = fp8_layer(layer, "mxfp8", weight_reuse=4)
    # the activation's cast on every micro-batch, a quarter of the weight's on each of 4
    assert shared.forward[0].bytes_accessed == (m * k + k * n / 4) * 4.0625
    assert shared.forward[0].flops == 3.0 * (m * k + k * n / 4)
    assert shared.forward[1] == fp8_layer(layer, "mxfp8").forward[1]   # the GEMM as it was


def _mxfp8_casts(strategy: str) -> dict:
    """micro_step -> bytes of the forward TE casts of one Llama 3 8B step on one DGX B200
    (2 micro-batches) under ``strategy``."""
    from simulator.pipeline import build_setup
    from simulator.scenario import scenario_from_dict
    extra = {"use_distributed_optimizer": True} if strategy == "megatron" else {}
    scn = scenario_from_dict({
        "name": "mx", "model": "llama-3-8b", "cluster": {"topology": "dgx-b200"},
        "strategy": {"name": strategy, **extra}, "simulation": {"variability": "none"},
        "training": {"seq_len": 4096, "micro_batch": 1, "grad_accum": 2,
                     "precision": "fp8", "fp8_recipe": "mxfp8"}})
    out: dict = {}
    for o in build_setup(scn, extrapolate_steps=False).trace.classes[0].ops:
        if o.phase == "forward" and o.name == "te_cast_transpose.mlp_gate_up":
            out[o.attrs["micro_step"]] = out.get(o.attrs["micro_step"], 0) + o.bytes_accessed
    return out


def test_megatron_mxfp8_casts_its_weights_once_a_step():
    casts = _mxfp8_casts("megatron")
    h, f, layers = 4096, 14336, 32            # Llama 3 8B: mlp_gate_up is [h, 2 f]
    # each of the 2 micro-batches: its activation and half the weight's one cast of the step
    for micro in (0, 1):
        assert casts[micro] == pytest.approx(layers * 4.0625 * (4096 * h + h * 2 * f / 2))


def test_mxfp8_is_refused_before_blackwell():
    from simulator.hardware import check_fp8_recipe
    check_fp8_recipe(gpu_spec("B200"), "mxfp8")
    check_fp8_recipe(gpu_spec("GB200"), "mxfp8")
    with pytest.raises(ConfigError, match="block-scaled") as exc:
        check_fp8_recipe(gpu_spec("H100-SXM"), "mxfp8")
    assert exc.value.field == "training.fp8_recipe"


# ------------------------------------------------------------------------ the B200 fit
def test_the_b200_fit_is_in_step_with_its_declared_rows():
    assert blackwell_fit.check() == []


def test_the_b200_matmul_factor_is_simumaxs_measured_gemm_rate():
    # SimuMax's B200 system config: BF16 GEMMs at 0.4878 of 2,250 TFLOP/s (1,098 TFLOP/s)
    # against compute.yaml's top-level bf16 curve, eff_max 0.80: 0.80 / 0.4878 = 1.640
    assert blackwell_fit.MEASURED_MATMUL == round(0.80 / 0.4878, 4) == 1.64
    assert family_of(gpu_spec("B200")).factor("matmul", "bf16") == 1.64
    assert family_of(gpu_spec("GB200")).factor("matmul", "fp8") == 1.64     # no FP8 rate
    assert blackwell_fit.CURVE_EFF_MAX == _roofline_bf16_matmul_eff_max()
    # ... so a B200 GEMM on the curve's plateau runs at the measured 0.4878 of its peak
    from simulator.compute.model import ComputeModel
    from simulator.compute.training_fit import IDENTITY
    flops = 1e18
    shipped = ComputeModel(gpu_spec("B200"), strategy="megatron")
    seconds = shipped.op_time_s("matmul", flops, 0.0, "bf16")
    roofline = ComputeModel(gpu_spec("B200"), fit=IDENTITY, strategy="megatron")
    assert seconds / roofline.op_time_s("matmul", flops, 0.0, "bf16") == pytest.approx(1.64)
    assert flops / seconds / 2250e12 == pytest.approx(0.80 / 1.64, rel=1e-4)      # 0.4878


def _roofline_bf16_matmul_eff_max() -> float:
    from simulator.compute.model import ComputeModel
    from simulator.compute.training_fit import IDENTITY
    # the curve at a GEMM so large that its fixed in-kernel time vanishes
    model = ComputeModel(gpu_spec("B200"), fit=IDENTITY, strategy="megatron")
    return round(model.efficiency("matmul", "bf16", 1e18), 3)


def test_gb200_takes_the_b200_fit_and_only_its_kernel_factor():
    entry = read_fit()["families"]["B200"]
    fit = family_of(gpu_spec("GB200"))
    assert fit.time_factor["matmul"] == entry["time_factor"]["matmul"]["value"] > 1.0
    assert fit.time_factor["attention"] == 1.0 and fit.time_factor["memory_bound"] == 1.0
    assert fit.kernel_overhead_s == 0.0
    assert len(entry["calibration_rows"]) > 5 * len(blackwell_fit.PARAMS)   # rows >> constants
    assert set(entry["calibration_rows"]) == set(
        pc.load(ROOT).blackwell_split.calibration["simumax_b200_measured.csv"])


def test_the_fsdp_fit_keeps_the_b200_family(tmp_path):
    from simulator.validation.training import fit
    path = tmp_path / "training_fit.yaml"
    path.write_text(fit.DATA_PATH.read_text())
    result = {"values": {"matmul": 1.0, "attention": 1.0, "memory_bound": 1.0,
                         "kernel_overhead_us": 0.0}, "rows": ["a"], "measured": [1.0],
              "simulated": [1.0], "rms_start": 0.0, "rms_fitted": 0.0}
    fit.write({"A100": result}, path)
    families = read_fit(path)["families"]
    assert set(families) == {"A100", "H100", "B200", "B300"}
    assert families["B200"] == read_fit()["families"]["B200"]
    assert families["B300"] == read_fit()["families"]["B300"]     # sourced, not fitted


@pytest.mark.parametrize("prefix,measured,low,high", [
    # Blackwell Ultra at Transformer Engine's B300 GEMM rates (family B300: its BF16 rate
    # and MXFP8:BF16 ratio): validation rows
    # (each -1.6% before Blackwell's attention took cuDNN's GB200 curve, compute.yaml
    # blackwell flash_attention, where it had run at the top-level 0.60 of peak; -4.1% before
    # Blackwell's FP8 casts made one copy, docs/compute.md "FP8")
    ("parallel/bridge/gb300/25.11/llama3-8b-8gpu", 37556, -0.04, -0.02),       # -2.9%
    ("parallel/bridge/gb300/26.02/llama3-70b-64gpu-mxfp8", 4596, -0.04, -0.025),  # -3.3%
    # (its preset's EP all-to-all overlap hides more than the real run gains:
    # docs/parallelism.md; +30.8% before the model's 4096-wide queries, head_dim; +11.0%
    # before a grouped GEMM's bytes added to its compute, docs/compute.md)
    # +3.7% before cuDNN's attention curve
    ("parallel/bridge/b300/26.06/qwen3-30b-a3b-8gpu-mxfp8", 40769, -0.025, -0.005),  # -1.6%
    # B200 / GB200 GEMMs at SimuMax's measured B200 rate (docs/compute.md, Blackwell)
    # (+3.0% and -2.9% before cuDNN's attention curve; +0.7% and -5.2% before Blackwell's
    # FP8 casts made one copy)
    ("parallel/bridge/gb200/25.11/llama3-8b-8gpu", 31508, 0.01, 0.03),        # +1.8%
    ("parallel/bridge/b200/25.11/llama3-8b-8gpu", 30624, -0.05, -0.03),       # -4.2%
    # micro-batch 1: each MoE layer's host sync waits for the token counts' all-gather, as
    # Megatron-Core's dispatcher does, and the CPU then keeps up (docs/compute.md, "The MoE
    # layer's host sync"; +26.7% while the sync waited for the dispatch all-to-all)
    ("parallel/bridge/b200/26.02/qwen3-30b-a3b-8gpu-mxfp8", 9691, 0.30, 0.32)])  # +31.1%
def test_blackwell_rows_land_where_docs_say(spec, prefix, measured, low, high):
    row = next(r for r in nemo.nemo_rows(ROOT, spec, kinds=("blackwell",),
                                         simulate_fn=_only(prefix))
               if r["case"].startswith(prefix))
    assert row["measured"] == measured
    assert low < row["error"] < high, row


"""How a kernel is launched (simulator/compute/launch.py) and what each launch pays; the eager
reference code's kernels (simulator/models/eager.py) against their byte formulas; what
torch.compile leaves of them; Megatron's CUDA graphs; torchtitan's measured compile gain."""

from __future__ import annotations

import copy
import tempfile
from pathlib import Path

import pytest

from simulator.compute.launch import COMPILED, EAGER, GRAPH, PIECE, dispatch_mode, graphed
from simulator.compute.model import ComputeModel
from simulator.errors import ConfigError
from simulator.hardware import gpu_spec
from simulator.models.costs import layer_costs
from simulator.models.spec import load_model
from simulator.pipeline import build_setup, run_setup
from simulator.scenario import scenario_from_dict
from simulator.strategies.fsdp_config import FSDPConfig
from simulator.strategies.host import dispatch_s, dispatch_table

B, S = 2, 1024                  # micro-batch, sequence of the block tests
T = B * S


def _elementwise_s(model: ComputeModel, launch: str) -> float:
    return model.op_time_s("elementwise", 1e6, 3e8, "bf16", launch=launch)


def test_each_launch_pays_its_per_kernel_costs():
    m = ComputeModel(gpu_spec("H100-SXM"), strategy="fsdp")      # the fitted eager stack
    overhead, gap = m.fit.overhead_s("bf16"), m.calibration.kernel_launch_s
    assert overhead > 0 and gap > 0
    graph = _elementwise_s(m, GRAPH)              # the kernel alone
    assert graph == pytest.approx(
        3e8 / (m.gpu.hbm_bw_bytes_per_s * m.memory_efficiency("elementwise"))
        * m.fit.factor("elementwise", "bf16"))
    assert _elementwise_s(m, COMPILED) == pytest.approx(graph + gap)
    assert _elementwise_s(m, PIECE) == pytest.approx(graph + gap)
    assert _elementwise_s(m, EAGER) == pytest.approx(graph + gap + overhead)
    with pytest.raises(ConfigError, match="launch"):
        _elementwise_s(m, "jit")


def test_a_strategy_off_the_stack_pays_no_overhead_whatever_the_launch():
    m = ComputeModel(gpu_spec("H100-SXM"), strategy="megatron")
    assert _elementwise_s(m, EAGER) == pytest.approx(_elementwise_s(m, COMPILED))


def test_host_dispatch_by_launch():
    table, cfg = dispatch_table(), FSDPConfig(name="fsdp")
    for phase in ("forward", "backward", "recompute"):
        assert dispatch_s(cfg, phase) == table["eager"][phase]
        assert dispatch_s(cfg, phase, COMPILED) == table["compiled"][phase]
        assert dispatch_s(cfg, phase, PIECE) == dispatch_s(cfg, phase, GRAPH) == 0.0
    assert dispatch_mode(COMPILED, "none") == "none"
    assert dispatch_s(FSDPConfig(name="fsdp", host_dispatch="none"), "forward", COMPILED) == 0


def _block(elementwise: str, compile: bool = False, precision: str = "bf16",
           autocast: bool = False):
    return layer_costs(load_model("llama-3-8b"), B, S, precision, True, autocast, compile,
                       elementwise=elementwise)[1]


def _pieces(ops, prefix: str):
    return [o for o in ops if o.name.split(".")[0] == prefix]


def test_eager_rmsnorm_moves_36_bytes_an_element_forward_and_92_backward():
    h, k = 4096, 2
    n = T * h
    fused, eager = _block("fused"), _block("eager")
    (norm,) = _pieces(fused.forward, "norm1")
    w = norm.bytes_accessed - 2 * k * n                  # the weight the fused op reads
    fwd = _pieces(eager.forward, "norm1")
    # float, pow, mean, add_eps, rsqrt, mul, type_as, * weight: 36 n + 24 t + w
    assert len(fwd) == 8
    assert sum(o.bytes_accessed for o in fwd) == pytest.approx(36 * n + 24 * T + w)
    assert [o.launch for o in fwd].count(EAGER) == 1          # one op's launch costs
    assert fwd[-1].name == "norm1" and fwd[-1].weight == norm.weight
    (nb,) = _pieces(fused.backward, "norm1")
    wb = (nb.bytes_accessed - 3 * k * n) / 2
    bwd = _pieces(eager.backward, "norm1")
    assert len(bwd) == 14
    assert sum(o.bytes_accessed for o in bwd) == pytest.approx(92 * n + 24 * T + 2 * wb)
    # autocast's fp32 residual: no casts, the weight product reads and writes fp32
    fp32 = _pieces(_block("eager", autocast=True).forward, "norm1")
    assert len(fp32) == 6 and not any(o.name.endswith((".float", ".type_as")) for o in fp32)


def test_eager_swiglu_rotary_and_repeat_kv():
    spec = load_model("llama-3-8b")
    e, f = 2, T * spec.ffn_hidden
    q, kv = T * spec.hidden, T * spec.kv_heads * spec.head_dim
    eager = _block("eager")
    sw = _pieces(eager.forward, "swiglu")
    assert [o.bytes_accessed for o in sw] == [2 * e * f, 3 * e * f]
    assert sw[0].saved_bytes == e * f                     # silu's output kept for backward
    rk = _pieces(eager.forward, "repeat_kv")
    assert [o.bytes_accessed for o in rk] == [e * (kv + q)] * 2
    table = 4 * S * spec.head_dim
    rot = _pieces(eager.forward, "rotary")
    assert len(rot) == 6
    assert sum(o.bytes_accessed for o in rot) == pytest.approx(
        (2 * (e + 4) + 8) * (q + kv) + 2 * table)
    # the saved activations grow by what autograd keeps of the pieces
    assert eager.activation_bytes - _block("fused").activation_bytes == sum(
        o.saved_bytes for o in eager.forward) - sum(o.saved_bytes for o in _block("fused").forward)


def test_compile_fuses_the_pieces_away_and_keeps_what_inductor_cannot():
    spec = load_model("llama-3-8b")
    e, h = 2, spec.hidden
    q, kv = T * h, T * spec.kv_heads * spec.head_dim
    fused, eager = _block("fused", compile=True), _block("eager", compile=True)
    ops = (*eager.forward, *eager.backward)
    assert all(o.launch == COMPILED for o in ops)
    # V's repeat_kv copy and its sum back; the separate projections' GEMMs, Q/K/V and
    # gate/up for two fused ones (tests/test_separate_projections.py), priced apart here
    assert len(eager.forward) == len(fused.forward) + 1 + 3
    assert len(eager.backward) == len(fused.backward) + 1 + 6

    def others(ops):
        return sum(o.bytes_accessed for o in ops if o.op_class != "matmul" or not o.weight)

    # forward: V copied to the query heads' width, the rotary writes K at that width
    extra_fwd = others(eager.forward) - others(fused.forward)
    assert extra_fwd == pytest.approx(e * (kv + q) + e * (q - kv))
    # backward: V's sum, K's in the rotary backward, the projections' gradient sums in the
    # norm backwards (2 extra reads of Q/K/V's, 1 of gate/up's)
    extra_bwd = others(eager.backward) - others(fused.backward)
    assert extra_bwd == pytest.approx(e * (q + kv) + e * (q - kv) + 3 * e * T * h)
    assert eager.activation_bytes == fused.activation_bytes


def test_elementwise_is_checked():
    with pytest.raises(ConfigError, match="elementwise"):
        layer_costs(load_model("llama-3-8b"), 1, 128, "bf16", elementwise="op_by_op")
    with pytest.raises(ConfigError, match="elementwise"):
        scenario_from_dict(dict(MEGATRON, training={"elementwise": "unfused"}))


MEGATRON = {"name": "mg", "model": "llama-3-8b",
            "training": {"micro_batch": 1, "seq_len": 2048, "grad_accum": 4,
                         "precision": "bf16"},
            "cluster": {"topology": "dgx-h100"},
            "strategy": {"name": "megatron", "tensor_model_parallel_size": 2,
                         "pipeline_model_parallel_size": 2}}


def _megatron(**strategy):
    data = copy.deepcopy(MEGATRON)
    data["strategy"].update(strategy)
    return build_setup(scenario_from_dict(data))


def _kernel_s(setup) -> tuple[float, int]:
    """Seconds of the first rank class's compute kernels, and how many replay from a graph."""
    total, graphs = 0.0, 0
    for op in setup.trace.classes[0].ops:
        if op.kind != "compute":
            continue
        a = op.attrs
        shape = (a["m"], a["n"], a["k"]) if "m" in a else None
        total += setup.compute.op_time_s(op.op_class, op.flops, op.bytes_accessed,
                                         a.get("precision", "bf16"), shape=shape,
                                         launch=a.get("launch", ""))
        graphs += a.get("launch") == GRAPH
    return total, graphs


def test_megatron_cuda_graphs_remove_the_launch_gap_of_every_block_kernel():
    plain, local = _megatron(), _megatron(cuda_graph_impl="local")
    (t0, g0), (t1, g1) = _kernel_s(plain), _kernel_s(local)
    assert g0 == 0 and g1 > 0
    assert t0 - t1 == pytest.approx(g1 * plain.compute.calibration.kernel_launch_s)
    # the older switch, and TE's graphs, are the same capture
    assert _kernel_s(_megatron(enable_cuda_graph=True)) == (t1, g1)
    assert _kernel_s(_megatron(cuda_graph_impl="transformer_engine")) == (t1, g1)
    assert run_setup(local).metrics.iteration_time_s < run_setup(plain).metrics.iteration_time_s
    with pytest.raises(ConfigError, match="cuda_graph_impl"):
        _megatron(cuda_graph_impl="full")


def test_graphed_leaves_non_blocks_alone():
    layers = layer_costs(load_model("llama-3-8b"), 1, 128, "bf16")
    out = [graphed(layer) for layer in layers]
    assert out[0] is layers[0] and out[-1] is layers[-1]
    assert {o.launch for o in (*out[1].forward, *out[1].backward)} == {GRAPH}


# torchtitan's 2024-12 H100 benchmark (validation/training/torchtitan_h100.csv, Tables 1 and
# 3): Llama 3.1 8B, FSDP, local batch 2, selective op AC, eager vs torch.compile
TITAN = "torchtitan/h100-2412/llama-3-8b_fsdp8{}_mb2_s8192"
# Tolerance on the gain, in points: the two published gains (8 and 128 GPUs) differ by 0.6
# point, each row is one logged iteration (the 90th); the rows themselves are gated at a
# 7% median, so a gain within 5 points is what the table's accuracy can promise.
GAIN_TOLERANCE = 0.05


def _titan_gain():
    from simulator.validation.training.tables import load_rows
    from simulator.validation.training.tables_run import build_row
    rows = {r.row_id: r for r in load_rows()}
    eager, compiled = rows[TITAN.format("")], rows[TITAN.format("_compile")]
    assert not eager.scenario["training"]["compile"] and compiled.scenario["training"]["compile"]
    measured = compiled.measured / eager.measured - 1
    with tempfile.TemporaryDirectory() as tmp:
        sim = [run_setup(build_row(r, Path(tmp))).metrics.tokens_per_s_per_gpu
               for r in (eager, compiled)]
    return measured, sim[1] / sim[0] - 1


@pytest.fixture(scope="module")
def titan_gain():
    return _titan_gain()


def test_torchtitan_compile_gains_at_least_what_was_measured(titan_gain):
    measured, simulated = titan_gain
    assert measured == pytest.approx(6667 / 5762 - 1)              # +15.7%
    assert simulated >= measured - GAIN_TOLERANCE


@pytest.mark.xfail(strict=True, reason="known miss (issue 40): simulated +31.9% against the "
                   "measured +15.7%; the eager op-by-op kernels cost about twice the "
                   "measured eager - compiled difference (docs/compute.md)")
def test_torchtitan_compile_gain_matches_the_measurement(titan_gain):
    measured, simulated = titan_gain
    assert abs(simulated - measured) <= GAIN_TOLERANCE


@pytest.mark.parametrize("model, strategy, says", [
    ("gpt2-small", {"name": "fsdp"}, "has none of them"),
    ("resnet-50", {"name": "ddp"}, "has none of them"),
    ("llama-2-7b", {"name": "tf_mirrored"}, "runs Keras"),
])
def test_eager_elementwise_is_refused_where_it_means_nothing(model, strategy, says):
    data = {"name": "x", "model": model,
            "training": {"micro_batch": 1, "seq_len": 128, "precision": "bf16",
                         "elementwise": "eager"},
            "cluster": {"topology": "dgx-h100"}, "strategy": strategy}
    with pytest.raises(ConfigError, match=says) as err:
        build_setup(scenario_from_dict(data))
    assert err.value.field == "training.elementwise"

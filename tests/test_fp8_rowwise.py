"""torchao's float8 rowwise recipe (``training.fp8_recipe: rowwise``,
simulator/models/fp8.py): each kernel's bytes as torchao's own roofline counts them
(torchao/testing/training/roofline_utils.py, ``get_tensor_memory_traffic_ovhd_s``), the
backward GEMMs' output rescale of torchao's cuBLAS workaround, the GEMMs in FP8, and the
recipe reaching a run from a scenario and a torchtitan TOML alike."""

from __future__ import annotations

import copy

import pytest

from simulator.compute.launch import COMPILED
from simulator.models.fp8 import fp8_layer
from simulator.models.ops import LayerCost, matmul, matmul_bwd
from simulator.pipeline import build_setup, run_setup
from simulator.scenario import scenario_from_dict
from dataclasses import replace

M, K, N = 4096, 1024, 3072        # X [M, K], W [K, N], dY [M, N]


def _linear(launch: str = "") -> LayerCost:
    fwd = [replace(matmul("lin", M, K, N, 2, params=K * N), launch=launch)]
    bwd = [replace(o, launch=launch) for o in matmul_bwd("lin", M, K, N, 2, weight=True)]
    return LayerCost("block.0", "block", K * N, tuple(fwd), tuple(bwd), 0, 0)


def _bytes(ops, prefix: str) -> float:
    return sum(o.bytes_accessed for o in ops if o.name.startswith(prefix))


@pytest.mark.parametrize("launch, first", [("", 5.0), (COMPILED, 3.0)])
def test_each_tensor_is_cast_as_torchaos_roofline_counts(launch, first):
    """Roofline, per element: an activation (X, dY) cast row-wise with a bf16 transposed copy
    (read 2, write 1 + 2; compiled, the read fused into its producer: 1 + 2), then that
    copy cast (read 2, write 1); the weight cast (2 + 1), transposed (2 + 2), cast (2 + 1)."""
    layer = fp8_layer(_linear(launch), "rowwise")
    fwd, bwd = layer.forward, layer.backward
    assert _bytes(fwd, "float8_rowwise_cast.") == M * K * first
    assert _bytes(fwd, "float8_rowwise_cast_weight.") == K * N * (2 + 1)
    assert _bytes(bwd, "float8_rowwise_cast.") == M * N * first
    assert _bytes(bwd, "float8_rowwise_transpose.") == K * N * (2 + 2)
    assert _bytes(bwd, "float8_rowwise_cast_weight.") == K * N * (2 + 1)
    assert _bytes(bwd, "float8_rowwise_cast_t.") == (M * K + M * N) * (2 + 1)
    # totals per tensor: X and dY first + 3 (compiled 6, eager 8), W 10
    total = _bytes(fwd, "float8_") + _bytes(bwd, "float8_rowwise_ca") \
        + _bytes(bwd, "float8_rowwise_transpose.")
    assert total == (M * K + M * N) * (first + 3) + K * N * 10


def test_backward_gemms_are_rescaled_and_every_gemm_runs_in_fp8():
    """torchao's backward GEMMs without fast accumulation run cuBLAS's tensor-scaled kernel
    and scale the bf16 output after it: read 2, write 2 an output element, after the
    GEMM; the forward GEMM (row-scaled, fast accumulation) has no rescale."""
    layer = fp8_layer(_linear(COMPILED), "rowwise")
    gemms = [o for o in (*layer.forward, *layer.backward) if o.op_class == "matmul"]
    assert [o.precision for o in gemms] == ["fp8"] * 3
    assert not [o for o in layer.forward if "rescale" in o.name]
    names = [o.name for o in layer.backward]
    for gemm, (m, n) in (("lin.dgrad", (M, K)), ("lin.wgrad", (K, N))):
        i = names.index(f"float8_rowwise_rescale.{gemm}")
        assert names[i - 1] == gemm
        assert layer.backward[i].bytes_accessed == (2 + 2) * m * n
        assert layer.backward[i].launch == COMPILED
    for o in gemms:    # 1-byte operands, bf16 output
        m, n, k = o.m, o.n, o.k
        assert o.bytes_accessed == m * k + k * n + 2 * m * n


BASE = {"name": "rowwise", "model": "llama-3-8b", "cluster": {"topology": "dgx-h100"},
        "simulation": {"variability": "none"},
        "training": {"seq_len": 8192, "micro_batch": 2, "global_batch": 16,
                     "precision": "fp8", "compile": True},
        "strategy": {"name": "torchtitan"}}


def _step(recipe: str | None) -> float:
    data = copy.deepcopy(BASE)
    if recipe is None:
        data["training"]["precision"] = "bf16"
    else:
        data["training"]["fp8_recipe"] = recipe
    return run_setup(build_setup(scenario_from_dict(data))).metrics.iteration_time_s


def test_a_run_prices_rowwise_between_its_casts_and_the_gemms_it_saves():
    """The same GEMMs in FP8 with heavier casts than tensorwise's: slower than
    tensorwise; on this 8B step still faster than bf16."""
    bf16, tensorwise, rowwise = _step(None), _step("tensorwise"), _step("rowwise")
    assert tensorwise < rowwise < bf16


def test_rowwise_has_no_fp8_attention():
    from simulator.errors import ConfigError
    data = copy.deepcopy(BASE)
    data["training"].update(fp8_recipe="rowwise", fp8_attention=True)
    with pytest.raises((ConfigError, ValueError)):
        scenario_from_dict(data)


@pytest.mark.parametrize("launch, act", [("", 3.0), (COMPILED, 1.0)])
def test_rowwise_with_gw_hp_casts_once_and_keeps_the_weight_gradient_in_bf16(launch, act):
    """torchao's rowwise_with_gw_hp (its config: the weight-gradient casts disabled, the
    weight tensorwise for the input gradient; its roofline's kernels): X and dY each cast
    row-wise once (read 2, write 1; compiled, the read fused: 1), the weight cast row-wise
    forward and tensorwise backward (2 + 1 each), no transposed copies; the forward and
    input-gradient GEMMs in FP8 with the input gradient rescaled (its rows' scales), the
    weight gradient a bf16 GEMM with no cast before it."""
    layer = fp8_layer(_linear(launch), "rowwise_with_gw_hp")
    fwd, bwd = layer.forward, layer.backward
    assert _bytes(fwd, "float8_rowwise_cast.lin") == M * K * act
    assert _bytes(fwd, "float8_rowwise_cast_weight.lin") == K * N * 3.0
    assert _bytes(bwd, "float8_rowwise_cast.lin.dgrad") == M * N * act     # dY [M, N]
    assert _bytes(bwd, "float8_cast_weight.lin.dgrad") == K * N * 3.0
    assert _bytes(bwd, "float8_rowwise_rescale.lin.dgrad") == 4.0 * M * K  # dX [M, K]
    assert [o.name for o in bwd if "wgrad" in o.name] == ["lin.wgrad"]   # nothing cast for dW
    gemms = {o.name: o.precision for o in (*fwd, *bwd) if o.op_class == "matmul"}
    assert gemms == {"lin": "fp8", "lin.dgrad": "fp8", "lin.wgrad": ""}
    assert not [o for o in (*fwd, *bwd) if "transpose" in o.name]

"""A GEMM's alignment is judged on its leading dimensions (simulator/compute/gemm_shape.py):
``k`` and ``n`` where A is read as stored (a Linear's forward and input gradient), ``m`` and
``n`` where A is a transposed view (``transa``: the weight gradient ``dW = X^T dY``). A
Linear's tokens are never a leading dimension, so a token count that is not a multiple of 8
(an MoE expert's tokens under uneven routing) prices as its neighbours do, while an
unaligned vocabulary still takes the fallback kernel in all three GEMMs."""

from __future__ import annotations

import collections

import pytest

from simulator.compute import ComputeModel, load_compute_calibration
from simulator.compute.gemm_shape import aligned
from simulator.compute.pricing import cost_time_s, kernel_attrs
from simulator.compute.training_fit import IDENTITY
from simulator.engine.job import kernel_time_s
from simulator.hardware import gpu_spec
from simulator.models.ops import matmul, matmul_bwd
from simulator.trace.fields import op_problem
from simulator.trace.schema import Op

H200 = gpu_spec("H200-SXM")
HOPPER = load_compute_calibration().families["hopper"].gemm


def test_the_leading_dimensions_of_each_layout():
    # not transposed: k and n; transposed A: m and n; unknown (a profiled GEMM): all three
    assert aligned(28091, 4096, 4096, 8) and not aligned(4096, 4096, 28091, 8)
    assert aligned(4096, 4096, 28091, 8, transa=True)
    assert not aligned(28091, 4096, 4096, 8, transa=True)
    assert not aligned(28091, 4096, 4096, 8, transa=None)
    assert not aligned(4096, 50257, 4096, 8) and not aligned(4096, 50257, 4096, 8, True)


def _linear(tokens: int, k_in: int, n_out: int) -> list:
    """Forward, input gradient and weight gradient of a Linear over ``tokens`` rows."""
    return [matmul("lin", tokens, k_in, n_out, 2, params=k_in * n_out),
            *matmul_bwd("lin", tokens, k_in, n_out, 2)]


def test_only_the_weight_gradient_reads_a_transposed():
    fwd, dgrad, wgrad = _linear(8192, 4096, 14336)
    assert [op.transa for op in (fwd, dgrad, wgrad)] == [False, False, True]
    assert "transa" not in kernel_attrs(fwd) and "transa" not in kernel_attrs(dgrad)
    assert kernel_attrs(wgrad)["transa"] is True
    assert (wgrad.m, wgrad.n, wgrad.k) == (4096, 14336, 8192)     # dW: k_in x n_out over tokens


def test_a_token_count_off_a_multiple_of_8_costs_its_neighbours_time():
    model = ComputeModel(H200, fit=IDENTITY)
    odd = [cost_time_s(model, op, "bf16") for op in _linear(28091, 4096, 14336)]
    even = [cost_time_s(model, op, "bf16") for op in _linear(28096, 4096, 14336)]
    for a, b in zip(odd, even):
        assert a == pytest.approx(b, rel=1e-3)


def test_an_unaligned_vocabulary_takes_the_fallback_in_every_gemm():
    model = ComputeModel(H200, fit=IDENTITY)
    odd = [cost_time_s(model, op, "bf16") for op in _linear(8192, 1024, 50257)]
    even = [cost_time_s(model, op, "bf16") for op in _linear(8192, 1024, 50264)]
    for a, b in zip(odd, even):      # 1 / unaligned_efficiency as slow, less the fixed parts
        assert a > 0.8 * b / HOPPER.unaligned_efficiency


def test_a_trace_ops_transa_must_be_a_boolean():
    base = dict(id=0, kind="compute", stream="compute", name="lin.wgrad", op_class="matmul",
                flops=1.0, bytes_accessed=1.0)
    good = Op(**base, attrs={"m": 8, "n": 8, "k": 8, "transa": True})
    assert op_problem(good, {}) is None
    bad = Op(**base, attrs={"m": 8, "n": 8, "k": 8, "transa": "yes"})
    assert op_problem(bad, {})[0] == "attrs.transa"


def test_uneven_routing_slows_the_experts_by_the_busiest_ranks_load():
    """Mixtral 8x7B, EP8, Zipf routing (s = 1.2): the busiest EP rank gets 3.43x the even
    share of token copies (28,091 of them, not a multiple of 8); its expert GEMMs take that
    much longer than under even routing, not 3x more on the unaligned fallback kernel (the
    expert GEMMs cost 10.6x before the leading-dimension rule)."""
    from simulator.models import load_model
    from simulator.pipeline import build_setup
    from simulator.scenario import load_scenario
    from simulator.strategies.parallel.moe import ExpertLoad, ep_loads
    zipf = {"distribution": "zipf", "zipf_s": 1.2, "seed": 3}
    load = ep_loads(load_model("mixtral-8x7b"), 4096, 8, ExpertLoad(**zipf))
    # the busiest expert's share 1 / sum(i^-1.2) of 8 ranks x 4,096 tokens x top-2 copies,
    # below the 8 x 4,096 cap (one expert, one copy of each token), one expert a rank
    share = 1 / sum(i ** -1.2 for i in range(1, 9))
    assert load.slowest == pytest.approx(share * 8 * 4096 * 2)
    assert load.slowest % 8 != 0 and load.imbalance == pytest.approx(share * 8)

    def expert_seconds(sets):
        setup = build_setup(load_scenario("mixtral-8x7b-ep8", sets), "mixtral")
        out = collections.Counter()
        for op in setup.trace.classes[0].ops:
            if op.kind == "compute" and op.name.startswith("moe_expert_gate_up"):
                out[op.name.rsplit(".", 1)[-1]] += kernel_time_s(setup.compute, op, "bf16")
        return out
    even = expert_seconds([])
    uneven = expert_seconds(["strategy.moe_load={distribution: zipf, zipf_s: 1.2, seed: 3}"])
    assert set(even) == {"moe_expert_gate_up", "dgrad", "wgrad"}
    for part in even:                # forward, input and weight gradients
        assert uneven[part] / even[part] == pytest.approx(load.imbalance, rel=0.02)


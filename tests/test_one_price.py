"""One machine, one price: a kernel on a GPU costs what its kernel stack says, whichever
strategy or spelling emitted it. Every eager PyTorch framework (fsdp, torchtitan, DeepSpeed,
DDP) prices the same kernel alike; a framework on other kernels (Megatron's Transformer
Engine, Horovod/TensorFlow) on the roofline, the difference being exactly the eager stack's
named factors and per-kernel overhead (simulator/data/training_fit.yaml), which ``compare``
prints beside the strategies it prices."""

from __future__ import annotations

import copy

import pytest

from simulator.compute import ComputeModel
from simulator.compute.training_fit import family_of
from simulator.hardware import gpu_spec
from simulator.pipeline import build_setup, run_setup
from simulator.scenario import scenario_from_dict

BASE = {"name": "one-price", "model": "llama-2-7b", "cluster": {"topology": "dgx-a100"},
        "simulation": {"variability": "none"},
        "training": {"seq_len": 2048, "micro_batch": 1, "global_batch": 8}}
EAGER = [{"name": "fsdp"}, {"name": "torchtitan"},
         {"name": "deepspeed", "zero_optimization": {"stage": 3}}, {"name": "ddp"}]
OTHER = [{"name": "megatron", "use_torch_fsdp2": True}, {"name": "horovod"}]
KERNELS = (("qkv_proj", "matmul"), ("attn_core", "attention"))     # same fields everywhere


def _durations(strategy: dict) -> dict[str, float]:
    data = copy.deepcopy(BASE)
    data["strategy"] = strategy
    setup = build_setup(scenario_from_dict(data), extrapolate_steps=False)
    first = setup.trace.classes[0].id
    return {r.name: r.end_s - r.start_s for r in run_setup(setup).timeline.records
            if r.cls == first and r.layer == "block.0" and r.phase == "forward"}


@pytest.fixture(scope="module")
def eager():
    return [_durations(s) for s in EAGER]


def test_every_eager_pytorch_spelling_prices_a_kernel_alike(eager):
    for name, _ in KERNELS:         # (end - start at different instants: a few ulps)
        assert all(d[name] == pytest.approx(eager[0][name], rel=1e-12) for d in eager), name


@pytest.mark.parametrize("strategy", OTHER, ids=lambda s: s["name"])
def test_another_stack_differs_by_the_eager_stacks_named_factors_only(eager, strategy):
    gpu = gpu_spec("A100-SXM4-80GB")
    fit, launch = family_of(gpu), ComputeModel(gpu).kernel_launch_s
    other = _durations(strategy)
    for name, op_class in KERNELS:
        # the eager stack: the kernel's roofline time (without its launch) x the class's
        # factor, plus the launch and the stack's per-kernel overhead
        want = (other[name] - launch) * fit.time_factor[op_class] + launch \
            + fit.kernel_overhead_s
        assert eager[0][name] == pytest.approx(want, rel=1e-9), name


def test_compare_names_the_stack_behind_each_strategy():
    from simulator.compare.options import parse_strategies
    from simulator.compare.report import render_table
    from simulator.compare.runner import compare
    from simulator.scenario import load_scenario
    cmp = compare(load_scenario("quickstart"), parse_strategies("fsdp-full,horovod"),
                  scaling=False, capacity=False)
    lines = [line for line in render_table(cmp).splitlines() if line.startswith("# kernels")]
    assert any(line.startswith("# kernels of fsdp-full: the eager PyTorch stack fitted on "
                               "A100 runs: matmul x0.90, attention x1.78") for line in lines)
    assert any(line.startswith("# kernels of horovod: the roofline's kernels (horovod runs "
                               "other kernels") for line in lines)

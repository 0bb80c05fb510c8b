"""One machine, one price: a kernel on a GPU costs what the GPU's fitted kernel factors say,
whichever strategy or spelling emitted it. Every eager PyTorch framework (fsdp, torchtitan,
DeepSpeed, DDP) prices the same kernel alike; a framework on another stack (Megatron's
Transformer Engine, Horovod/TensorFlow) pays the same GEMM and attention kernels and differs
by exactly the eager stack's named mechanisms: its memory-bound factor and its per-kernel
host overhead (simulator/data/training_fit.yaml), which ``compare`` prints beside the
strategies it prices."""

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
KERNELS = (("qkv_proj", "matmul"), ("attn_core", "attention"))     # the GPU's kernels
MEMORY_BOUND = (("swiglu", "memory_bound"), ("rotary", "memory_bound"))   # the stack's


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
def test_another_stack_differs_by_the_eager_stacks_named_mechanisms_only(eager, strategy):
    gpu = gpu_spec("A100-SXM4-80GB")
    fit, launch = family_of(gpu), ComputeModel(gpu).kernel_launch_s
    other = _durations(strategy)
    for name, _ in KERNELS:
        # the same GEMM / attention kernel at the GPU's factor; the eager stack adds its
        # host overhead between kernels
        assert eager[0][name] == pytest.approx(other[name] + fit.kernel_overhead_s,
                                               rel=1e-9), name
    for name, group in MEMORY_BOUND:
        # the other stack runs its memory-bound kernels on the roofline; the eager stack
        # at its fitted factor, plus the overhead
        want = (other[name] - launch) * fit.time_factor[group] + launch \
            + fit.kernel_overhead_s
        assert eager[0][name] == pytest.approx(want, rel=1e-9), name


def test_the_gpus_kernel_factors_apply_to_every_strategy():
    gpu = gpu_spec("H100-SXM")
    fit = family_of(gpu)
    for strategy in ("fsdp", "megatron", "horovod", "tf_mirrored", None):
        seen = ComputeModel(gpu, strategy=strategy).fit
        assert {g: seen.time_factor[g] for g in ("matmul", "attention")} == \
            {g: fit.time_factor[g] for g in ("matmul", "attention")}, strategy
        eager = strategy in ("fsdp", None)
        assert seen.time_factor["memory_bound"] == (fit.time_factor["memory_bound"]
                                                    if eager else 1.0)
        assert seen.kernel_overhead_s == (fit.kernel_overhead_s if eager else 0.0)


def test_compare_names_the_stack_behind_each_strategy():
    from simulator.compare.options import parse_strategies
    from simulator.compare.report import render_table
    from simulator.compare.runner import compare
    from simulator.scenario import load_scenario
    cmp = compare(load_scenario("quickstart"), parse_strategies("fsdp-full,horovod"),
                  scaling=False, capacity=False)
    lines = [line for line in render_table(cmp).splitlines() if line.startswith("# kernels")]
    assert any(line.startswith("# kernels of fsdp-full: A100 kernels as fitted: matmul "
                               "x0.90, attention x1.78; the eager PyTorch stack: memory-bound "
                               "x1.73, +231 us a kernel") for line in lines)
    assert any(line.startswith("# kernels of horovod: A100 kernels as fitted: matmul x0.90, "
                               "attention x1.78; not the eager PyTorch stack") and
               "autocast" in line for line in lines)


def _forward(res):
    from simulator.compare.runner import forward_gpu_s_per_sample
    return forward_gpu_s_per_sample(res)


def test_compare_prices_one_forward_pass_per_sample_across_frameworks():
    # quickstart (Llama 2 7B, 8 A100): FSDP's shardings run the same kernels; Horovod and
    # the TF strategies the same autocast kernels; DDP the autocast kernels on the eager
    # stack. A strategy's forward differs from another's only by what is printed.
    import dataclasses
    from simulator.compare.options import parse_strategies
    from simulator.compare.report import render_table
    from simulator.compare.runner import compare, with_strategy
    from simulator.engine import kernel_time_s
    from simulator.scenario import load_scenario
    scn = load_scenario("quickstart")
    cmp = compare(scn,
                  parse_strategies("fsdp-full,fsdp-grad-op,ddp,horovod,tf-mirrored,tf-ps"),
                  scaling=False, capacity=False)
    fwd = {r.alias.key: r.forward_gpu_s_per_sample for r in cmp.rows}
    assert fwd["fsdp-full"] == fwd["fsdp-grad-op"] > 0
    assert fwd["horovod"] == fwd["tf-mirrored"]
    assert fwd["tf-ps"] == pytest.approx(fwd["horovod"], rel=1e-12)    # 4 micro-steps, summed
    # DDP's forward ops priced by Horovod's stack cost what Horovod's forward costs: the same
    # kernels; the difference is the eager stack's memory-bound factor and overhead alone
    ddp, hvd = (run_setup(build_setup(with_strategy(scn, a), "q"))
                for a in parse_strategies("ddp,horovod"))
    assert _forward(ddp) == fwd["ddp"] and _forward(hvd) == fwd["horovod"]
    repriced = dataclasses.replace(ddp, setup=dataclasses.replace(
        ddp.setup, compute=hvd.setup.compute))
    assert _forward(repriced) == pytest.approx(fwd["horovod"], rel=1e-12)
    assert fwd["ddp"] > fwd["horovod"]
    # the column as the ops' nominal prices: one micro-step of 2 samples a GPU, 8 GPUs
    ops = [op for cls in ddp.setup.trace.classes for op in cls.ops
           if op.kind == "compute" and op.phase == "forward"]
    assert len(ddp.setup.trace.classes) == 1 and ddp.setup.trace.meta["global_batch"] == 16
    want = 8 * sum(kernel_time_s(ddp.setup.compute, op, "bf16") for op in ops) / 16
    assert fwd["ddp"] == pytest.approx(want, rel=1e-12)
    text = render_table(cmp)
    assert "fwd ms/sample" in text and f"{1e3 * fwd['ddp']:.1f}" in text


def test_the_forward_column_is_the_timelines_forward_without_variability():
    from simulator.scenario import load_scenario
    res = run_setup(build_setup(load_scenario("quickstart", ["simulation.variability=none"]),
                                "q"))
    sizes = {c.id: len(c.ranks) for c in res.setup.trace.classes}
    timeline = sum((r.end_s - r.start_s) * sizes[r.cls] for r in res.timeline.records
                   if r.kind == "compute" and r.phase == "forward")
    assert _forward(res) == pytest.approx(timeline / res.setup.trace.meta["global_batch"],
                                          rel=1e-9)

"""One machine, one price across 16-bit precisions and model code (issue 40).

fp16 and bf16 run the same tensor-core kernels at the same rates, so a family's fitted
factors cover both (simulator/compute/training_fit.py, ``FamilyFit.covers``). The eager
stack's mechanisms (memory-bound factor, per-kernel overhead) were fitted on decoder
language models' code (``STACK_MODELS``); a ResNet or a BERT runs the GPU's kernel factors
only, so DDP prices it as Horovod does and bf16 as fp16 does."""

from __future__ import annotations

import copy

import pytest

from simulator.compute import ComputeModel
from simulator.compute.training_fit import IDENTITY, STACK_MODELS, family_of
from simulator.hardware import gpu_spec
from simulator.models import load_model
from simulator.pipeline import build_setup, run_setup
from simulator.scenario import scenario_from_dict

A100 = gpu_spec("A100-SXM4-80GB")
H100 = gpu_spec("H100-SXM")


def test_a_fit_seen_on_bf16_covers_fp16_and_nothing_wider():
    fam = family_of(H100)
    assert fam.precisions == ("bf16",)
    for precision in ("bf16", "fp16"):
        assert fam.covers(precision)
        for op_class, group in (("matmul", "matmul"), ("attention", "attention"),
                                ("elementwise", "memory_bound"), ("norm", "memory_bound")):
            assert fam.factor(op_class, precision) == fam.time_factor[group]
        assert fam.overhead_s(precision) == fam.kernel_overhead_s
    for precision in ("tf32", "fp32"):
        assert not fam.covers(precision)
        assert fam.factor("matmul", precision) == 1.0 and fam.overhead_s(precision) == 0.0
    assert not IDENTITY.covers("fp16")
    # what compare prints beside a strategy says so
    model = ComputeModel(H100, strategy="fsdp", model_family="llama")
    assert model.stack("fp16") == model.stack("bf16")
    assert model.stack("tf32") == ("the roofline's kernels "
                                   "(the H100 fit covers bf16, fp16, not tf32)")


def test_the_stack_is_the_decoder_models_code():
    fam = family_of(A100)
    assert STACK_MODELS == ("gpt", "llama")
    for family in STACK_MODELS:
        assert ComputeModel(A100, strategy="ddp", model_family=family).fit is fam
    for family in ("bert", "resnet", "maskrcnn"):
        fit = ComputeModel(A100, strategy="fsdp", model_family=family).fit
        assert fit.time_factor["matmul"] == fam.time_factor["matmul"]       # the GPU's
        assert fit.time_factor["attention"] == fam.time_factor["attention"]
        assert fit.time_factor["memory_bound"] == 1.0 and fit.kernel_overhead_s == 0.0
        assert f"a {family} model's code does not run" in ComputeModel(
            A100, strategy="fsdp", model_family=family).stack("fp16")
    # a bare kernel (no strategy, no model) is the family's, as before
    assert ComputeModel(A100).fit is fam
    assert ComputeModel(A100, model_family="llama").fit is fam


def _op_times(scenario: dict) -> dict[tuple, float]:
    """The forward ops of the first block of rank 0: (name, phase) -> seconds."""
    setup = build_setup(scenario_from_dict(scenario), extrapolate_steps=False)
    first = setup.trace.classes[0].id
    layer = setup.trace.classes[0].ops[0].layer
    return {(r.name, r.phase): r.end_s - r.start_s for r in run_setup(setup).timeline.records
            if r.cls == first and r.layer == layer and r.phase == "forward"}


RESNET = {"name": "half", "model": "resnet-50", "simulation": {"variability": "none"},
          "cluster": {"topology": "dgx-a100"},
          "training": {"micro_batch": 64, "memory_format": "nhwc", "precision": "fp16"}}
BERT = {"name": "half", "model": "bert-large", "simulation": {"variability": "none"},
        "cluster": {"topology": "dgx-a100"},
        "training": {"micro_batch": 32, "seq_len": 128, "precision": "fp16",
                     "flash_attention": False}}


@pytest.mark.parametrize("base", [RESNET, BERT], ids=["resnet-50", "bert-large"])
def test_ddp_prices_a_non_decoder_model_as_horovod_in_either_16_bit_precision(base):
    times = {}
    for precision in ("fp16", "bf16"):
        for strategy in ({"name": "ddp", "param_dtype": "fp32"}, {"name": "horovod"}):
            data = copy.deepcopy(base)
            data["training"]["precision"] = precision
            data["strategy"] = strategy
            times[precision, strategy["name"]] = _op_times(data)
    reference = times["fp16", "horovod"]
    assert reference
    for key, ops in times.items():
        common = set(ops) & set(reference)
        assert len(common) >= len(reference) // 2, key
        for op in common:           # the same kernels: the same seconds (a few ulps apart)
            assert ops[op] == pytest.approx(reference[op], rel=1e-9), (key, op)


def test_a_decoder_model_costs_the_same_in_fp16_and_bf16():
    data = {"name": "half", "model": "llama-2-7b", "simulation": {"variability": "none"},
            "cluster": {"topology": "dgx-a100"}, "strategy": {"name": "fsdp"},
            "training": {"micro_batch": 1, "seq_len": 2048}}
    times = {}
    for precision in ("fp16", "bf16"):
        data["training"]["precision"] = precision
        times[precision] = _op_times(copy.deepcopy(data))
    assert times["bf16"] and set(times["bf16"]) == set(times["fp16"])
    fam = family_of(A100)
    for op, seconds in times["bf16"].items():
        assert times["fp16"][op] == pytest.approx(seconds, rel=1e-9), op
    # and the stack's overhead is in them: at least one kernel's worth a forward op
    assert min(times["bf16"].values()) >= fam.kernel_overhead_s


def test_a_generated_trace_carries_the_model_family_its_replay_prices_by(tmp_path):
    from simulator.trace_replay import run_settings
    data = copy.deepcopy(RESNET)
    data["strategy"] = {"name": "ddp", "param_dtype": "fp32"}
    setup = build_setup(scenario_from_dict(data), extrapolate_steps=False)
    assert setup.trace.meta["run"]["model_family"] == load_model("resnet-50").family
    assert run_settings(setup.trace.meta).model_family == "resnet"
    assert run_settings({"run": {}}).model_family is None


def test_a_trace_with_an_unknown_model_family_is_refused_naming_the_field():
    from simulator.errors import ConfigError
    from simulator.trace_replay import run_settings
    with pytest.raises(ConfigError) as err:
        run_settings({"run": {"model_family": "transformer"}})
    assert err.value.field == "meta.run.model_family"


@pytest.mark.parametrize("scenario, family", [("bert-large-ddp-8gpu", "bert"),
                                              ("quickstart", "llama")])
def test_run_says_what_prices_its_kernels_as_compare_does(capsys, scenario, family):
    """``run`` prints the kernel stack (``# kernels:``, JSON ``kernels``) that ``compare``
    prints for the same strategy: the GPU's family fit as the strategy and the model's code
    pay it."""
    import json
    from test_cli import run_main
    from simulator.compare.options import parse_strategies
    from simulator.compare.runner import compare
    from simulator.scenario import load_scenario
    code, out, err = run_main(capsys, "run", scenario, "--format", "json", "-q")
    assert code == 0, err
    said = json.loads(out)["kernels"]
    scn = load_scenario(scenario)
    setup = build_setup(scn, extrapolate_steps=False)
    assert said == setup.compute.stack(setup.job.precision)
    if family in STACK_MODELS:       # the eager stack's two mechanisms, named
        assert "the eager PyTorch stack: memory-bound x" in said
    else:
        assert f"a {family} model's code does not run the eager stack's" in said
    code, out, err = run_main(capsys, "run", scenario, "-q")
    assert f"# kernels: {said}" in out.splitlines()
    name = {"bert-large-ddp-8gpu": "ddp", "quickstart": "fsdp-full"}[scenario]
    row = next(r for r in compare(scn, parse_strategies([name]), scaling=False,
                                  capacity=False).rows)
    assert row.kernels.startswith(said)

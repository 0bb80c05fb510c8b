"""Each framework's FP8 as it runs it (issue 40): ``training.fp8_recipe`` left unset is the
strategy's framework's own default (Megatron-LM's ``--fp8-recipe`` defaults to Transformer
Engine's delayed scaling; torchao's ``Float8LinearConfig`` to tensorwise), a torchao recipe
under ``megatron`` is refused in one line, and Megatron-LM's argument file spells FP8 with
``--fp8-format``/``--fp8-recipe`` (its ``tensorwise`` is Transformer Engine's current
scaling) and NVFP4 with ``--fp4-format``, each costing what the scenario's spelling costs."""

from __future__ import annotations

import pytest
import yaml

from simulator.choices import TORCHAO_RECIPES, default_fp8_recipe
from simulator.cli.configfile import scenario_with_config
from simulator.errors import ConfigError
from simulator.pipeline import build_setup, run_setup
from simulator.scenario import scenario_from_dict
from simulator.strategies.frameworks.files import read_config
from simulator.strategies.frameworks.megatron import FILE_DEFAULTS

TP2 = {"name": "megatron", "tensor_model_parallel_size": 2, "sequence_parallel": True,
       "use_distributed_optimizer": True}
FLAGS = "--tensor-model-parallel-size 2 --sequence-parallel --use-distributed-optimizer"


def _scenario(strategy: dict, gpu: str = "dgx-h100", **training) -> dict:
    return {"name": "fp8-recipes", "model": "llama-3-8b", "cluster": {"topology": gpu},
            "strategy": strategy, "simulation": {"variability": "none"},
            "training": {"seq_len": 4096, "micro_batch": 1, "grad_accum": 2,
                         "precision": "fp8", **training}}


def _step_s(scn) -> float:
    return run_setup(build_setup(scn)).metrics.iteration_time_s


def _scn(strategy: dict, **training):
    return scenario_from_dict(_scenario(strategy, **training), "run.yaml")


def _write(tmp_path, text: str, name: str = "run.args"):
    path = tmp_path / name
    path.write_text(text)
    return path


def _from_file(tmp_path, flags: str, sets=()):
    base = tmp_path / "base.yaml"
    data = _scenario({"name": "megatron"})
    data["training"] = {k: v for k, v in data["training"].items() if k != "precision"}
    base.write_text(yaml.safe_dump(data))
    return scenario_with_config(str(base), read_config(_write(tmp_path, flags + "\n")),
                                list(sets))


def test_the_default_recipe_is_the_frameworks_own():
    assert default_fp8_recipe("megatron") == "delayed"
    for name in ("fsdp", "torchtitan", "ddp", "deepspeed"):
        assert default_fp8_recipe(name) == "tensorwise"
    assert _scn(TP2).fp8_recipe == "delayed"
    assert _scn({"name": "fsdp"}).fp8_recipe == "tensorwise"
    assert _scn(TP2, fp8_recipe="current").fp8_recipe == "current"     # set: as set


@pytest.mark.parametrize("strategy, default", [(TP2, "delayed"),
                                               ({"name": "fsdp"}, "tensorwise")])
def test_an_unset_recipe_costs_what_the_frameworks_default_costs(strategy, default):
    assert _step_s(_scn(strategy)) == _step_s(_scn(strategy, fp8_recipe=default))


def test_megatron_no_longer_prices_torchaos_recipe_by_default():
    """Before: an unset recipe was torchao's tensorwise under every strategy, and a Megatron
    FP8 step paid torchao's separate amax and cast kernels (GPT-3 175B TP8 x PP16 on H100:
    14% over delayed scaling)."""
    unset, delayed, current = (_step_s(_scn(TP2, **r)) for r in (
        {}, {"fp8_recipe": "delayed"}, {"fp8_recipe": "current"}))
    assert unset == delayed < current     # current scaling's amax pass reads each input again


@pytest.mark.parametrize("recipe", TORCHAO_RECIPES)
def test_a_torchao_recipe_under_megatron_is_refused_in_one_line(recipe):
    with pytest.raises(ConfigError, match=f"{recipe} is torchao's") as info:
        build_setup(_scn(TP2, fp8_recipe=recipe), "run.yaml")
    assert info.value.field == "training.fp8_recipe"
    assert info.value.source == "run.yaml" and "\n" not in str(info.value)


TITAN = {"name": "torchtitan", "parallelism": {"data_parallel_shard_degree": 8}}


@pytest.mark.parametrize("recipe, topology", [("delayed", "dgx-h100"), ("current", "dgx-h100"),
                                              ("mxfp8", "dgx-b200")])
def test_a_transformer_engine_recipe_under_torchtitan_is_refused_in_one_line(recipe, topology):
    """torchtitan's float8 is torchao's Float8Linear (its TOML reader refuses an MX
    converter too): Transformer Engine's recipes, which it cannot run, are refused as
    torchao's are under megatron, and fp8_attention (Transformer Engine's) with them."""
    data = _scenario(TITAN, fp8_recipe=recipe)
    data["cluster"]["topology"] = topology
    with pytest.raises(ConfigError, match=f"{recipe} is Transformer Engine's FP8 recipe; "
                                          f"torchtitan runs torchao's") as info:
        build_setup(scenario_from_dict(data, "run.yaml"), "run.yaml")
    assert info.value.field == "training.fp8_recipe"
    assert info.value.source == "run.yaml" and "\n" not in str(info.value)
    for torchao in TORCHAO_RECIPES:       # its own recipes run (on an H100)
        assert _step_s(_scn(TITAN, fp8_recipe=torchao)) > 0
    with pytest.raises(ConfigError, match="torchtitan runs torchao's float8, which has none"
                       ) as info:
        build_setup(_scn(TITAN, fp8_attention=True), "run.yaml")
    assert info.value.field == "training.fp8_attention"


@pytest.mark.parametrize("parallelism, precision, refused", [
    ({"tensor_parallel_degree": 2, "data_parallel_replicate_degree": 4,
      "data_parallel_shard_degree": 1}, "bf16", True),
    ({"tensor_parallel_degree": 2, "data_parallel_replicate_degree": 4,
      "data_parallel_shard_degree": 1}, "fp8", True),
    ({"pipeline_parallel_degree": 8}, "bf16", True),
    ({"pipeline_parallel_degree": 8}, "fp32", False),
    ({"tensor_parallel_degree": 2, "data_parallel_shard_degree": 4}, "bf16", False),
    ({"tensor_parallel_degree": 2, "context_parallel_degree": 4,
      "data_parallel_shard_degree": 1}, "bf16", False),
    ({"data_parallel_replicate_degree": 8, "data_parallel_shard_degree": 1}, "bf16", False),
])
def test_torchtitans_tp_or_pp_without_fsdp_is_refused_below_fp32(parallelism, precision,
                                                                 refused):
    """torchtitan's mixed precision is FSDP's (over dp_shard x cp), AMP only for DDP or one
    GPU: with TP or PP and neither it trains in fp32 (maybe_enable_amp), so a 16-bit or FP8
    step there is refused in one line naming the shard degree."""
    scn = _scn({"name": "torchtitan", "parallelism": parallelism}, precision=precision)
    if not refused:
        assert _step_s(scn) > 0
        return
    with pytest.raises(ConfigError, match="in fp32: its mixed precision is FSDP's") as info:
        build_setup(scn, "run.yaml")
    assert info.value.field == "strategy.parallelism.data_parallel_shard_degree"
    assert "\n" not in str(info.value)


def test_torchtitans_toml_without_fsdp_is_refused_at_its_own_key(tmp_path):
    base = tmp_path / "base.yaml"
    data = _scenario({"name": "torchtitan"})
    data["training"] = {k: v for k, v in data["training"].items() if k != "precision"}
    base.write_text(yaml.safe_dump(data))
    toml = ("[training]\nmixed_precision_param = \"bfloat16\"\n[parallelism]\n"
            "tensor_parallel_degree = 8\ndata_parallel_shard_degree = 1\n")
    pieces = read_config(_write(tmp_path, toml, "job.toml"))
    with pytest.raises(ConfigError, match="in fp32: its mixed precision is FSDP's") as info:
        scenario_with_config(str(base), pieces, [])
    assert info.value.source == str(tmp_path / "job.toml")
    assert info.value.field == "parallelism.data_parallel_shard_degree"


def test_fp8_attention_follows_the_resolved_recipe():
    """fp8_attention needs a Transformer Engine recipe: Megatron's default is one, the
    PyTorch strategies' (torchao tensorwise) is not; set, the recipe is checked on load."""
    def compute_s(scn):         # the GPU's time (this step's is bound by the host's launches)
        return run_setup(build_setup(scn)).metrics.compute_s
    assert compute_s(_scn(TP2, fp8_attention=True)) < compute_s(_scn(TP2))
    with pytest.raises(ConfigError, match="fp8_attention is Transformer Engine's") as info:
        build_setup(_scn({"name": "fsdp"}, fp8_attention=True), "run.yaml")
    assert info.value.field == "training.fp8_attention" and info.value.source == "run.yaml"
    with pytest.raises(ConfigError, match="fp8_attention is Transformer Engine's"):
        _scn(TP2, fp8_attention=True, fp8_recipe="rowwise")


@pytest.mark.parametrize("flags, fields", [
    ("--fp8-format hybrid", {"fp8_recipe": "delayed"}),             # Megatron-LM's default
    ("--fp8-format e4m3 --fp8-recipe delayed", {"fp8_recipe": "delayed"}),
    ("--fp8-format hybrid --fp8-recipe tensorwise", {"fp8_recipe": "current"}),
])
def test_the_argument_files_fp8_costs_what_the_scenario_spelling_costs(tmp_path, flags,
                                                                        fields):
    from_file = _from_file(tmp_path, f"{FLAGS} --bf16 {flags}")
    assert from_file.training.precision == "fp8"
    assert from_file.training.fp8_recipe == fields["fp8_recipe"]
    # the file's other defaults (FILE_DEFAULTS: Megatron-LM's unfused loss) spelled out
    assert _step_s(from_file) == _step_s(_scn({**TP2, **FILE_DEFAULTS}, **fields))


def test_the_argument_files_fp8_format_is_used_and_its_default_recipe_said(tmp_path):
    pieces = read_config(_write(tmp_path, f"{FLAGS} --bf16 --fp8-format hybrid\n"))
    assert pieces.training == {"precision": "fp8", "fp8_recipe": "delayed"}
    assert "--fp8-format" in pieces.used
    assert "--fp8-recipe not given: delayed (Megatron-LM's default)" in pieces.summary()
    plain = read_config(_write(tmp_path, f"{FLAGS} --bf16\n"))
    assert plain.training == {"precision": "bf16"}


def test_a_recipe_without_its_format_is_listed_as_ignored(tmp_path):
    pieces = read_config(_write(tmp_path, f"{FLAGS} --bf16 --fp8-recipe tensorwise\n"))
    assert pieces.training == {"precision": "bf16"}
    assert any(key.startswith("--fp8-recipe (without --fp8-format") for key in pieces.ignored)


def test_the_argument_files_fp4_format_is_nvfp4(tmp_path):
    pieces = read_config(_write(tmp_path, f"{FLAGS} --bf16 --fp4-format e2m1 "
                                          f"--fp4-recipe nvfp4\n"))
    assert pieces.training == {"precision": "fp4"}
    assert {"--fp4-format", "--fp4-recipe"} <= set(pieces.used)


@pytest.mark.parametrize("flags, field, reason", [
    ("--bf16 --fp8-format hybrid --fp8-recipe blockwise", "--fp8-recipe", "is not modelled"),
    ("--bf16 --fp8-format e5m2", "--fp8-format", "must be one of e4m3, hybrid"),
    ("--bf16 --fp8-format hybrid --fp8-recipe rowwise", "--fp8-recipe", "must be one of"),
    ("--fp8-format hybrid", "--fp8-format", "add --bf16"),
    ("--fp16 --fp8-format hybrid", "--fp8-format", "add --bf16"),
    ("--bf16 --fp8-format hybrid --fp4-format e2m1", "--fp4-format", "both given"),
    ("--bf16 --fp8-format hybrid --fp8-format e4m3", "--fp8-format", "given twice"),
])
def test_the_argument_files_low_precision_refusals_name_the_argument(tmp_path, flags, field,
                                                                     reason):
    with pytest.raises(ConfigError, match=reason) as info:
        read_config(_write(tmp_path, f"{FLAGS} {flags}\n"))
    assert info.value.field == field and info.value.source.endswith("run.args")
    assert "\n" not in str(info.value)


def test_an_fp8_argument_file_on_a_gpu_without_fp8_names_its_argument(tmp_path):
    base = tmp_path / "base.yaml"
    base.write_text(yaml.safe_dump(_scenario({"name": "megatron"}, gpu="dgx-a100",
                                             precision="bf16")))
    with pytest.raises(ConfigError, match="no FP8 tensor cores") as info:
        from simulator.cli.configfile import check_gpu
        from simulator.topology.build import scenario_graph
        pieces = read_config(_write(tmp_path, f"{FLAGS} --bf16 --fp8-format hybrid\n"))
        scn = scenario_with_config(str(base), pieces, [])
        check_gpu(scn, scenario_graph(scn), pieces, set())
    assert info.value.field == "--fp8-format"


# ------------------------------------------------------------------------------- plan
def _estimator(recipes: dict):
    from simulator.collectives.model import CollectiveModel
    from simulator.compute import ComputeModel
    from simulator.constants import load_constants
    from simulator.hardware import gpu_spec
    from simulator.models import load_model
    from simulator.planner.estimate import Estimator
    from simulator.planner.strategy import strategy_of
    from simulator.scenario import load_scenario
    from simulator.topology.build import scenario_cluster
    model = load_model("llama-2-7b")
    cluster = scenario_cluster(load_scenario("quickstart", ["training.seq_len=512"]))
    stacks = {name: ComputeModel(gpu_spec("H100-SXM"), strategy=name)
              for name in ("torchtitan", "megatron")}
    return Estimator(model, 512, "fp8", True, CollectiveModel(cluster, load_constants()),
                     stacks["torchtitan"], stacks=stacks, fp8_recipes=recipes,
                     stack_of=lambda c: strategy_of(c, model.layers)["name"])


def test_plan_prices_each_frameworks_candidates_at_its_own_recipe():
    """An unset recipe: plan's Megatron (distributed-optimizer) candidates at delayed
    scaling, its torchtitan candidates at tensorwise, as each one's replay runs them."""
    from simulator.planner.space import Candidate
    from simulator.strategies.parallel.plan import ParallelPlan
    zero1 = Candidate(ParallelPlan(tp=2, dp_shard=4, dp_mode="zero1", sequence_parallel=True),
                      1, 2, "none")
    fsdp = Candidate(ParallelPlan(tp=2, dp_shard=4, sequence_parallel=True), 1, 2, "none")
    own = _estimator({"torchtitan": "tensorwise", "megatron": "delayed"})
    delayed = _estimator({"torchtitan": "delayed", "megatron": "delayed"})
    tensorwise = _estimator({"torchtitan": "tensorwise", "megatron": "tensorwise"})
    assert own.estimate(zero1) == delayed.estimate(zero1) != tensorwise.estimate(zero1)
    assert own.estimate(fsdp) == tensorwise.estimate(fsdp) != delayed.estimate(fsdp)


def test_plan_leaves_out_the_candidates_whose_framework_refuses_the_recipe():
    from simulator.planner.report import header
    from simulator.planner.search import search
    from simulator.planner.space import Limits
    from simulator.scenario import load_scenario
    scn = load_scenario("quickstart", ["training.seq_len=512", "cluster.topology=dgx-h100",
                                       "training.precision=fp8",
                                       "training.fp8_recipe=rowwise"])
    out = search(scn, 16, replay=1, limits=Limits(max_pp=1, max_tp=2, max_micro_batch=2))
    c = out.counts
    assert c["refused by their framework"] > 0
    assert c["candidates"] == (c["not replayable here"] + c["over memory"] + c["fit"]
                               + c["refused by their framework"])
    assert all(r.strategy["name"] != "megatron" for r in out.rows)
    assert list(out.refused) == ["megatron"]
    assert f"{c['refused by their framework']} refused by their framework (megatron: " \
           f"training.fp8_recipe: rowwise is torchao's" in header(out)


def test_plan_spells_its_data_parallel_candidates_as_pytorchs_own_under_a_te_recipe():
    """A Transformer Engine recipe (llm-foundry's FSDP runs one): torchtitan refuses it, so
    plan's candidates without model parallelism are PyTorch's FSDP2 or DDP, which run it, and
    the model-parallel FSDP ones are left out as torchtitan's."""
    from simulator.planner.report import header
    from simulator.planner.search import search
    from simulator.planner.space import Limits
    from simulator.planner.strategy import carried_lines
    from simulator.scenario import load_scenario
    scn = load_scenario("quickstart", ["training.seq_len=512", "cluster.topology=dgx-h100",
                                       "training.precision=fp8",
                                       "training.fp8_recipe=delayed"])
    out = search(scn, 16, replay=8, limits=Limits(max_pp=1, max_tp=2, max_cp=1,
                                                  max_micro_batch=2))
    assert list(out.refused) == ["torchtitan"] and out.carried.te_fp8
    assert "refused by their framework (torchtitan: training.fp8_recipe: delayed is " \
           "Transformer Engine's" in header(out)
    names = {r.strategy["name"] for r in out.rows}
    assert "torchtitan" not in names and "fsdp" in names      # (DDP's fp32 copy: over memory)
    assert all(r.candidate.plan.tp == 1 for r in out.rows if r.strategy["name"] == "fsdp")
    assert all(r.metrics is not None for r in out.rows)      # each replayed, none refused
    assert any("PyTorch FSDP2 or DDP with Transformer Engine" in x
               for x in carried_lines(out.carried))
    bf16 = search(load_scenario("quickstart", ["training.seq_len=512",
                                               "cluster.topology=dgx-h100"]),
                  16, replay=1, limits=Limits(max_pp=1, max_tp=2, max_micro_batch=2))
    assert not bf16.carried.te_fp8 and bf16.refused == {}


def test_plan_leaves_out_torchtitans_candidates_under_fp8_attention():
    """fp8_attention with the recipe unset: Megatron's candidates run it (delayed), but
    torchtitan's default (torchao's tensorwise) has no FP8 attention: refused, as run
    refuses it."""
    from simulator.planner.search import search
    from simulator.planner.space import Limits
    from simulator.scenario import load_scenario
    scn = load_scenario("quickstart", ["training.seq_len=512", "cluster.topology=dgx-h100",
                                       "training.precision=fp8", "training.fp8_attention=true",
                                       "strategy={name: megatron}"])
    out = search(scn, 16, replay=1, limits=Limits(max_pp=1, max_tp=2, max_cp=1,
                                                  max_micro_batch=1))
    assert list(out.refused) == ["torchtitan"]
    assert out.refused["torchtitan"].startswith("training.fp8_attention: ")
    with pytest.raises(ConfigError) as info:
        build_setup(_scn(TITAN, fp8_attention=True), "run.yaml")
    assert out.refused["torchtitan"].endswith(info.value.reason)
    assert all(r.strategy["name"] == "megatron" for r in out.rows)


@pytest.mark.parametrize("mode", ["fsdp", "ddp"])
def test_a_data_parallel_candidate_costs_the_same_in_either_spelling(mode):
    """One path, one price: torchtitan's spelling of a candidate without model parallelism
    and PyTorch's own (plan's under a Transformer Engine recipe) replay the same step."""
    from simulator.planner.space import Candidate
    from simulator.planner.strategy import Carried, strategy_of
    from simulator.scenario import load_scenario
    from simulator.strategies.parallel.plan import ParallelPlan
    plan = (ParallelPlan(dp_replicate=2, dp_shard=4) if mode == "fsdp" else
            ParallelPlan(dp_replicate=8, dp_shard=1, dp_mode="ddp"))
    c = Candidate(plan, 1, 2, "full")
    spelled = [strategy_of(c, 32, Carried(te_fp8=te)) for te in (False, True)]
    assert [s["name"] for s in spelled] == ["torchtitan", mode]
    steps = [run_setup(build_setup(load_scenario(
        "quickstart", ["training.seq_len=512", "cluster.topology=dgx-h100", "cluster.gpus=8",
                       "training.micro_batch=1", "training.grad_accum=2",
                       f"strategy={s}"]))).metrics for s in spelled]
    assert steps[0].iteration_time_s == steps[1].iteration_time_s
    assert steps[0].peak_memory_gib == steps[1].peak_memory_gib


def test_plan_estimates_a_ddp_candidate_with_the_casts_its_replay_runs():
    """A DDP candidate replays under torch.autocast (fp32 weights cast for each GEMM), so
    its estimate prices the same layer costs: m x (blocks x (forward + backward) + embedding
    + head) of autocast's kernels; an FSDP candidate (bf16 parameters) the plain ones."""
    from simulator.collectives.model import CollectiveModel
    from simulator.compute import ComputeModel
    from simulator.constants import load_constants
    from simulator.hardware import gpu_spec
    from simulator.models import layer_costs, load_model
    from simulator.planner.estimate import Estimator
    from simulator.planner.space import Candidate
    from simulator.scenario import load_scenario
    from simulator.strategies.parallel.plan import ParallelPlan
    from simulator.topology.build import scenario_cluster
    model = load_model("llama-2-7b")
    cluster = scenario_cluster(load_scenario("quickstart", ["training.seq_len=512"]))
    stack = ComputeModel(gpu_spec("H100-SXM"), strategy="torchtitan")
    est = Estimator(model, 512, "bf16", True, CollectiveModel(cluster, load_constants()),
                    stack, stacks={"torchtitan": stack}, stack_of=lambda c: "torchtitan")
    ddp = Candidate(ParallelPlan(dp_replicate=8, dp_shard=1, dp_mode="ddp"), 1, 2, "none")
    fsdp = Candidate(ParallelPlan(dp_shard=8), 1, 2, "none")
    assert est.autocasts(ddp) and not est.autocasts(fsdp)

    def compute_s(autocast):
        layers = layer_costs(model, 1, 512, "bf16", True, autocast=autocast)

        def s(ops):          # as the replay prices the ops written from them
            from simulator.compute.pricing import cost_time_s
            return sum(cost_time_s(stack, o, "bf16") for o in ops)
        block = next(x for x in layers if x.kind.endswith("block"))
        edges = sum(s((*x.forward, *x.backward)) for x in (layers[0], layers[-1]))
        return 2 * (model.layers * (s(block.forward) + s(block.backward)) + edges)
    assert est.estimate(ddp).compute_s == pytest.approx(compute_s(True), rel=1e-12)
    assert compute_s(True) > compute_s(False)


def test_the_kernels_line_says_which_recipe_ran():
    from simulator.pipeline import kernel_stack
    setup = build_setup(_scn(TP2))
    assert kernel_stack(setup) == (setup.compute.stack("fp8")
                                   + "; FP8 recipe delayed, its framework's default")
    set_ = build_setup(_scn({"name": "fsdp"}, fp8_recipe="rowwise"))
    assert kernel_stack(set_).endswith("; FP8 recipe rowwise")
    bf16 = build_setup(_scn({"name": "fsdp"}, precision="bf16"))
    assert kernel_stack(bf16) == bf16.compute.stack("bf16")


# ---------------------------------------------------------------------------- compare
def _compare(**training):
    from simulator.compare.options import parse_strategies
    from simulator.compare.runner import compare
    data = _scenario({"name": "fsdp"}, seq_len=1024, **training)
    return compare(scenario_from_dict(data, "run.yaml"),
                   parse_strategies("fsdp-full,megatron:tp2"), scaling=False, capacity=False)


def test_compare_says_when_the_strategies_ran_different_recipes():
    from simulator.compare.report import recipe_lines, records, render_table
    cmp = _compare()
    assert {r.alias.key: r.fp8_recipe for r in cmp.rows} == {"fsdp-full": "tensorwise",
                                                             "megatron:tp2": "delayed"}
    line = recipe_lines([r for r in records(cmp) if r["status"] == "ok"])
    assert line == ["# FP8 recipes differ: fsdp-full tensorwise, megatron:tp2 delayed (each "
                    "framework's own where training.fp8_recipe is unset; set it to price one "
                    "recipe, which a framework that cannot run it refuses)"]
    assert line[0] in render_table(cmp).splitlines()
    one = _compare(fp8_recipe="delayed")           # one recipe: both run it, no line
    assert {r.fp8_recipe for r in one.rows} == {"delayed"}
    assert recipe_lines([r for r in records(one) if r["status"] == "ok"]) == []
    bf16 = _compare(precision="bf16")
    assert {r.fp8_recipe for r in bf16.rows} == {""}

"""What a new user trips on (issue 47), each checked where it happened: a misspelt key or
name gets a "did you mean", a shipped file copied into an installed package is named by its
name (``scenario quickstart``), rates read per week and per month, ``compare`` takes the
user's own model file, a single server says in words why it has no 2x-GPU column (and shows
no progress for runs it does not make), ``--config`` finds a shipped config by its bare name,
and ``validate`` from a wheel writes its reports in the current folder, never into the
installed package. (A wheel installed in a fresh environment: tests/test_packaging.py.)"""

from __future__ import annotations

import json
import shutil
import statistics
from pathlib import Path

import pytest

from simulator import shipped
from simulator.errors import ConfigError, did_you_mean
from simulator.reliability.quantities import parse_rate
from simulator.scenario import load_scenario
from simulator.validation import paths
from simulator.validation.envelope import load_ground
from test_cli import run_main

REPO = Path(__file__).resolve().parents[1]
SMALL = ["--set", "model=gpt2-small", "--set", "training.seq_len=1024",
         "--set", "training.micro_batch=1"]


# ---------------------------------------------------------------- did you mean
def test_a_misspelt_scenario_key_gets_the_closest_one(capsys):
    code, _, err = run_main(capsys, "run", "--set", "training.micro_bach=2")
    assert code == 2
    assert "--set training.micro_bach: unknown key (got 2); did you mean 'micro_batch'?" in err


def test_a_key_far_from_every_valid_one_gets_no_guess():
    with pytest.raises(ConfigError) as exc:
        load_scenario("quickstart", ["training.zzz=2"])
    assert "did you mean" not in str(exc.value)


@pytest.mark.parametrize("args,guess", [
    (["run", "llama2-7b-fsdp-128gp"], "llama2-7b-fsdp-128gpu"),
    (["run", "--set", "model=llama-2-7"], "llama-2-7b"),
    (["run", "--set", "cluster.topology=dgx-h100-superpd"], "dgx-h100-superpod"),
    (["run", "--config", "ds_zero.json"], "ds_zero3.json"),
])
def test_a_misspelt_name_gets_the_closest_one(capsys, args, guess):
    code, _, err = run_main(capsys, *args)
    assert code == 2 and f"did you mean {guess!r}?" in err, err


def test_did_you_mean_wants_a_close_match():
    assert did_you_mean("micro_bach", ["micro_batch", "seq_len"]) == \
        "; did you mean 'micro_batch'?"
    assert did_you_mean("batch", ["micro_batch", "seq_len"]) == ""


# ------------------------------------------------------- names, not install paths
@pytest.fixture
def packaged(tmp_path, monkeypatch):
    """An installed package's copy of the shipped scenarios (as a wheel has it), and no
    checkout folder: what a ``pip install`` of the wheel sees."""
    folder = tmp_path / "site-packages" / "simulator" / "_shipped"
    shutil.copytree(REPO / "scenarios", folder / "scenarios",
                    ignore=shutil.ignore_patterns("studies"))
    monkeypatch.setattr(shipped, "packaged_dir",
                        lambda kind: folder / shipped.FOLDERS[kind])
    monkeypatch.setattr(shipped, "source_dir", lambda kind: tmp_path / "no-checkout")
    monkeypatch.chdir(tmp_path)
    return folder


def test_an_installed_scenario_is_named_by_its_name(capsys, packaged):
    code, _, err = run_main(capsys, "run", "--set", "training.micro_batch=0")
    assert code == 2
    assert err.startswith("clustersim: error: scenario quickstart: --set training.micro_batch")
    assert "site-packages" not in err


def test_a_file_the_user_gave_is_named_by_its_path(capsys, tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text((REPO / "scenarios" / "quickstart.yaml").read_text())
    code, _, err = run_main(capsys, "run", str(mine), "--set", "training.micro_batch=0")
    assert code == 2 and f"error: {mine}: --set training.micro_batch" in err


def test_a_shipped_config_is_found_by_its_bare_name(capsys):
    code, out, err = run_main(capsys, "run", "llama2-7b-fsdp-128gpu", "--config",
                              "ds_zero3.json", "--format", "json")
    assert code == 0, err
    assert "deepspeed config, used:" in err


# ---------------------------------------------------------------- rates
@pytest.mark.parametrize("text,seconds", [
    ("3 per week", 7 * 86400 / 3),
    ("2 per month", 365 / 12 * 86400 / 2),
    ("1 per 2 weeks", 14 * 86400),
    ("6 per 1000 node-months", 1000 * 365 / 12 * 86400 / 6),
])
def test_rates_per_week_and_month(text, seconds):
    rate = parse_rate(text)
    assert rate.per_s == pytest.approx(1 / seconds, rel=1e-12)
    assert rate.basis == ("node" if "node" in text else "job")


# ---------------------------------------------------------------- compare
def test_compare_takes_the_users_own_model_file(capsys, tmp_path, monkeypatch):
    model = (REPO / "simulator" / "data" / "models" / "gpt2-small.yaml").read_text()
    (tmp_path / "my-model.yaml").write_text(model.replace("name: gpt2-small", "name: my-gpt"))
    (tmp_path / "mine.yaml").write_text(
        "name: mine\nmodel: my-model.yaml\ntraining: {micro_batch: 1, seq_len: 1024}\n"
        "cluster: {topology: dgx-a100}\nstrategy: {name: fsdp}\n")
    monkeypatch.chdir(tmp_path)
    code, out, err = run_main(capsys, "compare", "mine.yaml", "--strategies", "fsdp-full,ddp",
                              "--no-scaling", "--no-capacity")
    assert code == 0, err
    assert "my-gpt" in out and "# accuracy (" in out


def test_a_single_server_says_why_it_has_no_2x_column(capsys):
    code, out, err = run_main(capsys, "compare", *SMALL, "--strategies", "fsdp-full,ddp",
                              "--no-capacity")
    assert code == 0, err
    line = next(x for x in out.splitlines() if x.startswith("# 2x GPUs:"))
    assert "dgx-a100 is a single server" in line and "generator" not in line
    assert "2x GPUs 1/" not in err                  # no progress for runs not made


# ---------------------------------------------------------------- validate from a wheel
def test_a_wheels_validation_reports_go_to_the_current_folder(tmp_path, monkeypatch):
    data = tmp_path / "site-packages" / "simulator" / "_shipped" / "validation"
    monkeypatch.setattr(paths, "IN_CHECKOUT", False)
    monkeypatch.setattr(paths, "PACKAGED", data)
    assert paths.default_report(data / "traces") == Path("validation-report/traces")
    assert paths.default_report(data / "training" / "report") == \
        Path("validation-report/training/report")
    elsewhere = tmp_path / "mine"
    assert paths.default_report(elsewhere) == elsewhere
    monkeypatch.setattr(paths, "IN_CHECKOUT", True)       # a checkout: beside its data
    assert paths.default_report(data / "traces") == data / "traces"


# ---------------------------------------------------------------- compare reads top-down
def test_compare_gives_the_decision_and_its_trust_before_the_details(capsys):
    code, out, err = run_main(capsys, "compare", *SMALL, "--strategies",
                              "fsdp-full,tf-multiworker", "--no-capacity", "--no-scaling")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("# compare quickstart: ")
    assert "is the cheapest strategy that fits in memory: $" in lines[1]
    trust = next(i for i, x in enumerate(lines) if x.startswith("# How far to trust it: "))
    table = next(i for i, x in enumerate(lines) if x.startswith("strategy "))
    cost = next(i for i, x in enumerate(lines) if x.startswith("# cost at "))
    details = next(i for i, x in enumerate(lines) if x.startswith("# accuracy ("))
    assert trust < table < cost < details
    # the median of TensorFlow's held-out A100-80GB transformer rows (TF2 BERT-large, under
    # Horovod: the horovod strategy is TensorFlow's), as validated.csv has them; Mask R-CNN's
    # detection rows speak for detection models only (tests/test_envelope.py)
    rows = [r for r in load_ground() if r["family"] in ("tensorflow", "horovod")
            and r["architecture"] == "transformer"
            and r["gpu"] == "A100-SXM4-80GB" and r["split"] == "validation"]
    median = statistics.median(abs(r["error"]) for r in rows)
    assert f"TensorFlow {100 * median:.1f}% ({len(rows)} runs)" in lines[trust]
    assert "too far off" not in lines[trust]


def test_a_strategy_refusing_the_step_is_a_row_not_an_error(capsys):
    """BERT accumulates 32 micro-batches, which ParameterServerStrategy does not: its row
    says so and the others still compare (the whole command failed before)."""
    code, out, err = run_main(capsys, "compare", "bert-large-ddp-8gpu", "--strategies",
                              "ddp,tf-ps", "--no-capacity", "--no-scaling")
    assert code == 0, err
    assert "tf-ps: n/a: training.grad_accum: ParameterServerStrategy steps have no " \
           "gradient accumulation" in out
    assert any(x.startswith("ddp ") for x in out.splitlines())


def test_a_model_without_tokens_is_priced_per_sample(capsys):
    code, out, err = run_main(capsys, "compare", "resnet50-ddp-8gpu", "--strategies",
                              "ddp,fsdp-full", "--no-capacity", "--no-scaling")
    assert code == 0, err
    assert "is the cheapest strategy that fits in memory: $" in out and \
        "per 1k samples at" in out


# ---------------------------------------------------------------- run names its plan
def test_run_names_the_plan_and_its_bubble(capsys):
    """An FSDP2 x TP8 x PP4 job spelt in Megatron's keys (use_torch_fsdp2) is named by what
    runs (PyTorch FSDP2 over Megatron-Core's TP layers, not 'megatron'); the header says the
    plan in words and a pipeline's wait is named its bubble, at the textbook share
    (pp-1)/(vp m + pp-1)."""
    code, out, err = run_main(capsys, "run", "llama3-70b-fsdp-tp8-256gpu", "--set",
                              "strategy.pipeline_model_parallel_size=4", "-q")
    assert code == 0, err
    assert out.splitlines()[0].startswith(
        "# llama3-70b-fsdp-tp8-256gpu: llama-3-70b PyTorch FSDP2 x TP8 via Megatron-Core "
        "(tensor parallel 8 inside each "
        "server, pipeline 4 (1f1b), data parallel 8 (FSDP)) on 256 x H100-SXM")
    assert f"= {100 * 3 / (1 * 1 + 3):.0f}% of the schedule" in out      # pp 4, m 1


def test_megatron_without_fsdp2_keeps_its_name():
    from simulator.planwords import framework_words
    assert framework_words("megatron", "zero1", 8) == "megatron"
    assert framework_words("megatron", "fsdp", 1) == "PyTorch FSDP2 via Megatron-Core"
    assert framework_words("torchtitan", "fsdp", 8) == "torchtitan"


def test_bubble_share_follows_the_formula():
    from simulator.cli.run import bubble_line
    assert bubble_line({"pp": 1}) == ""
    line = bubble_line({"pp": 8, "vp": 2, "grad_accum": 16, "schedule": "interleaved"})
    assert f"= {100 * 7 / (2 * 16 + 7):.0f}% of the schedule" in line and "2 virtual" in line


def test_every_gantt_colour_is_explained():
    """gantt.png has a legend of every colour it draws, and report.html's caption says them."""
    from simulator.metrics import outputs, page
    drawn = set(outputs.GANTT_COLORS.values()) | {"tab:red", "tab:gray"}
    assert {c for _, c in outputs.GANTT_LEGEND} == drawn
    for label, colour in outputs.GANTT_LEGEND:
        name = colour.removeprefix("tab:").replace("gray", "grey")
        assert f"{label} {name}" in page.GANTT_CAPTION


def test_a_collective_size_below_one_element_per_rank_is_left_out(capsys):
    """all_gather of 8-64 B on 32 ranks gives each rank no whole float ('count 0'): those
    sizes are left out and the header says so."""
    code, out, err = run_main(capsys, "collective", "all_gather", "--topology",
                              "dgx-a100-superpod", "--nodes", "4", "-b", "8", "-e", "256")
    assert code == 0, err
    assert "# sizes below 128 B (one float per rank on 32 ranks) left out: 8, 16, 32, 64" in out
    counts = [int(x.split()[1]) for x in out.splitlines() if x and not x.startswith("#")]
    assert counts == [1, 2]
    code, _, err = run_main(capsys, "collective", "all_gather", "--topology",
                            "dgx-a100-superpod", "--nodes", "4", "-b", "8", "-e", "64")
    assert code == 2 and "-e/--max-bytes: every size is below 128 B" in err


def test_baseline_none_on_the_command_line_drops_the_scenarios_rates_too(capsys):
    """reliability-1024gpu sets its own switch failure rates; --set ...baseline=none drops
    them too (they were kept, and read as leftovers of the baseline): no failure at all."""
    code, out, err = run_main(capsys, "reliability", "reliability-1024gpu", "--trials", "2",
                              "--workers", "1", "--set", "reliability.failures.baseline=none",
                              "--set", "reliability.search.trials=1", "--set",
                              "reliability.search.points=2", "-q")
    assert code == 0, err
    assert "# baseline none: no failure class has a rate" in out
    assert "# failures: expected MTTI none from the rates; simulated none" in out


def test_baseline_none_keeps_the_rates_given_with_it():
    """A rate set on the command line beside baseline=none stays, in either order; one the
    scenario file sets beside its own baseline: none stays too (the file means it)."""
    from simulator.scenario import apply_sets
    data = {"reliability": {"failures": {"leaf_switch": {"rate": "1 per day", "repair": "4 h"},
                                         "node": {"rate": "2 per day"}}}}
    none, node = "reliability.failures.baseline=none", "reliability.failures.node.rate=3 per day"
    for sets in ([none, node], [node, none]):
        f = apply_sets(data, sets, "s.yaml")["reliability"]["failures"]
        assert f["leaf_switch"] == {"repair": "4 h"} and f["node"] == {"rate": "3 per day"}
        assert f["baseline"] == "none"
    data["reliability"]["failures"]["baseline"] = "none"
    scn = load_scenario("reliability-1024gpu", ["reliability.failures.baseline=llama3"])
    assert str(scn.reliability.failures.leaf_switch.rate) == "0.5 per 1000 switch-days"
    assert apply_sets(data, [], "s.yaml") == data


def test_the_worst_recovery_says_whether_the_spares_ran_out(capsys):
    """The worst recovery is explained: how many failures it merged and how long its
    servers waited for repairs because every spare was in use (never more than its
    downtime); the text says it in words."""
    import json
    args = ["reliability", "reliability-1024gpu", "--trials", "40", "--workers", "1",
            "--set", "reliability.search.trials=1", "--set", "reliability.search.points=2",
            "-q"]
    code, out, err = run_main(capsys, *args, "--format", "json")
    assert code == 0, err
    d = json.loads(out)
    w = d["worst_recovery"]
    assert w["recovery_s"] == d["recovery_s"]["max"]
    assert 0 <= w["spare_wait_s"] <= w["downtime_s"] <= w["recovery_s"] and w["failures"] >= 1
    code, out, err = run_main(capsys, *args)
    line = next(x for x in out.splitlines() if x.startswith("  the worst recovery: "))
    assert ("had run out" in line) == (w["spare_wait_s"] > 0)


def test_compare_page_folds_the_envelope_details_below_the_answer(capsys, tmp_path):
    """report.html: the decision and its one-sentence confidence first, the tables, then the
    accuracy envelope's lines folded in a <details> a reader opens on demand."""
    code, out, err = run_main(capsys, "compare", *SMALL, "--strategies", "fsdp-full,ddp",
                              "--no-capacity", "--no-scaling", "--price-per-gpu-hour", "2",
                              "--out", str(tmp_path / "c"))
    assert code == 0, err
    page = (tmp_path / "c" / "report.html").read_text()
    answer, table = page.index('<section class="answer">'), page.index("<table")
    details = page.index("<details><summary>The accuracy envelope of each strategy")
    assert answer < table < details
    assert "How far to trust it" in page[answer:table]            # the one sentence, first
    folded = page[details:page.index("</details>", details)]
    assert folded.count('<p class="note">') == 4                 # two lines per strategy
    assert "nearest validated" in folded


# ------------------------------------------------ capacity: the largest model, with 3-D plans
def test_capacity_names_the_largest_model_a_3d_plan_fits(capsys):
    """Issue 47: 'the largest model that fits on 64 H100' searches parallel plans and a
    ladder of sizes up to 1T+, and says the answer in a sentence. Static memory follows
    the 16 bytes a parameter of mixed-precision Adam (2 weights, 2 gradients, 12 optimizer
    state): FSDP over 64 GPUs holds 16 x params / 64; a TP8 x PP8 plan splits the weights
    64 ways and holds at least that much."""
    args = ("capacity", "llama2-7b-fsdp-128gpu", "--set", "cluster.topology=dgx-h100-superpod",
            "--set", "cluster.nodes=8", "--strategies", "fsdp-full,megatron:tp8pp8", "-q")
    code, out, err = run_main(capsys, *args)
    assert code == 0, err
    assert "# the largest llama-family model that fits on 64 x H100-SXM: " in out
    assert "with megatron:tp8pp8" in out.split("the largest llama-family model", 1)[1] \
        .splitlines()[0]
    code, out, err = run_main(capsys, *args, "--format", "json")
    d = json.loads(out)
    assert d["ladder"][-1]["params"] >= 1e12                    # the ladder reaches 1T+
    by = {r["strategy"]: r["largest_fit"] for r in d["results"]}
    fsdp, tp_pp = by["fsdp:FULL_SHARD"], by["megatron:tp8pp8"]
    gib = float(1 << 30)
    assert fsdp["static_memory_gib"] == pytest.approx(16 * fsdp["params"] / 64 / gib, rel=1e-3)
    assert tp_pp["static_memory_gib"] >= 16 * tp_pp["params"] / 64 / gib * 0.999
    assert tp_pp["params"] > 10 * fsdp["params"] and tp_pp["peak_memory_gib"] <= 80


def test_capacity_help_names_the_3d_plan_spelling_it_takes(capsys):
    """--help listed only ddp and fsdp[:SHARDING] though a 3-D plan is how 'the largest
    model on 64 H100' is answered: the spelling it shows is one the option accepts."""
    from simulator.capacity.probe import parse_strategy_specs
    code, out, _ = run_main(capsys, "capacity", "--help")
    text = " ".join(out.split())
    assert code == 0 and "or a 3-D plan such as megatron:tp8pp4" in text
    (spec,) = parse_strategy_specs("megatron:tp8pp4")
    assert spec.label == "megatron:tp8pp4"

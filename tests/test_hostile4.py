"""Regression tests of the fourth hostile-input campaign (issue 42, round four;
benchmarks/hostile/campaign4.py) and of the three inputs left alone in round three: one
test per root cause, each with the input that used to end badly (traceback, a loud answer
where a refusal was due, or a message naming what the user never named)."""

from __future__ import annotations

import json
from pathlib import Path

from campaign_table import check_campaign_table
from test_cli import run_main
from test_hostile import refused

REPO = Path(__file__).resolve().parents[1]


def test_a_lora_rank_past_the_weights_dimensions_is_refused(capsys):
    """A LoRA update of a k x n weight has rank at most min(k, n): rank 1e9 on Llama 2 70B
    was simulated and answered as a loud out-of-memory; now one line naming the weight and
    its dimensions. The largest rank that fits the dimensions still runs."""
    err = refused(capsys, "run", "llama2-70b-lora-8gpu", "-q", "--set",
                  "training.finetune.rank=1000000000")
    assert "training.finetune.rank: rank 1000000000 exceeds llama-2-70b's" in err, err
    assert "has rank at most 8192" in err
    # k_proj of Llama 2 70B is 8192 x 1024 (8 KV heads of 128): rank 1025 is past it
    err = refused(capsys, "run", "llama2-70b-lora-8gpu", "-q", "--set",
                  "training.finetune={mode: lora, rank: 1025, target_modules: [k_proj]}")
    assert f"(8192 x {8 * 128})" in err and f"at most {8 * 128}" in err, err
    code, out, err = run_main(capsys, "run", "llama2-70b-lora-8gpu", "-q", "--set",
                              "training.finetune={mode: lora, rank: 1024, "
                              "target_modules: [k_proj]}")
    assert code == 0, err


def test_deepspeed_counts_are_whole_numbers_however_written(capsys, tmp_path):
    """DeepSpeed reads its batch counts untyped (its checks: > 0 and micro x accumulation x
    ranks = batch), so JSON's 2.0 is the count 2, as every DeepSpeed count is read (5e8);
    2.5 is refused naming the file and the key."""
    ds = json.loads((REPO / "scenarios/configs/ds_zero3.json").read_text())
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({**ds, "gradient_accumulation_steps": 2.0}))
    code, _, err = run_main(capsys, "run", "llama2-7b-fsdp-128gpu", "-q", "--config",
                            str(path), "--format", "json")
    assert code == 0, err
    path.write_text(json.dumps({**ds, "gradient_accumulation_steps": 2}))
    code2, _, err2 = run_main(capsys, "run", "llama2-7b-fsdp-128gpu", "-q", "--config",
                              str(path), "--format", "json")
    assert code2 == 0 and err2 == err        # the same run, the same "used" line
    path.write_text(json.dumps({**ds, "gradient_accumulation_steps": 2.5}))
    err = refused(capsys, "run", "llama2-7b-fsdp-128gpu", "-q", "--config", str(path))
    assert f"{path}: gradient_accumulation_steps: must be a whole number" in err, err


def test_a_shipped_topology_is_named_as_the_user_named_it(capsys):
    """``collective --topology dgx-a100 --nodes 4`` named the topology file's path inside
    the checkout; the user named ``dgx-a100``. A path the user gave is still the path."""
    err = refused(capsys, "collective", "all_reduce", "--topology", "dgx-a100", "--nodes", "4")
    assert err.startswith("clustersim: error: topology dgx-a100: --nodes: "), err
    # and it names the shipped fabric of those servers, which --nodes does grow
    assert err.endswith("; fabrics of these servers: dgx-a100-superpod"), err
    err = refused(capsys, "topology", "dgx-a100", "--nodes", "4")
    assert err.startswith("clustersim: error: topology dgx-a100: --nodes: "), err
    path = str(REPO / "topologies" / "dgx-a100.yaml")
    err = refused(capsys, "topology", path, "--nodes", "4")
    assert err.startswith(f"clustersim: error: {path}: --nodes: "), err


def test_freeze_layers_under_lora_is_refused_not_dropped(capsys):
    """LoRA adapts every block on a frozen base: ``freeze_layers: 2`` beside it changed
    nothing and ran without a word; it is a full fine-tuning setting."""
    err = refused(capsys, "run", "llama2-70b-lora-8gpu", "-q", "--set",
                  "training.finetune={mode: lora, rank: 16, freeze_layers: 2}")
    assert "--set training.finetune.freeze_layers: lora freezes every base weight" in err, err
    code, _, err = run_main(capsys, "run", "quickstart", "-q", "--set",
                            "training.finetune={mode: full, freeze_layers: 2}")
    assert code == 0, err


def test_a_finetune_refusal_names_the_key_as_the_user_spelled_it(capsys):
    """Finetune's own checks named their field ``finetune.rank`` (no such key anywhere): the
    user wrote ``training.finetune`` (here with --set)."""
    err = refused(capsys, "run", "quickstart", "-q", "--set",
                  "training.finetune={mode: lora, rank: 0}")
    assert "quickstart.yaml: --set training.finetune.rank: lora needs a rank > 0" in err, err


def test_plan_at_fp4_is_refused_naming_the_scenarios_key(capsys):
    """plan on an FP8 scenario ended in 'precision: unknown precision 'fp8'', naming no
    file and a field the user never wrote (the estimate's bytes per element); it prices FP8
    now (tests/test_plan_finetune.py), and still refuses FP4 so, and FP8 on a GPU without
    FP8 tensor cores."""
    err = refused(capsys, "plan", "quickstart", "-q", "--replay", "1", "--set",
                  "cluster.topology=dgx-h100", "--set", "training.precision=fp4")
    assert "quickstart.yaml: --set training.precision: plan's analytical estimate prices " \
        "fp32, tf32, bf16, fp16 and fp8 steps, not fp4" in err, err
    err = refused(capsys, "plan", "quickstart", "-q", "--replay", "1", "--set",
                  "training.precision=fp8")
    assert "training.precision: A100-SXM4-80GB has no FP8 tensor cores" in err, err


def test_an_against_value_refused_while_applied_is_named_against(capsys, tmp_path):
    """A --against KEY=VALUE that cannot be applied (a dotted key through a list) was
    labelled '--set KEY': apply_sets names its own refusals --set, whichever option the
    item came with."""
    path = tmp_path / "m.yaml"
    path.write_text("name: m\ncluster: {topology: dgx-a100-superpod, nodes: 4}\njobs:\n"
                    "  - {name: a, arrival: 0 s, scenario: resnet50-ddp-8gpu, gpus: 8, "
                    "steps: 20}\n")
    err = refused(capsys, "cluster", str(path), "-q", "--against", "jobs.0.gpus=16")
    assert f"{path}: --against jobs.0.gpus: 'jobs' is not a mapping" in err, err
    err = refused(capsys, "cluster", str(path), "-q", "--set", "jobs.0.gpus=16")
    assert f"{path}: --set jobs.0.gpus: 'jobs' is not a mapping" in err, err


def test_a_linked_kineto_folder_is_replaced_not_written_through(capsys, tmp_path):
    """After a run --timeline-format kineto, out/kineto replaced by a link to a user's
    folder: the next run wrote its rank files through the link, over the user's files. And
    a run of fewer ranks left the earlier run's rank files beside its own, so HTA's
    trace_dir mixed two runs."""
    out, victim = tmp_path / "out", tmp_path / "victim"
    code, _, err = run_main(capsys, "run", "quickstart", "-q", "--out", str(out),
                            "--timeline-format", "kineto")
    assert code == 0, err
    victim.mkdir()
    (victim / "rank-0.pt.trace.json").write_text("USER DATA\n")
    for f in (out / "kineto").iterdir():
        f.unlink()
    (out / "kineto").rmdir()
    (out / "kineto").symlink_to(victim)
    code, _, err = run_main(capsys, "run", "resnet50-ddp-1gpu", "-q", "--out", str(out),
                            "--timeline-format", "kineto")
    assert code == 0, err
    assert (victim / "rank-0.pt.trace.json").read_text() == "USER DATA\n"
    assert not (out / "kineto").is_symlink()
    for scenario, ranks in (("quickstart", 8), ("resnet50-ddp-1gpu", 1)):
        code, _, err = run_main(capsys, "run", scenario, "-q", "--out", str(out),
                                "--timeline-format", "kineto")
        assert code == 0, err
        assert sorted(f.name for f in (out / "kineto").iterdir()) == \
            sorted(f"rank-{r}.pt.trace.json" for r in range(ranks))


def test_the_campaign_table_in_docs_is_its_results_file():
    """docs/inputs.md's table of the fourth campaign is counted from the committed
    benchmarks/hostile/campaign4_results.csv (the script's own ``csv`` output)."""
    check_campaign_table("campaign4_results.csv", "## The fourth campaign", 500)


def test_validate_energy_checks_its_files_where_read(capsys, tmp_path):
    """validate energy --root DIR trusted every file: a setup.yaml that is a list, a missing
    CSV, a steps row that is not there or a measurement that is text were tracebacks
    (FileNotFoundError, TypeError, StopIteration, ValueError)."""
    import shutil
    root = tmp_path / "e"
    root.mkdir()
    (root / "setup.yaml").write_text("- x\n")
    err = refused(capsys, "validate", "energy", "--root", str(root))
    assert f"{root}/setup.yaml: " in err, err
    shutil.copy(REPO / "validation/energy/setup.yaml", root)
    err = refused(capsys, "validate", "energy", "--root", str(root))
    assert f"{root}/mlperf_power_h100.csv: cannot read validation CSV: no such file" in err
    for name in ("mlperf_power_h100.csv", "mlperf_v41_steps.csv"):
        shutil.copy(REPO / "validation/energy" / name, root)
    setup = (root / "setup.yaml").read_text()
    (root / "setup.yaml").write_text(setup.replace("steps_row: 8xXE9680", "steps_row: nope"))
    err = refused(capsys, "validate", "energy", "--root", str(root))
    assert "mlperf_v41_steps.csv: no row of system 'nope" in err, err
    (root / "setup.yaml").write_text(setup)
    power = (root / "mlperf_power_h100.csv").read_text().splitlines()
    cells = power[1].split(",")
    cells[power[0].split(",").index("ttt_min")] = "x"
    (root / "mlperf_power_h100.csv").write_text("\n".join([power[0], ",".join(cells)]) + "\n")
    err = refused(capsys, "validate", "energy", "--root", str(root))
    assert "a measurement that is not a number" in err, err


def test_a_validate_report_folder_refusal_names_no_option_the_user_did_not_give(capsys,
                                                                              tmp_path):
    """validate traces --root DIR (the user's own data, with a file of theirs beside it)
    writes its report there by default; the refusal said 'DIR: --out: ...', naming an --out
    never given."""
    import shutil
    root = tmp_path / "t"
    (root / "a100").mkdir(parents=True)
    shutil.copy(REPO / "validation/traces/a100/nccl_data.json.gz", root / "a100")
    (root / "notes.txt").write_text("USER DATA\n")
    err = refused(capsys, "validate", "traces", "--root", str(root))
    assert err == (f"clustersim: error: {root}: report folder: folder is not empty and was "
                   f"not written by clustersim; choose another --out (without --out the "
                   f"report is written here)"), err
    assert (root / "notes.txt").read_text() == "USER DATA\n"

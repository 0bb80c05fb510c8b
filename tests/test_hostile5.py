"""Regression tests of the fifth hostile-input campaign (issue 42, round five;
benchmarks/hostile/campaign5.py): one test per root cause, each with the input that used to
end badly (traceback, a loud answer where a refusal was due, a file of the user's changed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from test_cli import run_main
from test_hostile import refused

REPO = Path(__file__).resolve().parents[1]


def test_validate_energy_replaces_a_linked_report_and_never_leaves_it_cut(tmp_path,
                                                                          monkeypatch):
    """validate energy writes results.csv and report.md into its --root with a plain open():
    a report.md that is a link to a user's file was written through, and a run killed while
    writing left a cut report. Now each is written to a temporary name beside it and renamed
    into place: the link is replaced, the user's file unchanged, and a write that fails
    leaves the previous report whole."""
    from simulator.validation import energy
    victim = tmp_path / "victim.txt"
    victim.write_text("USER DATA\n")
    root = tmp_path / "e"
    root.mkdir()
    (root / "report.md").symlink_to(victim)
    (root / "results.csv").symlink_to(victim)
    energy.write([], {"scenario": "x"}, None, None, root)
    assert victim.read_text() == "USER DATA\n"
    assert not (root / "report.md").is_symlink() and not (root / "results.csv").is_symlink()
    assert (root / "report.md").read_text().startswith("# Energy validation")
    old = (root / "results.csv").read_text()

    class Killed(energy.csv.DictWriter):
        def writerows(self, rows):
            self.writer.writerow(["cut"])
            raise KeyboardInterrupt                 # killed half-way through the table
    monkeypatch.setattr(energy.csv, "DictWriter", Killed)
    with pytest.raises(KeyboardInterrupt):
        energy.write([{}], {"scenario": "x"}, None, None, root)
    assert (root / "results.csv").read_text() == old
    assert sorted(p.name for p in root.iterdir()) == ["report.md", "results.csv"]


MIX = """name: m
cluster: {topology: dgx-a100-superpod, nodes: 4}
jobs:
  - {name: a, arrival: 0 s, scenario: resnet50-ddp-8gpu, gpus: 8, steps: 20}
failures:
  %s
limits: {horizon: %s}
"""


def test_fleet_failure_rates_past_the_work_bound_are_refused_before_simulating(capsys,
                                                                              tmp_path):
    """A mix's failure rates were bounded only by their type: '1e200 per 1 gpu-days' drew
    failures until killed (a hang past 20 s of CPU). The rates x the components x the
    horizon is the number of failures the run may draw; past limits.max_failures it is
    refused in one line, and a shorter horizon or a higher limit lets it run."""
    mix = tmp_path / "m.yaml"
    mix.write_text(MIX % ("gpu: '1e200 per 1 gpu-days'", "365 d"))
    err = refused(capsys, "cluster", str(mix), "-q")
    # 1e200 a GPU-day x 32 GPUs x 365 days
    assert f"{mix}: limits.max_failures: about {1e200 * 32 * 365:.3g} failures expected" \
        in err, err
    # 4 servers x 2.4e4 a day over a day: 96,000, under the default 100,000 (runs)
    mix.write_text(MIX % ("node: '2.4e4 per 1 node-days'\n  repair: 1 s", "1 h"))
    code, out, err = run_main(capsys, "cluster", str(mix), "-q")
    assert code == 0, err
    mix.write_text(MIX % ("node: '2.6e4 per 1 node-days'", "1 d"))
    err = refused(capsys, "cluster", str(mix), "-q")
    assert f"about {2.6e4 * 4:.3g} failures expected in the horizon of 1 d" in err, err
    code, out, err = run_main(capsys, "cluster", str(mix), "-q", "--set",
                              "limits.max_failures=200000", "--set", "limits.horizon=1 h")
    assert code == 0, err


def test_a_scheduled_failure_names_a_component_of_its_own_class(capsys, tmp_path):
    """failures.schedule looked a name up among every component: {nic: n0.gpu0} failed a
    GPU and {switch: n0.gpu0} too, both answered without a word. A name must be of the
    class its key says; the right spelling still runs."""
    mix = tmp_path / "m.yaml"
    for entry, field in (("nic: n0.gpu0", "nic"), ("switch: n0.gpu0", "switch"),
                         ("gpu: n0.nic0", "gpu"), ("switch: n0.nic0", "switch")):
        mix.write_text(MIX % (f"schedule: [{{at: 1 s, {entry}}}]", "365 d"))
        err = refused(capsys, "cluster", str(mix), "-q")
        assert f"{mix}: failures.schedule[0].{field}: no " in err, err
    mix.write_text(MIX % ("schedule: [{at: 1 s, nic: n0.nic0}, {at: 2 s, gpu: n0.gpu0}]",
                          "365 d"))
    code, out, err = run_main(capsys, "cluster", str(mix), "-q")
    assert code == 0, err


def test_the_fifth_campaign_table_is_its_results():
    """docs/inputs.md's table of the fifth campaign is counted from the committed
    benchmarks/hostile/campaign5_results.csv (the script's own ``csv`` output)."""
    from campaign_table import check_campaign_table
    check_campaign_table("campaign5_results.csv", "## The fifth campaign", 1000)


@pytest.mark.parametrize("kernel", ["flash2", "flash3"])
def test_fp8_attention_with_a_flashattention_kernel_is_refused(capsys, kernel):
    """training.fp8_attention is Transformer Engine's fused (cuDNN) FP8 attention; beside
    attention: flash2 (FlashAttention-2, no FP8 kernel) it priced the FlashAttention curve
    at FP8 and answered. Now one line naming the kernel; the default kernel still runs."""
    err = refused(capsys, "run", "llama2-70b-lora-8gpu", "-q", "--set",
                  "training.fp8_attention=on", "--set", f"training.attention={kernel}")
    assert f"attention {kernel} has no FP8 training kernel" in err, err
    code, out, err = run_main(capsys, "run", "llama2-70b-lora-8gpu", "-q", "--set",
                              "training.fp8_attention=on")
    assert code == 0, err

"""The power runs' intervals with each node's power log on the run's clock
(simulator/validation/energy_clocks.py, validation/energy/extract_clocks.py; docs/energy.md):
the arithmetic written out, the data's claims, and the report and docs numbers."""

import csv
from pathlib import Path

import pytest

from simulator.validation import energy as ve
from simulator.validation import energy_clocks as vc


def _rows(name):
    with open(ve.ROOT / name, newline="") as f:
        return list(csv.DictReader(f))


def test_the_host_bound_power_and_the_idle_node_written_out():
    """An evaluation simulated at 5 s and 7,600 W that measured 9.6 s: were its 4.6 extra
    seconds idle at 3,300 W, (7,600 x 5 + 4.6 x 3,300) / 9.6 W. An idle node: (8 GPUs x 80 W
    + host 2,340 W + NICs 200 W) / 0.96."""
    assert vc.if_host_bound_w(7600, 5.0, 9.6, 3300) == pytest.approx(
        (7600 * 5 + 4.6 * 3300) / 9.6)
    parts = {"host_w": 2340.0, "nics_w": 200.0, "psu": 0.96}
    assert vc.idle_node_w(parts, 8, 80.0) == pytest.approx((8 * 80 + 2340 + 200) / 0.96)


def test_clock_rows_take_the_blocks_and_evaluations_after_the_first_written_out():
    """Blocks 1 and 2 (readings 20 at 8,000 W, 30 at 7,900 W), evaluations 1 and 2
    (10 s and 9 s at 6,000 W x 8 readings, 6,300 W x 12); block 0 and evaluation 0 left out:
    training (20 x 8,000 + 30 x 7,900) / 50, evaluation (8 x 6,000 + 12 x 6,300) / 20, the
    median evaluation (10 + 9) / 2 s; offsets the run's extremes."""
    aligned = [dict(zip(("run", "interval", "index", "start_s", "stop_s", "readings",
                         "mean_node_w"), v)) for v in (
        ("r", "train", "0", "0", "100", "800", "5000"),
        ("r", "eval", "0", "100", "120", "160", "4000"),
        ("r", "train", "1", "120", "146", "20", "8000"),
        ("r", "eval", "1", "146", "156", "8", "6000"),
        ("r", "train", "2", "156", "183", "30", "7900"),
        ("r", "eval", "2", "183", "192", "12", "6300"))]
    clocks = [{"run": "r", "offset_s": s} for s in ("-1.5", "-17.0", "-9.0")]
    (row,) = vc.clock_rows(aligned, clocks, 7800.0, 7600.0, 5.0, 3300.0)
    train = (20 * 8000 + 30 * 7900) / 50
    evals = (8 * 6000 + 12 * 6300) / 20
    assert row["offsets"] == (-17.0, -1.5)
    assert row["train_w"] == pytest.approx(train)
    assert row["train_error"] == pytest.approx(7800 / train - 1)
    assert row["eval_w"] == pytest.approx(evals)
    assert row["eval_error"] == pytest.approx(7600 / evals - 1)
    assert row["eval_s"] == pytest.approx(9.5)
    assert row["host_bound_w"] == pytest.approx((7600 * 5 + 4.5 * 3300) / 9.5)


def test_each_nodes_clock_is_behind_by_the_same_seconds_in_every_run():
    """The claim the alignment rests on: a node's offset differs by under 3 s across the ten
    runs (the readings are stamped to whole seconds), and every log is behind (offset < 0)."""
    clocks = _rows(ve.CLOCKS)
    assert len(clocks) == 80 and all(r["source"] for r in clocks)
    for node in range(8):
        offs = [float(r["offset_s"]) for r in clocks if r["node"] == str(node)]
        assert len(offs) == 10 and max(offs) - min(offs) < 3 and max(offs) < 0, node


def test_the_aligned_file_holds_the_phases_intervals_and_each_runs_logged_energy():
    """The aligned file splits the same intervals as the phases file (times, steps), and its
    readings put the last evaluation with the others: on the nodes' own clocks it read near
    idle (the nodes' logs stop early), on the run's it reads within 10% of the
    middle evaluations."""
    aligned, phases = _rows(ve.ALIGNED), _rows(ve.PHASES)
    key = ("run", "interval", "index", "start_s", "stop_s", "steps")
    assert [tuple(r[k] for k in key) for r in aligned] == [tuple(r[k] for k in key)
                                                           for r in phases]
    for run in sorted({r["run"] for r in aligned}):
        evals = [r for r in aligned if r["run"] == run and r["interval"] == "eval"]
        middle = vc.mean_w(evals[1:-1])
        assert float(evals[-1]["mean_node_w"]) == pytest.approx(middle, rel=0.10), run
        raw = [r for r in phases if r["run"] == run and r["interval"] == "eval"][-1]
        assert float(raw["mean_node_w"]) < 0.8 * middle, run


def test_the_report_section_and_the_docs_are_the_commands():
    """The committed report's section is the one the simulation and the files give, and the
    ranges docs/energy.md quotes are its rows' extremes."""
    setup, rows, sim, _ = ve.evaluate()
    if sim is None:
        pytest.skip("the LoRA scenario is not shipped in this build")
    (m, e, ev) = sim
    section = ve.clock_lines(e, ev)
    report = (ve.ROOT / "report.md").read_text()
    assert "\n".join(section) in report
    got, idle_w = ve.clock_checks(e, ev)
    doc = Path(__file__).resolve().parents[1].joinpath("docs", "energy.md").read_text()
    table = doc[doc.index("| on the run's clock | measured | simulated | error |"):]

    def span(key, fmt):
        vals = sorted(r[key] for r in got)
        return f"{fmt(vals[0])}-{fmt(vals[-1])}"
    watts = lambda v: f"{v:,.0f} W"                     # noqa: E731
    pct = lambda v: f"{v:+.1%}"                         # noqa: E731
    for label, key, sim_w in (("training blocks after the first", "train", e.avg_node_w),
                              ("evaluations after the first", "eval", ev.avg_node_w)):
        line = next(x for x in table.splitlines() if x.startswith(f"| {label} |"))
        lo, hi = (f"{v:+.1%}" for v in sorted(r[f"{key}_error"] for r in got)[::len(got) - 1])
        assert line == (f"| {label} | {span(f'{key}_w', lambda v: f'{v:,.0f}')} W | "
                        f"{sim_w:,.0f} W | {lo} to {hi} |"), line
    line = next(x for x in table.splitlines() if x.startswith("| evaluations, were "))
    lo, hi = (pct(v) for v in sorted(r["host_bound_error"] for r in got)[::len(got) - 1])
    assert line.endswith(f"| {span('host_bound_w', lambda v: f'{v:,.0f}')} W | {lo} to {hi} |")
    assert f"idle node {watts(idle_w)}" in doc
    offs = sorted(o for r in got for o in r["offsets"])
    assert f"{-offs[-1]:.0f} to {-offs[0]:.0f} s behind" in doc


def test_the_energy_gap_rows_written_out():
    """A run of 384 steps of 0.5 s at 7,800 W and 5 evaluations simulated at 5 s and
    7,600 W, measured at 9.6 s (median), its first block 19 s past its steps and its first
    evaluation 22.6 s; idle node 3,300 W, 8 nodes: (384 x 0.5 x 7,800 + 5 x (5 x 7,600 +
    4.6 x 3,300)) x 8 J, then + (19 + 22.6 - 9.6) x 3,300 x 8 J."""
    run = {"run": "r", "steps": 384, "evaluations": 5, "block0_extra_s": 19.0,
           "first_eval_s": 22.6, "measured_kwh": 4.5, "simulated_kwh": 4.0,
           "energy_error": 4.0 / 4.5 - 1}
    (row,) = vc.gap_rows([run], [{"run": "r", "eval_s": 9.6}], 0.5, 7800.0, 5.0, 7600.0,
                         3300.0, 8)
    joules = (384 * 0.5 * 7800 + 5 * (5 * 7600 + 4.6 * 3300)) * 8
    assert row["paced_kwh"] == pytest.approx(joules / 3.6e6)
    assert row["paced_error"] == pytest.approx(joules / 3.6e6 / 4.5 - 1)
    assert row["start_s"] == pytest.approx(19 + 22.6 - 9.6)
    started = joules + (19 + 22.6 - 9.6) * 3300 * 8
    assert row["started_kwh"] == pytest.approx(started / 3.6e6)
    assert row["started_error"] == pytest.approx(started / 3.6e6 / 4.5 - 1)


def test_the_energy_gap_the_docs_quote_is_the_commands():
    """The report's table is the one the results give, and docs/energy.md's ranges are its
    extremes."""
    setup, rows, sim, _ = ve.evaluate()
    if sim is None:
        pytest.skip("the LoRA scenario is not shipped in this build")
    assert "\n".join(ve.gap_lines(rows, sim)) in (ve.ROOT / "report.md").read_text()
    got = ve.gaps(rows, sim)
    assert len(got) == 10
    doc = Path(__file__).resolve().parents[1].joinpath("docs", "energy.md").read_text()

    def span(key, fmt):
        vals = sorted(r[key] for r in got)
        return f"{fmt(vals[0])} to {fmt(vals[-1])}"
    pct = lambda v: f"{v:+.1%}"                         # noqa: E731
    assert f"| each evaluation at its measured seconds | {span('paced_error', pct)} |" in doc
    assert (f"| and the first evaluation's start-up ({span('start_s', lambda v: f'{v:.1f}')}"
            f" s) | {span('started_error', pct)} |") in doc
    outside = sum(1 for r in got if abs(r["paced_error"]) > 0.10)
    assert f"would still leave {outside} of the 10 runs outside" in doc

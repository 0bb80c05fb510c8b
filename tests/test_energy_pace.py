"""An evaluation split into a pace per batch and a start per evaluation (simulator/validation/
energy_pace.py; validation/energy setup.yaml ``evaluation_pace``), with the arithmetic
written out on the shipped intervals file."""

import csv
import math
from pathlib import Path

import pytest
import yaml

from simulator.errors import ConfigError
from simulator.evaluation import EvalPass
from simulator.validation.energy_pace import (check_groups, later_evaluations, line, median,
                                              pace_rows, report_lines)

DATA = Path(__file__).resolve().parents[1] / "validation" / "energy"


def _intervals() -> list[dict]:
    with open(DATA / "mlperf_v41_intervals.csv", newline="") as f:
        return list(csv.DictReader(f))


def _batches() -> dict[str, int]:
    with open(DATA / "mlperf_v41_steps.csv", newline="") as f:
        return {r["system"]: int(r["global_batch"]) for r in csv.DictReader(f)
                if r["global_batch"].isdigit()}


def test_a_line_through_points_written_out():
    """(2, 1.24) and (22, 8.62): slope (8.62 - 1.24) / 20 = 0.369, intercept 1.24 - 2 x
    0.369 = 0.502; three points on y = 0.5 + 0.4 x give it back exactly."""
    start, pace = line([(2, 1.24), (22, 8.62)])
    assert pace == pytest.approx((8.62 - 1.24) / 20)
    assert start == pytest.approx(1.24 - 2 * (8.62 - 1.24) / 20)
    assert line([(3, 1.7), (11, 4.9), (22, 9.3)]) == pytest.approx((0.5, 0.4))


def test_later_evaluations_leave_each_runs_first_out():
    rows = [{"system": "s", "run": r, "interval": "eval", "start_s": "0", "stop_s": str(v)}
            for r, v in (("a", 9), ("a", 1), ("a", 2), ("b", 9), ("b", 3))]
    assert later_evaluations(rows, "s") == [1.0, 2.0, 3.0]
    assert median([1.0, 2.0, 3.0, 10.0]) == 2.5


def _pass() -> EvalPass:
    return EvalPass(48, 192, 173, 8, 22, 0.2254, 22 * 0.2254 + 0.1806, None, None, None,
                    0.1806)


def test_the_shipped_groups_written_out():
    """The groups setup.yaml declares, on the shipped file: each system's batches are
    ceil(173 / its global batch) (8 -> 22, 16 -> 11, 64 -> 3, 128 -> 2), its point the
    median of its later evaluations, the line through them; the simulated split of a pass
    of 22 batches of 0.2254 s fed by a 0.1806 s loader: 0.2254 s a batch, 0.1806 s more."""
    groups = yaml.safe_load((DATA / "setup.yaml").read_text())["evaluation_pace"]
    rows, gb = _intervals(), _batches()
    out = pace_rows(groups, rows, gb, 173, _pass())
    assert [r["group"] for r in out] == list(groups)
    for r, systems in zip(out, groups.values()):
        pts = [(math.ceil(173 / gb[s]), median(later_evaluations(rows, s))) for s in systems]
        assert r["points"] == pts
        assert (r["start_s"], r["pace_s"]) == pytest.approx(line(pts))
        assert r["simulated_pace_s"] == 0.2254
        assert r["simulated_start_s"] == pytest.approx(0.1806)
    assert [b for b, _ in out[0]["points"]] == [22, 2]
    assert [b for b, _ in out[1]["points"]] == [22, 11, 3]
    start, pace = out[1]["start_s"], out[1]["pace_s"]     # Oracle's three on their line
    assert all(abs(y - (start + pace * b)) < 0.02 for b, y in out[1]["points"])
    # the numbers docs/energy.md quotes
    assert [round(r["pace_s"], 3) for r in out] == [0.369, 0.415]
    assert [round(r["start_s"], 2) for r in out] == [0.50, 0.57]
    table = "\n".join(report_lines(out))
    assert "| 0.369 | 0.225 | 0.50 | 0.18 |" in table
    assert "| 0.415 | 0.225 | 0.57 | 0.18 |" in table


def test_the_shipped_report_holds_the_section_docs_energy_quotes():
    report = (DATA / "report.md").read_text()
    assert "## The evaluation's pace: per batch and per evaluation" in report
    docs = (Path(__file__).resolve().parents[1] / "docs" / "energy.md").read_text()
    row = next(line for line in docs.splitlines() if "| NVIDIA DGX H100 (Eos) |" in line)
    measured, simulated, start, sim_start = (c.strip().removesuffix(" s")
                                             for c in row.strip("| ").split("|")[2:6])
    assert f"| {measured} | {simulated} | {start} | {sim_start} |" in report


@pytest.mark.parametrize("groups,why", [
    ({"g": ["eos_n8_ngc24.09_nemo", "nope"]}, "system 'nope' needs"),
    ({"g": ["eos_n8_ngc24.09_nemo", "8xXE9680x8H100-SXM-80GB-POWER"]}, "two global batches"),
])
def test_a_group_that_cannot_be_drawn_is_refused_naming_it(groups, why):
    with pytest.raises(ConfigError, match=why) as err:
        check_groups(groups, _intervals(), _batches(), "setup.yaml")
    assert err.value.field == "evaluation_pace.g"

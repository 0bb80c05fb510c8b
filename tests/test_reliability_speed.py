"""The bracketing interval search: fewer candidate runs, the same candidates, the same best;
the plan's step simulations in forked processes: the same times."""

from __future__ import annotations

import os

from simulator.reliability import search as search_mod
from simulator.reliability import steps
from simulator.reliability.plan import build_plan
from simulator.reliability.runner import run_many
from simulator.reliability.search import _bracket, search
from simulator.scenario import load_scenario, resolve_scenario
from test_reliability_engine import plan_of

REL = {"job": {"duration": "20 d", "iteration_time": "10 s"},
       "failures": {"baseline": "none", "software": {"rate": "4 per day",
                                                     "detected_by": ["process_exit"]}},
       "detection": {"monitor_interval": "0 s"},
       "restart": {"teardown": "0 s", "process_start": "10 min", "comm_init": {"time": "0 s"}},
       "checkpoint": {"interval": "4 h", "mode": "sync", "size": 1, "overhead": "5 min",
                      "persist_overhead": "0 s"}}
ARGS = (6 * 3600.0, 600.0)


def _counting(monkeypatch) -> list[int]:
    ran: list[int] = []
    monkeypatch.setattr(search_mod, "run_many",
                        lambda plans, *a: ran.append(len(plans)) or run_many(plans, *a))
    return ran


def test_bracket_runs_a_subset_of_the_grid_with_the_same_results(monkeypatch):
    plan = plan_of(REL)
    known = run_many([plan], 16, 5)[0]
    grid = search(plan, *ARGS, points=11, span=6.0, trials=16, seed=5, workers=1, known=known)
    ran = _counting(monkeypatch)
    found = search(plan, *ARGS, points=11, span=6.0, trials=16, seed=5, workers=1,
                   known=known, method="bracket")
    by_k = {c.iterations: c for c in grid.candidates}
    assert all(by_k[c.iterations] == c for c in found.candidates)
    assert found.best == grid.best
    # every candidate it lists was run once (the configured one not at all: known)
    assert sum(ran) == len(found.candidates) - 1 < len(grid.candidates) - 1
    assert {"configured", "Young", "Daly"} <= {part for c in found.candidates
                                               for part in c.label.split("/")}
    # the best has its grid neighbours on both sides, each worse
    keys = sorted(by_k)
    i = keys.index(found.best.iterations)
    listed = {c.iterations for c in found.candidates}
    assert keys[i - 1] in listed and keys[i + 1] in listed


class _Fake:
    """Scores that peak at one grid point; records what was run, in order."""

    def __init__(self, peak: int):
        self.peak, self.done, self.calls = peak, {}, []

    def run(self, keys) -> None:
        todo = sorted({k for k in keys if k not in self.done})
        if todo:
            self.calls.append(todo)
            self.done.update({k: None for k in todo})

    def score(self, k: int):
        return -abs(k - self.peak), -k


def test_bracket_steps_outwards_to_the_peak_and_stops_there():
    grid = [1, 2, 4, 8, 16, 32, 64, 128, 256]
    runs = _Fake(peak=64)
    _bracket(runs, grid, [999], start=8)
    # Daly's point and its neighbours (with the must-run point) first, then one step at a
    # time towards the peak, until the point past it is run
    assert runs.calls == [[4, 8, 16, 999], [32], [64], [128]]


def test_bracket_stops_at_the_end_of_the_grid():
    grid = [1, 2, 4, 8]
    runs = _Fake(peak=0)
    _bracket(runs, grid, [], start=4)
    assert runs.calls == [[2, 4, 8], [1]]
    runs = _Fake(peak=100)
    _bracket(runs, [5], [], start=5)
    assert runs.calls == [[5]]


def test_the_command_brackets_by_default_and_runs_the_whole_grid_on_request(capsys, tmp_path):
    import json

    import yaml

    from test_cli import run_main
    from test_reliability_cli import SCENARIO
    path = tmp_path / "rel.yaml"
    path.write_text(yaml.safe_dump({**SCENARIO, "reliability": {
        **SCENARIO["reliability"], "search": {"points": 9, "span": 8.0}}}))
    out = {}
    for method in ("bracket", "grid"):
        code, text, err = run_main(capsys, "reliability", str(path), "--trials", "4",
                                   "--workers", "1", "--format", "json", "--set",
                                   f"reliability.search.method={method}")
        assert code == 0, err
        out[method] = json.loads(text)["interval_search"]
    code, text, err = run_main(capsys, "reliability", str(path), "--trials", "4",
                               "--workers", "1", "--format", "json")
    assert json.loads(text)["interval_search"] == out["bracket"]
    grid = {c["iterations"]: c for c in out["grid"]["candidates"]}
    assert len(grid) >= 9 > len(out["bracket"]["candidates"])
    assert all(grid[c["iterations"]] == c for c in out["bracket"]["candidates"])
    assert out["bracket"]["best"] == out["grid"]["best"]


# ---------------------------------------------------------------- step simulations, once
def _reliability_point(sets: list[str]) -> dict:
    from simulator.scenario import load_scenario
    from simulator.study.adapters import reliability_point
    scn = load_scenario("quickstart", [
        "model=gpt2-small", "training.seq_len=1024", "cluster.gpus=2",
        "reliability={job: {duration: 2 d}, failures: {software: {rate: 2 per day}}}", *sets])
    return reliability_point(scn, {"id": "p", "options": {"trials": 2}})[0]


def test_study_points_that_share_the_step_simulate_it_once(monkeypatch):
    from simulator.reliability import steps
    monkeypatch.setattr(steps, "_MEMO", {})
    ran = []
    real = steps.run_setup
    monkeypatch.setattr(steps, "run_setup", lambda s: ran.append(1) or real(s))
    a = _reliability_point(["reliability.checkpoint.interval=20 min"])
    once = len(ran)
    b = _reliability_point(["reliability.checkpoint.interval=40 min",
                            "reliability.failures.software.rate=5 per day"])
    assert once >= 1 and len(ran) == once          # the same step: not simulated again
    assert a["iteration_time_s"] == b["iteration_time_s"]
    assert a["checkpoint_interval_s"] != b["checkpoint_interval_s"]
    c = _reliability_point(["reliability.checkpoint.interval=20 min", "cluster.gpus=4"])
    assert len(ran) == 2 * once                    # another cluster: simulated
    assert c["gpus"] == 4


def test_step_memo_keys_files_by_content(tmp_path):
    from simulator.reliability.steps import _memo_key
    from simulator.scenario import load_scenario
    from simulator.topology.loader import resolve_topology
    text = resolve_topology("dgx-a100").read_text()
    keys = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        path = tmp_path / name / "topology.yaml"
        path.write_text(text)
        keys.append(_memo_key(load_scenario("quickstart", [f"cluster.topology={path}"]),
                              {}, []))
    assert keys[0] == keys[1]
    (tmp_path / "b" / "topology.yaml").write_text(text + "\n# changed\n")
    changed = _memo_key(load_scenario("quickstart", [
        f"cluster.topology={tmp_path / 'b' / 'topology.yaml'}"]), {}, [])
    assert changed != keys[0]


def test_study_loads_no_plotting_library_before_its_points_run():
    # the report (matplotlib) is imported once the study has run (a missing file stops it
    # before any point, after every import the command does first)
    from test_startup import _loaded
    assert _loaded(["study", "/nonexistent/study.yaml"], ("matplotlib",)) == []


# ---- the plan's step simulations: the variants in forked processes
_PIDS: list = []            # (file, the function recorded), set by the test below


def _recorded_variant_time(i: int) -> float:
    """Module level, so that the process pool can name it; notes the process it ran in."""
    path, original = _PIDS
    with open(path, "a") as f:
        f.write(f"{os.getpid()}\n")
    return original(i)


def test_step_variants_run_in_forked_processes_with_the_same_times(monkeypatch, tmp_path):
    path = resolve_scenario("reliability-1024gpu")
    scn = load_scenario(path, ["cluster.nodes=16", "reliability.restart.spare_nodes=2"])
    serial = build_plan(scn, str(path))[1].steps
    assert serial.simulated and len(serial.times_s) >= 3       # healthy and variants
    _PIDS[:] = [tmp_path / "pids", steps._variant_time]
    monkeypatch.setattr(steps, "_variant_time", _recorded_variant_time)
    forked = build_plan(scn, str(path), workers=2)[1].steps
    assert forked.times_s == serial.times_s                    # bit for bit
    assert forked.metrics == serial.metrics
    ran_in = {int(p) for p in (tmp_path / "pids").read_text().split()}
    assert len(ran_in) >= 1 and os.getpid() not in ran_in

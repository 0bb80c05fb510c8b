"""plan --workers: the replays run in forked processes (simulator/forkpool.py) and the answer
is the same, to the last digit, as replaying them one after the other here."""

from __future__ import annotations

import dataclasses
import json

from simulator.planner import search
from simulator.scenario import load_scenario
from test_cli import run_main

ARGS = ["plan", "quickstart", "--set", "cluster.gpus=8", "--global-batch", "16",
        "--max-tp", "2", "--max-pp", "2", "--max-micro-batch", "2", "--replay", "3"]


def _rows(result):
    return [(r.candidate.label(), r.error, dataclasses.asdict(r.metrics) if r.metrics else None,
             dataclasses.asdict(r.energy) if r.energy else None) for r in result.rows]


def test_forked_replays_give_the_serial_answer():
    scn = load_scenario("quickstart", ["cluster.gpus=8"])
    serial = search(scn, 16, replay=3, workers=1)
    forked = search(scn, 16, replay=3, workers=2)
    assert len(serial.rows) == 3 and all(r.metrics is not None for r in serial.rows)
    assert _rows(forked) == _rows(serial)
    assert forked.events == serial.events > 0
    assert forked.counts == serial.counts


def test_the_command_says_how_it_replays_and_answers_the_same(capsys):
    code, one, err1 = run_main(capsys, *ARGS, "--workers", "1", "--format", "json")
    assert code == 0, err1
    assert "replaying 1/3" in err1 and "processes" not in err1
    code, two, err2 = run_main(capsys, *ARGS, "--workers", "2", "--format", "json")
    assert code == 0, err2
    assert "replaying 3 plans in 2 processes" in err2
    assert json.loads(two) == json.loads(one)
    code, _, err = run_main(capsys, *ARGS, "--workers", "0")
    assert code == 2 and "--workers" in err and len(err.strip().splitlines()) == 1

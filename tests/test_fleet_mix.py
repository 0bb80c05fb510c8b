"""Job mix files and the seeded generator (simulator/fleet/mix.py, generate.py, build.py):
every field checked (one line naming the file and the field, exit 2), a generated mix the
same for a seed and shaped by the Acme summary, the shipped mix found from any folder."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from simulator.cli import main
from simulator.errors import ConfigError
from simulator.fleet.generate import acme_row, generate_jobs, lognormal_sigma
from simulator.fleet.mix import Generate, load_mix

ROOT = Path(__file__).resolve().parents[1]
GOOD = {"name": "m", "cluster": {"topology": "dgx-a100-superpod", "nodes": 4},
        "jobs": [{"arrival": "0 s", "scenario": "quickstart", "gpus": 8, "steps": 10},
                 {"arrival": "1 min", "scenario": "quickstart", "gpus": 16, "duration": "1 h"}]}


def _write(tmp_path, data) -> Path:
    import yaml
    path = tmp_path / "mix.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _with(path_keys, value):
    import copy
    data = copy.deepcopy(GOOD)
    node = data
    for k in path_keys[:-1]:
        node = node[k]
    if value is _DROP:
        del node[path_keys[-1]]
    else:
        node[path_keys[-1]] = value
    return data


_DROP = object()

BAD = [
    (("jobs", 1, "gpus"), 0, "jobs[1].gpus", "greater than 0"),
    (("jobs", 0, "arrival"), 5, "jobs[0].arrival", "unit"),
    (("jobs", 0, "arrival"), "-5 s", "jobs[0].arrival", ">= 0"),
    (("jobs", 0, "scenario"), _DROP, "jobs[0].scenario", "missing"),
    (("jobs", 0, "duration"), "2 h", "jobs[0]", "exactly one of steps or duration"),
    (("jobs", 0, "steps"), _DROP, "jobs[0]", "exactly one of steps or duration"),
    (("jobs", 0, "colour"), "red", "jobs[0].colour", "unknown key"),
    (("jobs", 0, "priority"), 10 ** 6, "jobs[0].priority", "less than or equal"),
    (("jobs", 1, "checkpoint"), {"save": "1 s"}, "jobs[1].checkpoint.interval", "missing"),
    (("jobs", 1, "checkpoint"), {"interval": "0 s"}, "jobs[1].checkpoint.interval", "> 0"),
    (("scheduler",), "sjf", "scheduler", "fifo"),
    (("placement",), "random", "placement", "packed"),
    (("seed",), -1, "seed", "greater than or equal"),
    (("failures",), {"node": 3}, "failures.node", "basis"),
    (("limits",), {"max_work": 0}, "limits.max_work", "greater than 0"),
    (("failures",), {"schedule": [{"at": "1 h"}]}, "failures.schedule[0]",
     "node, switch, gpu, nic or link"),
    (("cluster", "gpus"), 8, "cluster", "each job says its gpus"),
    (("jobs",), [], "jobs", "at least 1"),
]


@pytest.mark.parametrize("keys, value, field, why", BAD, ids=[b[2] + ":" + str(b[1])[:12]
                                                              for b in BAD])
def test_every_field_is_checked(tmp_path, keys, value, field, why):
    path = _write(tmp_path, _with(keys, value))
    with pytest.raises(ConfigError, match=why) as info:
        load_mix(path)
    assert info.value.field == field and info.value.source == str(path)


@pytest.mark.parametrize("keys, value, field, why", [
    (("jobs", 1, "gpus"), 12, "jobs[1].gpus", "whole servers of 8"),
    (("jobs", 1, "gpus"), 64, "jobs[1].gpus", "the cluster has 32"),
    (("jobs", 0, "scenario"), "no-such", "jobs[0].scenario", "no scenario"),
    (("jobs", 0, "set"), {"training.micro_batch": 0}, "jobs[0]", "micro_batch"),
    (("failures",), {"node": "1 per day"}, "failures.node", "per node-time"),
    (("failures",), {"leaf_switch": "1 per 9 link-days"}, "failures.leaf_switch",
     "per switch-time"),
    (("failures",), {"schedule": [{"at": "1 h", "switch": "leaf.x"}]},
     "failures.schedule[0].switch", "no leaf or spine switch 'leaf.x'"),
    (("failures",), {"schedule": [{"at": "1 h", "node": 4}]}, "failures.schedule[0].node",
     "0..3"),
    (("failures",), {"schedule": [{"at": "1 h", "gpu": "n9.gpu0"}]},
     "failures.schedule[0].gpu", "no gpu 'n9.gpu0'"),
    (("failures",), {"schedule": [{"at": "1 h", "link": ["n0.gpu0", "n0.nic0"]}]},
     "failures.schedule[0].link", "no link between switches or a NIC and its switch"),
    (("failures",), {"gpu": "1 per 9 link-days"}, "failures.gpu", "per gpu-time"),
    (("limits",), {"max_work": 10}, "limits.max_work", "op replays"),
])
def test_what_needs_the_cluster_is_checked_before_anything_runs(tmp_path, keys, value, field,
                                                                 why):
    from simulator.fleet.build import build_fleet
    path = _write(tmp_path, _with(keys, value))
    with pytest.raises(ConfigError, match=why) as info:
        build_fleet(*load_mix(path))
    assert info.value.field == field and info.value.source == str(path)


def test_a_bad_mix_is_one_line_and_exit_2(tmp_path, capsys):
    path = _write(tmp_path, _with(("jobs", 1, "gpus"), 0))
    with pytest.raises(SystemExit) as info:
        main(["cluster", str(path), "-q"])
    err = capsys.readouterr().err.strip()
    assert info.value.code == 2 and "\n" not in err
    assert err.startswith(f"clustersim: error: {path}: jobs[1].gpus:")


def test_two_jobs_of_one_name_are_refused(tmp_path):
    data = _with(("jobs", 0, "name"), "a")
    data["jobs"][1]["name"] = "a"
    with pytest.raises(ConfigError, match="also jobs\\[0\\]'s") as info:
        load_mix(_write(tmp_path, data))
    assert info.value.field == "jobs[1].name"


def test_the_acme_copies_are_the_shared_data_unedited():
    shipped = ROOT / "simulator" / "data" / "clusters" / "acme" / "cluster_summary.csv"
    kept = ROOT / "validation" / "clusters" / "acme" / "cluster_summary.csv"
    assert shipped.read_bytes() == kept.read_bytes()
    assert acme_row("Seren")["med_gpu_num"] == 1.0 and acme_row("Kalos")["avg_gpu_num"] == 26.77


def _gen(seed, **kw) -> list:
    gen = Generate(jobs=kw.pop("jobs", 2000), scenarios={"a": 1, "b": 8}, **kw)
    return generate_jobs(gen, 2048, 8, seed)


def test_a_generated_mix_is_the_same_for_a_seed_and_another_for_another():
    assert _gen(3, jobs=50) == _gen(3, jobs=50)
    assert _gen(3, jobs=50) != _gen(4, jobs=50)


def test_a_generated_mix_has_the_summary_s_medians_and_the_offered_load():
    from simulator.reliability.quantities import parse_duration
    row = acme_row("Seren")
    jobs = _gen(1, load=0.5)
    runs = np.array([parse_duration(j.duration) for j in jobs])
    gpus = np.array([j.gpus for j in jobs])
    # log-normal with the row's median (122 s) and mean (1414 s): sigma = sqrt(2 ln(a/m))
    assert lognormal_sigma(122.0, 1414.335) == pytest.approx(math.sqrt(2 * math.log(1414.335
                                                                                   / 122)))
    assert np.median(runs) == pytest.approx(row["med_run_time_gpu"], rel=0.1)
    assert np.median(gpus) == row["med_gpu_num"] and gpus.max() <= row["max_gpu"]
    assert set(np.unique(gpus)) <= {2 ** k for k in range(12)}
    arrivals = np.array([parse_duration(j.arrival) for j in jobs])
    assert arrivals[0] == 0 and np.all(np.diff(arrivals) >= 0)
    # the arrivals span the time that makes the offered GPU-time half the cluster's
    offered = float(np.sum(gpus * runs)) / (2048 * arrivals[-1])
    assert offered == pytest.approx(0.5, rel=0.1)
    # scenario a runs on 1 GPU and up, b on 8 and up: a small job is always a's
    assert all(j.scenario == "a" for j in jobs if j.gpus < 8)
    assert {j.scenario for j in jobs if j.gpus >= 8} == {"a", "b"}


def test_the_shipped_mix_runs_by_name_from_any_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    mix, source = load_mix("acme-seren-day")
    assert Path(source).parent.name == "mixes" and mix.generate.jobs == 300
    main_rc = None
    try:
        main(["cluster", "acme-seren-day", "--set", "generate.jobs=4", "-q", "--format",
              "json"])
    except SystemExit as exc:
        main_rc = exc.code
    assert main_rc == 0
    import json
    out = json.loads(capsys.readouterr().out)
    assert out["summary"]["jobs"] == out["summary"]["jobs_done"] == 4

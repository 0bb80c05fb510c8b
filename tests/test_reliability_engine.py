"""The job-level event loop on cases worked out by hand (seconds, iterations).

Common setup (``_rel``): 16 DGX A100 (128 GPUs), a 10 s iteration given (no step
simulation), 1,000 iterations, a synchronous checkpoint every 100 iterations that blocks
5 s (a 1-byte state: the write itself is ~1e-11 s), no random failures. A checkpoint cycle
is then 100 x 10 + 5 = 1,005 s: checkpoints end at 1,005 s (P = 100) and 2,010 s (P = 200).
"""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest

from simulator.reliability.engine import run_trial
from simulator.reliability.plan import build_plan
from simulator.reliability.results import CATEGORIES
from simulator.reliability.running import Runner
from simulator.reliability.runner import run_many
from simulator.scenario import scenario_from_dict

BASE = {
    "job": {"iterations": 1000, "iteration_time": "10 s"},
    "failures": {"baseline": "none"},
    "detection": {"collective_timeout": "10 min"},
    "restart": {"spare_nodes": 1, "spare_swap": "60 s", "teardown": "10 s",
                "process_start": "30 s", "comm_init": {"time": "0 s"}},
    "checkpoint": {"every_iterations": 100, "mode": "sync", "size": 1, "overhead": "5 s",
                   "persist_overhead": "0 s"},
}
NODE_AT_2500 = {"at": "2500 s", "component": "node", "id": "n3"}


def _rel(**changes) -> dict:
    rel = copy.deepcopy(BASE)
    for path, value in changes.items():
        node = rel
        keys = path.split("__")
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        node[keys[-1]] = value
    return rel


def plan_of(rel: dict, nodes: int = 16):
    scn = scenario_from_dict({"name": "t", "model": "llama-2-7b",
                              "cluster": {"topology": "dgx-a100-superpod", "nodes": nodes},
                              "reliability": rel})
    return build_plan(scn, "test")[0]


def seconds(res) -> dict:
    return dict(zip(CATEGORIES, res.seconds))


def test_no_failures_costs_only_the_checkpoints():
    # 1,000 iterations, checkpoints at P = 100 .. 900 (none at the end): 9 x 5 s.
    res = run_trial(plan_of(_rel()), 0, 0)
    assert res.wall_s == pytest.approx(10_000 + 9 * 5)
    assert res.checkpoints == 9 and res.interrupts == 0 and res.completed
    assert res.ettr == pytest.approx(10_000 / 10_045)


def test_node_failure_timeline_by_hand():
    # At 2,500 s: P = 200 + 490/10 = 249; 49 iterations lost. NCCL timeout 600 s (3,100),
    # teardown 10 s (3,110), a spare: hand-over 60 s (3,170), start 30 s (3,200), load ~0.
    # Then 800 iterations and 7 checkpoints: end 3,200 + 8,000 + 35 = 11,235 s.
    plan = plan_of(_rel(failures__schedule=[NODE_AT_2500],
                        failures__node={"detected_by": ["collective_timeout"]}))
    res = run_trial(plan, 0, 0)
    s = seconds(res)
    assert res.wall_s == pytest.approx(11_235)
    assert s["recompute"] == pytest.approx(490)
    assert s["detection"] == pytest.approx(600)
    assert s["restart"] == pytest.approx(40)
    assert s["waiting"] == pytest.approx(60)
    assert s["checkpoint"] == pytest.approx(45)
    (ep,) = res.episodes
    assert (ep.t0_s, ep.downtime_s, ep.recovery_s) == pytest.approx((2500, 700, 1190))
    assert ep.source == "primary"


def test_no_spare_waits_for_the_repair():
    # Node repair 1 h: the server is back at 2,500 + 3,600 = 6,100 s; resume at 6,190.
    plan = plan_of(_rel(failures__schedule=[NODE_AT_2500], restart__spare_nodes=0,
                        failures__node={"detected_by": ["collective_timeout"],
                                        "repair": "1 h"}))
    (ep,) = run_trial(plan, 0, 0).episodes
    assert ep.downtime_s == pytest.approx(6190 - 2500)


@pytest.mark.parametrize("mechanism, delay", [("process_exit", (0.0, 0.1)),
                                              ("heartbeat", (25.0, 30.0)),
                                              ("health_check", (0.0, 300.0))])
def test_detection_delay_within_each_mechanism_bounds(mechanism, delay):
    # Detection = the mechanism's delay; the rest of the downtime is the 100 s restart.
    plan = plan_of(_rel(failures__schedule=[NODE_AT_2500],
                        failures__node={"detected_by": [mechanism]}))
    for trial in range(5):
        (ep,) = run_trial(plan, 0, trial).episodes
        assert delay[0] <= ep.downtime_s - 100 <= delay[1]


def test_software_crash_needs_no_node():
    plan = plan_of(_rel(failures__schedule=[{"at": "2500 s", "component": "software"}],
                        failures__software={"detected_by": ["process_exit"]},
                        detection__monitor_interval="0 s"))
    s = seconds(run_trial(plan, 0, 0))
    assert s["waiting"] == 0 and s["restart"] == pytest.approx(40)


def test_keras_backup_and_restore_goes_back_to_the_epoch_start():
    # Epochs of 150 iterations, backups every 100: the backup at P = 200 restores epoch 1,
    # i.e. P = 150, so 249 - 150 = 99 iterations are redone.
    plan = plan_of(_rel(failures__schedule=[NODE_AT_2500], checkpoint={
        "keras": {"save_freq": 100, "iterations_per_epoch": 150}, "every_iterations": None,
        "interval": None, "size": 1, "overhead": "5 s", "persist_overhead": "0 s"}))
    assert seconds(run_trial(plan, 0, 0))["recompute"] == pytest.approx(990)


def test_local_nvme_is_lost_with_its_node():
    # The replaced server's shard is gone: without a shared copy the job starts over.
    rel = _rel(failures__schedule=[NODE_AT_2500], checkpoint__target="local_nvme")
    assert seconds(run_trial(plan_of(rel), 0, 0))["recompute"] == pytest.approx(2490)
    # With every 2nd checkpoint copied to the shared FS, P = 200 survives.
    rel["checkpoint"]["copy_to_shared_every"] = 2
    res = run_trial(plan_of(rel), 0, 0)
    assert seconds(res)["recompute"] == pytest.approx(490)
    assert res.episodes[0].source == "shared copy"


@pytest.mark.parametrize("lost, survives", [(("n3", "n4"), False), (("n3", "n6"), True)])
def test_peer_memory_replica_on_the_next_server(lost, survives):
    # One replica of server i on i+1: losing 3 and 4 together loses 3's shard.
    events = [{"at": "2500 s", "component": "node", "id": n} for n in lost]
    rel = _rel(failures__schedule=events, checkpoint__target="peer_memory",
               restart__spare_nodes=2)
    res = run_trial(plan_of(rel), 0, 0)
    assert seconds(res)["recompute"] == pytest.approx(490 if survives else 2490)


def test_leaf_switch_takes_its_rail_group_down():
    # 40 servers in 2 rail groups of 20: leaf.r0.g1 cuts servers 20-39 off. 20 spares are
    # needed; with 1, the job waits for the switch repair (2 h).
    rel = _rel(failures__schedule=[{"at": "2500 s", "component": "leaf_switch",
                                    "id": "leaf.r0.g1"}],
               failures__leaf_switch={"repair": "2 h", "detected_by": ["collective_timeout"]})
    (ep,) = run_trial(plan_of(rel, nodes=40), 0, 0).episodes
    assert ep.downtime_s == pytest.approx(7200 + 60 + 30)
    rel["restart"]["spare_nodes"] = 20
    (ep,) = run_trial(plan_of(rel, nodes=40), 0, 0).episodes
    assert ep.downtime_s == pytest.approx(600 + 10 + 60 + 30)


def test_straggler_slows_iterations_for_its_duration():
    # Twice as slow for the first 1,000 s: 50 iterations instead of 100, 500 s degraded.
    rel = _rel(failures__schedule=[{"at": "0 s", "component": "straggler", "rank": 5,
                                    "factor": 2.0, "duration": "1000 s"}])
    res = run_trial(plan_of(rel), 0, 0)
    assert seconds(res)["degraded"] == pytest.approx(500)
    assert res.wall_s == pytest.approx(10_500 + 9 * 5)


def test_time_interval_follows_the_iteration_time():
    # Every 1,000 s of training. Twice as slow until 2,000 s: 50 iterations per checkpoint
    # (P = 50 ends at 1,005 s); at 2,000 s P = 50 + 995/20 = 99.75, then 10 s iterations:
    # P = 100 at 2,002.5 s, block to 2,007.5; then 100 per checkpoint, 8 more to P = 1,000:
    # 2,007.5 + 9,000 + 8 x 5 = 11,047.5 s, of which 99.75 x 10 s degraded.
    rel = _rel(checkpoint__every_iterations=None, checkpoint__interval="1000 s",
               failures__schedule=[{"at": "0 s", "component": "straggler", "rank": 0,
                                    "factor": 2.0, "duration": "2000 s"}])
    res = run_trial(plan_of(rel), 0, 0)
    assert res.wall_s == pytest.approx(11_047.5)
    assert seconds(res)["degraded"] == pytest.approx(997.5)
    assert res.checkpoints == 10


def test_async_checkpoint_durable_only_after_persist():
    # Async, 5 s snapshot, 700 s persist: the checkpoint of P = 200 (snapshot ends 2,010 s)
    # is durable at 2,710 s, after the failure at 2,500 s: P = 100 is restored, and the
    # persist in flight is lost. P at the failure: 200 + 49 = 249 -> 149 redone.
    rel = _rel(failures__schedule=[NODE_AT_2500], checkpoint__mode="async",
               checkpoint__persist_overhead="700 s")
    assert seconds(run_trial(plan_of(rel), 0, 0))["recompute"] == pytest.approx(1490)


def _random_plan(**extra):
    rel = _rel(job={"duration": "20 d", "iteration_time": "10 s"},
               failures={"baseline": "llama3", "leaf_switch": {"rate": "5 per 1000 switch-days"},
                         "stragglers": {"rate": "2 per 1000 gpu-days"}, **extra},
               checkpoint={"interval": "20 min", "mode": "async", "size": "100G",
                           "persist_overhead": "30 s"})
    rel["restart"]["spare_nodes"] = 4
    return plan_of(rel, nodes=64)


def test_wall_time_splits_exactly_into_causes():
    plan = _random_plan()
    for trial in range(20):
        res = run_trial(plan, 3, trial)
        assert sum(res.seconds) == pytest.approx(res.wall_s, rel=1e-9)
        assert all(v >= -1e-6 for v in res.seconds)


def test_jumping_steady_cycles_changes_nothing(monkeypatch):
    plan = _random_plan()
    fast = [run_trial(plan, 1, t) for t in range(5)]
    monkeypatch.setattr(Runner, "_jump", lambda self, t_stop: None)
    slow = [run_trial(plan, 1, t) for t in range(5)]
    for a, b in zip(fast, slow):
        assert a.seconds == pytest.approx(b.seconds, rel=1e-9, abs=1e-6)
        assert (a.interrupts, a.checkpoints) == (b.interrupts, b.checkpoints)


def test_bit_for_bit_for_any_worker_count():
    plan = _random_plan()
    one = run_many([plan], 12, 7, workers=1)[0]
    two = run_many([plan], 12, 7, workers=2)[0]
    assert repr(one) == repr(two)
    assert repr(run_many([plan], 12, 8, workers=1)[0]) != repr(one)


def test_weibull_infant_mortality_fails_more_early():
    # Shape 0.5 with the same mean: fresh components fail more in the first days than an
    # exponential process with the same rate (hazard ~ t^-0.5).
    plan = _random_plan(gpu={"rate": "3 per 1000 gpu-days", "distribution": "weibull",
                             "shape": 0.5})
    early = replace(plan, duration_s=2 * 86400.0)
    w = sum(r.failures[1] for r in run_many([early], 20, 0)[0])
    exp = replace(early, classes=tuple(replace(c, shape=None) for c in early.classes))
    e = sum(r.failures[1] for r in run_many([exp], 20, 0)[0])
    assert w > 1.5 * e

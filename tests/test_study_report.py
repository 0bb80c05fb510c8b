"""Report sentences and plots are computed from the results table: the tests build small
tables, work the expected figures out from them, and check the sentences say those."""

import json

import networkx as nx
import numpy as np
import pandas as pd
import pytest

from simulator.study.answers import answer
from simulator.study.scaling import scaling_curve
from simulator.study.format import fmt
from simulator.study.links import link_role
from simulator.study.plots import draw
from simulator.study.spec import Study

PHASES = {"all_gather (forward)": 0.01, "reduce_scatter (backward)": 0.02}


def _study(axes, questions=(), plots=()):
    return Study.model_validate({"name": "t", "axes": {"grid": axes},
                                 "questions": list(questions), "plots": list(plots)})


def _scaling_table(gpus, throughput, util, exposed_share, link="leaf-spine uplinks",
                   grew="reduce_scatter (backward)"):
    rows = []
    for i, (g, s, u, e) in enumerate(zip(gpus, throughput, util, exposed_share)):
        phases = dict(PHASES)
        phases[grew] += e                       # the phase that grows with exposed share
        rows.append({"point": f"p{i}", "index": i, "status": "ok", "cluster.nodes": g // 8,
                     "gpus": g, "samples_per_s": s, "iteration_time_s": 1.0,
                     "exposed_comm_s": e, "wait_s": 0.01, "compute_s": 1.0 - e - 0.01,
                     "busiest_link": link, "busiest_link_type": "ib-hdr",
                     "busiest_link_util": u, "busiest_phase": "reduce_scatter (backward)",
                     "exposed_by_phase": json.dumps(phases)})
    return pd.DataFrame(rows)


SCALING_Q = {"kind": "scaling", "ask": "Where does it stop?", "x": "gpus",
             "metric": "samples_per_s", "threshold": 0.9, "saturated": 0.8}


def test_scaling_knee_doubling_and_saturated_cause_come_from_the_data():
    gpus = [8, 16, 32, 64]
    per_gpu = [10.0, 9.8, 9.5, 8.8]                 # efficiency drops to 88% at 64
    table = _scaling_table(gpus, [g * p for g, p in zip(gpus, per_gpu)],
                           util=[0.2, 0.4, 0.6, 0.95], exposed_share=[0.0, 0.01, 0.02, 0.2])
    study = _study({"cluster.nodes": [1, 2, 4, 8]}, [SCALING_Q])
    text = answer(study.questions[0], table, study)
    step = (64 * 8.8) / (32 * 9.5)
    eff = 8.8 / 10.0
    assert f"Doubling from 32 GPUs to 64 GPUs gives {step:.2f}x" in text
    assert f"efficiency drops below 90% at 64 GPUs ({eff:.1%})" in text
    assert "leaf-spine uplinks (ib-hdr) saturate during the reduce-scatter (backward) phase" in text
    assert "95% busy" in text and "from 2.0% to 20.0% of the step" in text
    # the same table with the drop one step later moves the knee and the doubling
    per_gpu = [10.0, 9.8, 9.5, 9.2]
    table2 = _scaling_table(gpus, [g * p for g, p in zip(gpus, per_gpu)],
                            util=[0.2, 0.4, 0.6, 0.7], exposed_share=[0.0, 0.01, 0.02, 0.03])
    text2 = answer(study.questions[0], table2, study)
    assert "stays at or above 90% up to 64 GPUs" in text2
    assert f"lowest {9.2 / 10:.1%} at 64 GPUs" in text2


def test_scaling_knee_after_a_superlinear_start_is_the_first_weak_doubling():
    """Efficiency against the first point stays above the threshold (each GPU's share of a
    sharded optimizer step shrinks), but one doubling gains less than 90% of 2x: that is
    where scaling stops being linear."""
    gpus = [8, 16, 32, 64, 128]
    per_gpu = [10.0, 10.5, 11.0, 11.3, 10.0]
    table = _scaling_table(gpus, [g * p for g, p in zip(gpus, per_gpu)],
                           util=[0.2, 0.2, 0.3, 0.3, 0.4], exposed_share=[0, 0, 0.01, 0.02, 0.1])
    study = _study({"cluster.nodes": [1, 2, 4, 8, 16]}, [SCALING_Q])
    text = answer(study.questions[0], table, study)
    gain = (128 * 10.0) / (64 * 11.3)
    assert f"Doubling from 64 GPUs to 128 GPUs gives {gain:.2f}x ({gain / 2:.1%} of linear)" \
        in text
    assert "scaling stops being linear at 128 GPUs, though efficiency against 8 GPUs is " \
        f"still {10.0 / 10.0:.1%}" in text


def test_scaling_cause_names_latency_when_links_are_not_busy():
    gpus = [8, 16, 32]
    table = _scaling_table(gpus, [8 * 10, 16 * 9.7, 32 * 7.5], util=[0.3, 0.35, 0.4],
                           exposed_share=[0.0, 0.02, 0.15], link="NIC-leaf links",
                           grew="all_gather (forward)")
    study = _study({"cluster.nodes": [1, 2, 4]}, [SCALING_Q])
    text = answer(study.questions[0], table, study)
    assert "most of it in the all-gather (forward) phase" in text
    assert "(NIC-leaf links, ib-hdr) are only 40% busy" in text
    assert "latency, not bandwidth" in text and "saturate" not in text


def test_scaling_curve_is_speedup_over_ideal():
    table = pd.DataFrame({"x": [4, 1, 2], "m": [3.0, 1.0, 1.9], "index": [2, 0, 1]})
    curve = scaling_curve(table, "x", "m")
    assert list(curve["x"]) == [1, 2, 4]
    assert np.allclose(curve["efficiency"], [1.0, 1.9 / 2, 3.0 / 4])


def _effect_table(bw, os_, time_of):
    rows = []
    for i, (b, o) in enumerate([(b, o) for b in bw for o in os_]):
        rows.append({"point": f"p{i}", "index": i, "status": "ok", "link": f"{b} Gb/s",
                     "over": o, "iteration_time_s": time_of(b, o),
                     "busiest_link": "NIC-leaf links" if b < 400 else "PCIe links",
                     "busiest_link_util": 100 / b, "link_util_by_role": json.dumps(
                         {"leaf-spine uplinks": 0.04 * o, "NIC-leaf links": 100 / b})})
    return pd.DataFrame(rows)


def test_effect_sentence_reports_change_and_where_gains_stop():
    extra = {100: 0.2, 200: 0.05, 400: 0.01, 800: 0.0}
    table = _effect_table([100, 200, 400, 800], [1, 4], lambda b, o: 0.4 + extra[b])
    study = _study({"link": ["100 Gb/s", "200 Gb/s", "400 Gb/s", "800 Gb/s"], "over": [1, 4]},
                   [{"kind": "effect", "ask": "bw?", "axis": "link",
                     "metric": "iteration_time_s"}])
    text = answer(study.questions[0], table, study)
    lo, hi = 0.4 + extra[100], 0.4 + extra[800]
    assert text.startswith(f"Iteration time goes from {fmt('iteration_time_s', lo)} at link "
                           f"100 Gb/s to {fmt('iteration_time_s', hi)} at 800 Gb/s "
                           f"({hi / lo - 1:+.1%})")
    # 90% of the 0.2 s change is 0.18 s: 200 Gb/s gives 0.15 s of it, 400 Gb/s 0.19 s
    assert "90% of that change already at 400 Gb/s" in text
    assert "move from the NIC-leaf links (100% busy" in text and "to the PCIe links (12%)" in text
    assert text.endswith("(with over 1).")


def test_effect_of_an_axis_that_changes_nothing_says_so_with_the_links_that_explain_it():
    table = _effect_table([100, 200, 400, 800], [1, 2, 4], lambda b, o: 0.4 + 20 / b)
    study = _study({"link": ["100 Gb/s", "200 Gb/s", "400 Gb/s", "800 Gb/s"],
                    "over": [1, 2, 4]},
                   [{"kind": "effect", "ask": "os?", "axis": "over",
                     "metric": "iteration_time_s", "per": "link"}])
    text = answer(study.questions[0], table, study)
    assert "does not depend on over at any link from 100 Gb/s to 800 Gb/s" in text
    assert "the leaf-spine uplinks go from 4% to 16% busy" in text
    slower = table.assign(iteration_time_s=table["iteration_time_s"] * table["over"] ** 0.5)
    text2 = answer(study.questions[0], slower, study)
    assert f"changes iteration time by {2.0 - 1:+.1%}" in text2


def test_best_reports_ties_and_the_runner_up():
    table = pd.DataFrame({"point": list("abcd"), "index": range(4), "status": "ok",
                          "x": [1, 2, 3, 4], "tok": [100.0, 150.0, 150.2, 120.0]})
    study = _study({"x": [1, 2, 3, 4]}, [{"kind": "best", "ask": "?", "metric": "tok",
                                          "goal": "max"}])
    text = answer(study.questions[0], table, study)
    assert text.startswith("The highest tok is 150 with x 3 (tied within 0.5% with x 2)")
    assert text.endswith(f"next comes x 4 with 120 ({120 / 150.2 - 1:+.1%}).")


def test_best_per_group_says_once_when_the_same_point_wins_everywhere():
    rows = [{"point": f"p{i}", "index": i, "status": "ok", "gpus": g, "strategy": s,
             "sps": g * f} for i, (g, s, f) in enumerate(
                 (g, s, f) for g in (8, 16) for s, f in (("a", 10.0), ("b", 8.0)))]
    study = _study({"gpus": [8, 16]}, [{"kind": "best", "ask": "?", "metric": "sps",
                                         "goal": "max", "per": "gpus"}])
    text = answer(study.questions[0], pd.DataFrame(rows), study, keys=("strategy",))
    assert text.startswith("Strategy a gives the highest sps at every size from 8 to 16 "
                           f"GPUs ({8 * 10:g} to {16 * 10:g})")
    assert f"next comes strategy b, {8 / 10 - 1:+.1%} at 8 GPUs" in text
    among = _study({"gpus": [8, 16]}, [{"kind": "best", "ask": "?", "metric": "sps",
                                         "goal": "min", "per": "gpus",
                                         "among": {"strategy": ["a"]}}])
    text = answer(among.questions[0], pd.DataFrame(rows), among, keys=("strategy",))
    assert text.startswith("Strategy a gives the lowest sps") and "strategy b" not in text


def test_best_among_names_every_strategy_it_asks_about():
    """A question naming what it compares (``among``) answers for each of them, not only
    the winner: fsdp-vs-tensorflow asks about MultiWorkerMirrored, so the answer says it."""
    rows = [{"point": f"p{i}", "index": i, "status": "ok", "gpus": g, "strategy": s,
             "sps": g * f} for i, (g, s, f) in enumerate(
                 (g, s, f) for g in (8, 16) for s, f in (("a", 10.0), ("b", 8.0), ("c", 6.0),
                                                         ("d", 1.0)))]
    study = _study({"gpus": [8, 16]}, [{"kind": "best", "ask": "?", "metric": "sps",
                                         "goal": "max", "per": "gpus",
                                         "among": {"strategy": ["a", "b", "c"]}}])
    text = answer(study.questions[0], pd.DataFrame(rows), study, keys=("strategy",))
    assert text.endswith(f"; against it at 16 GPUs: strategy b {16 * 8:g} "
                         f"({8 / 10 - 1:+.1%}), strategy c {16 * 6:g} ({6 / 10 - 1:+.1%}).")
    assert "strategy d" not in text


def test_no_finished_point_gives_no_answer():
    study = _study({"x": [1]}, [SCALING_Q])
    assert "No point finished" in answer(study.questions[0], pd.DataFrame(), study)
    nan = _scaling_table([8, 16], [80.0, float("nan")], [0.1, 0.1], [0.0, 0.0])
    assert "Only one value" in answer(study.questions[0], nan, study)


def test_plots_are_drawn_from_the_table(tmp_path):
    gpus = [8, 16, 32, 64]
    table = _scaling_table(gpus, [80, 150, 260, 300], [0.1] * 4, [0.0] * 4)
    study = _study({"cluster.nodes": [1, 2, 4, 8]}, plots=[
        {"kind": "line", "x": "gpus", "y": "samples_per_s", "ideal": "linear", "knee": 0.9},
        {"kind": "line", "x": "cluster.nodes", "y": "iteration_time_s"},
        {"kind": "heatmap", "x": "cluster.nodes", "y": "gpus", "z": "samples_per_s"}])
    for i, plot in enumerate(study.plots):
        path = draw(plot, table, study, tmp_path / f"{i}.png")
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert draw(study.plots[0], table.iloc[0:0], study, tmp_path / "none.png") is None


def test_link_roles_from_node_kinds():
    G = nx.Graph()
    G.add_node("n0.gpu0", kind="gpu")
    G.add_node("n0.nic0", kind="nic")
    G.add_node("leaf.g0", kind="switch", tier="leaf")
    G.add_node("spine.0", kind="switch", tier="spine")
    G.add_node("switch", kind="switch", tier="single")
    assert link_role(G, "n0.gpu0", "n0.nic0", "pcie") == "PCIe links"
    assert link_role(G, "n0.nic0", "leaf.g0", "net") == "NIC-leaf links"
    assert link_role(G, "spine.0", "leaf.g0", "net") == "leaf-spine uplinks"
    assert link_role(G, "switch", "n0.nic0", "net") == "NIC-switch links"


@pytest.mark.parametrize("column, value, text", [
    ("iteration_time_s", 0.4567, "457 ms"), ("iteration_time_s", 12.3, "12.3 s"),
    ("best_interval_s", 1800.0, "30 min"), ("recovery_p99_s", 9000, "2.5 h"),
    ("mfu", 0.4213, "42.1%"), ("busiest_link_util", 1.0, "100.0%"),
    ("samples_per_s", 12345.6, "12,346"), ("peak_memory_gib", 71.26, "71.3 GiB"),
    ("tokens_per_s", None, "n/a")])
def test_numbers_carry_their_units(column, value, text):
    assert fmt(column, value) == text

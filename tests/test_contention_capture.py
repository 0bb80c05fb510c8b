"""The captured contention run (validation/cluster/, issue 45) against the fleet's
co-simulation (simulator/validation/captured/contention.py).

Two real gloo jobs (torch 2.13 CPU, 2 ranks each, back-to-back all_reduces) ran through
namespaces joined by tbf-shaped links; each job alone, then both together. The simulator
builds the same fabric from the same file and gives each job's step alone and together
through :class:`~simulator.fleet.contention.StepTimes`, with nothing fitted to this capture.

Tolerance: the simulated step together must lie within the middle 80% (p10..p90) of the
measured steps together, and the simulated slowdown within the half-width of that range
relative to its median: TCP's sharing of one tbf queue makes single steps differ by that
much (README in validation/cluster/), so a closer claim is below what the capture resolves.
The step alone is priced by the gloo microbenchmark (another day, another link rate) and
must be within 3%: the alone medians at 100 Mbit/s repeat within 1.2% between the committed
pass and its repeat (contention_capture_repeat.csv), and the microbenchmark's fit error at
large sizes is 1.8%.
"""

from __future__ import annotations

import csv
import statistics
import sys
from pathlib import Path

import numpy as np
import pytest

from simulator.cluster import Cluster
from simulator.errors import ConfigError
from simulator.fleet.placement import Layout
from simulator.validation.captured import contention as cc
from simulator.validation.captured.machine import description

HERE = Path(__file__).resolve().parents[1] / "validation" / "cluster"
sys.path.insert(0, str(HERE))
import capture_contention as cap  # noqa: E402

FABRIC = cc.load_fabric()
ROWS = {(r["setup"], r["job"]): r for r in cc.compare(FABRIC)}
K = description(cc.CONSTANTS_AT).constants[2]["all_reduce"]
MIB4 = 4 * 1024 * 1024


def _half_width(r: dict) -> float:
    return (r["together_p90_s"] - r["together_p10_s"]) / (2 * r["together_s"])


# ----------------------------------------------------------- the model, by the arithmetic
def test_the_fabric_file_becomes_two_leaves_and_a_one_link_spine():
    G = cc.fabric_graph(FABRIC["setups"]["unequal"])
    cluster = Cluster(G)
    layout = Layout.of(cluster)
    assert layout.group == (0, 1, 0, 1)                 # a0, a1, b0, b1 by their leaves
    assert G.edges["leaf.0", "leaf.1"]["bw_bytes_per_s"] == 100e6 / 8
    assert G.edges["n2.nic0", "leaf.0"]["bw_bytes_per_s"] == 30e6 / 8   # b0
    assert Layout.of(Cluster(cc.fabric_graph(FABRIC["setups"]["disjoint"]))).group == \
        (0, 0, 1, 1)


def test_one_all_reduce_alone_is_alpha_plus_its_bytes_at_the_efficient_rate():
    # 2 ranks: each sends 2 (n-1)/n S = S bytes, at the link rate x gloo's efficiency
    for setup, job, rate in (("shared", "A", 100e6), ("unequal", "B", 30e6)):
        sims, _ = cc.predict(setup, FABRIC)
        expect = K["alpha_s"] + MIB4 / (rate / 8 * K["efficiency"])
        assert sims[job].alone_s == pytest.approx(expect, rel=1e-12)


def test_the_routed_ring_costs_what_the_capture_machine_s_gloo_model_costs():
    """One path, one price: on the one-bridge capture machine (machine.py) the routed ring
    and GlooModel price an all_reduce alike (to the 6 digits the description keeps)."""
    from simulator.validation.captured.machine import build
    desc = description(cc.CONSTANTS_AT)
    model = build(2, desc)
    routed = cc.RoutedGloo(model.cluster, K["alpha_s"], K["efficiency"])
    for size in (1 << 20, MIB4, 32 << 20):
        assert routed.plan("all_reduce", size, [0, 1]).predicted_s == pytest.approx(
            model.plan("all_reduce", size, [0, 1]).predicted_s, rel=1e-6)


def test_two_jobs_on_the_shared_spine_each_get_half_and_the_narrow_one_keeps_its_own():
    e, alpha = K["efficiency"], K["alpha_s"]
    shared, counts = cc.predict("shared", FABRIC)
    assert counts.together == 1
    for p in shared.values():        # max-min: 50 Mbit/s each
        assert p.together_s == pytest.approx(alpha + MIB4 / (50e6 / 8 * e), rel=1e-12)
    unequal, _ = cc.predict("unequal", FABRIC)
    # B is held at 30 Mbit/s by its own links; A gets the other 70 of the spine, all of it
    # in B's latency (alpha) between its iterations: B's flow is on the spine a share
    # (1.19 - alpha) / 1.19 of the time, so A's step is within alpha / 1.19 of the 70
    at_70, at_100 = alpha + MIB4 / (70e6 / 8 * e), alpha + MIB4 / (100e6 / 8 * e)
    assert at_100 < unequal["A"].together_s <= at_70
    assert unequal["A"].together_s == pytest.approx(at_70, rel=alpha / unequal["B"].alone_s)
    assert unequal["B"].together_s == pytest.approx(unequal["B"].alone_s, rel=1e-12)


def test_jobs_inside_their_own_leaves_are_not_neighbours_and_co_simulated_agree():
    sims, counts = cc.predict("disjoint", FABRIC)
    assert counts.together == 0
    assert all(p.together_s == p.alone_s for p in sims.values())


def test_only_all_reduce_is_modelled_and_the_setup_must_exist():
    planner = cc.RoutedGloo(Cluster(cc.fabric_graph(FABRIC["setups"]["shared"])), 1e-3, 0.9)
    with pytest.raises(ConfigError, match="all_gather"):
        planner.plan("all_gather", 1024, [0, 1])
    with pytest.raises(ConfigError, match="setup"):
        cc.predict("nowhere", FABRIC)
    with pytest.raises(ConfigError, match="efficiency"):
        cc.RoutedGloo(planner.cluster, 1e-3, 1.5)
    assert planner.plan("all_reduce", 1024, [3]).payload_bytes == 0.0


# ----------------------------------------------------------- the capture script, no root
def test_the_capture_shapes_every_link_both_ways_from_the_same_file():
    f = cap.Fabric.of("unequal", FABRIC)
    cmds = [" ".join(c) for c in cap.setup_commands(f)]
    tbf = [c for c in cmds if " tbf " in c]
    assert len(tbf) == 2 + 2 * len(f.hosts)            # the spine's two ends, each host's two
    assert "tc -n cc-l0 qdisc add dev spine0 root handle 1: tbf rate 100000000bit burst " \
           "65536 latency 50ms" in cmds
    assert "ip -n cc-l1 link add ccb1h type veth peer name eth0 netns cc-b1" in cmds
    assert sum("rate 30000000bit" in c for c in tbf) == 4
    assert cap.rank_env(f, "B", 1)["MASTER_ADDR"] == f.addr("b0") == "198.18.1.3"
    assert cap.bit_per_s("30 Mbit/s") == 30e6


@pytest.mark.parametrize("edit,field", [
    (lambda d: d["setups"]["shared"].update(spines="1 Gbit/s"), "setups.shared"),
    (lambda d: d["setups"]["shared"].update(spine=100), "setups.shared.spine"),
    (lambda d: d["setups"]["unequal"]["hosts"]["b0"].update(leaf=2),
     "setups.unequal.hosts.b0.leaf"),
    (lambda d: d["setups"]["disjoint"]["jobs"]["A"].update(ranks=["a0", "zz"]),
     "setups.disjoint.jobs.A.ranks"),
    (lambda d: d["setups"]["disjoint"]["jobs"]["B"].update(size=6), "setups.disjoint.jobs.B.size"),
    (lambda d: d["tbf"].update(burst="64k"), "tbf.burst"),
])
def test_a_mistake_in_the_fabric_file_is_one_line_naming_the_field(tmp_path, edit, field):
    import copy

    import yaml
    data = copy.deepcopy(FABRIC)
    edit(data)
    path = tmp_path / "fabric.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as err:
        cc.load_fabric(path)
    assert str(err.value).startswith(f"{path}: {field}:") and "\n" not in str(err.value)


def test_tbf_counters_are_read_from_tc_statistics():
    text = ("qdisc tbf 1: root refcnt 3 rate 100Mbit burst 64Kb lat 50ms \n"
            " Sent 4242 bytes 17 pkt (dropped 3, overlimits 9 requeues 0) \n")
    assert cap.qdisc_counts(text) == (17, 3)
    with pytest.raises(ValueError, match="tbf counters"):
        cap.qdisc_counts("qdisc noqueue 0: root")
    ends = cap.links(cap.Fabric.of("shared", FABRIC))
    assert ends["spine"] == [("cc-l0", "spine0"), ("cc-l1", "spine1")]
    assert ends["b1"] == [("cc-b1", "eth0"), ("cc-l1", "ccb1h")]


def test_timed_steps_are_the_intervals_inside_the_window():
    steps = [(0.0, 1.0), (1.0, 1.5), (1.5, 2.5), (2.5, 4.0), (4.0, 5.5)]
    timing = {"warm_s": 1.0, "window_s": 3.0}
    assert cap.timed_steps(steps, 0.0, timing) == [(1.0, 0.5), (1.5, 1.0), (2.5, 1.5)]


def test_the_summary_is_what_the_committed_steps_give():
    with open(HERE / "contention_steps.csv", newline="") as fh:
        steps = list(csv.DictReader(fh))
    summary = cc.measured()
    assert {r["method"] for r in summary.values()} == {cap.METHOD}
    assert {s for s, _, _ in summary} == set(FABRIC["setups"])
    for (setup, job, run), row in summary.items():
        xs = [float(s["step_s"]) for s in steps
              if (s["setup"], s["job"], s["run"]) == (setup, job, run)]
        assert len(xs) == int(row["steps"]) >= 7, (setup, job, run)   # B at 30 Mbit/s: 7
        assert float(row["median_s"]) == pytest.approx(statistics.median(xs), abs=2e-6)
        assert float(row["p90_s"]) == pytest.approx(np.quantile(xs, 0.9), abs=2e-6)


def test_the_repeat_pass_agrees_with_the_committed_one():
    """The run-to-run spread quoted in docs/cluster.md: the same capture 7 minutes apart."""
    now, repeat = cc.measured(), cc.measured(cc.cluster_dir() / "contention_capture_repeat.csv")
    assert now.keys() == repeat.keys()

    def slowdown(rows, setup, job):
        return (float(rows[(setup, job, "together")]["median_s"])
                / float(rows[(setup, job, "alone")]["median_s"]))
    for (setup, job, run), row in now.items():
        if run == "alone" and (setup, job) != ("unequal", "B"):
            assert float(row["median_s"]) == pytest.approx(
                float(repeat[(setup, job, run)]["median_s"]), rel=0.012)
    for job in ("A", "B"):
        assert slowdown(now, "shared", job) == pytest.approx(
            slowdown(repeat, "shared", job), rel=0.06)
        assert 2.1 < slowdown(now, "shared", job) < 2.35
        assert 2.1 < slowdown(repeat, "shared", job) < 2.35


# ----------------------------------------------------------- the capture against the model
# 30 Mbit/s is below the microbenchmarks' rates (200 Mbit/s - 10 Gbit/s, where gloo reaches
# 94% of the link): there tbf dropped 3310 packets of B's alone run and gloo reached 90%
BELOW_BENCHMARKS = ("at 30 Mbit/s the host's BBR overshoots tbf (3310 drops in the alone run) "
                    "and gloo reaches 90% of the link, not the 94% measured at 200 Mbit/s and "
                    "above; under CUBIC it is the microbenchmark's (test_contention_tcp_probe)")


@pytest.mark.parametrize("key", [pytest.param(k, marks=pytest.mark.xfail(
    strict=True, reason=BELOW_BENCHMARKS)) if k == ("unequal", "B") else k for k in ROWS],
    ids="-".join)
def test_step_alone_is_the_microbenchmark_s(key):
    r = ROWS[key]
    assert r["sim_alone_s"] == pytest.approx(r["alone_s"], rel=0.03)


# B's own 30 Mbit/s links hold it below its max-min share of the spine, so the model leaves
# it alone; in the capture it still runs 1.31x slower: BBR caps its data in flight at twice
# its bandwidth estimate times its minimum RTT, and the queue A keeps at the spine makes the
# RTT longer, so B leaves its own link idle (validation/cluster/probe_tcp.py and README;
# under CUBIC B slows 5%: tests/test_contention_tcp_probe.py)
NOT_MAX_MIN = ("TCP BBR is not max-min: beside a flow that keeps a queue at the shared link, "
               "the flow held below its share by its own links is window-limited below them")


@pytest.mark.parametrize("key", [
    ("shared", "A"), ("shared", "B"), ("unequal", "A"),
    pytest.param(("unequal", "B"), marks=pytest.mark.xfail(strict=True, reason=NOT_MAX_MIN))],
    ids="-".join)
def test_the_captured_slowdown_is_predicted_within_the_steps_spread(key):
    r = ROWS[key]
    assert r["together_p10_s"] <= r["sim_together_s"] <= r["together_p90_s"]
    assert r["sim_slowdown"] == pytest.approx(r["slowdown"], rel=_half_width(r))


def test_the_control_shows_no_slowdown_in_the_capture_nor_the_model():
    for job in ("A", "B"):
        r = ROWS[("disjoint", job)]
        assert r["sim_slowdown"] == 1.0
        assert r["slowdown"] == pytest.approx(1.0, rel=_half_width(r))
        assert r["together_p10_s"] <= r["alone_s"] <= r["together_p90_s"]
    # and the shared spine's slowdown is far outside the control's
    assert ROWS[("shared", "A")]["slowdown"] > 1.5


def test_co_simulated_iterations_meet_a_neighbour_of_shorter_steps_all_through():
    """B's step is a quarter of A's, so in the capture A shares the spine for its whole step
    (slowdown ~2). The co-simulation runs B's iterations back to back while A (the slower)
    runs its step: A meets B's traffic all through (one iteration of each from the same
    instant let A finish alone: 1.25)."""
    a, b = ROWS[("mismatched", "A")], ROWS[("mismatched", "B")]
    assert a["slowdown"] > 1.5 and b["slowdown"] > 1.5
    for r in (a, b):
        assert r["sim_slowdown"] == pytest.approx(r["slowdown"], rel=_half_width(r))
    assert a["sim_slowdown"] > 1.9


def test_the_docs_table_is_what_the_comparison_prints(capsys):
    """docs/cluster.md quotes `python -m simulator.validation.captured.contention` verbatim."""
    lines = (Path(__file__).resolve().parents[1] / "docs" / "cluster.md").read_text().splitlines()
    start = lines.index("<!-- printed by: python -m simulator.validation.captured.contention -->")
    block = lines[start + 2:lines.index("```", start + 2)]
    assert len(block) == 1 + len(ROWS)
    cc.main()
    printed = capsys.readouterr().out.splitlines()
    assert block == printed


def test_the_docs_numbers_are_the_data_s():
    """The numbers docs/cluster.md quotes around its table, from the data."""
    text = " ".join((Path(__file__).resolve().parents[1] / "docs" / "cluster.md")
                    .read_text().split())
    repeat = cc.measured(cc.cluster_dir() / "contention_capture_repeat.csv")
    slow = [float(repeat[("shared", j, "together")]["median_s"])
            / float(repeat[("shared", j, "alone")]["median_s"]) for j in "AB"]
    a, b = ROWS[("shared", "A")], ROWS[("shared", "B")]
    errors = sorted(-round(100 * (r["sim_slowdown"] / r["slowdown"] - 1)) for r in (a, b))
    widths = sorted(round(100 * _half_width(r)) for r in (a, b))
    shared_sum = sorted(sum(float(rows[("shared", j, "alone")]["median_s"])
                            / float(rows[("shared", j, "together")]["median_s"]) for j in "AB")
                        for rows in (cc.measured(), repeat))
    narrow = ROWS[("unequal", "B")]
    slower = -round(100 * (narrow["sim_alone_s"] / narrow["alone_s"] - 1))
    for quoted in (f"{K['efficiency']:.0%} of the link", f"{K['alpha_s'] * 1e3:.1f} ms per",
                   f"measured {slow[0]:.2f} and {slow[1]:.2f}",
                   f"is {errors[1]}% and {errors[0]}% low",
                   f"(p10-p90 of A's steps {a['together_p10_s']:.2f}-{a['together_p90_s']:.2f} s)",
                   f"half-width ({widths[0]}-{widths[1]}%)",
                   f"step alone is {slower}% slower", f"loses {errors[0]}-{errors[1]}% more",
                   f"moved {shared_sum[0]:.2f}-{shared_sum[1]:.2f} of the bytes per second"):
        assert quoted in text, quoted

"""NCCL_IB_QPS_PER_CONNECTION (`nccl.ib_qps_per_connection`, `collective --ib-qps`): under
hash ECMP each queue pair of a connection between servers is hashed to its own path, so the
connection's bytes split k/qps over the paths k of its QPs chose; under spread ECMP nothing
changes (the bytes are already split evenly over every path)."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from simulator.cluster import Cluster
from simulator.constants import load_constants
from simulator.collectives.model import CollectiveModel
from simulator.collectives.run import run_collective
from simulator.scenario import load_scenario
from simulator.topology import topology_from_dict
from simulator.topology.build import scenario_cluster
from test_cli import run_main

LEAF_SPINE = {"name": "ls", "generator": "leaf_spine",
              "params": {"nodes": 8, "nodes_per_leaf": 2, "oversubscription": 1.0,
                         "node": {"type": "dgx_a100", "gpu": "A100-SXM4-80GB", "nics": 8,
                                  "nic": "ib-hdr"}}}


@pytest.fixture(scope="module")
def graph():
    return topology_from_dict(LEAF_SPINE)


def _nics_on_two_leaves(cluster: Cluster) -> tuple[str, str]:
    nics = [n for n, d in cluster.G.nodes(data=True) if d.get("kind") == "nic"]
    leaf = {n: cluster.routes.attached_switch(n) for n in nics}
    a = nics[0]
    b = next(n for n in nics if leaf[n] != leaf[a])
    return a, b


@pytest.mark.parametrize("qps", [1, 2, 5, 16])
def test_a_connection_splits_k_over_qps_on_the_paths_its_queue_pairs_hash_to(graph, qps):
    cluster = Cluster.from_graph(graph, ecmp="hash", seed=3, qps=qps)
    a, b = _nics_on_two_leaves(cluster)
    paths = cluster.routes.switch_paths(cluster.routes.attached_switch(a),
                                        cluster.routes.attached_switch(b))
    assert len(paths) > 1                                   # equal-cost spines to hash over
    picks = [zlib.crc32(f"{a}|{b}|7|3".encode()) % len(paths)]
    picks += [zlib.crc32(f"{a}|{b}|7|3|qp{q}".encode()) % len(paths) for q in range(1, qps)]
    route = cluster.route(a, b, label=7)
    # every hop of a chosen path carries (QPs that chose it) / qps of the bytes
    for i in set(picks):
        spine = paths[i][1]
        up = cluster.link_id[(paths[i][0], spine)]
        assert route.coef[route.links == up].sum() == pytest.approx(picks.count(i) / qps)
    # the NIC's own uplink carries everything, once
    first = cluster.link_id[(a, cluster.routes.attached_switch(a))]
    assert route.coef[route.links == first].sum() == pytest.approx(1.0)


def test_one_queue_pair_is_the_single_hashed_path_and_spread_ignores_qps(graph):
    one = Cluster.from_graph(graph, ecmp="hash", seed=3, qps=1)
    a, b = _nics_on_two_leaves(one)
    route = one.route(a, b, label=7)
    assert np.all(route.coef == 1.0)
    spread1 = Cluster.from_graph(graph, qps=1).route(a, b)
    spread8 = Cluster.from_graph(graph, qps=8).route(a, b)
    assert np.array_equal(spread1.links, spread8.links)
    assert np.array_equal(spread1.coef, spread8.coef)


def test_more_queue_pairs_never_slow_an_all_to_all_down_under_hash(graph):
    times = []
    for qps in (1, 16):
        cluster = Cluster.from_graph(graph, ecmp="hash", seed=0, qps=qps)
        model = CollectiveModel(cluster, load_constants())
        times.append(run_collective(model, "all_to_all", 64 << 20,
                                    list(range(cluster.n_gpus))).time_s)
    spread = Cluster.from_graph(graph)
    ideal = run_collective(CollectiveModel(spread, load_constants()), "all_to_all", 64 << 20,
                           list(range(spread.n_gpus))).time_s
    assert ideal <= times[1] <= times[0]


def test_the_scenario_knob_reaches_the_cluster():
    scn = load_scenario("scenarios/llama2-7b-fsdp-128gpu.yaml",
                        ["nccl.ib_qps_per_connection=4", "cluster.ecmp=hash"])
    assert scenario_cluster(scn).qps == 4


def test_a_bad_count_is_one_line_exit_2(capsys):
    code, out, err = run_main(capsys, "collective", "all_reduce", "--ib-qps", "0")
    assert code == 2 and err.count("\n") == 1 and "--ib-qps" in err
    code, out, err = run_main(capsys, "run", "--set", "nccl.ib_qps_per_connection=129")
    assert code == 2 and err.count("\n") == 1 and "nccl.ib_qps_per_connection" in err

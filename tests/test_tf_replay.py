"""The engine extensions the TensorFlow strategies need, against closed forms: copy-based
(``star``) reductions, copies between GPUs and host memory, repeated ops; plus the shipped
TensorFlow scenarios end to end and determinism."""

from pathlib import Path

import pytest

from simulator.cluster import Cluster
from simulator.collectives.host import host_memory, host_route
from simulator.collectives.model import CollectiveModel
from simulator.collectives.run import simulate_plans
from simulator.engine import MachineConfig, replay
from simulator.hardware import link_spec
from simulator.pipeline import build_setup, run_setup
from simulator.scenario import load_scenario
from simulator.strategies import World, build_trace, parse_strategy
from simulator.topology.fabrics import single_switch
from simulator.topology.servers import dgx_a100_node
from simulator.trace import Op, RankClass, Trace
from test_tf_strategies import LAYERS, PSI

S = 1 << 30
NVLINK = link_spec("nvlink3").bw_bytes_per_s
PCIE = link_spec("pcie-gen4-x16").bw_bytes_per_s
HDR = link_spec("ib-hdr").bw_bytes_per_s
TF_SCENARIOS = ("resnet50-tf-mirrored-8gpu", "resnet50-horovod-8gpu",
                "resnet50-tf-multiworker-32gpu", "resnet50-tf-ps-4node",
                "resnet50-tf-central-8gpu")


class TeraflopGPU:
    def op_time_s(self, op_class, flops, bytes_accessed, precision):
        return flops / 1e12


@pytest.fixture
def dgx(ideal_constants):
    return CollectiveModel(Cluster(dgx_a100_node(), link_efficiency={}), ideal_constants)


@pytest.fixture
def two_dgx(ideal_constants):
    G = single_switch(2, {"type": "dgx_a100"})
    return CollectiveModel(Cluster(G, link_efficiency={}), ideal_constants)


def one_class(ops, n, comms=None):
    return Trace(n, [RankClass("all", tuple(range(n)), ops)], comms or {}, {})


# ----------------------------------------------------------------------- star copies
@pytest.mark.parametrize("op", ["reduce", "broadcast"])
def test_star_puts_n_minus_1_copies_on_the_root_port(dgx, op):
    # every member copies S to (or from) the root at once: (n-1) S over one NVLink port
    plan = dgx.plan(op, S, list(range(8)), algo="star", root=3)
    (end,), _ = simulate_plans(dgx.cluster, [plan])
    assert end - plan.latency_s == pytest.approx(7 * S / NVLINK, rel=1e-9)
    assert plan.predicted_s == pytest.approx(end, rel=1e-9)



def test_nccl_s_pipelined_broadcast_moves_s_once_where_star_moves_it_7_times(dgx):
    chain = dgx.plan("broadcast", S, list(range(8)), algo="ring", proto="Simple")
    (end_chain,), _ = simulate_plans(dgx.cluster, [chain])
    assert end_chain - chain.latency_s == pytest.approx(S / NVLINK, rel=1e-9)


def test_star_is_never_picked_by_the_tuner_and_only_for_reduce_and_broadcast(dgx):
    assert dgx.plan("reduce", S, list(range(8))).algo != "star"
    with pytest.raises(Exception, match="star"):
        dgx.plan("all_reduce", S, list(range(8)), algo="star")


# ------------------------------------------------------------------------- host copies
def test_host_copy_to_own_host_crosses_pcie_shared_by_two_gpus(dgx):
    # 8 GPUs read S from host memory at once; two GPUs share each PCIe switch's uplink
    op = Op(0, "h2d", "recv", "pull", size_bytes=S, attrs={"host": 0, "nic": 0})
    tl = replay(one_class([op], 8), dgx, TeraflopGPU(), machine=MachineConfig(host_bytes_per_s=1e15))
    latency = max(host_route(dgx.cluster, r, 0, False).latency_s for r in range(8))
    assert tl.iteration_time_s == pytest.approx(latency + S / (PCIE / 2), rel=1e-9)
    assert host_memory(dgx.cluster, 0) == "n0.cpu0"          # the socket of NIC 0


def test_one_copy_is_capped_at_the_host_copy_rate(dgx):
    op = Op(0, "d2h", "send", "push", size_bytes=S, attrs={"host": 0})
    tl = replay(one_class([op], 1), dgx, TeraflopGPU(), machine=MachineConfig(host_bytes_per_s=20e9))
    assert tl.iteration_time_s == pytest.approx(host_route(dgx.cluster, 0, 0, True).latency_s
                                                + S / 20e9, rel=1e-9)


def test_copy_to_another_host_goes_through_both_nics(two_dgx):
    route = host_route(two_dgx.cluster, 0, 1, True)
    types = set(two_dgx.cluster.link_type[route.links])
    assert {"ib-hdr", "pcie-gen4-x16"} <= types
    op = Op(0, "push", "send", "push", size_bytes=S, attrs={"host": 1})
    tl = replay(one_class([op], 1), two_dgx, TeraflopGPU(), machine=MachineConfig(host_bytes_per_s=1e15))
    assert tl.iteration_time_s == pytest.approx(route.latency_s + S / min(HDR, PCIE), rel=1e-9)


def test_parameter_server_nic_carries_every_worker_s_variables(ideal_constants):
    G = single_switch(3, {"type": "dgx_a100"})
    model = CollectiveModel(Cluster(G, link_efficiency={}), ideal_constants)
    cfg = parse_strategy({"name": "tf_ps", "precision": "fp16", "num_ps": 1})
    trace = build_trace(LAYERS, cfg, World(24, 8))
    tl = replay(trace, model, TeraflopGPU(), machine=MachineConfig(host_bytes_per_s=1e15))
    steps, workers = trace.meta["steps_per_iteration"], trace.world_size
    out_of_ps = model.cluster.link_id[("n2.nic0", "switch")]
    into_ps = model.cluster.link_id[("switch", "n2.nic0")]
    assert tl.machine.link_bytes[out_of_ps] == pytest.approx(steps * workers * PSI * 4, rel=1e-6)
    assert tl.machine.link_bytes[into_ps] == pytest.approx(steps * workers * PSI * 4, rel=1e-6)


# ------------------------------------------------------------------------------ repeat
def test_a_repeated_op_runs_back_to_back(dgx):
    ops = [Op(0, "compute", "compute", "c", flops=2e12, op_class="matmul",
              attrs={"repeat": 3}),
           Op(1, "compute", "compute", "d", flops=1e12, op_class="matmul")]
    tl = replay(one_class(ops, 1), dgx, TeraflopGPU())
    assert tl.iteration_time_s == pytest.approx(3 * 2 + 1)


def test_accumulation_costs_k_micro_steps(dgx):
    def step_time(k):
        cfg = parse_strategy({"name": "horovod", "grad_accum": k})
        return replay(build_trace(LAYERS, cfg, World(1, 8)), dgx, TeraflopGPU()).iteration_time_s
    micro = sum(c.flops for layer in LAYERS for c in (*layer.forward, *layer.backward)) / 1e12
    assert step_time(4) - step_time(1) == pytest.approx(3 * micro, rel=1e-9)


# --------------------------------------------------------------------------- scenarios
@pytest.mark.parametrize("name", TF_SCENARIOS)
def test_shipped_scenarios_run(name):
    path = Path(__file__).resolve().parents[1] / "scenarios" / f"{name}.yaml"
    setup = build_setup(load_scenario(path), str(path))
    m = run_setup(setup).metrics
    assert setup.trace.meta["strategy"] == load_scenario(path).strategy["name"]
    assert m.samples_per_s > 0 and not m.oom


def test_same_inputs_same_timeline_bit_for_bit():
    def once():
        scn = load_scenario("resnet50-tf-ps-4node", ["cluster.nodes=2"])
        r = run_setup(build_setup(scn))
        return [(x.cls, x.op_id, x.start_s, x.end_s) for x in r.timeline.records], \
            r.metrics.as_dict(), r.timeline.machine.link_bytes.tolist()
    assert once() == once()

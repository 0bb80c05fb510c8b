"""Energy and power of a step (simulator/energy): the integral written out, the phases read
off a timeline, the power-cap what-if and the data file's sources."""

from __future__ import annotations

import copy

import pytest

from simulator.energy import GpuPower, Phases, Site, gpu_energy_j, load_power, step_energy
from simulator.energy.model import J_PER_KWH, Machine
from simulator.energy.power import HostPower, capped_gpu
from simulator.energy.timeline import class_phases, energy_of
from simulator.engine.records import MachineRecord, OpRecord, Timeline
from simulator.errors import ConfigError
from simulator.hardware import gpu_spec
from simulator.pipeline import build_setup, run_setup
from simulator.scenario import scenario_from_dict

POWER = GpuPower(idle_w=100.0, gemm_w=700.0, memory_w=500.0, comm_w=300.0)


def test_one_gpu_energy_is_power_times_time_summed_over_phases():
    ph = Phases(gemm_s=0.5, memory_s=0.2, comm_s=0.1, idle_s=0.2)
    assert gpu_energy_j(ph, POWER) == pytest.approx(0.5 * 700 + 0.2 * 500 + 0.1 * 300
                                                    + 0.2 * 100)


def test_a_step_of_known_phases_and_powers_integrates_to_the_sum_written_out():
    # two servers of two GPUs; server 1's GPUs sit in a bubble half the step
    busy = Phases(gemm_s=0.6, memory_s=0.2, comm_s=0.2, idle_s=0.0)
    bubble = Phases(gemm_s=0.3, memory_s=0.1, comm_s=0.1, idle_s=0.5)
    machine = Machine(HostPower(host_w=1000.0, gpus=2, psu_efficiency=0.8), servers=2,
                      nics_per_server=4, nic_w=25.0, switches=0.5, switch_w=1200.0)
    site = Site(pue=1.5, usd_per_kwh=0.1, carbon_kg_per_kwh=0.4)
    e = step_energy([(0, busy), (0, busy), (1, bubble), (1, bubble)], POWER, machine, site,
                    step_s=1.0, tokens_per_step=1000.0)
    gpu_busy = 0.6 * 700 + 0.2 * 500 + 0.2 * 300               # 580 J
    gpu_bubble = 0.3 * 700 + 0.1 * 500 + 0.1 * 300 + 0.5 * 100  # 340 J
    gpu = 2 * gpu_busy + 2 * gpu_bubble
    host, nic, switch = 2 * 1000.0, 2 * 4 * 25.0, 0.5 * 1200.0
    it_ac = (gpu + host + nic) / 0.8 + switch
    assert e.gpu_j == pytest.approx(gpu)
    assert e.it_ac_j == pytest.approx(it_ac)
    assert e.facility_j == pytest.approx(1.5 * it_ac)
    assert e.kwh_per_step == pytest.approx(1.5 * it_ac / 3.6e6)
    assert e.kwh_per_million_tokens == pytest.approx(1.5 * it_ac / 3.6e6 / 1000 * 1e6)
    assert e.co2_kg_per_million_tokens == pytest.approx(e.kwh_per_million_tokens * 0.4)
    assert e.usd_per_million_tokens == pytest.approx(e.kwh_per_million_tokens * 0.1)
    assert e.avg_gpu_w == pytest.approx(gpu / 4)
    assert e.avg_node_w == pytest.approx((gpu + host + nic) / 0.8 / 2)
    assert e.peak_gpu_w == 700.0
    assert e.peak_node_w == pytest.approx((2 * 700 + 1000 + 100) / 0.8)
    assert J_PER_KWH == 3.6e6


def test_a_capped_gpu_draws_no_more_than_its_cap_in_any_phase():
    capped = POWER.capped(450.0)
    assert (capped.idle_w, capped.gemm_w, capped.memory_w, capped.comm_w) == \
        (100.0, 450.0, 450.0, 300.0)
    assert POWER.capped(None) is POWER


def _record(cls, op_id, kind, start, end, op_class=""):
    return OpRecord(cls, op_id, f"op{op_id}", "s", kind, "", "", start, start, end,
                    op_class=op_class)


def test_phases_read_off_a_timeline_give_gemm_priority_then_kernels_then_comm():
    # 0-1 GEMM with a collective under it; 1-1.5 elementwise; 1.5-2.5 collective alone;
    # 2.5-3 host work (delay); step 4 s: idle 4 - 2.5 = 1.5 s
    recs = [_record("a", 0, "compute", 0.0, 1.0, "matmul"),
            _record("a", 1, "collective", 0.5, 2.5),
            _record("a", 2, "compute", 1.0, 1.5, "elementwise"),
            _record("a", 3, "delay", 2.5, 3.0),
            _record("a", 4, "memcpy", 3.5, 4.0)]
    tl = Timeline(recs, {}, {}, {}, 4.0, MachineRecord(0, [], None, None))
    ph = class_phases(tl)["a"]
    assert (ph.gemm_s, ph.memory_s, ph.comm_s, ph.idle_s) == (1.0, 1.0, 1.0, 1.0)


BASE = {"name": "energy", "model": "llama-2-7b", "cluster": {"topology": "dgx-h100"},
        "simulation": {"variability": "none"},
        "training": {"seq_len": 2048, "micro_batch": 1, "global_batch": 8},
        "strategy": {"name": "fsdp"}}


def _run(**cluster):
    data = copy.deepcopy(BASE)
    data["cluster"].update(cluster)
    res = run_setup(build_setup(scenario_from_dict(data), extrapolate_steps=False))
    return res, energy_of(res)


@pytest.fixture(scope="module")
def uncapped():
    return _run()


def test_a_run_has_its_energy_from_its_own_timeline_and_is_deterministic(uncapped):
    res, e = uncapped
    again = energy_of(res)
    assert e == again
    phases = class_phases(res.timeline)
    total = sum(p.total_s for p in phases.values())
    assert total == pytest.approx(len(phases) * res.timeline.iteration_time_s)
    assert e.step_time_s == res.metrics.iteration_time_s
    assert 80.0 < e.avg_gpu_w <= e.peak_gpu_w <= 700.0
    tokens = res.metrics.tokens_per_s * e.step_time_s
    assert e.kwh_per_million_tokens == pytest.approx(e.kwh_per_step / tokens * 1e6)


def test_a_power_cap_slows_the_step_and_lowers_power_as_the_curve_says(uncapped):
    res, e = uncapped
    res500, e500 = _run(power_cap_w=500)
    assert res500.setup.compute.gpu.power_capped_rate == pytest.approx(0.92)
    assert res500.metrics.iteration_time_s > res.metrics.iteration_time_s
    # only tensor-core kernels slow down (memory-bound ones keep their speed), by at most
    # 1 / 0.92 each
    assert res500.metrics.iteration_time_s < res.metrics.iteration_time_s / 0.92
    assert e500.peak_gpu_w == 500.0 and e500.power_cap_w == 500.0
    assert e500.avg_gpu_w < e.avg_gpu_w
    assert e500.gpu_j < e.gpu_j


def test_the_curve_interpolates_between_its_sourced_points_and_refuses_outside():
    table = load_power()
    assert table.capped_rate("H100-SXM", 600.0) == pytest.approx(0.92 + 0.08 * 100 / 200)
    assert table.capped_rate("H100-SXM", 700.0) == 1.0
    with pytest.raises(ConfigError, match="cluster.power_cap_w.*outside"):
        table.capped_rate("H100-SXM", 400.0)
    with pytest.raises(ConfigError, match="cluster.power_cap_w.*no sourced clock curve"):
        capped_gpu(gpu_spec("A100-SXM4-80GB"), 300.0)
    with pytest.raises(ConfigError, match="cluster.power_cap_w"):
        build_setup(scenario_from_dict({**copy.deepcopy(BASE), "cluster": {
            "topology": "dgx-a100", "power_cap_w": 300}}))


def test_one_machine_one_rate_the_500w_part_and_a_500w_cap_agree():
    part = gpu_spec("H100-SXM-96GB-500W")
    capped = capped_gpu(gpu_spec("H100-SXM"), part.power_cap_w)
    assert capped.power_capped_rate == part.power_capped_rate
    assert capped.power_cap_w == part.power_cap_w
    assert capped_gpu(part, 500.0) is part
    with pytest.raises(ConfigError, match="own 500 W limit"):
        capped_gpu(part, 600.0)
    table = load_power()
    assert table.gpu("H100-SXM").capped(500.0) == table.gpu("H100-SXM-96GB-500W")


def test_every_catalog_gpu_has_sourced_power_within_its_tdp():
    import yaml
    from simulator.energy.power import DATA
    from simulator.hardware import gpu_names
    table, raw = load_power(), yaml.safe_load(DATA.read_text())
    for name in gpu_names():
        p, gpu = table.gpu(name), gpu_spec(name)
        assert p is not None and table.host(name) is not None, name
        assert p.idle_w < p.comm_w < p.memory_w <= p.gemm_w <= gpu.tdp_w, name
        assert raw["gpus"][name]["source"] and raw["hosts"][name]["source"], name
    for section in ("site", "nic", "switch"):
        for entry in raw[section].values():
            assert entry["source"]


def test_a_bad_value_in_the_power_file_is_refused_with_its_place(tmp_path):
    from simulator.energy.power import DATA
    bad = tmp_path / "power.yaml"
    bad.write_text(DATA.read_text().replace('idle: "80 W"', 'idle: "80"', 1))
    with pytest.raises(ConfigError, match=r"gpus\.H100-SXM\.idle.*write e\.g\."):
        load_power(bad)


@pytest.mark.parametrize("cap, rate, gemm_w, memory_w", [
    (500.0, 0.92, 500.0, 500.0),                         # the curve's sourced point
    (600.0, 0.92 + (1.0 - 0.92) * (600 - 500) / (700 - 500), 600.0, 517.0),   # interpolated
])
def test_a_power_cap_moves_step_and_energy_as_the_curve_in_power_yaml_says(
        uncapped, cap, rate, gemm_w, memory_w):
    """power.yaml's H100-SXM curve: (500 W, 0.92), (700 W, 1.0), linear between. Under a cap
    every tensor-core class's sustained rate is the datasheet's x the curve's fraction
    (other classes keep theirs), so a tensor-core kernel takes at most 1 / fraction as long
    and a memory-bound one as long as before; each phase's board power is min(its power,
    cap) (gemm 700, memory-bound 517, communication 299, idle 80 W), and the GPUs' energy is
    the sum over the capped step's phases of those powers x their seconds."""
    from simulator.metrics.summary import COMPUTE_KINDS
    res, e = uncapped
    capped, ec = _run(power_cap_w=cap)
    assert capped.setup.compute.gpu.power_capped_rate == pytest.approx(rate)
    base, under = res.setup.compute, capped.setup.compute
    for op_class in ("matmul", "attention"):
        assert under._lookup(op_class, "bf16")[0] == pytest.approx(
            base._lookup(op_class, "bf16")[0] * rate)
    for op_class in ("elementwise", "norm"):
        assert under._lookup(op_class, "bf16") == base._lookup(op_class, "bf16")
    before = {(r.cls, r.op_id): r.end_s - r.start_s for r in res.timeline.records}
    for r in capped.timeline.records:
        if r.kind not in COMPUTE_KINDS or before[(r.cls, r.op_id)] <= 0:
            continue
        ratio = (r.end_s - r.start_s) / before[(r.cls, r.op_id)]
        if r.op_class in ("matmul", "attention"):
            assert 1.0 <= ratio <= 1.0 / rate + 1e-9, r.name
        else:
            assert ratio == pytest.approx(1.0), r.name
    assert capped.metrics.iteration_time_s > res.metrics.iteration_time_s
    per_gpu = [(ph, len(c.ranks)) for c in capped.setup.trace.classes
               for ph in [class_phases(capped.timeline)[c.id]]]
    gpu_j = sum(n * (ph.gemm_s * gemm_w + ph.memory_s * memory_w + ph.comm_s * 299.0
                     + ph.idle_s * 80.0) for ph, n in per_gpu)
    assert ec.gpu_j == pytest.approx(gpu_j)
    assert ec.peak_gpu_w == gemm_w and ec.power_cap_w == cap
    kwh_per_token = ec.kwh_per_million_tokens / e.kwh_per_million_tokens
    assert kwh_per_token < 1.0          # the capped step is slower and uses less energy


def test_a100_and_b200_hosts_take_the_h100_ratio_without_the_topologys_nic_ports():
    """The H100 node's host under load without its 8 NIC ports, 2,340 W, is of its rest at
    maximum without them 10,200 - 8 x 700 - 8 x 25 = 4,400 W; the same ratio on DGX A100
    (6,500 - 8 x 400 - 8 x 25 = 3,100 W: 1,649 W) and DGX B200 (14,300 - 8 x 1,000 - 8 x 25 =
    6,100 W: 3,244 W); B300 takes B200's. The topologies add those 8 ports a server."""
    from simulator.energy.power import load_power
    from simulator.energy.timeline import _nics_per_server
    from simulator.scenario import load_scenario
    from simulator.topology.build import scenario_cluster
    t = load_power()
    nics = 8 * t.nic_w
    assert nics == 200.0 and t.host("H100-SXM").host_w == 2340.0
    ratio = 2340 / (10200 - 8 * 700 - nics)
    assert t.host("A100-SXM4-80GB").host_w == pytest.approx((6500 - 8 * 400 - nics) * ratio,
                                                            abs=0.5)
    assert t.host("A100-SXM4-40GB") == t.host("A100-SXM4-80GB")
    assert t.host("B200").host_w == pytest.approx((14300 - 8 * 1000 - nics) * ratio, abs=0.5)
    assert t.host("B300") == t.host("B200")
    for topo in ("dgx-a100", "dgx-b200"):
        G = scenario_cluster(load_scenario("quickstart", [f"cluster.topology={topo}"])).G
        assert _nics_per_server(G) == 8, topo

"""Issue 16's hardware: the H100/H200/B200/GB200 catalog entries, the shipped topologies
(load, draw, run, collective, compare), their prices, and `--set topology.*` on the
scenario commands."""

import csv
import json
import re
from collections import Counter

import pytest
from click.testing import CliRunner

from simulator.cli import cli
from simulator.compare.cost import resolve_price
from simulator.errors import ConfigError
from simulator.hardware import gpu_spec, link_spec
from simulator.topology import load_topology, resolve_topology, topology_from_dict
from test_cli import run_main

NEW = {  # name: (GPUs at the default size, GPU model, GPUs per NVLink domain, NIC type)
    "dgx-h100": (8, "H100-SXM", 8, "ib-ndr"),
    "dgx-h100-superpod": (32, "H100-SXM", 8, "ib-ndr"),
    "hgx-h100-roce": (16, "H100-SXM", 8, "roce-400"),
    "aws-p5": (16, "H100-SXM", 8, "efa-v2"),
    "gcp-a3-mega": (16, "H100-SXM", 8, "tcpxo-200"),
    "dgx-h200": (8, "H200-SXM", 8, "ib-ndr"),
    "dgx-b200": (8, "B200", 8, "ib-ndr"),
    "dgx-b200-superpod": (32, "B200", 8, "ib-ndr"),
    "gb200-nvl72": (144, "GB200", 72, "ib-ndr"),
}


def run(*args):
    return CliRunner().invoke(cli, list(args))


# ------------------------------------------------------------------------------ catalog
@pytest.mark.parametrize("name, fp8, hbm_bw, tdp", [
    ("H100-SXM", 1979e12, 3350e9, 700), ("H100-SXM-96GB-500W", 1979e12, 2400e9, 700),
    ("H100-PCIE-80GB", 1513e12, 2000e9, 350), ("H200-SXM", 1979e12, 4800e9, 700),
    ("B200", 4500e12, 8000e9, 1000), ("GB200", 5000e12, 8000e9, 1200)])
def test_new_gpus_carry_their_datasheet_figures(name, fp8, hbm_bw, tdp):
    g = gpu_spec(name)
    assert g.low_precision_flops["fp8"] == fp8
    assert g.hbm_bw_bytes_per_s == hbm_bw and g.tdp_w == tdp
    assert g.has_precision("fp8") and g.sm_count and g.boost_clock_hz    # SMs and clock
    assert re.search(r"20\d\d-\d\d-\d\d", g.source)       # sources carry a date
    assert g.low_precision_flops["fp8"] == pytest.approx(2 * g.peak_flops["bf16"], rel=0.01)


def test_blackwell_has_fp4_hopper_does_not_a100_has_neither():
    assert gpu_spec("B200").low_precision_flops["fp4"] == 2 * 4500e12
    assert not gpu_spec("H100-SXM").has_precision("fp4")
    assert not gpu_spec("A100-SXM4-80GB").has_precision("fp8")


def test_500w_variant_records_its_power_cap_and_memory():
    g = gpu_spec("H100-SXM-96GB-500W")
    assert g.power_cap_w == 500 and g.hbm_bytes == 96 << 30 and g.nvls


def test_nvls_only_on_nvswitch3_or_later():
    assert [gpu_spec(n).nvls for n in ("A100-SXM4-80GB", "H100-PCIE-80GB", "H100-SXM",
                                       "B200")] == [False, False, True, True]


@pytest.mark.parametrize("name, gbps", [("nvlink5", 900 * 8), ("ib-xdr", 800),
                                        ("roce-800", 800), ("efa-v2", 100),
                                        ("tcpxo-200", 200), ("tcpx-200", 200)])
def test_new_links(name, gbps):
    assert link_spec(name).bw_bytes_per_s == gbps * 1e9 / 8


# --------------------------------------------------------------------------- topologies
@pytest.mark.parametrize("name", NEW)
def test_new_topology_loads_with_its_hardware(name):
    gpus, model, domain, nic = NEW[name]
    G = load_topology(resolve_topology(name))
    kinds = Counter(kind for _, kind in G.nodes(data="kind"))
    assert kinds["gpu"] == gpus and G.graph["gpu"] == model
    assert G.graph["gpus_per_node"] == domain
    nics = {d["link_type"] for u, v, d in G.edges(data=True)
            if "nic" in (G.nodes[u]["kind"], G.nodes[v]["kind"]) and d["link_class"] == "net"}
    single = G.graph["nodes"] == 1            # a lone server's NICs have no cable
    assert nics == (set() if single else {nic})
    if single:
        assert f"nic={nic}" in G.nodes["n0.gpu0"]["template"]
    nvlink = {d["link_type"] for _, _, d in G.edges(data=True) if d["link_class"] == "nvlink"}
    assert nvlink == {gpu_spec(model).scale_up}


def test_sharp_only_on_the_infiniband_superpods():
    sharp = {n: bool(load_topology(resolve_topology(n)).graph.get("sharp")) for n in NEW}
    assert {n for n, s in sharp.items() if s} == {"dgx-h100-superpod", "dgx-b200-superpod",
                                                    "gb200-nvl72"}


def test_h100_superpod_is_rail_optimized_in_32_server_units():
    # NIC j of server s is cabled to rail leaf j of scalable unit s // 32, 8 x NDR each
    G = load_topology(resolve_topology("dgx-h100-superpod"), nodes=64)
    for s in (0, 31, 32, 63):
        for j in range(8):
            nic = f"n{s}.nic{j}"
            leaf = {v for v in G.neighbors(nic) if G.nodes[v]["kind"] == "switch"}
            assert leaf == {f"leaf.r{j}.g{s // 32}"}
            assert G.edges[nic, f"leaf.r{j}.g{s // 32}"]["link_type"] == "ib-ndr"
    assert sum(k == "switch" and n.startswith("leaf") for n, k in G.nodes(data="kind")) == 16


def test_nvl72_racks_joined_by_ethernet_instead():
    # the issue's "racks joined by InfiniBand or Ethernet": leaf_spine + roce-400, no SHARP
    G = topology_from_dict({"name": "nvl72-eth", "generator": "leaf_spine", "params": {
        "nodes": 2, "node": {"type": "nvl_rack", "gpu": "GB200", "gpus": 72,
                             "nic": "roce-400"}, "nodes_per_leaf": 1}}, source="x.yaml")
    assert G.graph["gpus_per_node"] == 72 and G.graph["nodes"] == 2
    assert not G.graph.get("sharp")
    assert {d["link_type"] for _, _, d in G.edges(data=True) if d["link_class"] == "net"} \
        == {"roce-400"}


def test_aws_p5_has_four_100g_cards_per_gpu():
    G = load_topology(resolve_topology("aws-p5"))
    bw = {d["bw_bytes_per_s"] for u, v, d in G.edges(data=True) if d["link_type"] == "efa-v2"
          and "nic" in (G.nodes[u]["kind"], G.nodes[v]["kind"])}
    assert bw == {4 * 100e9 / 8}


@pytest.mark.parametrize("name", NEW)
def test_topology_command_draws_each(name):
    r = run("topology", name)
    assert r.exit_code == 0, r.output
    assert f"topology: {name}" in r.output and "servers:" in r.output


@pytest.mark.parametrize("name", NEW)
def test_collective_runs_on_each(name):
    r = run("collective", "all_reduce", "--topology", name, "-b", "1M", "-e", "1M",
            "--format", "csv")
    assert r.exit_code == 0, r.output
    assert r.output.strip().splitlines()[-1].startswith("1048576,")


@pytest.mark.parametrize("name", ["dgx-h100", "dgx-b200", "gcp-a3-mega"])
def test_run_and_compare_on_new_topologies(name):
    r = run("run", "--set", f"cluster.topology={name}", "--format", "json")
    assert r.exit_code == 0, r.output
    r = run("compare", "--set", f"cluster.topology={name}", "--strategies", "fsdp-full",
            "--price-per-gpu-hour", "2", "--format", "csv")
    assert r.exit_code == 0, r.output


SMALL = {"dgx-h100-superpod": 2, "dgx-b200-superpod": 2, "gb200-nvl72": 1}     # fewest servers that still test it


@pytest.mark.parametrize("name", sorted(set(NEW) - {"dgx-h100", "dgx-b200", "gcp-a3-mega"}))
def test_run_and_compare_on_the_other_new_topologies(name):
    sets = ["--set", f"cluster.topology={name}"]
    if name in SMALL:
        sets += ["--set", f"cluster.nodes={SMALL[name]}"]
    r = run("run", *sets, "--format", "json")
    assert r.exit_code == 0, r.output
    assert '"iteration_time_s"' in r.output
    r = run("compare", *sets, "--strategies", "fsdp-full", "--no-scaling", "--no-capacity",
            "--format", "csv")
    assert r.exit_code == 0, r.output
    row = next(csv.DictReader(line for line in r.output.splitlines()
                              if line.startswith(("strategy,", "fsdp-full,"))))
    assert row["status"] == "ok" and float(row["usd_per_gpu_hour"]) > 0   # priced by default


def test_nvlink_domain_over_the_switch_limit_is_refused(tmp_path, capsys):
    limit = link_spec("nvlink5").max_domain_gpus
    path = tmp_path / "big.yaml"
    path.write_text("name: big\ngenerator: superpod\nparams:\n  nodes: 1\n"
                    f"  node: {{type: nvl_rack, gpu: GB200, gpus: {limit + 2}}}\n")
    code, out, err = run_main(capsys, "topology", str(path))
    assert code == 2 and out == "" and err.count("\n") == 1
    assert f"big.yaml: params.node.gpus: {limit + 2} GPUs in one NVLink domain" in err


def test_sharp_on_ethernet_is_refused():
    data = {"name": "x", "generator": "superpod",
            "params": {"nodes": 2, "node": {"type": "dgx_a100", "gpu": "H100-SXM",
                                            "nic": "roce-400"}, "sharp": True}}
    with pytest.raises(ConfigError, match="params.sharp: SHARP needs InfiniBand"):
        topology_from_dict(data, source="x.yaml")


# ------------------------------------------------------------------------------- prices
@pytest.mark.parametrize("gpu, instance, usd_per_hour, gpus", [
    ("H100-SXM", "p5.48xlarge", 55.04, 8), ("H200-SXM", "p5en.48xlarge", 63.296, 8),
    ("B200", "p6-b200.48xlarge", 113.9328, 8),
    ("GB200", "u-p6e-gb200x72 (UltraServer)", 761.904, 72)])
def test_default_prices_of_the_new_gpus(gpu, instance, usd_per_hour, gpus):
    price = resolve_price(gpu)
    assert instance in price.label
    assert price.usd_per_gpu_hour == pytest.approx(usd_per_hour / gpus)


@pytest.mark.parametrize("name", NEW)
def test_every_new_topology_has_a_sourced_dated_price(name):
    G = load_topology(resolve_topology(name))
    price = resolve_price(G.graph["gpu"], topology=G.graph["name"])
    assert price is not None and re.search(r"retrieved 20\d\d-\d\d-\d\d", price.label)
    assert "source" in price.source.lower() or "http" in price.source   # says where from


def test_a_cloud_topology_is_priced_as_its_own_cloud():
    gcp = resolve_price("H100-SXM", topology="gcp-a3-mega")
    assert "a3-megagpu-8g" in gcp.label and gcp.usd_per_gpu_hour == pytest.approx(93.40 / 8)
    assert "p5.48xlarge" in resolve_price("H100-SXM", topology="dgx-h100").label
    r = run("compare", "--set", "cluster.topology=gcp-a3-mega", "--strategies", "fsdp-full",
            "--no-scaling", "--no-capacity")
    assert r.exit_code == 0 and "a3-megagpu-8g" in r.output


# ------------------------------------------------------------------ --set topology.*
@pytest.mark.parametrize("command", [["run"], ["capacity", "--strategies", "ddp"],
                                     ["compare", "--strategies", "ddp",
                                      "--price-per-gpu-hour", "1"]])
def test_set_topology_params_reaches_the_cluster(command):
    r = run(*command, "--set", "topology.params.gpu=H100-SXM")
    assert r.exit_code == 0, r.output
    assert "H100" in r.output


def test_set_topology_params_in_reliability(capsys):
    args = ["reliability", "--trials", "1", "--set", "reliability={job: {duration: 1 h}}",
            "--format", "json", "--quiet"]
    code, out, err = run_main(capsys, *args, "--set", "topology.params.node.gpu=H100-SXM")
    assert code == 0, err
    h100 = json.loads(out)["iteration_time_s"]["healthy"]
    code, out, err = run_main(capsys, *args)
    a100 = json.loads(out)["iteration_time_s"]["healthy"]
    assert h100 < 0.75 * a100          # the H100 cluster was simulated, not the A100 one


def test_bad_topology_set_names_the_set(capsys):
    code, out, err = run_main(capsys, "run", "--set", "topology.params.gpu=H100-XXX")
    assert code == 2 and err.count("\n") == 1
    assert "quickstart.yaml: --set topology.params.gpu: unknown GPU 'H100-XXX'" in err


# -------------------------------------------------------------------------------- FP8
def test_fp8_on_a_gpu_without_fp8_is_one_line_exit_2(capsys):
    code, out, err = run_main(capsys, "run", "--set", "training.precision=fp8")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert ("quickstart.yaml: --set training.precision: A100-SXM4-80GB has no FP8 tensor "
            "cores") in err


def test_fp8_on_h100_runs_and_fp4_is_refused_outside_megatron(capsys):
    # FP8 GEMMs are modelled (simulator/models/fp8.py, tests/test_compute_fp8.py); NVFP4
    # under Megatron only (simulator/models/nvfp4.py, tests/test_nvfp4.py)
    code, out, err = run_main(capsys, "run", "--set", "training.precision=fp8",
                              "--set", "topology.params.gpu=H100-SXM", "--quiet")
    assert code == 0 and "iteration_time_s" in out
    code, out, err = run_main(capsys, "run", "--set", "training.precision=fp4",
                              "--set", "topology.params.gpu=B200", "--quiet")
    assert code == 2 and err.count("\n") == 1
    assert "training.precision: fp4 is Transformer Engine's NVFP4 recipe" in err
    code, out, err = run_main(capsys, "run", "--set", "training.precision=fp4",
                              "--set", "topology.params.gpu=H100-SXM")
    assert code == 2 and "H100-SXM has no FP4 tensor cores" in err


def test_nvls_asked_on_a100_names_the_file_the_field_and_why(tmp_path, capsys):
    # NCCL_ALGO=NVLS leaves all_gather nothing it can run on NVSwitch 2: the error is met at
    # the first op of the replay, and still names the scenario file and its nccl.algo field.
    path = tmp_path / "nvls.yaml"
    path.write_text("name: nvls\nmodel: llama-2-7b\ncluster: {topology: dgx-a100}\n"
                    "nccl: {algo: NVLS}\n")
    code, out, err = run_main(capsys, "run", str(path), "--quiet")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert f"{path}: nccl.algo: no algorithm left for all_gather" in err
    assert "nvls needs NVLink SHARP" in err and "A100-SXM4-80GB on dgx-a100 has none" in err


def test_fp8_in_capacity_names_training_precision_not_the_strategy(capsys):
    # capacity checks the scenario's strategy keys before probing; fp8 must still get the
    # GPU's verdict on training.precision, as run gives it
    code, out, err = run_main(capsys, "capacity", "--quiet", "--set", "training.precision=fp8")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert ("quickstart.yaml: --set training.precision: A100-SXM4-80GB has no FP8 tensor "
            "cores") in err


# ------------------------------------------------------- collective --set (degraded fabric)
def _busbw(*args):
    r = run("collective", "all_reduce", "--topology", "dgx-h100-superpod", "-b", "1G",
            "-e", "1G", "--format", "csv", *args)
    assert r.exit_code == 0, r.output
    return float(r.output.strip().splitlines()[-1].split(",")[5])


def test_collective_set_describes_fewer_nics_and_a_slow_link():
    full = _busbw()
    half_nics = _busbw("--set", "params.node.nics=4")
    half_rate = _busbw("--set", "links={ib-ndr: {bw: 200 Gb/s}}")
    # 4 NICs at 400 Gb/s and 8 at 200 Gb/s give each server the same network capacity
    assert half_nics < 0.6 * full and half_nics == pytest.approx(half_rate, rel=1e-9)
    assert _busbw("--set", "topology.params.node.nics=8") == full     # prefix accepted


def test_collective_set_reaches_the_graph():
    from simulator.topology.build import topology_with_keys
    G = topology_with_keys(resolve_topology("dgx-h100-superpod"), {"params.node.nics": 4},
                           source="x", prefix="--set ")
    assert Counter(k for _, k in G.nodes(data="kind"))["nic"] == 4 * G.graph["nodes"]


def test_collective_bad_set_and_missing_hardware_name_file_and_option(capsys):
    path = resolve_topology("dgx-h100-superpod")
    code, out, err = run_main(capsys, "collective", "all_reduce", "--topology",
                              "dgx-h100-superpod", "--set", "params.node.nics=3")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert f"{path}: --set params.node.nics: must be one of" in err
    # SHARP asked of an InfiniBand fabric whose switches have none (sharp: false)
    code, out, err = run_main(capsys, "collective", "all_reduce", "--topology",
                              "dgx-h100-superpod", "--set", "params.sharp=false",
                              "--algo", "collnet_chain", "-b", "1M", "-e", "1M")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert f"{path}: --algo: collnet_chain reduces on the switches (IB SHARP)" in err
    # NVLS asked on PCIe cards
    code, out, err = run_main(capsys, "collective", "all_reduce", "--topology",
                              "hgx-a100-pcie", "--algo", "nvls", "-b", "1M", "-e", "1M")
    assert code == 2 and err.count("\n") == 1
    assert (f"{resolve_topology('hgx-a100-pcie')}: --algo: nvls needs NVLink SHARP"
            in err) and "A100-PCIE-40GB" in err


def test_sharp_on_an_ethernet_topology_file_is_one_line_exit_2(tmp_path, capsys):
    path = tmp_path / "roce-sharp.yaml"
    path.write_text("name: roce-sharp\ngenerator: superpod\nparams:\n  nodes: 2\n"
                    "  node: {type: dgx_a100, gpu: H100-SXM, nics: 8, nic: roce-400}\n"
                    "  sharp: true\n")
    code, out, err = run_main(capsys, "topology", str(path))
    assert code == 2 and out == "" and err.count("\n") == 1
    assert f"{path}: params.sharp: SHARP needs InfiniBand" in err


def test_the_issues_set_node_gpu_works_on_a_single_server_too(capsys):
    # `run --set topology.params.node.gpu=H100-SXM` (the issue's example) on the one-DGX
    # quickstart: a single-server generator takes a fabric's `node:` keys as its own
    code, node, err = run_main(capsys, "run", "--format", "json", "--quiet",
                               "--set", "topology.params.node.gpu=H100-SXM")
    assert code == 0, err
    code, flat, err = run_main(capsys, "run", "--format", "json", "--quiet",
                               "--set", "topology.params.gpu=H100-SXM")
    assert node == flat
    code, out, err = run_main(capsys, "run", "--set", "topology.params.node.type=pcie")
    assert code == 2 and err.count("\n") == 1
    assert "--set topology.params.node.type: generator 'dgx_a100_node' builds a" in err

"""Hardware catalog: shipped values, lookups, and validation of bad catalog files."""

import dataclasses

import pytest

from simulator import hardware
from simulator.errors import ConfigError
from simulator.hardware import (LINK_CLASSES, gpu_names, gpu_spec, link_names, link_spec,
                                load_gpu_table, load_link_table)

GiB = 1 << 30


def test_catalog_lists_required_entries():
    assert {"A100-SXM4-40GB", "A100-SXM4-80GB", "A100-PCIE-40GB", "A100-PCIE-80GB",
            "H100-SXM"} <= set(gpu_names())
    assert {"nvlink3", "nvlink4", "pcie-gen4-x16", "pcie-gen5-x16", "ib-hdr", "ib-ndr",
            "roce-100", "roce-200", "roce-400", "efa-100", "xgmi", "ethernet-100"} <= set(
        link_names())


def test_a100_80gb_values_match_facts_table():
    spec = gpu_spec("A100-SXM4-80GB")
    assert spec.peak_flops["bf16"] == pytest.approx(312e12)
    assert spec.peak_flops["fp16"] == pytest.approx(312e12)
    assert spec.peak_flops["tf32"] == pytest.approx(156e12)
    assert spec.peak_flops["fp32"] == pytest.approx(19.5e12)
    assert spec.hbm_bytes == 80 * GiB
    assert spec.hbm_bw_bytes_per_s == pytest.approx(2039e9)
    assert spec.scale_up == "nvlink3"
    assert spec.tdp_w == 400


@pytest.mark.parametrize("name, hbm_gib, hbm_bw", [
    ("A100-SXM4-40GB", 40, 1555e9), ("A100-PCIE-40GB", 40, 1555e9),
    ("A100-PCIE-80GB", 80, 1935e9), ("H100-SXM", 80, 3350e9)])
def test_memory_sizes_and_bandwidths(name, hbm_gib, hbm_bw):
    spec = gpu_spec(name)
    assert spec.hbm_bytes == hbm_gib * GiB
    assert spec.hbm_bw_bytes_per_s == pytest.approx(hbm_bw)


def test_pcie_cards_have_no_nvlink_and_h100_uses_nvlink4():
    assert gpu_spec("A100-PCIE-40GB").scale_up is None
    assert gpu_spec("A100-PCIE-80GB").scale_up is None
    h100 = gpu_spec("H100-SXM")
    assert h100.scale_up == "nvlink4" and h100.pcie == "pcie-gen5-x16"
    assert h100.peak_flops["bf16"] == pytest.approx(989e12)


@pytest.mark.parametrize("name, bw", [
    ("nvlink3", 300e9), ("nvlink4", 450e9), ("pcie-gen4-x16", 31.5e9),
    ("pcie-gen5-x16", 63e9), ("ib-hdr", 25e9), ("ib-ndr", 50e9), ("roce-100", 12.5e9),
    ("roce-200", 25e9), ("roce-400", 50e9), ("efa-100", 12.5e9), ("ethernet-100", 12.5e9)])
def test_link_bandwidth_per_direction(name, bw):
    assert link_spec(name).bw_bytes_per_s == pytest.approx(bw)


def test_every_entry_is_sourced_and_sane():
    for name in link_names():
        spec = link_spec(name)
        assert spec.link_class in LINK_CLASSES
        assert spec.bw_bytes_per_s > 0 and 0 <= spec.latency_s < 1e-4
        assert len(spec.source) > 20, name
    for name in gpu_names():
        spec = gpu_spec(name)
        assert spec.source and all(v > 0 for v in spec.peak_flops.values())
        if spec.scale_up:     # NVIDIA's scale-up port is NVLink, AMD's Infinity Fabric
            want = "infinity_fabric" if spec.vendor == "amd" else "nvlink"
            assert link_spec(spec.scale_up).link_class == want
        assert link_spec(spec.pcie).link_class == "pcie"


def test_latency_ordering_nvlink_below_pcie_below_efa():
    assert link_spec("nvlink3").latency_s < link_spec("pcie-gen4-x16").latency_s
    assert link_spec("ib-hdr").latency_s < link_spec("roce-100").latency_s
    assert link_spec("roce-100").latency_s < link_spec("efa-100").latency_s


def test_specs_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        gpu_spec("A100-SXM4-80GB").hbm_bytes = 1


def test_unknown_names_list_valid_ones():
    with pytest.raises(ConfigError, match=r"unknown GPU 'V100'; valid: .*A100-SXM4-80GB"):
        gpu_spec("V100")
    with pytest.raises(ConfigError, match=r"unknown link type 'ib-gdr'; valid: .*ib-hdr"):
        link_spec("ib-gdr")   # ib-xdr is in the catalog since issue 16


def _links_file(tmp_path, body):
    path = tmp_path / "links.yaml"
    path.write_text(body)
    return path


@pytest.mark.parametrize("body, field, message", [
    ("bad: {bw: 200, latency: 1 us, link_class: net}", "bad.bw", "needs a unit"),
    ("bad: {bw: 0 Gb/s, latency: 1 us, link_class: net}", "bad.bw", "must be > 0"),
    ("bad: {bw: 1 Gb/s, latency: 1 parsec, link_class: net}", "bad.latency", "cannot read"),
    ("bad: {bw: 1 Gb/s, latency: 1 us, link_class: wifi}", "bad.link_class", "one of"),
    ("bad: {bw: 1 Gb/s, latency: 1 us, link_class: net, speed: 3}", "bad", "unknown key"),
    ("bad: {bw: 1 Gb/s, link_class: net}", "bad", "missing key.*latency"),
])
def test_bad_link_file_names_file_and_field(tmp_path, body, field, message):
    path = _links_file(tmp_path, body)
    with pytest.raises(ConfigError, match=rf"links\.yaml: {field}: .*{message}"):
        load_link_table(path)


@pytest.mark.parametrize("entry, field, message", [
    ("hbm_bytes: 80", "x.hbm_bytes", "needs a unit"),
    ("hbm_bw: 2039", "x.hbm_bw", "needs a unit"),
    ("peak_flops: {bf16: 312}", "x.peak_flops.bf16", "needs a unit"),
    ("peak_flops: {bf16: 0 TFLOP/s}", "x.peak_flops.bf16", "must be > 0"),
    ("peak_flops: {int3: 1 TFLOP/s}", "x.peak_flops.int3", "unknown precision"),
    ("scale_up: pcie-gen4-x16", "x.scale_up", "not a nvlink or infinity_fabric link type"),
    ("vendor: intel", "x.vendor", "must be one of nvidia, amd"),
    ("tdp: 400", "x.tdp", "cannot read power"),
])
def test_bad_gpu_file_names_file_and_field(tmp_path, entry, field, message):
    base = {"peak_flops": "{bf16: 312 TFLOP/s}", "hbm_bytes": "80 GiB",
            "hbm_bw": "2039 GB/s", "scale_up": "nvlink3"}
    key = entry.split(":")[0]
    base[key] = entry.split(": ", 1)[1]
    path = tmp_path / "gpus.yaml"
    path.write_text("x:\n" + "".join(f"  {k}: {v}\n" for k, v in base.items()))
    links = hardware._catalog()[1]
    with pytest.raises(ConfigError, match=rf"gpus\.yaml: {field}: .*{message}"):
        load_gpu_table(path, links)


def test_unreadable_catalog_is_a_config_error(tmp_path):
    path = _links_file(tmp_path, "a: [1,\n")
    with pytest.raises(ConfigError, match=r"links\.yaml: malformed YAML at line 2"):
        load_link_table(path)
    with pytest.raises(ConfigError, match=r"absent\.yaml: cannot read catalog"):
        load_link_table(tmp_path / "absent.yaml")


def test_oom_capacity_is_what_cuda_reports_when_measured():
    from simulator.hardware import gpu_spec
    a100 = gpu_spec("A100-SXM4-80GB")
    assert a100.hbm_bytes == 80 << 30
    assert a100.memory_capacity_bytes == 84990623744      # totalGlobalMem in real traces
    h100 = gpu_spec("H100-SXM")
    assert h100.memory_capacity_bytes == h100.hbm_bytes   # no measurement: marketed size

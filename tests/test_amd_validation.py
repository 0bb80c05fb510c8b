"""The rccl-tests comparison of validation/collectives/rccl: results.md is what the model
gives today, and its bandwidth regime stays where the README says."""

import csv
import statistics

import pytest

from simulator.cluster import Cluster
from simulator.collectives.model import CollectiveModel
from simulator.collectives.nccl_config import NcclConfig
from simulator.constants import load_constants
from simulator.validation.collectives import rccl

AZURE_ND = "azure_nd_mi300x_v5"     # RCCL 2.22.3: only bus bandwidth published


def test_results_file_is_current():
    rows = rccl.simulate()
    assert (rccl.DIR / "results.md").read_text() == rccl.report(rows)


def test_every_table_row_is_simulated_once():
    rows = rccl.simulate()
    assert len(rows) == 115
    assert {r.table for r in rows} == {"rccl_issue_1562_azure_mi300x", "hisohara_aac8_mi300x",
                                       "hisohara_aac11_mi325x", "hisohara_aac10_mi300x_2node",
                                       AZURE_ND}


def test_bandwidth_regime_error_as_stated():
    """From 64 MiB up: the model's 6 rings x 48 GB/s = 288 GB/s bus bandwidth against
    266-319 measured, +8.4% to +10.9% slow (README)."""
    one = [r for r in rccl.simulate() if r.nodes == 1]
    big = rccl.band(one, 64 << 20, float("inf"))
    errors = [r.error for r in big]
    assert len(big) == 21
    assert (round(min(errors) * 100, 1), round(max(errors) * 100, 1)) == (8.4, 10.9)
    assert statistics.median(abs(e) for e in errors) < 0.11
    assert all(r.algo == "ring" for r in big)


def test_two_platforms_bandwidth_regime_as_stated():
    """2 x 8 MI300X over 8 x 400G RoCE rails, from 256 MiB up: -9.3% to -4.3%, and -43% at
    128 MiB (README, docs/amd.md)."""
    rows = [r for r in rccl.simulate() if r.nodes == 2]
    two = rccl.band(rows, 256 << 20, float("inf"))
    errors = [r.error for r in two]
    assert len(two) == 7
    assert (round(min(errors) * 100, 1), round(max(errors) * 100, 1)) == (-9.3, -4.3)
    assert [round(r.error * 100) for r in rows if r.size_bytes == 128 << 20] == [-43]


def test_the_azure_nd_rows_are_its_bus_bandwidth_as_times():
    """Azure publishes bus bandwidth only: time = size x 2(n-1)/n / busbw, algbw = busbw x
    n / (2(n-1)), n = 8; sizes 1 KiB x 2^i to 8 GiB (rccl-tests -f 2)."""
    rows = [r for r in csv.DictReader(open(rccl.TABLES)) if r["table"] == AZURE_ND]
    assert [int(r["size_bytes"]) for r in rows] == [1024 << i for i in range(24)]
    for r in rows:
        size, bus = int(r["size_bytes"]), float(r["busbw_gbps"])
        assert float(r["time_us"]) == pytest.approx(size * 2 * 7 / 8 / (bus * 1e9) * 1e6,
                                                    abs=0.005)
        assert float(r["algbw_gbps"]) == pytest.approx(bus * 8 / 14, abs=0.005)


def test_the_rccl_2_22_3_table_as_docs_amd_says():
    rows = [r for r in rccl.simulate() if r.table == AZURE_ND]

    def span(low, high):
        errs = [r.error for r in rccl.band(rows, low, high)]
        return round(min(errs) * 100, 1), round(max(errs) * 100, 1)
    assert span(4 << 20, 32 << 20) == (-4.7, 0.8)
    assert {r.proto for r in rccl.band(rows, 4 << 20, 32 << 20)} == {"LL128"}
    assert span(64 << 20, float("inf")) == (8.4, 10.2)
    assert span(0, 512 << 10) == (-86.9, -80.2)
    small = rccl.band(rows, 0, 512 << 10)
    assert {r.algo for r in small} == {"one_shot"}
    assert (round(min(r.measured_us for r in small)), round(max(r.measured_us for r in small)),
            round(min(r.simulated_us for r in small), 1),
            round(max(r.simulated_us for r in small), 1)) == (45, 61, 6.7, 12.1)


def _mid_band_medians(proto):
    """Median |error| of each table's 512 KiB - 64 MiB rows with NCCL_PROTO ``proto``."""
    tables: dict = {}
    for r in csv.DictReader(open(rccl.TABLES)):
        size = int(r["size_bytes"])
        if (512 << 10) <= size < (64 << 20):
            tables.setdefault((r["table"], r["gpu"], int(r["nodes"])), []).append(
                (size, float(r["time_us"])))
    out = {}
    for (table, gpu, nodes), rows in tables.items():
        model = CollectiveModel(Cluster.from_graph(rccl.platform(gpu, nodes)),
                                load_constants(), NcclConfig(proto=proto))
        errs = [model.plan("all_reduce", size, list(range(8 * nodes))).predicted_s * 1e6
                / us - 1 for size, us in rows]
        out[table] = round(100 * statistics.median(abs(e) for e in errs), 1)
    return out


def test_the_mid_band_with_and_without_ll128_as_docs_amd_says():
    """docs/amd.md: RCCL 2.21.5 runs no LL128 on gfx942; the tables with and without it."""
    with_ll128, without = _mid_band_medians(None), _mid_band_medians("^LL128")
    assert [(with_ll128[t], without[t]) for t in ("rccl_issue_1562_azure_mi300x",
            "hisohara_aac8_mi300x", AZURE_ND, "hisohara_aac10_mi300x_2node")] == \
        [(27.7, 37.4), (32.7, 35.6), (7.5, 8.5), (65.8, 50.6)]

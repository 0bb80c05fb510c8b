"""NCCL 2.28's own tuner on AWS p5 (simulator/collectives/nccl_own_tuner.py): the ring
all_gather's protocol switch from LL128 to Simple, with the arithmetic of tuning.cc written
out; where it falls against the measured tables' dips
(simulator/validation/collectives/efa_protocols.py)."""

import pandas as pd
import pytest

from simulator.collectives import nccl_own_tuner as nt
from simulator.validation.collectives import efa_protocols as ep
from simulator.validation.collectives.schema import default_root

C = nt.view("p5_p5e")
MiB = 2 ** 20


def test_view_is_nccl_2_28_and_the_p5_graph():
    assert C["base_us"] == {"LL": 6.6, "LL128": 14.0, "Simple": 8.4}
    assert C["nvlink_hop_us"] == {"LL": 0.6, "LL128": 1.9, "Simple": 3.4}
    assert C["net_hop_us"] == {"LL": 2.7, "LL128": 4.0, "Simple": 14.0}
    assert (C["graph_channels"], C["graph_bw_gbps"], C["latency_inter_us"]) == (8, 48.0, 75.0)
    assert C["gpus_per_server"] == 8


def test_latency_arithmetic():
    # 2 instances, 16 ranks: 15 steps, 1 across instances.
    # LL128: 14.0 + 14 x max(1.9, 2.0) + 1 x (4.0 + 75) = 121.0 us
    assert nt.latency_us("LL128", 2, C) == pytest.approx(14.0 + 14 * 2.0 + 79.0)
    # Simple: 8.4 + 14 x max(3.4, 3 x 2.0) + 1 x (14.0 + 2 x 75) = 256.4 us
    assert nt.latency_us("Simple", 2, C) == pytest.approx(8.4 + 14 * 6.0 + 164.0)
    # 32 instances, 256 ranks: 255 steps, 31 across: LL128 14 + 224 x 2 + 31 x 79
    assert nt.latency_us("LL128", 32, C) == pytest.approx(14.0 + 224 * 2.0 + 31 * 79.0)


def test_bandwidth_arithmetic():
    assert nt.bus_bw_gbps("Simple", 4, C) == pytest.approx(8 * 48.0)         # 384
    # LL128: min(0.92 x 384 = 353.3, 8 channels x 36.7 = 293.6)
    assert nt.bus_bw_gbps("LL128", 4, C) == pytest.approx(8 * 36.7)
    # LL: min(llMaxBw of an AMD host, 384 x 0.5)
    assert nt.bus_bw_gbps("LL", 2, C) == pytest.approx(22.5)
    assert nt.bus_bw_gbps("LL", 8, C) == pytest.approx(19.0)


@pytest.mark.parametrize("nodes", [2, 4, 8, 16, 32])
def test_switch_is_where_the_tuner_times_cross(nodes):
    n = 8 * nodes
    s = nt.switch_bytes(nodes, C)
    # closed form: (lat_Simple - lat_LL128) / ((n - 1) / n / 1000 x (1/293.6 - 1/384))
    extra = nt.latency_us("Simple", nodes, C) - nt.latency_us("LL128", nodes, C)
    assert s == pytest.approx(extra / ((n - 1) / n / 1000.0 * (1 / 293.6 - 1 / 384.0)))
    protos = ("LL", "LL128", "Simple")
    assert nt.ring_protocol("p5_p5e", "all_gather", 0.99 * s, n, nodes, protos) == "LL128"
    assert nt.ring_protocol("p5_p5e", "all_gather", 1.01 * s, n, nodes, protos) == "Simple"
    # NCCL_PROTO without LL128: the best of what is left
    assert nt.ring_protocol("p5_p5e", "all_gather", 0.99 * s, n, nodes, ("Simple",)) == "Simple"


def test_switch_sizes():
    # 10.74, 13.87, 15.36, 16.08, 16.44 MiB per rank on 2, 4, 8, 16, 32 instances
    got = [round(ep.switch_mib_per_rank(n), 2) for n in (2, 4, 8, 16, 32)]
    assert got == [10.74, 13.87, 15.36, 16.08, 16.44]


def test_does_not_apply_elsewhere():
    protos = ("LL", "LL128", "Simple")
    assert nt.ring_protocol(None, "all_gather", 1 << 30, 16, 2, protos) is None
    assert nt.ring_protocol("p5_p5e", "all_reduce", 1 << 30, 16, 2, protos) is None
    assert nt.ring_protocol("p5_p5e", "all_gather", 1 << 30, 8, 1, protos) is None
    assert nt.ring_protocol("p5_p5e", "all_gather", 1 << 30, 8, 2, protos) is None   # 4/node


def _rows():
    df = pd.read_csv(default_root() / "raw" / "aws_p5" / "nccl_all_gather.csv")
    return [(int(r[0]), int(r[2]) << 20, float(r[6])) for r in df.itertuples(index=False)]


def test_the_measured_dips_are_the_first_simple_sizes():
    # 16 MiB per rank is past the switch on 2, 4 and 8 instances (Simple) and below it on 16
    # (LL128): the tables drop there on 2, 4 and 8 (215.58, 220.57, 224.47 GB/s after
    # 234.54, 253.36, 261.26 at 8 MiB per rank) and not on 16 (265.15 after 261.88)
    busbw = {(n, s // (8 * n)): b for n, s, b in _rows()}
    for nodes, proto in ((2, "Simple"), (4, "Simple"), (8, "Simple"), (16, "LL128")):
        assert ep.choice(nodes, 16 * MiB * 8 * nodes) == proto
        assert ep.choice(nodes, 8 * MiB * 8 * nodes) == "LL128"
        dropped = busbw[(nodes, 16 * MiB)] < busbw[(nodes, 8 * MiB)]
        assert dropped == (proto == "Simple")


def test_protocol_step_fit_on_the_calibration_tables():
    res = ep.fit_protocol_steps(_rows())
    f = res["fitted"]
    # 15 LL128 rows and 6 Simple rows of the 2, 8 and 32 instance tables
    assert (f["LL128"]["rows"], f["Simple"]["rows"]) == (15, 6)
    assert round(f["LL128"]["step_us"], 1) == 9.6 and round(f["Simple"]["step_us"], 1) == 25.2
    assert round(f["LL128"]["busbw_GBps"]) == 390 and round(f["Simple"]["busbw_GBps"]) == 360
    cal = ep.summary(res["errors"], ep.CALIBRATION_NODES)
    val = ep.summary(res["errors"], ep.VALIDATION_NODES)
    assert (cal["within"], cal["rows"]) == (20, 21)
    assert (val["within"], val["rows"]) == (13, 14)
    assert round(100 * val["median"], 1) == 2.7 and round(100 * val["max"], 1) == 20.3


def test_docs_quote_the_analysis():
    """docs/collective-model.md, EFA (all_gather, 16 MiB per rank) quotes these numbers."""
    from pathlib import Path
    from simulator.constants import load_constants

    text = " ".join((Path(__file__).resolve().parents[1] / "docs" / "collective-model.md")
                    .read_text().split())
    sw = [f"{ep.switch_mib_per_rank(n):.2f}" for n in (2, 4, 8, 16, 32)]
    assert f"{', '.join(sw[:4])} and {sw[4]} MiB per rank on 2, 4, 8, 16 and 32" in text
    f = ep.fit_protocol_steps(_rows())["fitted"]
    assert (f"LL128 {f['LL128']['step_us']:.1f} us per step at {f['LL128']['busbw_GBps']:.0f} "
            f"GB/s and Simple {f['Simple']['step_us']:.1f} us at "
            f"{f['Simple']['busbw_GBps']:.0f} GB/s, and 13 of the 14 held-out rows") in text
    # NCCL 2.28's Hopper ring LL128 ceiling: the model's row for H100 and the tuner's view
    assert load_constants().ceilings["ring_ll128"]["hopper"][2] == pytest.approx(36.7e9)
    assert C["ll128_max_bw_per_channel_gbps"] == 36.7
    assert "min(0.92 x 384, 8 x 36.7)" in text

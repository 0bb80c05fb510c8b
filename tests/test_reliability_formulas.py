"""Young's and Daly's intervals, MTTF and expected ETTR against their published numbers,
and the units of the reliability section."""

from __future__ import annotations

import math

import pytest

from simulator.reliability.formulas import (daly_interval, expected_ettr, expected_wall_time,
                                            mttf_s, young_interval)
from simulator.reliability.quantities import parse_duration, parse_rate
from simulator.units import UnitError

MIN, H, DAY = 60.0, 3600.0, 86400.0


@pytest.mark.parametrize("M, printed, decimals", [(24 * H, 117, 0), (6 * H, 57, 0),
                                                  (15 * MIN, 9.1, 1)])
def test_daly_worked_examples(M, printed, decimals):
    # Daly (2006), R = 10 min and delta = 5 min, as printed in the paper's abstract.
    assert round(daly_interval(5 * MIN, M) / MIN, decimals) == printed


def test_young_is_sqrt_2_delta_M():
    # delta = 5 min, M = 24 h: sqrt(2 x 5 x 1440) = 120 min exactly.
    assert young_interval(5 * MIN, 24 * H) == pytest.approx(120 * MIN)
    assert young_interval(2.0, 50.0) == pytest.approx(math.sqrt(200.0))


def test_daly_caps_at_M_when_checkpoints_cost_more_than_2M():
    assert daly_interval(10.0, 4.0) == 4.0


def test_daly_optimum_maximises_daly_expected_ettr():
    # The higher-order estimate sits within 1% of the numerical optimum of eq. 13 for
    # delta << M (Daly's claim for delta < M/2).
    delta, R, M = 5 * MIN, 10 * MIN, 6 * H
    taus = [delta * (1.0 + i / 100.0) for i in range(1, 20000)]
    best = max(taus, key=lambda t: expected_ettr(t, delta, R, M))
    assert daly_interval(delta, M) == pytest.approx(best, rel=0.01)


def test_expected_wall_time_limits():
    # No failures (M -> inf): T_s (tau + delta) / tau.
    assert expected_wall_time(100.0, 10.0, 1.0, 5.0, 1e12) == pytest.approx(110.0, rel=1e-6)
    assert expected_ettr(10.0, 1.0, 5.0, 1e12) == pytest.approx(10 / 11, rel=1e-6)


def test_mttf_from_the_meta_node_rate():
    # Kokolis et al.: r_f = 6.5 per 1,000 node-days; 16,384 GPUs = 2,048 nodes -> 1.8 h,
    # 131,072 GPUs -> 0.23 h, 1,024 GPUs -> ~29 h.
    r_f = parse_rate("6.5 per 1000 node-days").per_s
    assert round(mttf_s(r_f, 2048) / H, 1) == 1.8
    assert round(mttf_s(r_f, 16384) / H, 2) == 0.23
    assert round(mttf_s(r_f, 128) / H) == 29


def test_llama3_interruption_rate_is_about_3_hours():
    # 419 unexpected interruptions in 54 days: 3.1 h between them.
    rate = parse_rate("419 per 54 days")
    assert rate.basis == "job"
    assert round(1 / rate.per_s / H, 1) == 3.1


@pytest.mark.parametrize("text, per_s, basis", [
    ("6.5 per 1000 node-days", 6.5 / 1000 / DAY, "node"),
    ("0.3/1000 gpu-days", 0.3 / 1000 / DAY, "gpu"),
    ("1 per 50000 link-hours", 1 / 50000 / H, "link"),
    ("2 per year", 2 / 365 / DAY, "job"),
    ("0 per day", 0.0, "job"),
])
def test_rates_carry_their_basis(text, per_s, basis):
    r = parse_rate(text)
    assert r.per_s == pytest.approx(per_s) and r.basis == basis


@pytest.mark.parametrize("bad", [6.5, "6.5", "-1 per day", -2, "6.5 per 1000 widget-days",
                                 "1 per 0 days"])
def test_bad_rates(bad):
    with pytest.raises(UnitError):
        parse_rate(bad)


def test_durations_take_days_and_refuse_bare_numbers():
    assert parse_duration("30 d") == 30 * DAY
    assert parse_duration("10 min") == 600.0
    for bad in (10, "10", "-5 s", "ten min"):
        with pytest.raises(UnitError):
            parse_duration(bad)

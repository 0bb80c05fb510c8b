"""Validation gates (validation/reliability/cases.yaml; full runs: report.md).

Fewer trials than the report, so the gates hold with room for the extra sampling noise.
"""

from __future__ import annotations

import pytest

from simulator.validation.reliability import checks as v

CASES = v.load_cases()


def test_daly_printed_optima():
    assert all(r["ok"] for r in v.daly_examples(CASES))


def test_simulation_matches_daly_expected_wall_time():
    rows = v.daly_simulation(CASES, trials=40, intervals=["20 min", "57 min"])
    for r in rows:
        assert r["ok"], r


def test_meta_rsc_ettr_at_60_and_5_minutes():
    # 16,384 GPUs, 6.5 node failures per 1,000 node-days, u0 = 5 min: E[ETTR] 0.70 and
    # 0.93 within 0.03.
    rows = v.meta_ettr(CASES, trials=12, sensitivity=False)
    assert [r["interval"] for r in rows] == ["60 min", "5 min"]
    for r in rows:
        assert r["ok"], r


def test_meta_rsc_mttf_projection_and_simulated():
    rows = v.meta_mttf(CASES, trials=12)
    assert all(r["ok"] for r in rows), rows
    assert rows[-1]["simulated_h"] == pytest.approx(1.8, abs=0.1)


def test_1024_gpu_jobs_fail_more_often_than_node_failures_explain():
    n = v.meta_1024_note(CASES, trials=12)
    assert round(n["predicted_h"]) == 29 and n["measured_h"] == 7.9
    assert n["extra_per_day"] == pytest.approx(24 / 7.9 - 24 / n["predicted_h"])
    assert n["simulated_with_extra_h"] == pytest.approx(7.9, rel=0.06)


def test_llama3_interruption_count():
    rows = v.llama3_interruptions(CASES, trials=12, effects=("interrupt",))
    assert rows[0]["ok"], rows[0]
    # The RSC-1 node rate would predict ~1.7x more interruptions than Llama 3 saw.
    assert rows[-1]["mean"] == pytest.approx(6.5e-3 * 2048 * 54)

"""`clustersim run` says what its step costs (issue 46): the same price and the same formula
as `compare` (simulator.compare.cost.step_cost), in the text, in --format json and in
report.html; a GPU the catalog has no price for says so in one line, never a silent 0."""

from __future__ import annotations

import json

import pytest

from test_cli import run_main

LORA = "llama2-70b-lora-mi300x"          # 8 x MI300X, global batch 8 of 8,192 tokens


def _run_json(capsys, *args: str) -> dict:
    rc, out, err = run_main(capsys, "run", LORA, "--format", "json", "-q", *args)
    assert rc == 0, err
    return json.loads(out)


def test_run_costs_the_step_as_compare_does_and_as_the_formula_says(capsys):
    run = _run_json(capsys)
    rc, out, err = run_main(capsys, "compare", LORA, "--strategies", "megatron",
                            "--no-scaling", "--no-capacity", "--format", "json", "-q")
    assert rc == 0, err
    cmp = json.loads(out)
    (row,) = cmp["rows"]
    # the same step (TP1 x DP8) at the same price: one path, one price
    assert run["iteration_time_s"] == pytest.approx(row["metrics"]["iteration_time_s"])
    assert run["price"] == cmp["price"]
    assert run["price"]["usd_per_gpu_hour"] == 6.00          # Oracle, 48.00 USD / 8 GPUs
    c = run["cost"]
    assert c["per_million_tokens_usd"] == pytest.approx(row["cost"]["per_million_tokens_usd"])
    assert c["per_iteration_usd"] == pytest.approx(row["cost"]["per_iteration_usd"])
    # price x GPUs x step / tokens: 6.00 USD/GPU-h x 8 GPUs x t s / 3600 s/h over a step of
    # 8 samples x 8,192 tokens, per million tokens
    t = run["iteration_time_s"]
    assert c["per_iteration_usd"] == pytest.approx(6.00 * 8 * t / 3600)
    assert c["per_million_tokens_usd"] == pytest.approx(6.00 * 8 * t / 3600 / (8 * 8192) * 1e6)
    assert c["usd_per_hour"] == pytest.approx(6.00 * 8) and c["gpus"] == 8
    assert 0.6 < c["per_million_tokens_usd"] < 0.8           # about 0.69 USD today


def test_run_text_says_the_cost_in_lines_a_manager_reads(capsys):
    rc, out, err = run_main(capsys, "run", LORA, "-q")
    assert rc == 0, err
    rows = {line.split()[0]: line for line in out.splitlines()
            if line and not line.startswith("#")}
    t = float(rows["iteration_time_s"].split()[1])
    assert f"{6.00 * 8 * t / 3600:.4g} USD (8 x 6.00 USD per GPU-hour)" in \
        rows["cost_per_step_usd"]
    assert f"{6.00 * 8 * t / 3600 / (8 * 8192) * 1e6:.4g} USD" in rows["cost_per_1m_tok_usd"]
    assert "48.00 USD (8 GPUs)" in rows["cluster_usd_per_hour"]
    (cost,) = [line for line in out.splitlines() if line.startswith("# cost:")]
    assert "8 x MI300X at 6.00 USD per GPU-hour" in cost
    assert "48.00 USD an hour for the whole cluster" in cost
    # the electricity of the energy model, the number the energy row prints
    elec = rows["elec_usd_per_1m_tok"].split()[1]
    assert f"electricity at the site adds {float(elec):.3g} USD per 1M tokens" in cost
    assert "# price: oci-bm-gpu-mi300x-8: Oracle Cloud" in out


def test_a_given_rate_prices_the_step_and_a_bad_instance_is_refused(capsys):
    run = _run_json(capsys, "--price-per-gpu-hour", "2.5")
    t = run["iteration_time_s"]
    assert run["price"]["source"] == "--price-per-gpu-hour"
    assert run["cost"]["per_million_tokens_usd"] == pytest.approx(
        2.5 * 8 * t / 3600 / (8 * 8192) * 1e6)
    rc, out, err = run_main(capsys, "run", LORA, "-q", "--instance", "no-such-entry")
    assert rc != 0 and "--instance" in err and "no-such-entry" in err
    assert "iteration_time_s" not in out                    # refused before simulating
    for bad in (["--price-per-gpu-hour", "-1"],
                ["--price-per-gpu-hour", "2.5", "--instance", "oci-bm-gpu-mi300x-8"]):
        rc, out, err = run_main(capsys, "run", LORA, "-q", *bad)
        assert rc != 0 and ("--price-per-gpu-hour" in err or "--instance" in err), bad
        assert "iteration_time_s" not in out


def test_a_gpu_without_a_price_says_so_in_one_line_never_zero(capsys):
    # MI350X: no list on-demand price found (prices.yaml's comment)
    rc, out, err = run_main(capsys, "run", LORA, "-q", "--set", "topology.params.gpu=MI350X")
    assert rc == 0, err
    said = [line for line in out.splitlines() if "no price in the catalog" in line]
    assert len(said) == 1 and "no price in the catalog for MI350X" in said[0]
    assert said[0].split()[0] == "cost" and "n/a" in said[0]
    assert "cost_per_step_usd" not in out and "# cost:" not in out
    run = _run_json(capsys, "--set", "topology.params.gpu=MI350X")
    assert run["cost"] is None and run["price"] is None
    assert run["cost_note"].startswith("no price in the catalog for MI350X")


def test_report_html_and_summary_json_say_what_the_step_costs(tmp_path, capsys):
    out_dir = tmp_path / "out"
    rc, out, err = run_main(capsys, "run", LORA, "-q", "--out", str(out_dir))
    assert rc == 0, err
    summary = json.loads((out_dir / "summary.json").read_text())
    assert summary["cost"] == _run_json(capsys)["cost"]          # what --format json says
    assert summary["price"]["usd_per_gpu_hour"] == 6.00
    page = (out_dir / "report.html").read_text()
    assert "Renting the 8 x MI300X at 6.00 USD per GPU-hour costs" in page
    assert "cost_per_1m_tok_usd" in page and "cluster_usd_per_hour" in page

"""AMD Instinct prices per GPU-hour (simulator/data/prices.yaml, issue 44): the catalog's AMD
entries, the MI300X LoRA scenario's cost per 1M tokens by the formula, and one fine-tuning
job compared across GPU vendors in one command (scenarios/studies/lora-across-vendors.yaml)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from simulator.compare.cost import load_price_file, resolve_price
from simulator.hardware import gpu_names, gpu_spec
from test_cli import run_main

# AMD GPUs of the catalog with no public list on-demand price found (prices.yaml's comment
# says so): they cost nothing unless a price is given.
UNPRICED_AMD = {"MI325X", "MI350X"}
REPO = Path(__file__).resolve().parents[1]


def test_amd_entries_load_with_oracle_list_prices():
    table = load_price_file()
    mi300x = table.instances[table.default_instance["MI300X"]]
    assert (mi300x.provider, mi300x.gpu, mi300x.gpus, mi300x.usd_per_hour) == \
        ("Oracle Cloud", "MI300X", 8, 48.00)
    assert "BM.GPU.MI300X.8" in mi300x.instance and "$6.00" in mi300x.source
    # Oracle lists 6.00 USD per MI300X-hour; the shape holds 8: 48.00 / 8 = 6.00
    assert resolve_price("MI300X").usd_per_gpu_hour == pytest.approx(48.00 / 8)
    mi355x = table.instances[table.default_instance["MI355X"]]
    assert (mi355x.provider, mi355x.gpu, mi355x.gpus, mi355x.usd_per_hour) == \
        ("Oracle Cloud", "MI355X", 1, 8.60)
    assert resolve_price("MI355X").usd_per_gpu_hour == pytest.approx(8.60 / 1)
    # Vultr lists 2.000 USD per MI325X-hour on-demand (Oracle lists no MI325X): in the
    # catalog by name only, not a default beside Oracle's MI300X (a neocloud's rate)
    mi325x = table.instances["vultr-mi325x-per-gpu"]
    assert (mi325x.provider, mi325x.gpu, mi325x.gpus, mi325x.usd_per_hour) == \
        ("Vultr", "MI325X", 1, 2.00)
    assert "vultr.com/pricing" in mi325x.source and mi325x.retrieved == "2026-07-31"
    assert resolve_price("MI325X", instance="vultr-mi325x-per-gpu").usd_per_gpu_hour == \
        pytest.approx(2.00 / 1)
    assert resolve_price("MI325X", topology="mi325x-8gpu") is None
    for gpu in UNPRICED_AMD:
        assert resolve_price(gpu) is None
        assert resolve_price(gpu, 3.0).usd_per_gpu_hour == 3.0     # a given rate still works


def test_every_amd_gpu_is_priced_or_named_unpriced():
    """A new AMD GPU in the catalog needs a sourced price or a place in UNPRICED_AMD."""
    amd = {g for g in gpu_names() if gpu_spec(g).family.startswith("cdna")}
    assert amd == {"MI300X", "MI325X", "MI350X", "MI355X"}
    priced = set(load_price_file().default_instance)
    assert amd - UNPRICED_AMD <= priced and not (UNPRICED_AMD & priced)


def test_mi300x_lora_cost_per_million_tokens_follows_the_formula(capsys):
    rc, out, err = run_main(capsys, "compare", "llama2-70b-lora-mi300x", "--strategies",
                            "megatron", "--no-scaling", "--no-capacity", "--format", "json",
                            "-q")
    assert rc == 0, err
    data = json.loads(out)
    assert data["price"]["usd_per_gpu_hour"] == 6.00
    assert data["price"]["label"].startswith("oci-bm-gpu-mi300x-8: Oracle Cloud")
    (row,) = data["rows"]
    tokens_per_s = row["metrics"]["tokens_per_s"]
    assert row["metrics"]["tokens_per_s"] == pytest.approx(8 * 8192 / row["metrics"]
                                                          ["iteration_time_s"])
    # the 8 GPUs cost 8 x 6.00 USD an hour = 8 x 6.00 / 3600 USD a second, in which the job
    # trains tokens_per_s tokens: USD per 1M tokens = 8 x 6.00 / 3600 / tokens_per_s x 1e6
    assert row["cost"]["per_million_tokens_usd"] == pytest.approx(
        8 * 6.00 / 3600 / tokens_per_s * 1e6)
    assert row["cost"]["per_iteration_usd"] == pytest.approx(
        8 * 6.00 * row["metrics"]["iteration_time_s"] / 3600)
    # what it comes to today (Megatron TP1 x DP8, 3.37 s a step): about 0.69 USD
    assert 0.6 < row["cost"]["per_million_tokens_usd"] < 0.8


def test_one_finetuning_job_across_vendors_in_one_command(tmp_path, capsys):
    out = tmp_path / "study"
    rc, stdout, err = run_main(capsys, "study", "lora-across-vendors", "--out", str(out),
                               "--workers", "1", "-q")
    assert rc == 0, err
    d = pd.read_parquet(out / "results.parquet").set_index("cluster.topology")
    assert list(d.index) == ["mi300x-8gpu", "mi355x-8gpu", "dgx-h100", "dgx-h200", "dgx-b200"]
    assert (d.strategy_status == "ok").all() and (d.gpus == 8).all()
    # each server in a layout that fits its memory (the zipped axes): none out of memory
    assert not d.oom.any()
    assert list(d["strategy.tensor_model_parallel_size"]) == [1, 1, 4, 1, 1]
    # each server at its own GPU's default price: Oracle's 6.00 and 8.60 USD per AMD
    # GPU-hour, AWS p5 55.04 / 8, p5en 63.296 / 8, p6-b200 113.9328 / 8 for NVIDIA
    rates = {"mi300x-8gpu": 48.00 / 8, "mi355x-8gpu": 8.60, "dgx-h100": 55.04 / 8,
             "dgx-h200": 63.296 / 8, "dgx-b200": 113.9328 / 8}
    for topology, rate in rates.items():
        r = d.loc[topology]
        assert r.usd_per_gpu_hour == pytest.approx(rate)
        assert "list on-demand" in r.price
        assert r.cost_per_million_tokens_usd == pytest.approx(
            8 * rate / 3600 / r.tokens_per_s * 1e6)
    assert "lowest cost per 1M tokens (USD)" in stdout
    # docs/amd.md's table is these rows
    page = (REPO / "docs" / "amd.md").read_text()
    for topology, r in d.iterrows():
        assert (f"| {r.usd_per_gpu_hour:.2f} | {r.iteration_time_s:.3f} | "
                f"{r.tokens_per_s:,.0f} | {r.cost_per_million_tokens_usd:.3f} |") in page, topology

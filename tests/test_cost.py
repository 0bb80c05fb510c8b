"""The cost model (simulator/compare/cost.py): the formula, comm-wait cost, budget conversions,
migration, the price catalog and bad input."""

from __future__ import annotations

from importlib import resources

import pytest
import yaml

from simulator.compare.cost import (Budget, Price, instance_price, load_price_file, migration_cost,
                            parse_count, resolve_price, training_cost)
from simulator.errors import ConfigError
from simulator.hardware import gpu_names

PRICE = Price(2.5, "test", "test")


def test_cost_per_iteration_and_comm_wait_follow_the_formula():
    # 16 GPUs at 2.5 USD/GPU-h for 1.8 s = 16 * 2.5 * 1.8 / 3600 USD; 0.45 s of it waiting
    c = training_cost(PRICE, 16, 1.8, 0.45, samples_per_iteration=64,
                      tokens_per_iteration=64 * 2048)
    assert c.per_iteration_usd == pytest.approx(16 * 2.5 * 1.8 / 3600)
    assert c.comm_wait_per_iteration_usd == pytest.approx(16 * 2.5 * 0.45 / 3600)
    assert c.comm_wait_share == pytest.approx(0.25)
    assert c.per_million_tokens_usd == pytest.approx(c.per_iteration_usd / (64 * 2048) * 1e6)
    assert c.per_thousand_samples_usd == pytest.approx(c.per_iteration_usd / 64 * 1e3)
    assert c.iterations is None and c.total_usd is None     # no budget, no totals


def test_token_budget_converts_to_iterations_pro_rata():
    tokens_per_iter = 256 * 4096
    budget = Budget("tokens", 1e12)
    c = training_cost(PRICE, 128, 1.7, 0.1, 256, tokens_per_iter, budget)
    n = 1e12 / tokens_per_iter                      # 953,674.3 iterations, not rounded up
    assert c.iterations == pytest.approx(n)
    assert c.gpu_hours == pytest.approx(128 * 1.7 * n / 3600)
    assert c.wall_hours == pytest.approx(1.7 * n / 3600)
    assert c.training_usd == pytest.approx(2.5 * 128 * 1.7 * n / 3600)
    assert c.comm_wait_usd == pytest.approx(2.5 * 128 * 0.1 * n / 3600)
    assert c.comm_wait_usd / c.training_usd == pytest.approx(0.1 / 1.7)
    assert c.total_usd == pytest.approx(c.training_usd)        # no migration


def test_epoch_and_iteration_budgets():
    c = training_cost(PRICE, 8, 0.5, 0.0, 2048, 0, Budget("epochs", 3, 1_281_167))
    assert c.iterations == pytest.approx(3 * 1_281_167 / 2048)
    assert c.per_million_tokens_usd is None                    # a CNN has no tokens
    c = training_cost(PRICE, 8, 0.5, 0.0, 2048, 0, Budget("iterations", 1000))
    assert c.training_usd == pytest.approx(1000 * 8 * 2.5 * 0.5 / 3600)


def test_token_budget_of_a_model_without_tokens_has_no_total():
    c = training_cost(PRICE, 8, 0.5, 0.1, 2048, 0, Budget("tokens", 1e9))
    assert c.iterations is None and c.training_usd is None and c.total_usd is None


def test_migration_is_added_once():
    mig = migration_cost(20, 900.0)
    assert mig == 20 * 900.0
    c = training_cost(PRICE, 8, 1.0, 0.2, 64, 64 * 1024, Budget("iterations", 100), mig)
    assert c.total_usd == pytest.approx(100 * 8 * 2.5 / 3600 + 18_000)
    assert migration_cost(0, None) == 0.0


@pytest.mark.parametrize("days, rate, match", [
    (-1, 100.0, "person-days"), (5, None, "--day-rate"), (5, -10.0, ">= 0 USD"),
    (float("nan"), 100.0, "person-days")])
def test_bad_migration_input(days, rate, match):
    with pytest.raises(ConfigError, match=match):
        migration_cost(days, rate)


@pytest.mark.parametrize("value", [0.0, -2.0, float("nan"), float("inf")])
def test_price_must_be_positive(value):
    with pytest.raises(ConfigError, match="--price-per-gpu-hour"):
        Price(value, "x", "x")


@pytest.mark.parametrize("kw, match", [
    (dict(gpus=0), "positive integer"), (dict(gpus=True), "positive integer"),
    (dict(iteration_time_s=0.0), "iteration time"), (dict(comm_wait_s=2.0), "comm wait"),
    (dict(comm_wait_s=-0.1), "comm wait"), (dict(samples_per_iteration=0), "positive")])
def test_impossible_cost_inputs(kw, match):
    args = dict(price=PRICE, gpus=8, iteration_time_s=1.0, comm_wait_s=0.1,
                samples_per_iteration=8, tokens_per_iteration=8)
    args.update(kw)
    with pytest.raises(ConfigError, match=match):
        training_cost(**args)


@pytest.mark.parametrize("text, value", [
    ("300B", 300e9), ("2T", 2e12), ("1.2M", 1.2e6), ("1e12", 1e12), ("64k", 64e3),
    ("5G", 5e9), (" 7 ", 7.0), (3, 3.0)])
def test_parse_count(text, value):
    assert parse_count(text, "--tokens") == pytest.approx(value)


@pytest.mark.parametrize("text", ["abc", "-5", "0", "1Q", "", "inf"])
def test_parse_count_rejects(text):
    with pytest.raises(ConfigError, match="--tokens"):
        parse_count(text, "--tokens")


@pytest.mark.parametrize("kw, match", [
    (dict(kind="epochs", amount=3), "--dataset-samples"),
    (dict(kind="tokens", amount=1e9, dataset_samples=10), "--dataset-samples"),
    (dict(kind="hours", amount=1), "budget kind"),
    (dict(kind="tokens", amount=-1), "positive")])
def test_bad_budget(kw, match):
    with pytest.raises(ConfigError, match=match):
        Budget(**kw)


# ------------------------------------------------------------------------ price catalog
def test_catalog_entries_are_sourced_list_prices_per_gpu():
    table = load_price_file()
    assert {"aws-p4d.24xlarge", "aws-p4de.24xlarge"} <= set(table.instances)
    known = set(gpu_names())
    for name, e in table.instances.items():
        p = instance_price(name, table)
        assert p.usd_per_gpu_hour == pytest.approx(e.usd_per_hour / e.gpus)
        assert e.gpu in known, f"{name}: {e.gpu} is not in the GPU catalog"
        assert e.source.strip() and len(e.retrieved) == 10
        assert "list on-demand" in p.label and e.retrieved in p.label


def test_default_price_follows_the_gpu_model():
    table = load_price_file()
    for gpu, name in table.default_instance.items():
        p = resolve_price(gpu)
        assert table.instances[name].gpu == gpu
        assert p.usd_per_gpu_hour == pytest.approx(
            table.instances[name].usd_per_hour / table.instances[name].gpus)
    assert resolve_price("H100-PCIE-80GB") is None   # no default: no cost (B200 has one since
    #                                                  issue 16's price audit)
    assert resolve_price("A100-SXM4-80GB", 1.25).usd_per_gpu_hour == 1.25
    assert resolve_price("A100-SXM4-80GB", instance="gcp-a2-ultragpu-8g").usd_per_gpu_hour \
        == pytest.approx(table.instances["gcp-a2-ultragpu-8g"].usd_per_hour / 8)


def test_price_selection_errors():
    with pytest.raises(ConfigError, match="known: aws-p4d"):
        resolve_price("A100-SXM4-80GB", instance="p3.2xlarge")
    with pytest.raises(ConfigError, match="not both"):
        resolve_price("A100-SXM4-80GB", 2.0, "aws-p4d.24xlarge")
    with pytest.raises(ConfigError, match="--price-per-gpu-hour"):
        resolve_price("A100-SXM4-80GB", -3.0)


def test_bad_price_file(tmp_path):
    data = yaml.safe_load((resources.files("simulator") / "data" / "prices.yaml").read_text())
    data["instances"]["aws-p4d.24xlarge"]["usd_per_hour"] = -1
    bad = tmp_path / "prices.yaml"
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"instances\.aws-p4d\.24xlarge\.usd_per_hour"):
        load_price_file(bad)
    data["instances"]["aws-p4d.24xlarge"]["usd_per_hour"] = 1.0
    data["default_instance"]["A100-SXM4-40GB"] = "nowhere"
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match="default_instance.A100-SXM4-40GB"):
        load_price_file(bad)

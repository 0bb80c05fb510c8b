"""`clustersim compare`: aliases, rows against independent runs, scaling, cost, rows that
cannot run, the CLI (formats, bad input, out-dir protection) and determinism."""

from __future__ import annotations

import dataclasses
import io
import json

import pandas as pd
import pytest

from simulator.capacity.ladder import build_ladder
from simulator.capacity.probe import spec_of
from simulator.capacity.search import search
from simulator.choices import NAMED_STRATEGIES, NamedStrategy
from simulator.cli import main
from simulator.compare.cost import Budget, Price
from simulator.compare.options import migration_plan, parse_strategies
from simulator.compare.report import render_table, to_csv, to_json
from simulator.compare.results import cheapest, excess_over_cheapest
from simulator.compare.runner import _cost_row, comm_bytes_per_gpu, compare, doubled
from simulator.errors import ConfigError
from simulator.pipeline import build_setup, run_setup
from simulator.scenario import load_scenario
from simulator.strategies import STRATEGIES, CommonConfig, Strategy

# Small and fast: GPT-2 small, 1 x 1024 tokens per GPU.
SMALL = ["model=gpt2-small", "training.seq_len=1024", "training.micro_batch=1"]
MULTI = ("llama2-7b-fsdp-128gpu", [*SMALL, "cluster.nodes=2"])     # 16 GPUs, 2 DGX nodes
ONE_NODE = ("quickstart", [*SMALL, "cluster.gpus=4"])              # 4 of one DGX's 8 GPUs
PRICE = Price(2.0, "test price", "test")
TF = {"tf-mirrored": "tf_mirrored", "tf-multiworker": "tf_multiworker", "tf-ps": "tf_ps",
      "tf-central": "tf_central_storage", "horovod": "horovod"}


def run_main(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out, err = capsys.readouterr()
    return (0 if exc.value.code is None else exc.value.code), out, err


def sets_args(sets: list[str]) -> list[str]:
    return [a for s in sets for a in ("--set", s)]


def independent(name: str, sets: list[str], strategy: str):
    """One iteration as `clustersim run --set strategy=...` would replay it."""
    scn = load_scenario(name, [*sets, f"strategy={strategy}"])
    return run_setup(build_setup(scn)).metrics


@pytest.fixture(scope="module")
def multi():
    scn = load_scenario(*MULTI)
    return compare(scn, parse_strategies("fsdp-full,fsdp-hybrid,ddp"), price=PRICE,
                   budget=Budget("tokens", 1e9), migration_days={"ddp": 3.0},
                   day_rate=500.0, capacity=False)


# ----------------------------------------------------------------------------- aliases
@pytest.mark.parametrize("key, name, sharding", [
    ("fsdp-full", "fsdp", "FULL_SHARD"), ("fsdp-grad-op", "fsdp", "SHARD_GRAD_OP"),
    ("fsdp-no-shard", "fsdp", "NO_SHARD"), ("fsdp-hybrid", "fsdp", "HYBRID_SHARD"),
    ("fsdp-hybrid-zero2", "fsdp", "_HYBRID_SHARD_ZERO2"), ("ddp", "ddp", None),
    *[(k, v, None) for k, v in TF.items()]])
def test_alias_names_a_registry_strategy(key, name, sharding):
    a = parse_strategies(key)[0]
    assert (a.key, a.strategy, a.sharding) == (key, name, sharding)


def test_other_spellings_and_order():
    got = parse_strategies(" FSDP_FULL, fsdp:HYBRID_SHARD,tf_central_storage,ddp,fsdp,ddp")
    assert [a.key for a in got] == ["fsdp-full", "fsdp-hybrid", "tf-central", "ddp"]


@pytest.mark.parametrize("text, match", [("fsdp-ful", "unknown strategy 'fsdp-ful'; valid: "
                                          "fsdp-full"), ("ddp,,fsdp-full", "empty strategy"),
                                         ("", "empty strategy")])
def test_bad_alias(text, match):
    with pytest.raises(ConfigError, match=match):
        parse_strategies(text)


@pytest.mark.parametrize("alias", sorted(TF))
def test_tf_alias_runs_once_registered(alias):
    name = parse_strategies(alias)[0].strategy
    if name not in STRATEGIES:
        pytest.skip(f"{name!r} is not registered in simulator/strategies yet (the "
                    f"TensorFlow strategies land separately); the alias maps to it already")
    cmp = compare(load_scenario(*ONE_NODE), parse_strategies(alias), price=PRICE,
                  scaling=False, capacity=False)
    row = cmp.rows[0]
    assert row.status in ("ok", "n/a")
    if row.ok:
        assert row.metrics.iteration_time_s > 0 and row.cost.per_iteration_usd > 0
        assert row.cost.gpus == cmp.cluster["gpus"] == 4    # the rented GPUs, busy or not
    else:
        assert row.reason


# ------------------------------------------------------------------------------- rows
@pytest.mark.parametrize("key, strategy", [
    ("fsdp-full", "{name: fsdp, sharding: FULL_SHARD}"),
    ("fsdp-hybrid", "{name: fsdp, sharding: HYBRID_SHARD}"), ("ddp", "{name: ddp}")])
def test_row_is_the_run_of_that_strategy(multi, key, strategy):
    row = next(r for r in multi.rows if r.alias.key == key)
    m = independent(*MULTI, strategy)
    assert row.ok and row.metrics.world_size == 16
    assert row.metrics.iteration_time_s == m.iteration_time_s
    assert row.metrics.peak_memory_gib == m.peak_memory_gib
    assert (row.metrics.comm_s, row.metrics.exposed_comm_s) == (m.comm_s, m.exposed_comm_s)


def test_scaling_is_weak_scaling_on_twice_the_nodes(multi):
    assert multi.doubling == "cluster.nodes 2 -> 4"
    sets = [*MULTI[1], "cluster.nodes=4"]
    for row, strategy in zip(multi.rows, ("{name: fsdp, sharding: FULL_SHARD}",
                                          "{name: fsdp, sharding: HYBRID_SHARD}",
                                          "{name: ddp}")):
        m2 = independent(MULTI[0], sets, strategy)
        assert row.scaling.gpus == 32
        assert row.scaling.efficiency == pytest.approx(
            m2.samples_per_s / (2 * row.metrics.samples_per_s))


def test_doubling_uses_spare_gpus_of_the_topology():
    scn = load_scenario(*ONE_NODE)
    G = build_setup(scn).cluster.G
    scn2, how = doubled(scn, 4, G)
    assert scn2.cluster.gpus == 8 and how.startswith("cluster.gpus 4 -> 8")


def test_single_server_cannot_double_and_says_why():
    cmp = compare(load_scenario("quickstart", SMALL), parse_strategies("ddp"), price=PRICE,
                  capacity=False)
    assert cmp.doubling.startswith("cannot double the GPUs") and "single server" in cmp.doubling
    assert cmp.rows[0].ok and cmp.rows[0].scaling.efficiency is None
    assert cmp.rows[0].scaling.reason == cmp.doubling


def test_cost_of_each_row_follows_the_formula(multi):
    for row in multi.rows:
        m, c = row.metrics, row.cost
        assert c.per_iteration_usd == pytest.approx(2.0 * 16 * m.iteration_time_s / 3600)
        assert c.comm_wait_per_iteration_usd == pytest.approx(
            2.0 * 16 * (m.exposed_comm_s + m.wait_s) / 3600)
        assert row.global_batch == 16                             # 1 sample per GPU
        assert c.iterations == pytest.approx(1e9 / (16 * 1024))
        assert c.migration_usd == (3 * 500.0 if row.alias.key == "ddp" else 0.0)
        assert c.total_usd == pytest.approx(c.training_usd + c.migration_usd)


def test_comm_wait_is_exposed_comm_plus_wait(multi):
    row = dataclasses.replace(multi.rows[0])
    row.metrics = dataclasses.replace(row.metrics, exposed_comm_s=0.001, wait_s=0.002)
    _cost_row(row, PRICE, None, None, 16)
    assert row.cost.comm_wait_per_iteration_usd == pytest.approx(2.0 * 16 * 0.003 / 3600)
    assert row.cost.comm_wait_share == pytest.approx(0.003 / row.metrics.iteration_time_s)


def test_cheapest_and_waste(multi):
    best = cheapest(multi.rows)
    totals = {r.alias.key: r.cost.total_usd for r in multi.rows if not r.metrics.oom}
    assert best.alias.key == min(totals, key=totals.get)
    for r in multi.rows:
        assert excess_over_cheapest(r, best) == pytest.approx(
            1 - totals[best.alias.key] / r.cost.total_usd)
    oom = dataclasses.replace(multi.rows[0])
    oom.metrics = dataclasses.replace(oom.metrics, oom=True)
    assert excess_over_cheapest(oom, best) is None and cheapest([oom]) is None


def test_comm_bytes_count_ring_traffic():
    for strategy, factor in (("{name: ddp}", lambda n: 2 * (n - 1) / n),
                             ("{name: fsdp, sharding: FULL_SHARD}", lambda n: (n - 1) / n)):
        trace = build_setup(load_scenario(*ONE_NODE[:1], [*ONE_NODE[1],
                                                          f"strategy={strategy}"])).trace
        ops = [op for op in trace.classes[0].ops if op.kind == "collective"]
        assert ops and {trace.communicators[op.comm].size for op in ops} == {4}
        assert comm_bytes_per_gpu(trace) == pytest.approx(
            sum(op.size_bytes for op in ops) * factor(4))


def test_rows_that_cannot_run_are_reported_not_raised(monkeypatch):
    def one_host_only(layers, cfg, world, **meta):
        if world.world_size > world.gpus_per_node:
            raise ConfigError("runs on one host only", field="strategy.name")
        raise AssertionError("not reached in this test")
    monkeypatch.setitem(STRATEGIES, "one_host", Strategy("one_host", "test", CommonConfig,
                                                         one_host_only))
    scn = load_scenario(MULTI[0], [*MULTI[1], "strategy.backward_prefetch=BOGUS"])
    aliases = [NamedStrategy("one-host", "one_host", None, "pytorch", "test"),
               NamedStrategy("ghost", "no_such_strategy", None, "pytorch", "test"),
               *parse_strategies("fsdp-full,ddp")]
    cmp = compare(scn, aliases, price=PRICE, scaling=False, capacity=False)
    rows = {r.alias.key: r for r in cmp.rows}
    assert rows["one-host"].status == "n/a" and "one host only" in rows["one-host"].reason
    assert rows["ghost"].status == "n/a" and "not registered" in rows["ghost"].reason
    assert rows["fsdp-full"].status == "n/a" and "backward_prefetch" in rows["fsdp-full"].reason
    assert rows["ddp"].ok and rows["ddp"].cost is not None     # FSDP-only keys do not apply
    table = render_table(cmp)
    assert "one-host: n/a: " in table and "ghost: n/a: " in table
    assert len(pd.read_csv(io.StringIO(to_csv(cmp)))) == 4


def test_largest_fit_is_capacity_search():
    scn = load_scenario("quickstart", [*SMALL, "cluster.gpus=2"])
    cmp = compare(scn, parse_strategies("fsdp-full"), price=PRICE, scaling=False)
    ladder = build_ladder("gpt", min_seq_len=1024)
    want = search(scn, spec_of(NAMED_STRATEGIES["fsdp-full"]), ladder).largest
    assert cmp.rows[0].largest_fit["model"] == want.rung.model.name
    assert cmp.rows[0].largest_fit["params"] == want.rung.params


def test_no_price_means_no_cost():
    scn = load_scenario("quickstart", [*SMALL, "cluster.topology=hgx-a100-pcie"])
    cmp = compare(scn, parse_strategies("ddp"), price=None, scaling=False, capacity=False)
    assert cmp.rows[0].ok and cmp.rows[0].cost is None
    assert "no default price for A100-PCIE-40GB" in render_table(cmp)


def test_deterministic():
    a, b = (to_json(compare(load_scenario(*ONE_NODE), parse_strategies("fsdp-full,ddp"),
                            price=PRICE, budget=Budget("iterations", 10), scaling=False,
                            capacity=False)) for _ in range(2))
    assert a == b


# --------------------------------------------------------------------------------- CLI
def test_migration_plan_charges_the_other_framework():
    everything = parse_strategies(",".join(NAMED_STRATEGIES))
    plan = migration_plan(["30"], everything, "pytorch")
    assert plan == {k: 30.0 for k in TF}
    assert migration_plan(["30", "tf-ps=5", "ddp=1"], everything, "pytorch")["tf-ps"] == 5.0
    assert migration_plan(["tf-ps=5", "30"], everything, "pytorch")["tf-ps"] == 5.0
    assert migration_plan(["fsdp_full=2"], everything, "pytorch") == {"fsdp-full": 2.0}
    for bad, match in ((["-1"], "DAYS >= 0"), (["x=1"], "unknown strategy"),
                       (["ten"], "DAYS >= 0")):
        with pytest.raises(ConfigError, match=match):
            migration_plan(bad, everything, "pytorch")
    with pytest.raises(ConfigError, match="STRATEGY=DAYS"):
        migration_plan(["3"], everything, None)


FAST = ["--strategies", "fsdp-full,ddp", "--no-capacity", "--no-scaling",
        "--price-per-gpu-hour", "2"]


@pytest.mark.parametrize("fmt", ["table", "csv", "json"])
def test_cli_formats(capsys, fmt):
    rc, out, err = run_main(capsys, "compare", MULTI[0], *sets_args(MULTI[1]), *FAST,
                            "--format", fmt, "--tokens", "1B")
    assert rc == 0, err
    assert "compare: iteration 1/2: fsdp-full on 16 GPUs" in err        # progress
    if fmt == "table":
        assert out.startswith("# compare llama2-7b-fsdp-128gpu: gpt2-small on 16 x")
        assert "cost at 2.0000 USD per GPU-hour" in out and "waste %" in out
    elif fmt == "csv":
        df = pd.read_csv(io.StringIO(out))
        assert list(df.strategy) == ["fsdp-full", "ddp"]
        assert df.per_iteration_usd.tolist() == pytest.approx(
            (2.0 * 16 * df.iteration_time_s / 3600).tolist())
        assert df.cheapest.sum() == 1
    else:
        data = json.loads(out)
        assert [r["strategy"] for r in data["rows"]] == ["fsdp-full", "ddp"]
        assert data["budget"] == {"kind": "tokens", "amount": 1e9, "dataset_samples": None}
        assert data["cheapest"] in ("fsdp-full", "ddp")


def test_cli_quiet(capsys):
    rc, _, err = run_main(capsys, "compare", *ONE_NODE[:1], *sets_args(ONE_NODE[1]), *FAST,
                          "-q")
    assert rc == 0 and err == ""


@pytest.mark.parametrize("args, match", [
    (["--strategies", "fsdp-ful"], "unknown strategy 'fsdp-ful'"),
    (["--price-per-gpu-hour", "-1"], "--price-per-gpu-hour: must be a positive number"),
    (["--price-per-gpu-hour", "0"], "--price-per-gpu-hour: must be a positive number"),
    (["--set", "cluster.gpus=0"], "cluster.gpus"),
    (["--set", "cluster.nodes=0"], "cluster.nodes"),
    (["--epochs", "2"], "--dataset-samples"),
    (["--tokens", "1T", "--iterations", "5"], "give one budget"),
    (["--tokens", "lots"], "--tokens: expected a positive count"),
    (["--migration-days", "ddp=5"], "--day-rate"),
    (["--migration-days", "ddp=-5", "--day-rate", "100"], "--migration-days"),
    (["--day-rate", "-100"], "--day-rate: must be >= 0"),
    (["--instance", "p3.2xlarge"], "--instance: no price for 'p3.2xlarge'"),
    (["--format", "xml"], "'xml' is not one of"),
])
def test_cli_bad_input_is_one_line(capsys, args, match):
    rc, out, err = run_main(capsys, "compare", "llama2-7b-fsdp-128gpu", "--no-capacity", *args)
    assert rc == 2 and out == ""
    assert err.startswith("clustersim: error: ") and err.count("\n") == 1, err
    assert match in err


def test_out_dir_is_written_and_never_overwrites_user_files(capsys, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    args = ["compare", *ONE_NODE[:1], *sets_args(ONE_NODE[1]), *FAST, "-q"]
    rc, out, err = run_main(capsys, *args, "--out", str(mine))
    assert rc == 2 and "not empty and was not written by clustersim" in err
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
    assert (mine / "notes.txt").read_text() == "keep me"
    out_dir = tmp_path / "new"
    for _ in range(2):                                  # a folder we wrote may be reused
        rc, out, err = run_main(capsys, *args, "--out", str(out_dir))
        assert rc == 0, err
    names = {"compare.csv", "compare.json", "iteration_time.png", "memory.png", "cost.png"}
    assert names <= {p.name for p in out_dir.iterdir()}
    for png in ("iteration_time.png", "memory.png", "cost.png"):
        assert (out_dir / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(pd.read_csv(out_dir / "compare.csv")) == 2
    assert json.loads((out_dir / "compare.json").read_text())["scenario"] == "quickstart"


def test_the_report_pages_table_heads_every_cell(multi):
    # the text table and report.html's table share perf_cells: one head per cell
    from simulator.compare.page import PERF_HEAD
    from simulator.compare.report import perf_cells, records
    for rec in records(multi):
        if rec["status"] == "ok":
            assert len(perf_cells(rec)) == len(PERF_HEAD)
            assert rec["forward_gpu_s_per_sample"] > 0

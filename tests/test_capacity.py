"""`clustersim capacity`: size ladders, the bisection, memory verdicts, CLI and errors."""

from __future__ import annotations

import json
import math

import pytest

from simulator.capacity.ladder import CEIL_PARAMS, STEP, build_ladder
from simulator.capacity.probe import (BASE_MODEL, GIB, Prober, StrategySpec,
                                      parse_strategy_specs, strategy_dict)
from simulator.capacity.report import capacity
from simulator.capacity.search import largest_fitting, search
from simulator.choices import FAMILIES
from simulator.cli import main
from simulator.errors import ConfigError
from simulator.models import layer_costs, load_model, params_total, parse_model
from simulator.pipeline import build_setup, run_setup
from simulator.scenario import load_scenario

# quickstart with micro_batch 1 and 2048 tokens: fast, and the folk claim's micro-batch
FAST = ["training.micro_batch=1", "training.seq_len=2048"]
FAST_SETS = [arg for s in FAST for arg in ("--set", s)]


def run_main(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out, err = capsys.readouterr()
    return (0 if exc.value.code is None else exc.value.code), out, err


@pytest.fixture(scope="module")
def fast_scn():
    return load_scenario("quickstart", FAST)


@pytest.fixture(scope="module")
def fast_report(fast_scn):
    return capacity(fast_scn, "llama", "ddp,fsdp:FULL_SHARD")


# ----------------------------------------------------------------------------- ladder
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_ladder_is_ordered_and_spaced(family):
    ladder = build_ladder(family)
    params = [r.params for r in ladder]
    assert params == sorted(params) and len(set(params)) == len(params)
    assert {r.model.name for r in ladder if r.kind == "catalog"} == set(FAMILIES[family])
    assert ladder[-1].kind == "extrapolated"        # past the largest catalog model ...
    assert 1e12 <= params[-1] <= CEIL_PARAMS * 1.1   # ... up to about 1.2T (issue 47)
    assert 0.85e9 <= params[0] <= 1.1e9            # extrapolated down to about 1B
    steps = [b / a - 1 for a, b in zip(params, params[1:])]
    assert max(steps) <= 0.3                        # resolution ~10-25 % in parameters
    assert sum(steps) / len(steps) == pytest.approx(STEP, abs=0.03)   # the target spacing


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_generated_rungs_are_valid_models(family):
    for r in build_ladder(family):
        m = r.model
        assert params_total(m) == r.params
        if r.kind == "catalog":
            assert m == load_model(m.name)
            continue
        assert r.kind in ("interpolated", "extrapolated") and r.kind in m.source
        assert m.name.startswith(("llama-like-", "gpt3-like-"))
        assert m.family == family and m.hidden % 128 == 0 and m.heads == m.hidden // 128
        if m.hidden > 8192:                  # tp and pp up to 8 split every large rung
            assert m.heads % 8 == 0 and m.layers % 8 == 0
        assert m.heads % m.kv_heads == 0
        # round-trips through the model-file checker
        data = {k: getattr(m, k) for k in ("name", "family", "source", "layers", "hidden",
                                           "heads", "kv_heads", "ffn_hidden", "vocab",
                                           "max_seq_len", "mlp", "norm", "tied_embeddings",
                                           "bias", "position_embedding")}
        assert parse_model(data, "<test>") == m
        assert layer_costs(m, 1, 128, "bf16")
        if family == "llama":
            assert m.ffn_hidden % 256 == 0 and 2.6 <= m.ffn_hidden / m.hidden <= 3.6
        else:
            assert m.ffn_hidden == 4 * m.hidden


def test_ladder_follows_aspect_ratio():
    """Between two anchors, layers and hidden both grow (geometric path)."""
    ladder = build_ladder("llama")
    names = [r.model.name for r in ladder]
    a, b = names.index("llama-2-7b"), names.index("llama-2-13b")
    between = [r.model for r in ladder[a:b + 1]]
    assert [m.layers for m in between] == sorted(m.layers for m in between)
    assert [m.hidden for m in between] == sorted(m.hidden for m in between)
    gqa = [r.model for r in ladder if r.model.kv_heads < r.model.heads]
    assert min(m.layers for m in gqa) == 48        # GQA only from llama-2-34b up


def test_learned_positions_extended_for_long_sequences():
    ladder = build_ladder("gpt", min_seq_len=4096)
    assert all(r.model.max_seq_len == 4096 for r in ladder)
    with pytest.raises(ConfigError, match="--family"):
        build_ladder("bert")


# ------------------------------------------------------------------------------ search
@pytest.mark.parametrize("n", [1, 2, 7, 34])
def test_bisection_finds_the_boundary(n):
    for boundary in range(-1, n):
        calls = []

        def fits(i):
            calls.append(i)
            return i <= boundary

        assert largest_fitting(n, fits) == boundary
        assert len(calls) <= math.ceil(math.log2(n + 1))
        assert all(0 <= i < n for i in calls)
    assert largest_fitting(0, lambda i: True) == -1


def test_ddp_fits_less_than_fsdp(fast_report):
    ddp, fsdp = fast_report.results
    assert (ddp.spec.label, fsdp.spec.label) == ("ddp", "fsdp:FULL_SHARD")
    for r in (ddp, fsdp):
        assert r.largest is not None and r.first_oom is not None
        assert r.largest.fits and r.largest.peak_gib <= 80
        assert not r.first_oom.fits and r.first_oom.peak_gib > 80 and r.first_oom.oom_at
        assert r.largest.iteration_time_s > 0 and r.largest.tokens_per_s_per_gpu > 0
        # adjacent rungs: the boundary is at the ladder's resolution
        assert r.first_oom.rung.params / r.largest.rung.params < 1.25
    assert ddp.largest.rung.params < 7e9 < fsdp.largest.rung.params
    assert 3 * ddp.largest.rung.params < fsdp.largest.rung.params
    assert ddp.replays <= 6 and fsdp.replays <= 6


def test_sixteen_bytes_per_param_never_fits_ddp(fast_scn, fast_report):
    prober = Prober(fast_scn, parse_strategy_specs("ddp")[0])
    cap = prober.base.capacity_bytes
    assert cap == 84990623744          # what CUDA reports on an A100-SXM4-80GB
    too_big = [r for r in build_ladder("llama") if 16 * r.params > cap]
    assert too_big[0].params < 7e9 and too_big[0].model.name != "llama-2-7b"
    for rung in (too_big[0], too_big[-1]):
        p = prober.probe(rung)
        assert not p.fits and not p.replayed and p.oom_at.startswith("static memory")
        assert p.static_gib == pytest.approx(16 * rung.params / GIB)
    # the fast path agrees with the engine's own verdict
    res = run_setup(prober.setup_for(too_big[0].model))
    assert res.metrics.oom and res.metrics.oom_at == {"all": "static memory"}
    assert 16 * fast_report.results[0].largest.rung.params < cap


def test_foreach_optimizer_temporary_can_decide_the_fit(fast_scn):
    """A DDP rung whose 16 B/param static state fits but not 20 B/param: PyTorch's foreach
    AdamW holds a 4 B/param temporary at the step, so the run goes out of memory at the
    optimizer; with fused=True it fits."""
    ladder = build_ladder("llama")
    cap = 84990623744                  # what CUDA reports on an A100-SXM4-80GB
    rung = next(r for r in ladder if 16 * r.params < 0.9 * cap and 20 * r.params > cap)
    verdicts = {}
    for impl in ("foreach", "fused"):
        scn = fast_scn.model_copy(update={"strategy": {"name": "ddp", "optimizer_impl": impl}})
        m = run_setup(Prober(scn, parse_strategy_specs("ddp")[0]).setup_for(rung.model)).metrics
        verdicts[impl] = (m.oom, m.oom_at)
    assert verdicts["foreach"][0] and "optimizer" in verdicts["foreach"][1]["all"]
    assert not verdicts["fused"][0]


def test_prober_trace_matches_pipeline(fast_scn):
    """Rungs' traces are built as pipeline.build_setup builds them."""
    spec = parse_strategy_specs("fsdp:SHARD_GRAD_OP")[0]
    prober = Prober(fast_scn, spec)
    ours = prober.setup_for(load_model("llama-2-13b")).trace
    scn = prober.scn.model_copy(update={"model": "llama-2-13b"})
    theirs = build_setup(scn).trace
    assert ours.meta == theirs.meta
    assert [len(c.ops) for c in ours.classes] == [len(c.ops) for c in theirs.classes]
    assert prober.scn.model == BASE_MODEL


def test_strategy_dict_keeps_only_what_applies(fast_scn):
    scn = fast_scn.model_copy(update={"strategy": {
        "name": "fsdp", "sharding": "FULL_SHARD", "backward_prefetch": "BACKWARD_POST",
        "activation_checkpointing": True}})
    ddp, sgo = parse_strategy_specs("ddp,fsdp:SHARD_GRAD_OP")
    assert strategy_dict(scn, ddp) == {"name": "ddp", "activation_checkpointing": True}
    assert strategy_dict(scn, sgo) == {"name": "fsdp", "sharding": "SHARD_GRAD_OP",
                                       "backward_prefetch": "BACKWARD_POST",
                                       "activation_checkpointing": True}
    assert [s.label for s in parse_strategy_specs("fsdp, ddp ,fsdp:full_shard")] == \
        ["fsdp:FULL_SHARD", "ddp"]
    # the optimizer implementation carries between PyTorch strategies, not to TensorFlow's
    scn = fast_scn.model_copy(update={"strategy": {"name": "fsdp", "optimizer_impl": "fused"}})
    assert strategy_dict(scn, ddp)["optimizer_impl"] == "fused"
    assert "optimizer_impl" not in strategy_dict(scn, StrategySpec("tf", "tf_mirrored", None))


def test_search_without_replay_when_nothing_fits(fast_scn):
    """When no rung fits on static memory alone, the answer comes without any replay."""
    scn = fast_scn.model_copy(update={"cluster": fast_scn.cluster.model_copy(
        update={"gpus": 1})})
    ladder = build_ladder("llama")[-3:]        # 48B..69B: 16 B/param >> 80 GiB
    r = search(scn, parse_strategy_specs("ddp")[0], ladder)
    assert r.largest is None and r.first_oom.rung == ladder[0] and r.replays == 0


# ---------------------------------------------------------------------------------- CLI
def test_cli_table(capsys):
    code, out, err = run_main(capsys, "capacity", *FAST_SETS, "--strategies",
                              "ddp,fsdp:FULL_SHARD")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("# capacity of 8 x A100-SXM4-80GB")
    assert "micro_batch 1, seq_len 2048" in out and "activation checkpointing off" in out
    rows = {line.split()[0]: line.split() for line in lines
            if line.split() and line.split()[0] in ("ddp", "fsdp:FULL_SHARD")}
    assert set(rows) == {"ddp", "fsdp:FULL_SHARD"}
    assert rows["ddp"][1].startswith("llama-") and rows["ddp"][2].endswith("B")
    verdict = [line for line in lines if line.startswith("folk claim")]
    assert len(verdict) == 1
    assert "micro_batch 1" in verdict[0] and "activation checkpointing off" in verdict[0]
    assert "DDP" in verdict[0] and "FSDP FULL_SHARD" in verdict[0]


def test_cli_json(capsys, fast_report):
    code, out, err = run_main(capsys, "capacity", *FAST_SETS, "--strategies",
                              "ddp,fsdp:FULL_SHARD", "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    assert data["family"] == "llama" and data["cluster"]["gpus"] == 8
    assert data["settings"]["micro_batch"] == 1 and data["settings"]["seq_len"] == 2048
    assert [r["strategy"] for r in data["results"]] == ["ddp", "fsdp:FULL_SHARD"]
    for r, ours in zip(data["results"], fast_report.results):
        assert r["largest_fit"]["model"] == ours.largest.rung.model.name
        assert r["first_no_fit"]["fits"] is False and r["first_no_fit"]["oom_at"]
        assert r["largest_fit"]["peak_memory_gib"] <= 80
    claim = data["folk_claim"]
    assert claim["checked"] and claim["micro_batch"] == 1
    assert claim["results"]["ddp"]["verdict"] == "optimistic"     # 7B x 16 B > 80 GiB
    assert claim["results"]["ddp"]["largest_fit"]["model"] == \
        data["results"][0]["largest_fit"]["model"]                  # reused at micro_batch 1


@pytest.mark.parametrize("args, needle", [
    (["--family", "bert"], "--family"),
    (["--strategies", "ddp,zero3"], "unknown strategy 'zero3'"),
    (["--strategies", "fsdp:FOO"], "unknown FSDP sharding 'FOO'"),
    (["--strategies", "ddp:FULL_SHARD"], "ddp takes no sharding"),
    (["--strategies", "ddp,,fsdp"], "empty strategy"),
    (["--set", "cluster.topology=dgx-a100-superpod", "--set", "cluster.nodes=2",
      "--set", "cluster.gpus=12", "--strategies", "fsdp:HYBRID_SHARD"],
     "gpus_per_node 8 does not divide the world size 12"),
    (["no-such-scenario"], "no scenario file or shipped scenario named 'no-such-scenario'"),
    (["--set", "strategy.bogus=1"], "strategy.bogus: unknown key"),
])
def test_cli_errors_are_one_line(capsys, args, needle):
    code, out, err = run_main(capsys, "capacity", *args)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("clustersim: error: ")
    assert needle in err

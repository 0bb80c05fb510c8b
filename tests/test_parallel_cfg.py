"""Configs people already have: the torchtitan, DeepSpeed and Megatron readers, their
merge over a scenario (`run --config`), and the torchtitan / deepspeed strategies."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.cli.configfile import grad_accum, scenario_with_config
from simulator.strategies.frameworks.files import read_config
from simulator.errors import ConfigError
from simulator.models import model_names
from simulator.strategies import World, parse_strategy
from test_cli import run_main

CONFIGS = Path(__file__).resolve().parents[1] / "scenarios" / "configs"
# what an argument file without --cross-entropy-loss-fusion / --cross-entropy-fusion-impl
# runs: Megatron-LM's defaults (tests/test_megatron_spellings.py)
MEGATRON_LM_LOSS = {"cross_entropy_loss_fusion": False, "cross_entropy_fusion_impl": "native"}


def write(tmp_path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# ------------------------------------------------------------------------- torchtitan
def test_torchtitan_llama3_70b_as_torchtitan_ships_it():
    p = read_config(CONFIGS / "llama3_70b.toml")
    assert p.framework == "torchtitan"
    assert p.strategy["parallelism"] == {
        "data_parallel_replicate_degree": 1, "data_parallel_shard_degree": -1,
        "tensor_parallel_degree": 8, "pipeline_parallel_degree": 1,
        "context_parallel_degree": 1}
    assert p.strategy["activation_checkpoint"] == {"mode": "full"}
    assert p.strategy["optimizer"] == "adam"
    assert p.training == {"micro_batch": 8, "seq_len": 8192, "compile": False}
    assert {"parallelism.tensor_parallel_degree", "training.seq_len"} <= set(p.used)
    assert {"job.dump_folder", "training.steps"} <= set(p.ignored)
    # its [float8] options with no float8 converter: listed, float8 being off
    assert "float8.filter_fqns (float8 is off)" in p.ignored
    assert {"compile.enable", "compile.components"} <= set(p.used)
    if "llama-3-70b" in model_names():
        assert p.model == "llama-3-70b"
    else:
        assert p.model is None and "llama-3-70b" in p.model_note
        assert "model.name" in p.ignored


def test_torchtitan_pipeline_micro_batches_and_global_batch(tmp_path):
    # pp 2 x tp 2 on quickstart's 8 GPUs leaves dp 2; local batch 8 in micro-batches of 2
    # is 4 micro-batches, and global 32 = 8 x 2 ranks x 2 accumulation steps: 4 x 2 = 8.
    path = write(tmp_path, "job.toml", """
[parallelism]
tensor_parallel_degree = 2
pipeline_parallel_degree = 2
pipeline_parallel_microbatch_size = 2
[training]
local_batch_size = 8
global_batch_size = 32
seq_len = 1024
""")
    pieces = read_config(path)
    assert pieces.training["micro_batch"] == 2 and pieces.local_batch == 8
    scn = scenario_with_config("quickstart", pieces, [])
    assert scn.training.micro_batch == 2 and scn.training.grad_accum == (8 // 2) * (32 // (8 * 2))
    assert grad_accum(pieces, 2, 2) == 8        # micro-batches of 2 over dp 2


def test_set_wins_over_the_config(tmp_path):
    path = write(tmp_path, "job.toml", "[training]\nlocal_batch_size = 4\nseq_len = 512\n")
    scn = scenario_with_config("quickstart", read_config(path),
                               ["training.micro_batch=1", "training.grad_accum=3"])
    assert scn.training.micro_batch == 1 and scn.training.grad_accum == 3
    assert scn.training.seq_len == 512 and scn.strategy["name"] == "torchtitan"


# -------------------------------------------------------------------------- deepspeed
def test_deepspeed_zero3_json():
    p = read_config(CONFIGS / "ds_zero3.json")
    z = p.strategy["zero_optimization"]
    assert z["stage"] == 3 and z["reduce_bucket_size"] == 5e8 and z["overlap_comm"] is True
    assert p.training == {"micro_batch": 2, "grad_accum": 2, "precision": "bf16"}
    assert p.global_batch == 512
    assert "zero_optimization.sub_group_size" in p.ignored
    assert "optimizer.params.lr" in p.ignored
    # 512 = 2 x 2 x 128 data-parallel ranks: holds on 128 GPUs, not on quickstart's 8
    scn = scenario_with_config("llama2-7b-fsdp-128gpu", p, [])
    assert scn.training.grad_accum == 2
    with pytest.raises(ConfigError) as exc:
        scenario_with_config("quickstart", p, [])
    assert exc.value.field == "train_batch_size" and "ds_zero3.json" in str(exc.value)


def test_deepspeed_auto_values_are_left_to_the_scenario(tmp_path):
    path = write(tmp_path, "ds.json", '{"train_micro_batch_size_per_gpu": "auto", '
                 '"zero_optimization": {"stage": 2, "reduce_bucket_size": "auto"}}')
    p = read_config(path)
    assert "micro_batch" not in p.training
    assert "train_micro_batch_size_per_gpu (auto)" in p.ignored
    assert p.strategy["zero_optimization"] == {"stage": 2}


# --------------------------------------------------------------------------- megatron
def test_megatron_gpt3_175b_args():
    p = read_config(CONFIGS / "gpt3_175b.args")
    s = p.strategy
    assert s["tensor_model_parallel_size"] == 8 and s["pipeline_model_parallel_size"] == 16
    # 96 layers / (16 stages x 3 layers per virtual stage) = 2 virtual stages
    assert s["virtual_pipeline_model_parallel_size"] == 96 // (16 * 3)
    assert s["sequence_parallel"] is True and s["use_distributed_optimizer"] is True
    assert s["recompute_granularity"] == "selective"
    assert p.training == {"seq_len": 2048, "micro_batch": 1, "precision": "bf16",
                          "flash_attention": True}
    assert p.global_batch == 1536 and p.model == "gpt3-175b"
    assert "--lr" in p.ignored and "--data-path" in p.ignored
    assert any(i.startswith("torchrun --nproc_per_node 8 pretrain_gpt.py") for i in p.ignored)


def test_megatron_one_line_equals_and_quotes(tmp_path):
    path = write(tmp_path, "a.sh", "--tensor-model-parallel-size=4 --micro-batch-size 2 "
                 "--recompute-activations --data-path '1 a b' # comment --bf16\n")
    p = read_config(path)
    assert p.strategy == {"name": "megatron", "tensor_model_parallel_size": 4,
                          "recompute_granularity": "selective", **MEGATRON_LM_LOSS}
    assert p.training == {"micro_batch": 2} and "--data-path" in p.ignored


def test_megatron_sizes_naming_no_catalog_model_are_ignored(tmp_path):
    path = write(tmp_path, "a.args", "--num-layers 7 --hidden-size 640 --num-attention-heads 5")
    p = read_config(path)
    assert p.model is None and "no catalog model" in p.model_note
    assert {"--num-layers", "--hidden-size", "--num-attention-heads"} <= set(p.ignored)


@pytest.mark.parametrize("text, field, reason", [
    ("--tensor-model-parallel-size eight", "--tensor-model-parallel-size", "whole number"),
    ("--tensor-model-parallel-size 2 --tensor-model-parallel-size 4",
     "--tensor-model-parallel-size", "given twice"),
    ("--sequence-parallel yes", "--sequence-parallel", "takes no value"),
    ("--bf16 --fp16", "--fp16", "both"),
])
def test_megatron_bad_arguments_name_the_flag(tmp_path, text, field, reason):
    with pytest.raises(ConfigError) as exc:
        read_config(write(tmp_path, "bad.args", text))
    assert exc.value.field == field and reason in exc.value.reason
    assert exc.value.source.endswith("bad.args")


@pytest.mark.parametrize("text, field, reason", [
    ("--tensor-model-parallel-size 0", "--tensor-model-parallel-size", "greater than or equal to 1"),
    ("--recompute-granularity partial", "--recompute-granularity", "'full' or 'selective'"),
    ("--recompute-method block", "--recompute-method", "recompute_granularity: full"),
    ("--tensor-model-parallel-size 3 --global-batch-size 8", "cluster.gpus", "does not divide"),
])
def test_megatron_values_are_checked_once_by_the_config_and_named_as_spelled(
        tmp_path, text, field, reason):
    # the reader only parses (a whole number, a switch); MegatronConfig checks each value,
    # and the error names the argument in the file (a cluster field: in the scenario)
    path = write(tmp_path, "bad.args", text)
    pieces = read_config(path)
    with pytest.raises(ConfigError) as exc:
        scenario_with_config("quickstart", pieces, [])
    assert exc.value.field == field and reason in exc.value.reason
    assert exc.value.source.endswith("quickstart.yaml" if field == "cluster.gpus" else "bad.args")
    # a --set of the same field wins over the file, and is named as set
    good = scenario_with_config("quickstart", pieces, [
        "strategy.tensor_model_parallel_size=2", "strategy.recompute_granularity=full"])
    assert good.strategy["tensor_model_parallel_size"] == 2


def test_a_megatron_config_read_by_both_spellings_gives_the_same_plan():
    from simulator.cli.configfile import check_strategy
    from simulator.scenario import load_scenario, resolve_scenario
    pieces = read_config(CONFIGS / "gpt3_175b.args")
    from_args = scenario_with_config("gpt3-175b-megatron-tp8-pp16-selene", pieces, [])
    cfg = check_strategy(from_args, pieces, set())
    yaml = {"name": "megatron", "tensor_model_parallel_size": 8,
            "pipeline_model_parallel_size": 16, "virtual_pipeline_model_parallel_size": 2,
            "sequence_parallel": True, "use_distributed_optimizer": True,
            "overlap_grad_reduce": True, "overlap_param_gather": True,
            "recompute_granularity": "selective", **MEGATRON_LM_LOSS}
    scn = load_scenario(resolve_scenario("gpt3-175b-megatron-tp8-pp16-selene"),
                        [f"strategy={yaml}"])
    assert cfg == parse_strategy({**scn.strategy, "micro_batch": 1, "grad_accum":
                                  from_args.training.grad_accum})
    assert cfg.plan(128) == parse_strategy(yaml).plan(128)
    assert cfg.plan(128).tp == 8 and from_args.training.grad_accum == 1536 // (1 * 1)
    # the argument file's spelling is the config's: each argument a field, with dashes
    from simulator.strategies.frameworks import megatron
    assert {a.field for a in megatron.STRATEGY_FLAGS.values()} <= set(
        megatron.MegatronConfig.model_fields)
    assert megatron.file_key("tensor_model_parallel_size") == "--tensor-model-parallel-size"


# --------------------------------------------------------------------------- hostile
@pytest.mark.parametrize("name, text, where", [
    ("cut.toml", "[parallelism]\ntensor_parallel_degree = ", "not valid TOML"),
    ("cut.json", '{"zero_optimization": {"stage": 3', "not valid JSON"),
    ("nan.json", '{"train_batch_size": NaN}', "finite"),
    ("deep.json", "[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ("list.json", "[1, 2]", "top level"),
    ("quote.args", "--data-path 'unclosed", "cannot split"),
    ("type.toml", '[parallelism]\ntensor_parallel_degree = "8"\n', "valid integer"),
    ("type.json", '{"train_micro_batch_size_per_gpu": 1.5}', "whole number"),
    ("sched.toml", '[parallelism]\npipeline_parallel_schedule = "Looped"\n', "1F1B"),
    ("stage.json", '{"zero_optimization": {"stage": 5}}', "0, 1, 2 or 3"),
    ("table.toml", "parallelism = 3\n", "table"),
])
def test_hostile_configs_are_one_line_and_exit_2(capsys, tmp_path, name, text, where):
    path = write(tmp_path, name, text)
    code, out, err = run_main(capsys, "run", "--config", str(path))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and str(path) in err and where in err


def test_binary_and_oversized_configs(capsys, tmp_path, monkeypatch):
    path = tmp_path / "bin.json"
    path.write_bytes(b"\x00\x01{}")
    code, _, err = run_main(capsys, "run", "--config", str(path))
    assert code == 2 and "binary" in err
    big = write(tmp_path, "big.toml", "# x\n" * 300)
    monkeypatch.setenv("CLUSTERSIM_MAX_CONFIG_BYTES", "1K")
    code, _, err = run_main(capsys, "run", "--config", str(big))
    assert code == 2 and "CLUSTERSIM_MAX_CONFIG_BYTES" in err


def test_a_bad_strategy_value_is_named_in_the_config_file(capsys, tmp_path):
    path = write(tmp_path, "bad.json", '{"zero_optimization": {"stage": 3, '
                 '"offload_optimizer": {"device": "nvme"}}}')
    code, _, err = run_main(capsys, "run", "--config", str(path))
    assert code == 2
    assert f"{path}: zero_optimization.offload_optimizer.device: only offload_param" in err


# ------------------------------------------------------------------ run --config (CLI)
def test_run_config_says_what_it_used_and_ignored(capsys, tmp_path):
    path = write(tmp_path, "ds.json", '{"train_micro_batch_size_per_gpu": 1, '
                 '"zero_optimization": {"stage": 3}, "steps_per_print": 10}')
    code, out, err = run_main(capsys, "run", "--config", str(path),
                              "--set", "training.seq_len=512")
    assert code == 0, err
    assert "used: zero_optimization.stage, train_micro_batch_size_per_gpu; ignored: " \
           "steps_per_print" in err
    assert "llama-2-7b deepspeed on 8 x A100" in out


# ------------------------------------------------------------------------- strategies
def test_torchtitan_translation_to_a_plan():
    cfg = parse_strategy({"name": "torchtitan", "parallelism": {
        "tensor_parallel_degree": 8, "pipeline_parallel_degree": 4,
        "pipeline_parallel_schedule": "Interleaved1F1B", "context_parallel_degree": 2,
        "context_parallel_rotate_method": "alltoall", "enable_async_tensor_parallel": True}})
    plan = cfg.plan(World(512, 8))
    assert (plan.tp, plan.pp, plan.cp, plan.dp_shard) == (8, 4, 2, 512 // (8 * 4 * 2))
    assert plan.vp == 2 and plan.schedule == "interleaved_1f1b"      # torchtitan's 2 per rank
    assert plan.sequence_parallel and plan.tp_overlap and plan.cp_mode == "ring"
    assert plan.dp_mode == "fsdp"      # default reshard under PP: never, FSDP2 as pipelining runs it
    assert cfg.plan(512, layers=80).vp == 2
    per_stage = parse_strategy({"name": "torchtitan", "parallelism": {
        "pipeline_parallel_degree": 4, "pipeline_parallel_schedule": "Interleaved1F1B",
        "pipeline_parallel_layers_per_stage": 5}})
    assert per_stage.plan(8, layers=80).vp == 80 // 5 // 4
    ddp = parse_strategy({"name": "torchtitan", "parallelism": {
        "data_parallel_replicate_degree": 8, "data_parallel_shard_degree": 1}})
    assert ddp.plan(8).dp_mode == "ddp"
    with pytest.raises(ConfigError, match="not a multiple"):
        parse_strategy({"name": "torchtitan", "parallelism": {
            "tensor_parallel_degree": 3}}).plan(8)


def test_torchtitan_shards_over_dp_shard_times_cp():
    # torchtitan applies FSDP on the mesh dp_shard x cp whenever either is above 1: CP8 with
    # dp_shard 1 is FSDP over 8 ranks (16 B/param / 8 of static state), not DDP (18 B/param)
    from simulator.pipeline import build_setup
    from simulator.scenario import scenario_from_dict
    cfg = parse_strategy({"name": "torchtitan", "parallelism": {
        "data_parallel_shard_degree": 1, "context_parallel_degree": 8}})
    assert cfg.plan(8).dp_mode == "fsdp"
    setup = build_setup(scenario_from_dict({
        "name": "cp8", "model": "llama-3-8b", "cluster": {"topology": "dgx-h100"},
        "training": {"seq_len": 32768, "micro_batch": 1},
        "strategy": {"name": "torchtitan", "activation_checkpoint": {"mode": "full"},
                     "parallelism": {"data_parallel_shard_degree": 1,
                                     "context_parallel_degree": 8}}}),
        extrapolate_steps=False)
    params = setup.trace.meta["params"]
    static = setup.trace.classes[0].static_memory_bytes
    assert static == pytest.approx(16 * params / 8, rel=0.01)


def test_shipped_405b_toml_and_mixtral_args_give_the_shipped_scenarios_plans():
    from simulator.scenario import load_scenario, resolve_scenario
    big = read_config(CONFIGS / "llama3_405b.args")
    shipped = load_scenario(resolve_scenario("llama3-405b-tp8-pp8-fsdp-512gpu")).strategy
    # every plan key of the shipped scenario, spelled as the argument file gives it
    assert {k: v for k, v in big.strategy.items() if k in shipped} == \
        {k: v for k, v in shipped.items() if k in big.strategy}
    assert big.strategy["account_for_embedding_in_pipeline_split"] is True
    assert big.strategy["use_torch_fsdp2"] is True and big.global_batch == 128
    mx = read_config(CONFIGS / "mixtral_8x7b_ep8.args")
    assert mx.strategy["expert_model_parallel_size"] == 8
    assert mx.strategy["pipeline_model_parallel_size"] == 4
    # --num-layers-per-virtual-pipeline-stage 1: 32 layers / (4 x 1) = 8 chunks per rank;
    # global batch 128 = micro-batch 1 x 8 micro-batches x dp 16
    assert mx.strategy["virtual_pipeline_model_parallel_size"] == 8
    assert mx.global_batch == 128


def test_deepspeed_translation_to_a_plan():
    for stage, mode in ((0, "ddp"), (1, "zero1"), (2, "zero2"), (3, "fsdp")):
        cfg = parse_strategy({"name": "deepspeed", "zero_optimization": {"stage": stage},
                              "tensor_parallel": {"autotp_size": 2}})
        plan = cfg.plan(16)
        assert plan.dp_mode == mode and plan.tp == 2 and plan.dp == 8
    cfg = parse_strategy({"name": "deepspeed", "zero_optimization": {
        "stage": 3, "offload_param": {"device": "cpu"}, "offload_optimizer": {"device": "cpu"}}})
    assert cfg.cpu_offload()
    with pytest.raises(ConfigError) as exc:
        parse_strategy({"name": "deepspeed", "zero_optimization": {
            "stage": 2, "offload_optimizer": {"device": "cpu"}}})
    assert exc.value.field == "strategy.zero_optimization.offload_optimizer.device"
    with pytest.raises(ConfigError) as exc:
        parse_strategy({"name": "deepspeed", "zero_optimization": {"stages": 3}})
    assert exc.value.field == "strategy.zero_optimization.stages"


def _replayed(strategy: dict):
    from simulator.pipeline import build_setup, run_setup
    from simulator.scenario import load_scenario
    scn = load_scenario("quickstart", [f"strategy={strategy}", "training.seq_len=512"])
    setup = build_setup(scn, "quickstart")
    return setup.trace, run_setup(setup).metrics


def test_data_parallel_torchtitan_and_deepspeed_replay_as_fsdp_and_ddp():
    # FSDP2 over all 8 GPUs with full checkpointing: the same trace as strategy fsdp's
    titan, m1 = _replayed({"name": "torchtitan", "activation_checkpoint": {"mode": "full"}})
    fsdp, m2 = _replayed({"name": "fsdp", "mesh": [1, 8], "activation_checkpointing": True})
    assert titan.meta["strategy"] == "torchtitan"
    assert [c.ops for c in titan.classes] == [c.ops for c in fsdp.classes]
    assert m1.iteration_time_s == m2.iteration_time_s
    # ZeRO-0 is DDP whose buckets are reduce_bucket_size elements of bf16 gradients
    ds, _ = _replayed({"name": "deepspeed", "zero_optimization": {
        "stage": 0, "reduce_bucket_size": 50_000_000}})
    mb = 50_000_000 * 2 / (1 << 20)
    ddp, _ = _replayed({"name": "ddp", "bucket_cap_mb": mb, "param_dtype": "bf16"})
    assert [c.ops for c in ds.classes] == [c.ops for c in ddp.classes]


# ------------------------------------------------------------------ compare rows
def test_framework_variants_are_named_strategies():
    from simulator.choices import DEFAULT_COMPARE_STRATEGIES, strategy_named
    v = strategy_named("Megatron:tp8pp2vp2dopt")
    assert v.key == "megatron:tp8pp2vp2dopt" and v.strategy == "megatron"
    assert dict(v.options) == {"tensor_model_parallel_size": 8,
                               "pipeline_model_parallel_size": 2,
                               "virtual_pipeline_model_parallel_size": 2,
                               "use_distributed_optimizer": True}
    assert dict(strategy_named("deepspeed:zero3tp2").options) == {
        "zero_optimization.stage": 3, "tensor_parallel.autotp_size": 2}
    for bad in ("megatron:tpx", "megatron:dopt2", "torchtitan:zero3", "deepspeed:tp"):
        assert strategy_named(bad) is None
    assert "megatron" not in DEFAULT_COMPARE_STRATEGIES     # the default rows are as before


def test_compare_rows_of_framework_strategies(capsys):
    code, out, err = run_main(capsys, "compare", "--set", "training.seq_len=512",
                              "--strategies", "torchtitan:tp2,megatron:tp2pp2dopt,deepspeed:zero3",
                              "--no-scaling", "--no-capacity", "--format", "json", "-q")
    assert code == 0, err
    import json
    rows = {r["strategy"]: r for r in json.loads(out)["rows"]}
    assert set(rows) == {"torchtitan:tp2", "megatron:tp2pp2dopt", "deepspeed:zero3"}
    assert all(r["status"] == "ok" for r in rows.values())
    code, _, err = run_main(capsys, "compare", "--strategies", "megatron:tpx", "-q")
    assert code == 2 and "megatron:tpx" in err


def test_deepspeed_refuses_zero2_and_3_under_pipeline_parallelism():
    with pytest.raises(ConfigError) as exc:
        parse_strategy({"name": "deepspeed", "zero_optimization": {"stage": 3},
                        "pipeline": {"stages": 2}})
    assert exc.value.field == "strategy.zero_optimization.stage"
    ok = parse_strategy({"name": "deepspeed", "zero_optimization": {"stage": 1},
                         "pipeline": {"stages": 2}})
    assert ok.plan(8).pp == 2 and ok.plan(8).dp_mode == "zero1"


def test_torchtitan_checkpointing_becomes_the_common_fields():
    from simulator.strategies.frameworks.translate import has_ac_modes
    full = parse_strategy({"name": "torchtitan", "activation_checkpoint": {"mode": "full"}})
    none = parse_strategy({"name": "torchtitan", "activation_checkpoint": {"mode": "none"}})
    assert full.activation_checkpointing in (True, "full")
    assert none.activation_checkpointing in (False, "none")
    every2 = {"name": "torchtitan", "activation_checkpoint": {"mode": "selective",
                                                               "selective_ac_option": "2"}}
    if has_ac_modes():                    # none | full | selective in the common config
        cfg = parse_strategy(every2)
        assert cfg.activation_checkpointing == "selective" and cfg.selective_ac_option == 2
    else:
        with pytest.raises(ConfigError) as exc:
            parse_strategy(every2)
        assert exc.value.field == "strategy.activation_checkpoint.mode"
    with pytest.raises(ConfigError) as exc:
        parse_strategy({**every2, "activation_checkpointing": True})
    assert exc.value.field == "strategy.activation_checkpointing"


def test_torchtitan_default_checkpointing_when_the_table_is_absent(tmp_path):
    from simulator.strategies.frameworks.translate import has_ac_modes
    p = read_config(write(tmp_path, "job.toml", "[parallelism]\ntensor_parallel_degree = 2\n"
                          "pipeline_parallel_layers_per_stage = 4\n"))
    assert "parallelism.pipeline_parallel_layers_per_stage" in p.used
    assert any("no [activation_checkpoint]" in n for n in p.notes)
    assert ("activation_checkpoint" in p.strategy) == has_ac_modes()
    assert p.summary().endswith(p.notes[-1])


def test_torchtitan_splits_uneven_blocks_as_torchtitan_does():
    from simulator.strategies.frameworks.torchtitan import split_point_blocks, weighted_split
    # embedding and output weigh a layer each: 126 + 2 = 128 over 8 stages is 16 a stage,
    # less the weights at the ends; 32 + 2 = 34 over 4 is 9, 9, 8, 8 less the weights
    assert weighted_split(8, 126) == (15, 16, 16, 16, 16, 16, 16, 15)
    assert weighted_split(4, 32) == (8, 9, 8, 7)
    assert split_point_blocks(["layers.10", "layers.40", "layers.70"], 4, 126) == \
        (10, 30, 30, 56)
    for points, why in [(["layers.10"], "make 2 stages"), (["norm.1", "a", "b"], "block name"),
                        (["layers.40", "layers.10", "layers.70"], "not increasing")]:
        with pytest.raises(ConfigError, match=why) as e:
            split_point_blocks(points, 4, 126)
        assert e.value.field == "strategy.parallelism.pipeline_parallel_split_points"
    with pytest.raises(ConfigError, match="do not fill 8 pipeline stages"):
        weighted_split(8, 4)
    # Llama 3.1 405B (126 blocks) on PP8 x TP8: torchtitan's split, not a refusal
    cfg = parse_strategy({"name": "torchtitan", "parallelism": {
        "pipeline_parallel_degree": 8, "tensor_parallel_degree": 8}})
    plan = cfg.plan(512, layers=126)
    assert plan.model_stage_blocks(126) == list(weighted_split(8, 126))
    assert cfg.plan(512, layers=128).stage_blocks == ()          # even: as before
    given = parse_strategy({"name": "torchtitan", "parallelism": {
        "pipeline_parallel_degree": 4, "pipeline_parallel_split_points": [
            "layers.10", "layers.40", "layers.70"]}})
    assert given.plan(8, layers=126).model_stage_blocks(126) == [10, 30, 30, 56]


def test_a_stage_split_given_outright_reaches_the_stages():
    from simulator.strategies.parallel import ParallelPlan
    from simulator.strategies.parallel.stages import chunks
    from simulator.models import layer_costs, load_model
    model = load_model("gpt3-1.3b")          # 24 blocks
    layers = layer_costs(model, 1, 128, "bf16")
    plan = ParallelPlan(pp=4, dp_shard=2, stage_blocks=(4, 8, 8, 4))
    got = chunks(layers, plan)
    assert [sum(x.kind.endswith("block") for x in got[(r, 0)].layers) for r in range(4)] \
        == [4, 8, 8, 4]
    with pytest.raises(ConfigError, match="not 24 layers over pp x vp = 4 x 1"):
        ParallelPlan(pp=4, dp_shard=2, stage_blocks=(4, 8, 8, 5)).model_stage_blocks(24)


# ------------------------------------------------- Megatron-LM's DDP implementations (SC21)
def test_megatron_torch_ddp_reduces_fp16_buckets_during_backward(tmp_path):
    """``--DDP-impl torch`` (SC21's 1.7B-18B runs, examples/sc21/run_table_1.sh): PyTorch
    DDP's 25 MiB buckets of 16-bit gradients, reduced during the last backward."""
    from simulator.strategies.frameworks.megatron import MegatronConfig
    p = read_config(write(tmp_path, "sc21.args", "--DDP-impl torch --fp16"))
    assert p.strategy == {"name": "megatron", "DDP_impl": "torch", **MEGATRON_LM_LOSS}
    torch = MegatronConfig(DDP_impl="torch", precision="fp16")
    plan = torch.plan(8)
    assert torch.grad_reduce_bytes() == 2
    assert plan.overlap_grad_reduce and plan.bucket_params == (25 << 20) // 2
    local = MegatronConfig(precision="fp16")            # Megatron's own DDP, the default
    assert local.DDP_impl == "local" and local.grad_reduce_bytes() == 4
    assert not local.plan(8).overlap_grad_reduce
    assert local.plan(8).bucket_params == 40_000_000


@pytest.mark.parametrize("extra, reason", [
    ({"use_distributed_optimizer": True}, "needs Megatron's own DDP"),
    ({"pipeline_model_parallel_size": 2}, "without pipeline parallelism only"),
])
def test_megatron_torch_ddp_refuses_what_it_cannot_do(extra, reason):
    from simulator.strategies.frameworks.megatron import MegatronConfig
    with pytest.raises(ConfigError) as exc:
        MegatronConfig(DDP_impl="torch", **extra)
    assert exc.value.field == "strategy.DDP_impl" and reason in exc.value.reason

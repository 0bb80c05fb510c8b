"""`plan` carries the scenario's own strategy settings into the candidates of its framework
(``simulator/planner/strategy.py`` ``carried``): a candidate of the scenario's own layout
costs what ``run`` gives the scenario (one path, one price); what the plan searches it sets
itself; what holds for one layout only, and every setting of a strategy the candidates are
not spelled in, is said, never dropped silently."""

from __future__ import annotations

import json

from simulator.pipeline import build_setup, run_setup
from simulator.planner import Candidate
from simulator.planner.strategy import Carried, carried, carried_lines, strategy_of
from simulator.scenario import scenario_from_dict
from simulator.strategies.parallel import ParallelPlan
from test_cli import run_main

LAYERS = 12          # gpt2-small
MEGATRON = {"name": "megatron", "tensor_model_parallel_size": 2, "sequence_parallel": True,
            "use_distributed_optimizer": True, "overlap_grad_reduce": True,
            "fp8_param_gather": True, "tp_comm_overlap": True, "grad_reduce_in_bf16": True}
TRAINING = {"micro_batch": 1, "seq_len": 1024, "grad_accum": 2, "precision": "fp8",
            "fp8_recipe": "delayed"}


def _step(strategy: dict) -> float:
    scn = scenario_from_dict({"name": "t", "model": "gpt2-small",
                              "cluster": {"topology": "dgx-h100"},
                              "simulation": {"variability": "none"},
                              "training": TRAINING, "strategy": strategy})
    return run_setup(build_setup(scn)).metrics.iteration_time_s


def test_the_scenarios_own_layout_costs_what_run_gives_it():
    own = MEGATRON
    c = Candidate(ParallelPlan(tp=2, dp_shard=4, dp_mode="zero1", sequence_parallel=True),
                  1, 2, "none")
    replayed = strategy_of(c, LAYERS, carried(own))
    assert {k: replayed[k] for k in ("fp8_param_gather", "tp_comm_overlap",
                                     "grad_reduce_in_bf16")} == \
        {"fp8_param_gather": True, "tp_comm_overlap": True, "grad_reduce_in_bf16": True}
    assert _step(replayed) == _step(own)
    # without the carry the candidate is another run: FP8 parameters and the TP overlap
    # change the step
    assert _step(strategy_of(c, LAYERS)) != _step(own)


def test_what_the_plan_searches_and_what_holds_for_one_layout():
    carry = carried({**MEGATRON, "pipeline_model_parallel_size": 4,
                     "pipeline_model_parallel_layout": "Et*3|(t*3|)*2,t*3L",
                     "recompute_granularity": "full", "expert_tensor_parallel_size": 1})
    assert carry.framework == "megatron"
    assert set(carry.settings) == {"fp8_param_gather", "tp_comm_overlap",
                                   "grad_reduce_in_bf16"}
    assert carry.left == ("strategy.expert_tensor_parallel_size",
                          "strategy.pipeline_model_parallel_layout")
    c = Candidate(ParallelPlan(tp=1, pp=2, dp_shard=4, dp_mode="zero1"), 1, 4, "selective")
    s = strategy_of(c, LAYERS, carry)
    assert (s["pipeline_model_parallel_size"], s["tensor_model_parallel_size"],
            s["recompute_granularity"]) == (2, 1, "selective")      # the candidate's own
    assert "pipeline_model_parallel_layout" not in s
    # a torchtitan candidate takes none of Megatron's settings
    fsdp = strategy_of(Candidate(ParallelPlan(dp_shard=8), 1, 2, "none"), LAYERS, carry)
    assert fsdp["name"] == "torchtitan" and "fp8_param_gather" not in fsdp


def test_torchtitan_settings_go_into_torchtitan_candidates():
    carry = carried({"name": "torchtitan", "enable_fsdp_float8_all_gather": True,
                     "parallelism": {"tensor_parallel_degree": 8,
                                     "enable_async_tensor_parallel": True,
                                     "pipeline_parallel_split_points": ["layers.6"]},
                     "activation_checkpoint": {"mode": "full"}})
    s = strategy_of(Candidate(ParallelPlan(tp=2, dp_shard=4), 1, 2, "none"), LAYERS, carry)
    assert s["enable_fsdp_float8_all_gather"] is True
    assert s["parallelism"]["enable_async_tensor_parallel"] is True
    assert s["parallelism"]["tensor_parallel_degree"] == 2          # the candidate's own
    assert s["activation_checkpoint"] == {"mode": "none"}
    assert carry.left == ("strategy.parallelism.pipeline_parallel_split_points",)
    z = strategy_of(Candidate(ParallelPlan(dp_shard=8, dp_mode="zero1"), 1, 2, "none"),
                    LAYERS, carry)
    assert z["name"] == "megatron" and "enable_fsdp_float8_all_gather" not in z


def test_another_strategys_settings_are_said():
    # the sharding is the plan's own search (its data-parallel modes): not said
    carry = carried({"name": "fsdp", "sharding": "SHARD_GRAD_OP", "cpu_offload": False,
                     "limit_all_gathers": True})
    assert carry == Carried("fsdp", "", {}, {}, ("strategy.cpu_offload",
                                                 "strategy.limit_all_gathers"))
    (line,) = carried_lines(carry)
    assert line == ("not in any candidate (the candidates carry the settings of a "
                    "torchtitan or megatron scenario only; this one's strategy is fsdp): "
                    "strategy.cpu_offload, "
                    "strategy.limit_all_gathers")
    assert carried_lines(carried({"name": "fsdp", "sharding": "FULL_SHARD"})) == []
    # a Megatron strategy's FSDP flags are the data-parallel mode the plan searches
    megatron = carried({"name": "megatron", "use_torch_fsdp2": True, "tp_comm_overlap": True})
    assert megatron.left == () and megatron.settings == {"tp_comm_overlap": True}


def test_the_plan_command_says_what_it_carried(capsys):
    args = ["plan", "--set", "training.seq_len=512", "--set",
            "strategy={name: megatron, tp_comm_overlap: true}", "--global-batch", "16",
            "--replay", "1", "--max-tp", "2", "--max-pp", "1", "--max-micro-batch", "2", "-q"]
    code, out, err = run_main(capsys, *args)
    assert code == 0, err
    assert ("# the scenario's megatron settings in its megatron candidates: "
            "tp_comm_overlap=True") in out.splitlines()
    code, out, err = run_main(capsys, *args, "--format", "json")
    d = json.loads(out)
    assert d["carried"] == {"from": "megatron", "framework": "megatron",
                            "settings": {"tp_comm_overlap": True}, "parallelism": {},
                            "not_carried": []}
    for row in d["rows"]:
        if row["strategy"]["name"] == "megatron":
            assert row["strategy"]["tp_comm_overlap"] is True


def test_the_estimate_holds_fp8_parameters_at_one_byte():
    """A carried fp8_param_gather (per-tensor recipe) makes the Megatron candidates' estimated
    memory the blocks' GEMM weights at one byte: Llama 2 7B under TP2, 32 blocks of
    qkv + proj + gate/up + down = (h (h + 2 kv) + h h + 3 h f) / 2 elements a rank, one byte
    fewer each; FSDP candidates (torchtitan) keep theirs."""
    from simulator.collectives.model import CollectiveModel
    from simulator.compute import ComputeModel
    from simulator.constants import load_constants
    from simulator.hardware import gpu_spec
    from simulator.models import load_model
    from simulator.planner import Estimator
    from simulator.scenario import load_scenario
    from simulator.topology.build import scenario_cluster
    model = load_model("llama-2-7b")
    cluster = scenario_cluster(load_scenario("quickstart", ["training.seq_len=512"]))
    gpu = gpu_spec("H100-SXM")
    stacks = {name: ComputeModel(gpu, strategy=name) for name in ("torchtitan", "megatron")}

    def est(fp8_params):
        return Estimator(model, 512, "fp8", True, CollectiveModel(cluster, load_constants()),
                         stacks["torchtitan"], stacks=stacks,
                         fp8_recipes={"torchtitan": "delayed", "megatron": "delayed"},
                         stack_of=lambda c: strategy_of(c, model.layers)["name"],
                         fp8_params=fp8_params)
    zero1 = Candidate(ParallelPlan(tp=2, dp_shard=4, dp_mode="zero1", sequence_parallel=True),
                      1, 2, "none")
    h, f = model.hidden, model.ffn_hidden
    kv = model.kv_heads * model.head_dim
    per_rank = (h * (h + 2 * kv) + h * h + 3 * h * f) // 2
    plain, fp8 = est(frozenset()), est(frozenset({"megatron"}))
    assert plain.estimate(zero1).memory_bytes - fp8.estimate(zero1).memory_bytes == \
        model.layers * per_rank
    fsdp = Candidate(ParallelPlan(tp=2, dp_shard=4), 1, 2, "none")
    assert plain.estimate(fsdp).memory_bytes == fp8.estimate(fsdp).memory_bytes


def test_the_ep_all_to_all_overlap_goes_where_there_is_expert_parallelism():
    carry = carried({"name": "megatron", "overlap_moe_expert_parallel_comm": True})
    ep = strategy_of(Candidate(ParallelPlan(dp_shard=8, ep=4, dp_mode="zero1"), 1, 2, "none"),
                     4, carry)
    dense = strategy_of(Candidate(ParallelPlan(dp_shard=8, dp_mode="zero1"), 1, 2, "none"),
                        4, carry)
    assert ep["overlap_moe_expert_parallel_comm"] is True
    assert "overlap_moe_expert_parallel_comm" not in dense


def test_ddp_with_model_parallelism_is_megatrons_ddp_without_the_optimizers_settings():
    """torchtitan trains TP or PP without FSDP in fp32, so plan spells such a DDP candidate
    as Megatron's DDP; the distributed optimizer's settings a Megatron scenario carries (FP8
    parameters, the parameter all-gather's overlap, the precision-aware optimizer) stay in
    the ZeRO-1 candidates, and the DDP one replays as run gives it."""
    own = {**MEGATRON, "overlap_param_gather": True, "use_precision_aware_optimizer": True,
           "exp_avg_dtype": "bf16"}
    carry = carried(own)
    ddp = Candidate(ParallelPlan(tp=2, dp_replicate=4, dp_mode="ddp", sequence_parallel=True),
                    1, 2, "none")
    zero1 = Candidate(ParallelPlan(tp=2, dp_shard=4, dp_mode="zero1", sequence_parallel=True),
                      1, 2, "none")
    optimizer = {"fp8_param_gather", "overlap_param_gather", "use_precision_aware_optimizer",
                 "exp_avg_dtype"}
    as_ddp, as_zero1 = strategy_of(ddp, LAYERS, carry), strategy_of(zero1, LAYERS, carry)
    assert as_ddp["name"] == as_zero1["name"] == "megatron"
    assert as_ddp["use_distributed_optimizer"] is False and not optimizer & set(as_ddp)
    assert as_zero1["use_distributed_optimizer"] is True and optimizer <= set(as_zero1)
    assert as_ddp["tp_comm_overlap"] is True          # the rest is carried into both
    assert _step(as_ddp) > 0
    # without model parallelism DDP stays torchtitan's (autocast, as PyTorch DDP)
    pure = Candidate(ParallelPlan(dp_replicate=8, dp_mode="ddp"), 1, 2, "none")
    assert strategy_of(pure, LAYERS, carry)["name"] == "torchtitan"


def test_a_bad_carried_setting_is_refused_as_run_refuses_it(capsys):
    args = ["quickstart", "--set", "strategy={name: megatron, bucket_size: -5}", "-q"]
    code, _, plan_err = run_main(capsys, "plan", *args)
    run_code, _, run_err = run_main(capsys, "run", *args)
    assert code == run_code == 2
    assert plan_err == run_err and len(plan_err.strip().splitlines()) == 1
    assert "quickstart.yaml: --set strategy.bucket_size" in plan_err

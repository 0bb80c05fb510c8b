"""`compare` without --strategies compares the scenario's own strategy too when it is a
framework's (megatron, torchtitan, deepspeed), as the scenario has it: its row is what
`run` gives the scenario (one path, one price); a scenario of a named strategy (fsdp,
ddp, ...) compares the named list as before."""

from __future__ import annotations

import json

from simulator.choices import DEFAULT_COMPARE_STRATEGIES
from simulator.compare.options import default_strategies
from test_cli import run_main

MEGATRON = ("strategy={name: megatron, tensor_model_parallel_size: 2, sequence_parallel: true,"
            " tp_comm_overlap: true, use_distributed_optimizer: true}")
SETS = ["--set", MEGATRON, "--set", "training.seq_len=512"]


def test_the_default_list_takes_the_scenarios_framework_strategy():
    named = ",".join(DEFAULT_COMPARE_STRATEGIES)
    assert default_strategies("fsdp") == named
    assert default_strategies("horovod") == named
    for framework in ("megatron", "torchtitan", "deepspeed"):
        assert default_strategies(framework) == f"{named},{framework}"


def test_the_scenarios_own_row_is_what_run_gives_it(capsys):
    code, out, err = run_main(capsys, "compare", "quickstart", *SETS, "--no-capacity",
                              "--no-scaling", "--format", "json", "-q")
    assert code == 0, err
    rows = {r["strategy"]: r for r in json.loads(out)["rows"]}
    assert set(rows) == {*DEFAULT_COMPARE_STRATEGIES, "megatron"}
    code, out, err = run_main(capsys, "run", "quickstart", *SETS, "--format", "json", "-q")
    assert code == 0, err
    ran = json.loads(out)
    step = ran.get("metrics", ran)["iteration_time_s"]
    assert rows["megatron"]["status"] == "ok"
    assert rows["megatron"]["metrics"]["iteration_time_s"] == step


def test_strategies_that_cannot_keep_the_batch_are_told_apart_with_what_to_set(capsys):
    """The scenario's Megatron TP2 plan steps 8 samples (micro-batch 2 on 4 data-parallel
    ranks); FSDP's 8 ranks need 16 a micro-step: not a cluster limit, a batch one, and the
    answer says what to set."""
    code, out, err = run_main(capsys, "compare", "quickstart", *SETS, "--no-capacity",
                              "--no-scaling", "-q")
    assert code == 0, err
    lines = out.splitlines()
    (batch,) = [x for x in lines if x.startswith("# Cannot keep 8 samples a step at "
                                                 "micro-batch 2: fsdp-full, ")]
    assert "set training.global_batch to a multiple of theirs" in batch
    assert not any(x.startswith("# Cannot run on this cluster") for x in lines)
    code, out, err = run_main(capsys, "compare", "quickstart", *SETS, "--no-capacity",
                              "--no-scaling", "--format", "json", "-q")
    rows = {r["strategy"]: r for r in json.loads(out)["rows"]}
    assert rows["fsdp-full"]["reason_field"] == "training.global_batch"
    assert rows["megatron"]["reason_field"] == ""


def test_a_mixture_of_experts_says_why_its_forward_time_differs_by_layout(capsys):
    """A mixture of experts' forward time per sample differs by how a strategy spreads its
    experts (expert parallelism or not), not by the kernel stacks alone: compare says so,
    for an MoE model only."""
    from simulator.compare.runner import MOE_NOTE
    moe = ["--set", "training.seq_len=512", "--set", "cluster.nodes=2", "--strategies",
           "fsdp-full,megatron", "--no-capacity", "--no-scaling", "-q"]
    code, out, err = run_main(capsys, "compare", "mixtral-8x7b-ep8", *moe)
    assert code == 0, err
    assert f"# note: {MOE_NOTE}" in out
    code, out, err = run_main(capsys, "compare", "quickstart", "--set", "training.seq_len=512",
                              "--strategies", "fsdp-full", "--no-capacity", "--no-scaling",
                              "-q")
    assert code == 0, err
    assert MOE_NOTE not in out

"""Two of issue 40's "tried as a new user" bullets, re-checked (the audit of issues 40, 41
and 47): ``run`` says how a ``--set`` of the plan or the GPUs moves the global batch of a
scenario that fixes none (``--set strategy.pipeline_model_parallel_size=4`` took it from 256
to 64 with no word), and ``run`` prints a ResNet's tokens/s as ``replay`` of its own trace
does, "n/a (not a token model)", not 0."""

from __future__ import annotations

import json

from simulator.cli.run import batch_note
from simulator.scenario import load_scenario
from test_cli import run_main

PP2 = "strategy={name: megatron, pipeline_model_parallel_size: 2}"


def test_a_plan_set_on_the_command_line_says_how_the_global_batch_follows(capsys):
    # quickstart: micro-batch 2, grad_accum 1 on 8 GPUs: 16 samples under FSDP; PP2 leaves
    # 4 data-parallel ranks: 2 x 1 x 4 = 8 samples a step
    code, out, err = run_main(capsys, "run", "quickstart", "--set", PP2, "-q")
    assert code == 0, err
    assert "global batch 8," in out.splitlines()[0]
    assert ("clustersim: run: global batch 8 samples = micro-batch 2 x 1 micro-batch(es) a "
            "step x 4 data-parallel ranks of this plan") in err
    assert "a training.global_batch in place of training.grad_accum holds it" in err


def test_no_note_without_a_plan_set_or_with_a_global_batch(capsys):
    code, _, err = run_main(capsys, "run", "quickstart", "--set", "training.seq_len=1024",
                            "-q")
    assert code == 0 and "global batch" not in err
    code, out, err = run_main(capsys, "run", "quickstart", "--set", PP2, "--set",
                              "training.global_batch=16", "--set", "training.grad_accum=2",
                              "-q")
    assert code == 0 and "global batch" not in err
    assert "global batch 16," in out.splitlines()[0]          # held: 2 x 2 x 4


def test_the_note_is_the_arithmetic():
    scn = load_scenario("quickstart")
    assert batch_note(scn, ("cluster.nodes=2",), 16).startswith(
        "global batch 16 samples = micro-batch 2 x 1 micro-batch(es) a step x 8 ")
    assert batch_note(scn, ("training.seq_len=1024",), 16) == ""
    lora = load_scenario("llama2-70b-lora-8gpu")              # training.global_batch: 8
    assert batch_note(lora, ("strategy.tensor_model_parallel_size=8",), 8) == ""


def test_run_and_replay_say_the_same_of_a_model_without_tokens(capsys, tmp_path):
    code, out, err = run_main(capsys, "run", "resnet50-ddp-1gpu", "-q")
    assert code == 0, err
    rows = dict(line.split(None, 1) for line in out.splitlines()
                if line and not line.startswith("#"))
    assert rows["tokens_per_s"] == rows["tokens_per_s_per_gpu"] == "n/a (not a token model)"
    trace = tmp_path / "r.json"
    code, _, err = run_main(capsys, "trace", "resnet50-ddp-1gpu", "-o", str(trace))
    assert code == 0, err
    code, replayed, err = run_main(capsys, "replay", str(trace))
    assert code == 0, err
    again = dict(line.split(None, 1) for line in replayed.splitlines()
                 if line and not line.startswith("#"))
    assert again["tokens_per_s"] == rows["tokens_per_s"]
    # the JSON says the same: null from both (run gave 0)
    code, out, _ = run_main(capsys, "run", "resnet50-ddp-1gpu", "-q", "--format", "json")
    assert json.loads(out)["tokens_per_s"] is None

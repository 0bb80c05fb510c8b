"""`clustersim run` and `clustersim trace`: outputs, overrides and one-line errors."""

from __future__ import annotations

import json

import pytest

from simulator.trace.io import read_trace
from test_cli import run_main

SMALL = ["--set", "training.seq_len=1024", "--set", "training.micro_batch=1"]


def test_default_run_is_the_quickstart(capsys):
    code, out, err = run_main(capsys, "run", *SMALL)
    assert code == 0, err
    assert "llama-2-7b fsdp on 8 x A100-SXM4-80GB" in out
    for key in ("iteration_time_s", "tokens_per_s_per_gpu", "mfu", "exposed_comm_s",
                "peak_memory_gib", "oom"):
        assert key in out


def test_json_metrics_and_overrides(capsys):
    code, out, err = run_main(capsys, "run", *SMALL, "--format", "json",
                              "--set", "cluster.topology=dgx-a100-superpod",
                              "--set", "cluster.nodes=2",
                              "--set", "strategy.sharding=HYBRID_SHARD")
    assert code == 0, err
    m = json.loads(out)
    assert m["world_size"] == 16
    assert m["compute_s"] + m["exposed_comm_s"] + m["wait_s"] == pytest.approx(
        m["iteration_time_s"])
    assert m["tokens_per_s"] == pytest.approx(16 * 1024 / m["iteration_time_s"])


def test_out_folder_gets_every_file(capsys, tmp_path):
    code, _, err = run_main(capsys, "run", *SMALL, "--out", str(tmp_path / "o"))
    assert code == 0, err
    names = {p.name for p in (tmp_path / "o").iterdir()}
    assert {"summary.json", "metrics.csv", "layers.csv", "ops.csv", "links.csv",
            "timeline.json", "breakdown.png", "memory.png", "gantt.png"} <= names


def test_a_model_that_does_not_fit_is_reported_as_oom(capsys):
    code, out, err = run_main(capsys, "run", "--set", "model=llama-2-70b",
                              "--set", "strategy={name: ddp}",
                              *SMALL)
    # DDP keeps a full replica: 16 bytes x 69B parameters is far beyond 80 GiB.
    assert code == 0, err
    assert "oom                   yes: all at static memory (peak " in out
    assert "GiB > 79.2 GiB per GPU)" in out


def test_trace_command_writes_a_readable_trace_and_never_overwrites(capsys, tmp_path):
    path = tmp_path / "q.json.gz"
    code, out, err = run_main(capsys, "trace", *SMALL, "-o", str(path))
    assert code == 0, err
    trace = read_trace(path)
    assert trace.world_size == 8 and trace.meta["strategy"] == "fsdp"
    code, _, err = run_main(capsys, "trace", *SMALL, "-o", str(path))
    assert code == 2 and "refusing to overwrite" in err


@pytest.mark.parametrize("args, needle", [
    (["--set", "model=gpt-9"], "model"),
    (["--set", "strategy.name=zero9"], "strategy.name: unknown strategy"),
    (["--set", "training.micro_batch=0"], "training.micro_batch"),
    (["--set", "strategy.sharding=HYBRID_SHARD", "--set", "strategy.shard_group_size=64"],
     "strategy.shard_group_size"),
    (["--set", "training.precision=fp8"], "training.precision"),
    (["--set", "cluster.gpus=9"], "cluster.gpus"),
    (["--set", "colour=blue"], "colour: unknown key"),
    (["--set", "nonsense"], "--set: expected KEY=VALUE"),
    (["--set", "simulation.stragglers={99: 1.5}"], "simulation.stragglers: rank 99"),
    (["no-such-scenario"], "no scenario file"),
    (["--set", "simulation.fidelity=nonsense"], "simulation.fidelity: must be one of"),
    (["--set", "cluster.ecmp=random"], "cluster.ecmp: must be one of"),
])
def test_bad_input_is_one_line_exit_2(capsys, args, needle):
    code, out, err = run_main(capsys, "run", *args)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("clustersim: error: ")
    assert needle in err and "Traceback" not in err


def test_malformed_scenario_yaml_names_the_file(capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nmodel: [unclosed\n")
    code, _, err = run_main(capsys, "run", str(bad))
    assert code == 2 and "bad.yaml: malformed YAML at line" in err


def test_same_scenario_same_numbers_bit_for_bit(capsys):
    outs = []
    for _ in range(2):
        code, out, err = run_main(capsys, "run", *SMALL, "--format", "json",
                                  "--set", "simulation.stragglers={3: 1.25}")
        assert code == 0, err
        outs.append(out)
    assert outs[0] == outs[1]
    assert json.loads(outs[0])["peak_memory_gib_per_class"].keys() == {"all", "all@x1.25"}


def test_what_if_link_bandwidth_from_the_scenario(capsys):
    base = ["--format", "json", "--set", "cluster.topology=dgx-a100-superpod",
            "--set", "cluster.nodes=2", *SMALL]
    _, fast, _ = run_main(capsys, "run", *base)
    _, slow, _ = run_main(capsys, "run", *base, "--set", "cluster.links={ib-hdr: {bw: 25 Gb/s}}")
    assert json.loads(slow)["comm_s"] > 4 * json.loads(fast)["comm_s"]
    code, _, err = run_main(capsys, "run", *base, "--set", "cluster.links={ib-hdr: {bw: 50}}")
    assert code == 2 and ("quickstart.yaml: --set cluster.links.ib-hdr.bw: bandwidth 50.0 "
                          "needs a unit") in err


def test_activation_offload_costs_two_host_copies_per_block(capsys):
    """On one GPU (no communication) offloading adds exactly one copy out and one copy back
    of each checkpointed block's input, at the host copy bandwidth, on the compute stream."""
    from simulator.engine import MachineConfig
    from simulator.models import layer_costs, load_model
    base = ["bert-large-ddp-8gpu", "--set", "cluster.gpus=1", "--set", "training.micro_batch=4",
            "--set", "training.grad_accum=1", "--set", "strategy.activation_checkpointing=true",
            # fused: no optimizer temporary, so the peak is the activations' (offload's effect)
            "--set", "strategy.optimizer_impl=fused", "--format", "json",
            # the GPU's work alone (4 sequences of 128 tokens: the CPU's dispatch would hide
            # part of the copies)
            "--set", "strategy.host_dispatch=none"]
    runs = {}
    for off in ("false", "true"):
        code, out, _ = run_main(capsys, "run", *base, "--set",
                                f"strategy.activation_offload={off}")
        assert code == 0
        runs[off] = json.loads(out)
    bert = load_model("bert-large")
    block = layer_costs(bert, 4, 128, "fp16", False, autocast=True)[1]
    copies = 2 * bert.layers * block.output_bytes / MachineConfig().host_bytes_per_s
    extra = runs["true"]["iteration_time_s"] - runs["false"]["iteration_time_s"]
    assert extra == pytest.approx(copies, rel=1e-6)
    assert runs["true"]["peak_memory_gib"] < runs["false"]["peak_memory_gib"]


def test_strategy_errors_from_the_trace_name_the_scenario(capsys):
    code, _, err = run_main(capsys, "run", "resnet50-ddp-8gpu", "--set",
                            "strategy={name: fsdp, wrap: submodule, backward_prefetch: null}")
    assert code == 2 and err.count("\n") == 1
    assert "resnet50-ddp-8gpu.yaml: --set strategy.wrap:" in err

"""Every bad parallel plan of issue 17's list, through `clustersim run`: one line naming the
scenario file and the field, exit code 2."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import yaml

from simulator.errors import ConfigError
from simulator.strategies.parallel import ParallelPlan
from test_cli import run_main

GPT = "gpt3-1.3b"          # 24 layers, 16 heads
LLAMA = "llama-2-70b"      # 80 layers, 64 heads, 8 KV heads
QWEN = "qwen3-30b-a3b"     # 128 experts of 768, top 8


def scenario(tmp_path, model: str, gpus: int, strategy: dict, seq_len: int = 1024,
             grad_accum: int = 4):
    data = {"name": "bad", "model": model,
            "training": {"micro_batch": 1, "seq_len": seq_len, "grad_accum": grad_accum},
            "cluster": {"topology": "dgx-a100-superpod", "nodes": -(-gpus // 8),
                        "gpus": gpus},
            "strategy": {"name": "megatron", **strategy}}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.mark.parametrize("model, gpus, strategy, seq, field, words", [
    (GPT, 3, {"tensor_model_parallel_size": 3}, 1024,
     "strategy.tensor_model_parallel_size", "16 heads"),
    (LLAMA, 16, {"tensor_model_parallel_size": 16}, 1024,
     "strategy.tensor_model_parallel_size", "8 kv_heads"),
    (GPT, 32, {"pipeline_model_parallel_size": 32}, 1024,
     "strategy.pipeline_model_parallel_size", "exceeds"),
    (GPT, 12, {"tensor_model_parallel_size": 8, "pipeline_model_parallel_size": 2}, 1024,
     "cluster.gpus", "does not divide"),
    (GPT, 8, {"expert_model_parallel_size": 8}, 1024,
     "strategy.expert_model_parallel_size", "no experts"),
    (GPT, 4, {"context_parallel_size": 2}, 1022,
     "strategy.context_parallel_size", "not divisible by 4"),
    (GPT, 4, {"pipeline_model_parallel_size": 4, "virtual_pipeline_model_parallel_size": 4},
     1024, "strategy.virtual_pipeline_model_parallel_size", "pp x vp = 4 x 4"),
    (GPT, 8, {"tp": 8}, 1024, "strategy.tp", "tensor_model_parallel_size"),
    (GPT, 8, {"expert_tensor_parallel_size": 2}, 1024,
     "strategy.expert_tensor_parallel_size", "no experts"),
    (QWEN, 32, {"tensor_model_parallel_size": 2, "sequence_parallel": True,
                "expert_model_parallel_size": 32, "expert_tensor_parallel_size": 2}, 1024,
     "strategy.expert_model_parallel_size", "2 x 32 = 64 does not divide"),
    (QWEN, 32, {"tensor_model_parallel_size": 2, "sequence_parallel": True,
                "expert_model_parallel_size": 8, "expert_tensor_parallel_size": 3}, 1024,
     "strategy.expert_tensor_parallel_size", "tp x cp x dp = 2 x 1 x 16 = 32"),
    (QWEN, 32, {"tensor_model_parallel_size": 2, "expert_model_parallel_size": 16}, 1024,
     "strategy.sequence_parallel", "needs sequence parallelism"),
])
def test_bad_plan_is_one_line_naming_file_and_field(capsys, tmp_path, model, gpus, strategy,
                                                    seq, field, words):
    path = scenario(tmp_path, model, gpus, strategy, seq_len=seq)
    code, out, err = run_main(capsys, "run", path, "-q")
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert path in lines[0] and f"{field}:" in lines[0] and words in lines[0]


def test_interleaving_needs_micro_batches_a_multiple_of_pp(capsys, tmp_path):
    path = scenario(tmp_path, GPT, 4, {"pipeline_model_parallel_size": 4,
                                       "virtual_pipeline_model_parallel_size": 2},
                    grad_accum=6)
    code, _, err = run_main(capsys, "run", path, "-q")
    assert code == 2 and "training.grad_accum" in err and path in err


def test_ep_not_dividing_the_experts():
    moe = SimpleNamespace(name="moe", is_transformer=True, heads=8, kv_heads=8,
                          ffn_hidden=1024, layers=4, experts=8)
    with pytest.raises(ConfigError) as exc:
        ParallelPlan(dp_shard=6, ep=3).check(moe, 6, seq_len=128)
    assert exc.value.field == "strategy.ep" and "8 experts" in exc.value.reason
    ParallelPlan(dp_shard=8, ep=4).check(moe, 8, seq_len=128)      # fits


def test_tp_across_nvlink_domains_is_legal(capsys, tmp_path):
    # TP 16 spans two 8-GPU servers: slow, but simulated
    path = scenario(tmp_path, GPT, 16, {"tensor_model_parallel_size": 16}, seq_len=256,
                    grad_accum=1)
    code, out, err = run_main(capsys, "run", path, "-q", "--format", "json")
    assert code == 0, err

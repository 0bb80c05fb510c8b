"""Run the H100 rows of shared/validation-data/training/llm_foundry_fsdp.csv on the shipped
dgx-h100-superpod topology and print simulated against published tokens/s per GPU.

Issue 16 checks only that the cluster exists, is right and the rows run; the compute
fidelity of these rows is issue 15's. MPT configs (mosaicml/llm-foundry scripts/train/yamls/
pretrain/mpt-*.yaml: d_model, n_layers, n_heads, expansion_ratio 4, vocab 50368, no bias)
are written as model YAMLs; ALiBi is taken as rope (neither has position tables). FP8 rows
are skipped: training.precision has no fp8.

    .venv/bin/python benchmarks/llm_foundry_h100_rows.py [CSV]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pandas as pd

from simulator.pipeline import build_setup, run_setup
from simulator.scenario import scenario_from_dict

_REPO = Path(__file__).resolve().parents[1]
_REL = "shared/validation-data/training/llm_foundry_fsdp.csv"
# ../shared next to the repository (main checkout), or two levels up (a worktree in wt/)
CSV = next((p / _REL for p in (_REPO.parent, _REPO.parents[1]) if (p / _REL).is_file()),
           _REPO.parent / _REL)
MPT = {"125m": (768, 12, 12), "350m": (1024, 24, 16), "760m": (1536, 24, 12),
       "1b": (2048, 24, 16), "3b": (2560, 32, 20), "7b": (4096, 32, 32),
       "13b": (5120, 40, 40), "30b": (7168, 48, 64), "70b": (8192, 80, 64)}


def model_file(folder: Path, size: str, seq_len: int) -> str:
    hidden, layers, heads = MPT[size]
    path = folder / f"mpt-{size}-{seq_len}.yaml"
    path.write_text(f"name: mpt-{size}\nfamily: gpt\nsource: llm-foundry mpt-{size}.yaml\n"
                    f"layers: {layers}\nhidden: {hidden}\nheads: {heads}\n"
                    f"ffn_hidden: {4 * hidden}\nvocab: 50368\nmax_seq_len: {seq_len}\n"
                    f"mlp: gelu\nnorm: layernorm\ntied_embeddings: true\nbias: false\n"
                    f"position_embedding: rope\n")
    return str(path)


def simulate(row, folder: Path) -> float:
    scn = scenario_from_dict({
        "name": f"llmfoundry-{row.model}-{row.seq_len}-{row.gpus}",
        "model": model_file(folder, row.model, int(row.seq_len)),
        "training": {"micro_batch": int(row.micro_batch), "seq_len": int(row.seq_len),
                     "grad_accum": int(row.grad_accum), "precision": "bf16"},
        "cluster": {"topology": "dgx-h100-superpod", "nodes": max(int(row.gpus) // 8, 1),
                    "gpus": int(row.gpus)},
        "strategy": {"name": "fsdp", "sharding": "FULL_SHARD",
                     "activation_checkpointing": bool(row.activation_checkpointing)},
    })
    return run_setup(build_setup(scn, "<llm-foundry>")).metrics.tokens_per_s_per_gpu


def main(csv: Path = CSV) -> None:
    df = pd.read_csv(csv)
    rows = df[df["gpu_type"].str.startswith("h100")]
    print("table,model,seq_len,gpus,measured_tok_s_gpu,simulated_tok_s_gpu,error")
    errors = []
    with tempfile.TemporaryDirectory() as tmp:
        for row in rows.itertuples(index=False):
            if row.precision != "amp_bf16":
                print(f"{row.table},{row.model},{row.seq_len},{row.gpus},"
                      f"{row.tokens_per_s_per_gpu},,skipped ({row.precision})")
                continue
            sim = simulate(row, Path(tmp))
            err = sim / row.tokens_per_s_per_gpu - 1
            errors.append(abs(err))
            print(f"{row.table},{row.model},{row.seq_len},{row.gpus},"
                  f"{row.tokens_per_s_per_gpu},{sim:.0f},{err:+.1%}")
    s = pd.Series(errors)
    print(f"# {len(errors)} rows run: median |error| {s.median():.1%}, "
          f"max {s.max():.1%}, within 15%: {(s <= 0.15).sum()}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else CSV)

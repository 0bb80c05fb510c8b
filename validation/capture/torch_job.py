"""One rank of a PyTorch FSDP2 or DDP training job (gloo, CPU), profiled with torch.profiler.

Started once per rank by ``capture.py`` inside that rank's network namespace, with RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT and GLOO_SOCKET_IFNAME set. Steps:
``--warmup`` (not timed) + ``--timed`` (timed, profiler idle) + 1 profiler warm-up step +
``--profiled`` (timed and traced, ``ProfilerStep#N`` markers). Writes
``OUT/rank{R}.pt.trace.json.gz`` (Kineto JSON, CPU activities, record_shapes=True) and
``OUT/rank{R}.steps.json`` (wall-clock time of every step).
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, schedule

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model_config import ModelConfig, job_parser  # noqa: E402


class Block(nn.Module):
    """Pre-LayerNorm transformer block with explicit attention matmuls (shapes in the trace)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        d = cfg.d_model
        self.heads = cfg.heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, cfg.d_ff)
        self.fc2 = nn.Linear(cfg.d_ff, d)
        mask = torch.triu(torch.ones(cfg.seq_len, cfg.seq_len, dtype=torch.bool), 1)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape                                                   # (B, T, C)
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / (c // self.heads) ** 0.5)  # (B, H, T, T)
        att = F.softmax(att.masked_fill(self.mask[:t, :t], float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class TinyGPT(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos = nn.Embedding(cfg.seq_len, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.blocks))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


def wrap(model: nn.Module, strategy: str) -> nn.Module:
    if strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP
        return DDP(model)
    if strategy == "fsdp2":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        for blk in model.blocks:
            fully_shard(blk, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return model
    raise ValueError(f"strategy(={strategy!r}) must be 'ddp' or 'fsdp2'")


def main() -> None:
    p = job_parser()
    p.add_argument("--strategy", required=True, choices=["ddp", "fsdp2"])
    a = p.parse_args()

    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    cfg = ModelConfig()
    torch.manual_seed(a.seed)                      # same initial weights on every rank
    model = wrap(TinyGPT(cfg), a.strategy)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9)
    gen = torch.Generator().manual_seed(a.seed + 1 + rank)   # each rank its own data
    batches = [torch.randint(cfg.vocab, (cfg.batch_per_rank, cfg.seq_len + 1), generator=gen)
               for _ in range(4)]

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    trace_json = out / f"rank{rank}.pt.trace.json"
    wait = a.warmup + a.timed
    total = wait + 1 + a.profiled

    def on_ready(prof) -> None:
        prof.export_chrome_trace(str(trace_json))

    step_s, step_end_unix, losses = [], [], []
    sched = schedule(wait=wait, warmup=1, active=a.profiled, repeat=1)
    dist.barrier()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, schedule=sched,
                 on_trace_ready=on_ready) as prof:
        t_prev = time.perf_counter()
        for step in range(total):
            batch = batches[step % len(batches)]
            x, y = batch[:, :-1], batch[:, 1:]
            opt.zero_grad(set_to_none=True)
            logits = model(x)
            loss = F.cross_entropy(logits.reshape(-1, cfg.vocab), y.reshape(-1))
            loss.backward()
            opt.step()
            t = time.perf_counter()
            step_s.append(t - t_prev)
            step_end_unix.append(time.time())
            losses.append(float(loss.detach()))
            t_prev = t
            prof.step()
    dist.barrier()
    dist.destroy_process_group()

    with open(trace_json, "rb") as src, gzip.open(str(trace_json) + ".gz", "wb", 9) as dst:
        shutil.copyfileobj(src, dst)
    trace_json.unlink()
    kinds = (["warmup"] * a.warmup + ["timed"] * a.timed + ["profiler_warmup"]
             + ["profiled"] * a.profiled)
    (out / f"rank{rank}.steps.json").write_text(json.dumps({
        "rank": rank, "world_size": world, "strategy": a.strategy, "threads": a.threads,
        "torch": torch.__version__, "pid": os.getpid(),
        "affinity": sorted(os.sched_getaffinity(0)), "model": cfg.as_dict(),
        "step_s": step_s, "step_end_unix": step_end_unix, "step_kind": kinds,
        "loss": losses}, indent=1))


if __name__ == "__main__":
    main()

"""The ``compare`` and ``reliability`` commands of a study, over their public functions.

* ``compare``: :func:`simulator.compare.runner.compare` on the point's scenario, one row per
  strategy (``options.strategies``, names as ``clustersim compare --strategies``).
* ``reliability``: :func:`simulator.reliability.study.run_study` (``options.trials`` runs of
  the whole job, seeded by the point's ``simulation.seed``), one row per point.

Their modules are imported only inside the point functions (and the options' checks), so
a study of another command never loads them.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

METRICS = ("iteration_time_s", "samples_per_s", "tokens_per_s", "tokens_per_s_per_gpu",
           "tflops_per_gpu", "mfu", "compute_s", "comm_s", "exposed_comm_s", "wait_s",
           "memory_wait_s", "gpu_utilization", "peak_memory_gib", "oom", "gpus")
COMPARE_COLUMNS = ("strategy", "framework", "strategy_status", "reason", *METRICS,
                   "worker_gpus", "global_batch", "oom_at", "comm_bytes_per_gpu", "scaling_gpus",
                   "scaling_efficiency", "usd_per_gpu_hour", "price", "cost_per_iteration_usd",
                   "cost_per_million_tokens_usd", "comm_wait_share", "extrapolated", "trust",
                   "kernels")
_LOST = ("checkpoint", "degraded", "recompute", "detection", "waiting", "restart", "restore")
RELIABILITY_COLUMNS = (
    "ettr_mean", "ettr_std", "ettr_p5", "ettr_p50", "ettr_p95", "goodput_tokens_per_s",
    "iteration_time_s", "interrupts_per_trial", "expected_mtti_s", "simulated_mtti_s",
    "downtime_mean_s", "downtime_p99_s", "recovery_mean_s", "recovery_p99_s",
    "checkpoints_per_trial", "checkpoint_interval_s", "completed", "lost_share",
    *(f"lost_{c}_s" for c in _LOST), "best_interval_s", "young_interval_s",
    "daly_interval_s", "gpus")


class _Options(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CompareOptions(_Options):
    strategies: list[str] = Field(default_factory=lambda: ["fsdp-full", "ddp"], min_length=1)
    scaling: bool = False              # also simulate twice the GPUs (scaling efficiency)
    capacity: bool = False             # also search the largest model that fits
    price_per_gpu_hour: float | None = Field(None, gt=0)
    instance: str | None = None        # a prices.yaml entry

    @field_validator("strategies")
    @classmethod
    def _known(cls, v: list[str]) -> list[str]:
        from ..compare.options import parse_strategies
        from ..errors import ConfigError
        try:
            return [n.key for n in parse_strategies(v)]
        except ConfigError as exc:
            raise ValueError(exc.reason) from None


class ReliabilityOptions(_Options):
    trials: int = Field(100, ge=1, le=100_000)
    search: bool = False               # also search the best checkpoint interval


def compare_point(scn, point: dict) -> list[dict]:
    """Every strategy of ``options.strategies`` on the point's scenario."""
    from ..compare.cost import resolve_price
    from ..compare.options import parse_strategies
    from ..compare.runner import compare
    from ..compare.trust import trust_of
    from ..topology.build import scenario_graph
    opts = CompareOptions.model_validate(point["options"])
    G = scenario_graph(scn)
    price = resolve_price(str(G.graph.get("gpu")), opts.price_per_gpu_hour, opts.instance,
                          topology=G.graph.get("name"))
    result = compare(scn, parse_strategies(opts.strategies), source=f"point {point['id']}",
                     price=price, scaling=opts.scaling, capacity=opts.capacity)
    trust = trust_of(result, scn.model, "the runs: docs/accuracy.md")
    label = price.label if price else ""
    return [_compare_row(r.as_dict(), result.cluster["gpus"], trust, label)
            for r in result.rows]


def _compare_row(d: dict, gpus: int, trust: str, price: str = "") -> dict:
    m, cost, scaling = d.get("metrics") or {}, d.get("cost") or {}, d.get("scaling_2x") or {}
    row = {"strategy": d["strategy"], "framework": d["framework"],
           "strategy_status": d["status"], "reason": d["reason"]}
    row.update({k: m.get(k) for k in METRICS if k != "gpus"})
    # gpus: what the job holds (the per-size answers group by it; cost charges it);
    # worker_gpus: the ranks that train (fewer for parameter servers on dedicated hosts).
    row.update(gpus=gpus, worker_gpus=m.get("world_size", gpus),
               global_batch=d.get("global_batch"),
               oom_at=d.get("oom_at") or "", comm_bytes_per_gpu=d.get("comm_bytes_per_gpu"),
               scaling_gpus=scaling.get("gpus"), scaling_efficiency=scaling.get("efficiency"),
               # the rate each point was priced at and where it comes from: points on
               # different GPUs take different default prices (prices.yaml)
               usd_per_gpu_hour=cost.get("usd_per_gpu_hour"), price=price,
               cost_per_iteration_usd=cost.get("per_iteration_usd"),
               cost_per_million_tokens_usd=cost.get("per_million_tokens_usd"),
               comm_wait_share=cost.get("comm_wait_share"),
               extrapolated=_brief(d.get("extrapolated")), trust=trust,
               # the kernel stack that prices the strategy's step (compare's "# kernels")
               kernels=d.get("kernels") or "")
    return row


def _brief(done: dict | None) -> str:
    """How a step was extrapolated from a few micro-steps, or "" when it was replayed."""
    from ..accum import brief
    return brief(done) if done else ""


def reliability_point(scn, point: dict) -> list[dict]:
    """``options.trials`` runs of the point's whole training job with failures."""
    from ..reliability.report import as_dict
    from ..reliability.study import run_study
    opts = ReliabilityOptions.model_validate(point["options"])
    st = run_study(scn, f"point {point['id']}", opts.trials, seed=scn.simulation.seed,
                   workers=1, with_search=opts.search, remember_steps=True)
    d = as_dict(st)
    ettr, lost = d["ettr"], d["seconds_lost"]
    found = d.get("interval_search") or {}
    row = {f"ettr_{k}": ettr.get(k) for k in ("mean", "std", "p5", "p50", "p95")}
    row.update(
        goodput_tokens_per_s=d["goodput_tokens_per_s"],
        iteration_time_s=next(iter(d["iteration_time_s"].values()), None),
        interrupts_per_trial=d["interrupts_per_trial"], expected_mtti_s=d["expected_mtti_s"],
        simulated_mtti_s=d["simulated_mtti_s"],
        downtime_mean_s=d["downtime_s"]["mean"], downtime_p99_s=d["downtime_s"]["p99"],
        recovery_mean_s=d["recovery_s"]["mean"], recovery_p99_s=d["recovery_s"]["p99"],
        checkpoints_per_trial=d["checkpoints_per_trial"],
        checkpoint_interval_s=d["checkpoint"]["interval_s"], completed=d["completed"],
        lost_share=d["share_of_wall"],
        **{f"lost_{c}_s": lost.get(c) for c in _LOST},
        best_interval_s=(found.get("best") or {}).get("interval_s"),
        young_interval_s=found.get("young_s"), daly_interval_s=found.get("daly_s"),
        gpus=d["world_size"])
    return [row]

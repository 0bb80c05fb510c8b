"""The candidate space of ``clustersim plan``: every parallel plan, micro-batch and
checkpointing mode a model and a cluster allow.

A candidate is a :class:`~simulator.strategies.parallel.plan.ParallelPlan` (tp, pp, vp and schedule,
cp, dp_replicate x dp_shard and the data-parallel mode, and for a mixture-of-experts model
the expert parallelism ep, :func:`expert_degrees`) plus the micro-batch and the
activation checkpointing mode; its micro-batches per step follow from the global batch
(``global_batch / (micro_batch x dp)``, whole, at most ``MAX_GRAD_ACCUM``). Only plans the model can run are listed
(:meth:`ParallelPlan.check`), and, until the model-parallel generator is in the build
(:func:`model_parallel_available`), only data-parallel ones.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterator

from ..errors import ConfigError
from ..models import ModelSpec
from ..scenario import MAX_GRAD_ACCUM
from ..strategies.frameworks.translate import has_ac_modes
from ..strategies.parallel.plan import ParallelPlan
from ..planwords import plan_words


@dataclass(frozen=True)
class Limits:
    """How wide the search goes (``clustersim plan`` options)."""

    max_tp: int = 16
    max_pp: int = 16
    max_cp: int = 4
    max_vp: int = 4
    max_micro_batch: int = 8
    max_ep: int = 64


@dataclass(frozen=True)
class Candidate:
    """One configuration to estimate (and maybe replay)."""

    plan: ParallelPlan
    micro_batch: int
    micro_batches: int           # per step per pipeline (grad_accum)
    ac: str                      # none | selective | full

    def label(self) -> str:
        """``tp8 pp4 vp2 cp1 dp 1x32 fsdp mb1 ac=full`` (``ep8`` after the cp when
        the experts are split)."""
        p = self.plan
        vp = f" vp{p.vp}" if p.vp > 1 else ""
        ep = f" ep{p.ep}" if p.ep > 1 else ""
        sched = f" {p.schedule}" if p.pp > 1 else ""
        return (f"tp{p.tp} pp{p.pp}{vp} cp{p.cp}{ep} dp {p.dp_replicate}x{p.dp_shard} "
                f"{p.dp_mode}{sched} mb{self.micro_batch} ac={self.ac}")

    def words(self) -> str:
        """The plan in words: ``tensor parallel 8 inside each server, pipeline 4 (1f1b),
        data parallel 8 (FSDP), micro-batch 1 x 16 a step, full activation
        checkpointing``; a degree of 1 is left out."""
        p = self.plan
        shape = f"{p.dp_replicate} replicas x {p.dp_shard} shards" \
            if p.dp_mode == "fsdp" and p.dp_replicate > 1 else ""
        ac = {"none": "no activation checkpointing"}.get(
            self.ac, f"{self.ac} activation checkpointing")
        degrees = plan_words(tp=p.tp, pp=p.pp, vp=p.vp, cp=p.cp,
                             dp=p.dp_replicate * p.dp_shard, dp_mode=p.dp_mode,
                             schedule=p.schedule, dp_shape=shape, ep=p.ep)
        return f"{degrees}, micro-batch {self.micro_batch} x {self.micro_batches} a step, {ac}"


def model_parallel_available() -> bool:
    """Whether this build replays tp/pp/cp plans (the model-parallel generator)."""
    try:
        from ..strategies.parallel import generate  # noqa: F401
    except ImportError:
        return False
    return True


def powers_of_two(most: int) -> list[int]:
    out, n = [], 1
    while n <= most:
        out.append(n)
        n *= 2
    return out


def ac_modes() -> tuple[str, ...]:
    return ("none", "selective", "full") if has_ac_modes() else ("none", "full")


def candidates(model: ModelSpec, world: int, global_batch: int, seq_len: int,
               limits: Limits = Limits(), model_parallel: bool | None = None
               ) -> Iterator[Candidate]:
    """Every candidate, in a fixed order (deterministic)."""
    if model_parallel is None:
        model_parallel = model_parallel_available()
    for plan in plans(model, world, seq_len, limits, model_parallel):
        for mb in powers_of_two(limits.max_micro_batch):
            m, rest = divmod(global_batch, mb * plan.dp)
            if rest or not 1 <= m <= MAX_GRAD_ACCUM or \
                    (plan.pp > 1 and not _schedule_fits(plan, m)):
                continue
            for ac in ac_modes():
                yield Candidate(plan, mb, m, ac)


def plans(model: ModelSpec, world: int, seq_len: int, limits: Limits,
          model_parallel: bool) -> Iterator[ParallelPlan]:
    """Every mesh the model can run on ``world`` GPUs."""
    one = [1]
    for tp in powers_of_two(limits.max_tp) if model_parallel else one:
        for pp in powers_of_two(limits.max_pp) if model_parallel else one:
            for cp in powers_of_two(limits.max_cp) if model_parallel else one:
                mp = tp * pp * cp
                if world % mp:
                    continue
                for base in _pipelines(pp, limits):
                    for dp_rep, dp_shard, mode in _data_parallel(world // mp, cp):
                        plan = ParallelPlan(pp=pp, tp=tp, cp=cp, dp_replicate=dp_rep,
                                            dp_shard=dp_shard, dp_mode=mode,
                                            sequence_parallel=tp > 1, **base)
                        for ep in expert_degrees(model, plan, limits):
                            expert = replace(plan, ep=ep)
                            if _runs(expert, model, world, seq_len):
                                yield expert


def expert_degrees(model: ModelSpec, plan: ParallelPlan, limits: Limits) -> list[int]:
    """Expert parallelism for ``plan``: 1, and for a mixture-of-experts model every other
    divisor of its routed experts up to ``limits.max_ep`` that divides the ``cp x dp``
    ranks an EP group is carved from with ``etp`` at its default (``tp``: the expert mesh
    of :mod:`~simulator.strategies.parallel.plan`, ``tp cp dp / (etp ep)``)."""
    if not model.is_moe:
        return [1]
    ranks = plan.tp * plan.cp * plan.dp // plan.expert_tp
    return [ep for ep in range(1, min(model.num_experts, limits.max_ep) + 1)
            if model.num_experts % ep == 0 and ranks % ep == 0]


def _pipelines(pp: int, limits: Limits) -> list[dict]:
    """Schedule and virtual stages: 1F1B, and interleaved 1F1B with every 2..``max_vp``
    virtual stages (those that split the layers evenly survive the plan's check: Llama 2
    70B's 80 layers on PP8 take 2 and 5, GPT-3's 96 on PP8 2, 3, 4 and 6)."""
    if pp == 1:
        return [{"schedule": "1f1b", "vp": 1}]
    out = [{"schedule": "1f1b", "vp": 1}]
    out += [{"schedule": "interleaved_1f1b", "vp": v} for v in range(2, limits.max_vp + 1)]
    return out


def _data_parallel(dp: int, cp: int) -> list[tuple[int, int, str]]:
    """(dp_replicate, dp_shard, dp_mode): FSDP over all, HSDP splits, DDP, and the
    distributed optimizer (zero1) over all. Under PP, FSDP is as torchtitan runs it there
    (its default ``reshard_after_forward`` never, torch.distributed.pipelining reducing
    after the last micro-batch): ``fsdp`` under a pipeline gathers a block once a step and
    keeps it until its one reduce-scatter. With context
    parallelism torchtitan shards over dp_shard x cp, so there is no DDP: replicating over
    every data-parallel rank is HSDP with its shards on the cp ranks."""
    splits = [(1, dp)] + [(r, dp // r) for r in powers_of_two(dp) if 1 < r < dp and dp % r == 0]
    if cp > 1 and dp > 1:
        splits.append((dp, 1))
    out = [(r, s, "fsdp") for r, s in splits] if dp * cp > 1 else [(1, 1, "ddp")]
    if dp > 1:
        out += [(dp, 1, "ddp")] if cp == 1 else []
        out.append((1, dp, "zero1"))
    return out


def _schedule_fits(plan: ParallelPlan, m: int) -> bool:
    """Interleaving needs whole rounds of pp micro-batches (Megatron's rule)."""
    return plan.vp == 1 or m % plan.pp == 0


def _runs(plan: ParallelPlan, model: ModelSpec, world: int, seq_len: int) -> bool:
    try:
        plan.check(model, world, seq_len=seq_len)
    except ConfigError:
        return False
    return True

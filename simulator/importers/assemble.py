"""Per-rank iterations -> one :class:`~simulator.trace.Trace`.

One file per rank gives one rank class per file (ranks from the files' ``distributedInfo``,
or the file order). A single file of a job of ``world_size`` ranks stands for all of them:
its rank class covers every rank (the job is assumed symmetric, as DDP and FSDP are).
Communicators are the process groups the collectives name; a group recorded by one rank
only (``[0, 1]`` from rank 0 of a 4-rank job) is tiled over the world when a single file is
replicated. Every class must issue the same number of collectives per process group and
stream, or the replay could not match them: that is checked here.
"""

from __future__ import annotations

from collections import Counter

from ..errors import ConfigError
from ..trace.schema import Communicator, RankClass, Trace
from .builder import build_ops
from .ir import RankTrace


def _ranks(parts: list[RankTrace]) -> tuple[list[int], int]:
    ids = [p.rank for p in parts]
    if any(i is None for i in ids):
        ids = list(range(len(parts)))          # no distributedInfo: the order given
    world = max([len(parts), *(p.world_size or 0 for p in parts), max(ids) + 1])
    seen: dict[int, str] = {}
    for i, p in zip(ids, parts):
        if i in seen:
            raise ConfigError(f"both this file and {seen[i]} are rank {i}", source=p.source)
        seen[i] = p.source
    missing = sorted(set(range(world)) - set(ids))
    if len(parts) > 1 and missing:
        raise ConfigError(f"the job has {world} ranks but no file for rank(s) "
                          f"{', '.join(map(str, missing[:8]))}; give one file per rank, or "
                          f"a single file to stand for every rank", source=parts[0].source)
    return ids, world


def _groups(pg: str, parts: list[RankTrace], world: int,
            replicated: bool) -> tuple[tuple[int, ...], ...]:
    seen = {c.ranks for p in parts for c in p.comms if c.pg == pg and c.ranks}
    if not seen:
        seen = {p.pg_ranks[pg] for p in parts if pg in p.pg_ranks}
    if not seen:
        return (tuple(range(world)),)
    groups = sorted(seen)
    if replicated and len(groups) == 1:
        g = groups[0]
        n = len(g)
        if world % n == 0 and g == tuple(range(g[0], g[0] + n)) and g[0] % n == 0:
            return tuple(tuple(range(s, s + n)) for s in range(0, world, n))
    return tuple(groups)


def _check_matching(classes: list[RankClass], comms: dict[str, Communicator]) -> None:
    """Every class in a communicator issues as many collectives on it per stream."""
    for cid, comm in comms.items():
        members = {r for g in comm.groups for r in g}
        counts = {}
        for cls in classes:
            if members & set(cls.ranks):
                counts[cls.id] = Counter(op.stream for op in cls.ops if op.comm == cid)
        if len({tuple(sorted(c.items())) for c in counts.values()}) > 1:
            detail = "; ".join(f"{k}: {sum(c.values())}" for k, c in counts.items())
            raise ConfigError(f"ranks issue different numbers of collectives on process group "
                              f"{cid[3:]} in the chosen iteration ({detail}); choose the same "
                              f"step on every rank (--step) and files of one job",
                              source=", ".join(cls.id for cls in classes))


def recorded_iteration(part: RankTrace) -> float:
    """Seconds from the iteration's start until everything it started had finished (the
    host step, or later if GPU work or a collective ran past it): what the replay's
    iteration time measures."""
    ends = [part.window[1], *(o.end for o in (*part.device_ops, *part.comms))]
    return max(ends) - part.window[0]


def assemble(parts: list[RankTrace], framework: str) -> Trace:
    """The Trace of ``parts`` (one per file).

    :raises ConfigError: duplicate or missing ranks, or collectives that do not match.
    """
    ids, world = _ranks(parts)
    replicated = len(parts) == 1
    classes = []
    for i, p in zip(ids, parts):
        ranks = tuple(range(world)) if replicated else (i,)
        classes.append(RankClass("all" if replicated and world > 1 else f"rank{i}", ranks,
                                 build_ops(p)))
    pgs = sorted({op.comm[3:] for c in classes for op in c.ops if op.kind == "collective"})
    comms = {f"pg:{pg}": Communicator(f"pg:{pg}", _groups(pg, parts, world, replicated))
             for pg in pgs}
    _check_matching(classes, comms)
    if not any(c.ops for c in classes):
        raise ConfigError("the chosen step holds no GPU kernel, collective or CPU op to "
                          "replay (an empty or damaged profile?)",
                          source=", ".join(p.source for p in parts[:3]))
    first = parts[0]
    meta = {"model": "imported", "strategy": f"{framework} trace", "framework": framework,
            "files": [p.source for p in parts], "step": first.step,
            "recorded_step_s": max(p.window[1] - p.window[0] for p in parts),
            "recorded_iteration_s": max(recorded_iteration(p) for p in parts),
            "recorded_step_s_per_class": {c.id: p.window[1] - p.window[0]
                                          for c, p in zip(classes, parts)},
            "host": first.host_kind, "replicated": replicated and world > 1,
            "global_batch": 0, "tokens_per_sample": 0, "model_flops_per_iteration": 0.0,
            **{k: v for k, v in first.meta.items() if k in ("gpu", "backend", "steps")}}
    trace = Trace(world, classes, comms, meta)
    trace.validate()
    return trace


def with_model(trace: Trace, model: str, global_batch: int, seq_len: int | None) -> Trace:
    """``trace`` with what its profile cannot say filled in from the model it ran: samples
    per step across the job (``global_batch``), tokens per sample and model FLOPs per step
    (:func:`~simulator.models.model_flops_per_sample`), so a replay reports throughput and
    MFU (``model``: a catalog name or a model YAML; ``seq_len``: a transformer's).

    :raises ConfigError: for an unknown model, a batch below 1, or a transformer without
        ``seq_len`` (an image model takes none).
    """
    from ..models import load_model, model_flops_per_sample, tokens_per_sample
    spec = load_model(model)
    if global_batch < 1:
        raise ConfigError(f"must be at least 1, got {global_batch}", field="--global-batch")
    if spec.is_transformer and seq_len is None:
        raise ConfigError(f"{spec.name} is a transformer: give its --seq-len",
                          field="--seq-len")
    if not spec.is_transformer and seq_len is not None:
        raise ConfigError(f"{spec.name} has no sequence length", field="--seq-len")
    length = seq_len or 0
    meta = {**trace.meta, "model": spec.name, "global_batch": global_batch,
            "tokens_per_sample": tokens_per_sample(spec, length),
            "model_flops_per_iteration": model_flops_per_sample(spec, length) * global_batch}
    return Trace(trace.world_size, trace.classes, trace.communicators, meta)

"""Memory verdicts for ``clustersim capacity``: the strategies to compare (``--strategies``,
named as :mod:`simulator.choices` names them) and the replay of one ladder rung under one
of them (:class:`Prober`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..accum import plan_accum, plan_trace
from ..choices import (NAMED_STRATEGIES, NamedStrategy, framework_of, parse_strategy_names,
                       registry_spelling)
from ..errors import ConfigError
from ..models import ModelSpec
from ..pipeline import (Setup, build_setup, make_trace, portable_finetune, run_setup,
                        with_gpu_fp8)
from ..pipeline import strategy_dict as strategy_dict_of
from ..scenario import Scenario
from ..strategies import SHARDINGS, STRATEGIES, World, parse_strategy
from .host import host_need
from .ladder import Rung

GIB = 1 << 30


# ------------------------------------------------------------------------- strategies
@dataclass(frozen=True)
class StrategySpec:
    """A strategy of ``--strategies`` (``ddp``, ``fsdp:SHARDING``...) as ``text`` spelled it."""

    text: str
    name: str
    sharding: str | None
    options: tuple = ()          # dotted strategy keys a framework variant sets

    @property
    def label(self) -> str:
        return self.text if self.options else registry_spelling(self.name, self.sharding)


def spec_of(named: NamedStrategy, text: str | None = None) -> StrategySpec:
    """The spec of a named strategy, spelled ``text`` [default: its compare key]."""
    return StrategySpec(named.key if text is None else text, named.strategy, named.sharding,
                        named.options)


# Keys of the scenario's strategy every strategy understands (the rest, such as FSDP's
# prefetch options, are kept only when the scenario's strategy has the same name).
_COMMON_KEYS = ("activation_checkpointing", "selective_ac_option", "activation_offload",
                "optimizer", "param_dtype", "reduce_dtype", "optimizer_impl")
_SHARDING_KEYS = ("sharding", "shard_group_size", "reshard_after_forward", "mesh")
_SHARDED = {n.strategy for n in NAMED_STRATEGIES.values() if n.sharding}


def _unknown(item: str) -> str:
    """Why ``item`` names no strategy, in the registry's spelling."""
    name, _, sharding = item.partition(":")
    name, sharding = name.strip().lower(), sharding.strip().upper()
    if name not in STRATEGIES or not sharding:
        return (f"unknown strategy {name!r} in {item!r}; valid: {', '.join(STRATEGIES)} "
                f"(fsdp:SHARDING for a sharding mode)")
    if name not in _SHARDED:
        return f"{name} takes no sharding mode, got {item!r}; use {name} or fsdp:{sharding}"
    return f"unknown FSDP sharding {sharding!r} in {item!r}; valid: {', '.join(SHARDINGS)}"


def parse_strategy_specs(text: str | list[str] | tuple[str, ...]) -> list[StrategySpec]:
    """``"ddp,fsdp:FULL_SHARD"`` -> specs; ConfigError (``--strategies``) when unknown.

    Every spelling of :func:`simulator.choices.strategy_named` is accepted (``fsdp-full``
    as well); a spec's ``label`` is the registry spelling.
    """
    named = parse_strategy_names(text, _unknown, "; write e.g. ddp,fsdp:FULL_SHARD")
    return [spec_of(n, item) for n, item in named.items()]


def strategy_dict(scn: Scenario, spec: StrategySpec) -> dict:
    """The scenario's strategy mapping, switched to ``spec``."""
    base = dict(scn.strategy)
    if base.get("name") == spec.name:
        data = {k: v for k, v in base.items() if k not in _SHARDING_KEYS}
    else:
        data = {k: base[k] for k in _COMMON_KEYS if k in base}
        if framework_of(spec.name) != framework_of(base.get("name", "")):
            data.pop("optimizer_impl", None)     # PyTorch's choice; TensorFlow's is fused
    data["name"] = spec.name
    if spec.sharding is not None:
        data["sharding"] = spec.sharding
    for key, value in spec.options:          # megatron:tp8pp2 -> its degrees
        *path, last = key.split(".")
        node = data
        for part in path:
            node[part] = node = dict(node.get(part) or {})
        node[last] = value
    return data


# ------------------------------------------------------------------------------ probes
@dataclass
class Probe:
    """The memory verdict of one rung under one strategy."""

    rung: Rung
    fits: bool
    peak_gib: float
    static_gib: float
    oom_at: str | None
    replayed: bool
    iteration_time_s: float | None = None
    tokens_per_s_per_gpu: float | None = None
    mfu: float | None = None
    extrapolated: dict | None = None   # a step extrapolated from a few replays: how (accum)

    def as_dict(self) -> dict:
        d = {"model": self.rung.model.name, "params": self.rung.params,
             "kind": self.rung.kind, "fits": self.fits, "replayed": self.replayed,
             "peak_memory_gib": round(self.peak_gib, 3),
             "static_memory_gib": round(self.static_gib, 3), "oom_at": self.oom_at,
             "iteration_time_s": self.iteration_time_s,
             "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu, "mfu": self.mfu}
        if self.extrapolated:
            d["extrapolated"] = self.extrapolated
        return d


# Model of the base Setup (cluster, cost models, capacity) that rungs' traces replace:
# rotary positions, so any seq_len is valid.
BASE_MODEL = "llama-2-7b"


class Prober:
    """Replays rungs under one strategy and training setup, caching verdicts."""

    def __init__(self, scn: Scenario, spec: StrategySpec, source: str = "<scenario>"):
        self.spec = spec
        scn = portable_finetune(scn)
        self.scn = scn.model_copy(update={"model": BASE_MODEL, "strategy":
                                          strategy_dict(scn, spec)}, deep=True)
        try:
            self.base: Setup = build_setup(self.scn, source)
        except ConfigError as exc:   # a sharding this world cannot lay out...
            if not (exc.field or "").startswith("strategy"):
                raise
            raise ConfigError(f"{spec.text}: {exc.field}: {exc.reason}",
                              source="--strategies") from None
        self.cfg = parse_strategy(strategy_dict_of(self.scn), source=source)
        n = self.base.trace.world_size
        self.world = World(n, min(int(self.base.cluster.G.graph["gpus_per_node"]), n))
        self.cache: dict[str, Probe] = {}
        self.replays = 0
        self.adopted: dict[str, tuple[ModelSpec, object]] = {}
        self.host_unchecked = False     # cpu_offload on a topology without a host figure

    def setup_for(self, model: ModelSpec) -> Setup:
        """The Setup of ``self.base`` with ``model``'s trace (as build_setup makes it: a
        step of many identical micro-steps gets the few replays of :mod:`simulator.accum`)."""
        model = with_gpu_fp8(model, self.base.compute.gpu)
        def make(cfg) -> object:
            return make_trace(self.scn, model, cfg, self.world)
        plan = plan_accum(self.cfg, self.scn.training, make)
        if plan is None:
            return dataclasses.replace(self.base, trace=make(self.cfg), accum=None)
        return dataclasses.replace(self.base, trace=plan_trace(plan), accum=plan)

    def lays_out(self, model: ModelSpec) -> bool:
        """Whether this strategy's parallel plan can split ``model`` at all (its degrees
        divide the heads and layers; a plan-less strategy always can): a rung it cannot
        split is no candidate for it, rather than a failure of the whole search."""
        plan_of = getattr(self.cfg, "plan", None)
        if not callable(plan_of):
            return True
        n = self.world.world_size
        try:
            plan_of(n).check(model, n, seq_len=self.scn.training.seq_len)
        except ConfigError:
            return False
        return True

    def adopt(self, model: ModelSpec, result) -> None:
        """Use ``result`` (a RunResult of ``model`` under this prober's scenario, strategy
        and cluster, such as compare's own row) for the rung whose model equals ``model``
        instead of replaying the same iteration again."""
        self.adopted[model.name] = (model, result)

    def _replay(self, model: ModelSpec, setup: Setup):
        known = self.adopted.pop(model.name, None)
        if known is not None and known[0] == model:
            return known[1]
        self.replays += 1
        return run_setup(setup)

    def probe(self, rung: Rung) -> Probe:
        key = rung.model.name
        if key in self.cache:
            return self.cache[key]
        setup = self.setup_for(rung.model)
        static = max((c.static_memory_bytes for c in setup.trace.classes), default=0)
        host = host_need(self.cfg, setup.trace.meta, rung.params, self.world.gpus_per_node,
                         str(setup.cluster.G.graph.get("name")))
        self.host_unchecked = self.host_unchecked or (host is not None and
                                                      host.have_bytes is None)
        if host is not None and not host.fits:
            p = Probe(rung, False, static / GIB, static / GIB,
                      f"host memory (cpu_offload: {host.need_bytes / GIB:,.0f} GiB per server "
                      f"> {host.have_bytes / GIB:,.0f} GiB; not replayed)", False)
        elif 0 < setup.capacity_bytes < static:
            p = Probe(rung, False, static / GIB, static / GIB,
                      "static memory (not replayed)", False)
        else:
            res = self._replay(rung.model, setup)
            m = res.metrics
            oom = "; ".join(locate_oom(res.timeline, c, str(v))
                            for c, v in m.oom_at.items()) if m.oom else None
            p = Probe(rung, not m.oom, m.peak_memory_gib, static / GIB, oom, True,
                      m.iteration_time_s, m.tokens_per_s_per_gpu, m.mfu,
                      res.extrapolation.as_dict() if res.extrapolation else None)
        self.cache[key] = p
        return p


def locate_oom(tl, cls_id: str, op_name: str) -> str:
    """``op_name`` with its layer and phase (``norm1 (block.3 forward)``): the op that
    started when the memory of ``cls_id`` first went above the capacity."""
    cap = tl.capacity_bytes
    when = next((t for t, b in tl.memory.get(cls_id, ()) if cap and b > cap), None)
    if when is None:
        return op_name
    for r in tl.records:
        if r.cls == cls_id and r.name == op_name and r.start_s == when:
            where = r.phase if r.layer and r.layer in op_name else f"{r.layer} {r.phase}"
            return f"{op_name} ({where.strip()})"
    return op_name


__all__ = ["BASE_MODEL", "GIB", "Probe", "Prober", "StrategySpec", "locate_oom",
           "parse_strategy_specs", "spec_of", "strategy_dict"]

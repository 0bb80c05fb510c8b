"""Largest model of a family that fits per strategy on a cluster (``clustersim capacity``).

The question "how big a model can I train here with DDP, with FSDP?" is answered with the
engine's own memory verdict, not a formula: for each strategy we replay one iteration of
candidate models (the scenario's training settings) and read ``metrics.oom`` and
``metrics.peak_memory_gib``, binary-searching a *size ladder* of the family for the largest
model that fits. See ``docs/capacity.md`` for what it finds on one DGX A100.

Size ladder
-----------
A family's ladder is its real configurations from the catalog (the *anchors*: Llama-2
7B/13B/34B/70B; GPT-3 1.3B/2.7B/6.7B/13B/175B) plus generated decoder configs between
them, so that consecutive rungs differ by about :data:`STEP` (15 %) in parameters. The
rule, between two consecutive anchors A and B (``n = ceil(ln(P_B / P_A) / ln(1 + STEP))``
intervals, rung ``k`` at ``x = k / n``):

* ``layers`` and ``hidden`` are interpolated geometrically, ``exp((1 - x) ln A + x ln B)``,
  which follows the family's own aspect ratio (hidden / layers) from one anchor to the
  next; since parameters grow as ``layers * hidden^2`` this spaces rungs evenly in
  log-parameters. ``layers`` is rounded to an integer and ``hidden`` to a multiple of
  the head width :data:`HEAD_DIM` (128, as in every Llama-2 and most GPT-3 models), up or
  down, whichever of the four pairs comes closest to the rung's target parameter count
  (the geometric interpolation of the anchors' counts); ``heads = hidden / 128``;
* MLP width: GPT ``4 * hidden``; Llama ``ffn/hidden`` interpolated linearly in ``x``
  (2.6875 up to 34B, 3.5 for 70B) and rounded up to a multiple of 256, as Llama's
  ``multiple_of`` does;
* attention: grouped-query with the anchors' 8 KV heads when both anchors use GQA
  (Llama between 34B and 70B), else multi-head;
* everything else (vocabulary, norms, biases, positions, tied embeddings) as anchor A.

Below the smallest anchor the ladder is extrapolated with the slope of the first two
anchors (``x < 0``) down to about :data:`FLOOR_PARAMS` (1B), keeping the smallest anchor's
MLP ratio and attention type: DDP's answer on 80 GB GPUs lies below 7B. The ladder ends at
the largest anchor; a strategy that fits it is reported as "top of the ladder fits".
Generated rungs are built with :func:`simulator.models.parse_model` (so they are checked
like any model file) and rungs within 3 % of a neighbour are dropped.

Search
------
Memory grows with parameters along the ladder, so the largest fitting rung is found by
bisection (:func:`largest_fitting`), about ``log2(len(ladder))`` replays per strategy. A
rung whose *static* memory (weights + gradients + optimizer state, ``Trace.meta``) alone
exceeds the GPU's memory is rejected without a replay (the "fast path"; reported as
``static memory (not replayed)`` with the static size as its peak).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Callable

from .errors import ConfigError
from .models import ModelSpec, load_model, parse_model
from .models.transformer import block_params, embed_params, head_params
from .pipeline import Setup, build_setup, make_trace, run_setup
from .pipeline import strategy_dict as strategy_dict_of
from .scenario import Scenario
from .strategies import SHARDINGS, STRATEGIES, World, parse_strategy

GIB = 1 << 30
STEP = 0.15                 # target parameter ratio between rungs (+15 %)
FLOOR_PARAMS = 1.0e9        # extrapolate the ladder down to about this many parameters
DEDUP = 0.03                # drop a rung within 3 % of the previous one
HEAD_DIM = 128

FAMILIES: dict[str, tuple[str, ...]] = {
    "llama": ("llama-2-7b", "llama-2-13b", "llama-2-34b", "llama-2-70b"),
    "gpt": ("gpt3-1.3b", "gpt3-2.7b", "gpt3-6.7b", "gpt3-13b", "gpt3-175b"),
}
DEFAULT_STRATEGIES = ("ddp", "fsdp:FULL_SHARD", "fsdp:SHARD_GRAD_OP", "fsdp:HYBRID_SHARD")

# Folk claim checked by the command: 8 x A100-80GB, DDP ~7B, FSDP ~30B (FULL_SHARD).
CLAIM = {"gpu": "A100", "gib": 80, "gpus": 8, "ddp": 7e9, "fsdp:FULL_SHARD": 30e9}
CLAIM_TEXT = "on 8x A100-80GB, DDP trains about 7B, FSDP about 30B"
CLAIM_TOLERANCE = 1.25      # "about": within a factor 1.25 either way


# ----------------------------------------------------------------------------- ladder
@dataclass(frozen=True)
class Rung:
    """One model of the ladder; ``kind`` is ``catalog``, ``interpolated`` or
    ``extrapolated``."""

    model: ModelSpec
    params: int
    kind: str


def _shape(m: ModelSpec) -> dict:
    return {"layers": m.layers, "hidden": m.hidden, "ffn_ratio": m.ffn_hidden / m.hidden,
            "gqa": m.kv_heads < m.heads, "kv_heads": m.kv_heads}


def _generate(family: str, a: ModelSpec, b: ModelSpec, x: float, target: float,
              kind: str) -> ModelSpec:
    """The rung at ``x`` on the geometric path from anchor ``a`` (0) to ``b`` (1).

    ``layers`` and ``hidden`` are rounded (to an integer, to a multiple of HEAD_DIM) to the
    neighbouring pair whose parameter count is closest to ``target``, the geometric
    interpolation of the anchors' counts, so rungs stay evenly spaced despite rounding.
    """
    def geo(u: float, v: float) -> float:
        return math.exp((1 - x) * math.log(u) + x * math.log(v))

    sa, sb = _shape(a), _shape(b)
    ratio = sa["ffn_ratio"] if x <= 0 else (1 - x) * sa["ffn_ratio"] + x * sb["ffn_ratio"]
    L0, H0 = geo(a.layers, b.layers), geo(a.hidden, b.hidden)
    where = (f"between {a.name} and {b.name} at x={x:.3f}" if kind == "interpolated" else
             f"below {a.name} along the {a.name} -> {b.name} slope, x={x:.3f}")

    def make(layers: int, hidden: int) -> ModelSpec:
        heads = hidden // HEAD_DIM
        ffn = 256 * math.ceil(ratio * hidden / 256) if family == "llama" else 4 * hidden
        gqa = sa["gqa"] and (sb["gqa"] or x <= 0)
        kv = math.gcd(heads, sa["kv_heads"]) if gqa else heads
        name = f"{family}-{kind}-{layers}x{hidden}"      # renamed by _renamed
        data = {"name": name, "family": a.family,
                "source": f"generated by clustersim capacity ({kind} {where}; see "
                          f"simulator/capacity.py)",
                "layers": layers, "hidden": hidden, "heads": heads, "kv_heads": kv,
                "ffn_hidden": ffn, "vocab": a.vocab, "max_seq_len": a.max_seq_len,
                "mlp": a.mlp, "norm": a.norm, "tied_embeddings": a.tied_embeddings,
                "bias": a.bias, "position_embedding": a.position_embedding}
        return parse_model(data, f"<capacity ladder {name}>")

    best = None
    for layers in {max(1, math.floor(L0)), max(1, math.ceil(L0))}:
        for units in {max(1, math.floor(H0 / HEAD_DIM)), max(1, math.ceil(H0 / HEAD_DIM))}:
            m = make(layers, units * HEAD_DIM)
            miss = abs(math.log(_params(m) / target))
            shape = abs(math.log(layers / L0)) + abs(math.log(units * HEAD_DIM / H0))
            if best is None or (miss, shape) < best[0]:
                best = ((miss, shape), m)
    return best[1]


def _params(m: ModelSpec) -> int:
    """``params_total`` of a transformer without building its layers (same formulas)."""
    return embed_params(m) + m.layers * block_params(m) + head_params(m)


def _renamed(m: ModelSpec, kind: str) -> ModelSpec:
    """Name a generated rung after its real parameter count."""
    if kind == "catalog":
        return m
    tag = "interp" if kind == "interpolated" else "extrap"
    prefix = "gpt3" if m.family == "gpt" else m.family
    return dataclasses.replace(m, name=f"{prefix}-{tag}-{_params(m) / 1e9:.3g}b")


def build_ladder(family: str, step: float = STEP, floor: float = FLOOR_PARAMS,
                 min_seq_len: int = 0) -> list[Rung]:
    """The size ladder of ``family`` ordered by parameter count (see the module doc).

    :param min_seq_len: learned position tables (GPT) are extended to at least this many
        positions, so every rung can train at the scenario's ``seq_len``.
    :raises ConfigError: unknown family.
    """
    key = family.lower()
    if key not in FAMILIES:
        raise ConfigError(f"unknown family {family!r}; valid: {', '.join(FAMILIES)}",
                          source="--family")
    anchors = [load_model(n) for n in FAMILIES[key]]
    if min_seq_len:
        anchors = [dataclasses.replace(m, max_seq_len=max(m.max_seq_len, min_seq_len))
                   if m.position_embedding == "learned" else m for m in anchors]
    sizes = [_params(m) for m in anchors]
    log_step = math.log1p(step)
    cands: list[tuple[ModelSpec, str]] = []
    # extrapolation below the smallest anchor, along the first interval's slope
    a, b = anchors[0], anchors[1]
    n = max(1, math.ceil(math.log(sizes[1] / sizes[0]) / log_step))
    k = 1
    while sizes[0] * (sizes[1] / sizes[0]) ** (-k / n) >= floor * (1 - step / 2):
        hint = sizes[0] * (sizes[1] / sizes[0]) ** (-k / n)
        cands.append((_generate(key, a, b, -k / n, hint, "extrapolated"), "extrapolated"))
        k += 1
    for i, (a, b) in enumerate(zip(anchors, anchors[1:])):
        cands.append((a, "catalog"))
        n = max(1, math.ceil(math.log(sizes[i + 1] / sizes[i]) / log_step))
        for k in range(1, n):
            hint = sizes[i] * (sizes[i + 1] / sizes[i]) ** (k / n)
            cands.append((_generate(key, a, b, k / n, hint, "interpolated"), "interpolated"))
    cands.append((anchors[-1], "catalog"))
    rungs = sorted((Rung(_renamed(m, kind), _params(m), kind) for m, kind in cands),
                   key=lambda r: (r.params, r.kind != "catalog"))
    out: list[Rung] = []
    for r in rungs:     # keep catalog models; drop generated rungs too close to a neighbour
        if out and r.params < out[-1].params * (1 + DEDUP):
            if r.kind != "catalog":
                continue
            if out[-1].kind != "catalog":
                out.pop()
        out.append(r)
    if len({r.model.name for r in out}) != len(out):   # names key the probe cache
        raise AssertionError(f"duplicate rung names in the {key} ladder")
    return out


# ----------------------------------------------------------------------------- search
def largest_fitting(n: int, fits: Callable[[int], bool]) -> int:
    """Largest index ``i < n`` with ``fits(i)``, assuming ``fits`` is monotone (true up to
    a boundary, false after it); -1 when none fits. Calls ``fits`` about ``log2 n`` times."""
    lo, hi = -1, n          # invariant: fits(lo) (or lo = -1), not fits(hi) (or hi = n)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo


# ------------------------------------------------------------------------- strategies
@dataclass(frozen=True)
class StrategySpec:
    """``ddp`` or ``fsdp[:SHARDING]`` from ``--strategies``."""

    text: str
    name: str
    sharding: str | None

    @property
    def label(self) -> str:
        return self.name if self.sharding is None else f"{self.name}:{self.sharding}"


# Keys of the scenario's strategy every strategy understands (the rest, such as FSDP's
# prefetch options, are kept only when the scenario's strategy has the same name).
_COMMON_KEYS = ("activation_checkpointing", "optimizer", "param_dtype", "reduce_dtype")
_SHARDING_KEYS = ("sharding", "shard_group_size", "reshard_after_forward", "mesh")


def parse_strategy_specs(text: str | list[str] | tuple[str, ...]) -> list[StrategySpec]:
    """``"ddp,fsdp:FULL_SHARD"`` -> specs; ConfigError (``--strategies``) when unknown."""
    items = text.split(",") if isinstance(text, str) else list(text)
    specs: list[StrategySpec] = []
    for raw in items:
        item = raw.strip()
        if not item:
            raise ConfigError(f"empty strategy in {text!r}; write e.g. ddp,fsdp:FULL_SHARD",
                              source="--strategies")
        name, _, sharding = item.partition(":")
        name = name.strip().lower()
        if name not in STRATEGIES:
            raise ConfigError(f"unknown strategy {name!r} in {item!r}; valid: "
                              f"{', '.join(STRATEGIES)} (fsdp:SHARDING for a sharding mode)",
                              source="--strategies")
        sharding = sharding.strip().upper() or None
        if name == "ddp" and sharding is not None:
            raise ConfigError(f"ddp takes no sharding mode, got {item!r}; use ddp or "
                              f"fsdp:{sharding}", source="--strategies")
        if sharding is not None and sharding not in SHARDINGS:
            raise ConfigError(f"unknown FSDP sharding {sharding!r} in {item!r}; valid: "
                              f"{', '.join(SHARDINGS)}", source="--strategies")
        spec = StrategySpec(item, name, sharding or ("FULL_SHARD" if name == "fsdp" else None))
        if all(spec.label != s.label for s in specs):
            specs.append(spec)
    if not specs:
        raise ConfigError("no strategy given", source="--strategies")
    return specs


def strategy_dict(scn: Scenario, spec: StrategySpec) -> dict:
    """The scenario's strategy mapping, switched to ``spec``."""
    base = dict(scn.strategy)
    if base.get("name") == spec.name:
        data = {k: v for k, v in base.items() if k not in _SHARDING_KEYS}
    else:
        data = {k: base[k] for k in _COMMON_KEYS if k in base}
    data["name"] = spec.name
    if spec.sharding is not None:
        data["sharding"] = spec.sharding
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

    def as_dict(self) -> dict:
        return {"model": self.rung.model.name, "params": self.rung.params,
                "kind": self.rung.kind, "fits": self.fits, "replayed": self.replayed,
                "peak_memory_gib": round(self.peak_gib, 3),
                "static_memory_gib": round(self.static_gib, 3), "oom_at": self.oom_at,
                "iteration_time_s": self.iteration_time_s,
                "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu, "mfu": self.mfu}


# Model of the base Setup (cluster, cost models, capacity) that rungs' traces replace:
# rotary positions, so any seq_len is valid.
BASE_MODEL = "llama-2-7b"


class Prober:
    """Replays rungs under one strategy and training setup, caching verdicts."""

    def __init__(self, scn: Scenario, spec: StrategySpec, source: str = "<scenario>"):
        self.spec = spec
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

    def setup_for(self, model: ModelSpec) -> Setup:
        """The Setup of ``self.base`` with ``model``'s trace (as build_setup makes it)."""
        return dataclasses.replace(self.base, trace=make_trace(self.scn, model, self.cfg,
                                                               self.world))

    def probe(self, rung: Rung) -> Probe:
        key = rung.model.name
        if key in self.cache:
            return self.cache[key]
        setup = self.setup_for(rung.model)
        static = max(setup.trace.meta.get("static_memory_bytes", {}).values(), default=0)
        if 0 < setup.capacity_bytes < static:
            p = Probe(rung, False, static / GIB, static / GIB,
                      "static memory (not replayed)", False)
        else:
            self.replays += 1
            res = run_setup(setup)
            m = res.metrics
            oom = "; ".join(locate_oom(res.timeline, c, str(v))
                            for c, v in m.oom_at.items()) if m.oom else None
            p = Probe(rung, not m.oom, m.peak_memory_gib, static / GIB, oom, True,
                      m.iteration_time_s, m.tokens_per_s_per_gpu, m.mfu)
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


# ------------------------------------------------------------------------------ answer
@dataclass
class StrategyResult:
    spec: StrategySpec
    settings: dict
    largest: Probe | None
    first_oom: Probe | None
    probes: list[Probe] = field(default_factory=list)
    replays: int = 0

    def as_dict(self) -> dict:
        return {"strategy": self.spec.label, "settings": self.settings,
                "largest_fit": self.largest.as_dict() if self.largest else None,
                "first_no_fit": self.first_oom.as_dict() if self.first_oom else None,
                "top_of_ladder_fits": self.first_oom is None and self.largest is not None,
                "replays": self.replays,
                "probed": [p.as_dict() for p in self.probes]}


def settings_of(scn: Scenario) -> dict:
    t = scn.training
    return {"micro_batch": t.micro_batch, "seq_len": t.seq_len, "grad_accum": t.grad_accum,
            "precision": t.precision, "flash_attention": t.flash_attention,
            "activation_checkpointing": bool(scn.strategy.get("activation_checkpointing",
                                                              False))}


def search(scn: Scenario, spec: StrategySpec, ladder: list[Rung],
           source: str = "<scenario>", prober: Prober | None = None) -> StrategyResult:
    """Bisect ``ladder`` for the largest rung ``spec`` fits with ``scn``'s training setup."""
    prober = prober or Prober(scn, spec, source)
    order: list[Probe] = []

    def fits(i: int) -> bool:
        p = prober.probe(ladder[i])
        if p not in order:
            order.append(p)
        return p.fits

    i = largest_fitting(len(ladder), fits)
    largest = prober.probe(ladder[i]) if i >= 0 else None
    first = prober.probe(ladder[i + 1]) if i + 1 < len(ladder) else None
    s = settings_of(prober.scn)
    return StrategyResult(spec, s, largest, first, order, prober.replays)


@dataclass
class CapacityReport:
    scenario: str
    family: str
    cluster: dict
    settings: dict
    ladder: list[Rung]
    results: list[StrategyResult]
    claim: dict | None
    notes: list[str]

    def as_dict(self) -> dict:
        return {"scenario": self.scenario, "family": self.family, "cluster": self.cluster,
                "settings": self.settings,
                "ladder": [{"model": r.model.name, "params": r.params, "kind": r.kind}
                           for r in self.ladder],
                "results": [r.as_dict() for r in self.results], "folk_claim": self.claim,
                "notes": self.notes}


def family_of(scn: Scenario) -> str:
    """The scenario's model family if it has a ladder, else llama."""
    try:
        fam = load_model(scn.model).family
    except ConfigError:
        return "llama"
    return fam if fam in FAMILIES else "llama"


def capacity(scn: Scenario, family: str | None = None,
             strategies: str | list[str] | tuple[str, ...] = DEFAULT_STRATEGIES,
             source: str = "<scenario>", check_claim: bool = True) -> CapacityReport:
    """Largest fitting rung of ``family`` per strategy (see the module doc).

    :raises ConfigError: unknown family or strategy, a sharding the world cannot lay out.
    """
    specs = parse_strategy_specs(strategies)
    parse_strategy(strategy_dict_of(scn), source=source)    # the scenario's own keys
    family = (family or family_of(scn)).lower()
    ladder = build_ladder(family, min_seq_len=scn.training.seq_len)
    notes: list[str] = []
    if ladder[0].model.position_embedding == "learned" and \
            scn.training.seq_len > load_model(FAMILIES[family][0]).max_seq_len:
        notes.append(f"{family} models have {load_model(FAMILIES[family][0]).max_seq_len} "
                     f"learned positions; their tables were extended to seq_len "
                     f"{scn.training.seq_len}")
    probers = {s: Prober(scn, s, source) for s in specs}  # validate first
    results = [search(scn, s, ladder, source, probers[s]) for s in specs]
    base = next(iter(probers.values())).base
    gpu = str(base.cluster.G.graph.get("gpu"))
    cluster = {"topology": str(base.cluster.G.graph.get("name")), "gpu": gpu,
               "gpus": base.trace.world_size,
               "gpu_memory_gib": round(base.capacity_bytes / GIB, 2)}
    for r in results:
        statics = [p for p in r.probes if not p.replayed]
        if statics:
            notes.append(f"{r.spec.label}: {len(statics)} rung(s) rejected on static memory "
                         f"alone, without replay ({', '.join(p.rung.model.name for p in statics)})")
    claim = None
    if check_claim:
        claim = check_folk_claim(scn, ladder, cluster, source,
                                 {r.spec.label: r for r in results}, probers)
    return CapacityReport(str(scn.name), family, cluster, settings_of(scn), ladder, results,
                          claim, notes)


# -------------------------------------------------------------------------- folk claim
def check_folk_claim(scn: Scenario, ladder: list[Rung], cluster: dict, source: str,
                     done: dict[str, StrategyResult], probers: dict) -> dict:
    """Compare "8x A100-80GB: DDP ~7B, FSDP ~30B" with the search at micro_batch 1."""
    # An "80GB" A100 reports 79.2 GiB usable; compare within 2 GiB of the claim's size.
    if CLAIM["gpu"] not in cluster["gpu"] or abs(cluster["gpu_memory_gib"] - CLAIM["gib"]) > 2 \
            or cluster["gpus"] != CLAIM["gpus"]:
        return {"claim": CLAIM_TEXT, "checked": False,
                "verdict": f"folk claim ({CLAIM_TEXT}) not checked: this cluster is "
                           f"{cluster['gpus']} x {cluster['gpu']}"}
    scn1 = scn.model_copy(update={"training": scn.training.model_copy(
        update={"micro_batch": 1})}, deep=True)
    reuse = scn.training.micro_batch == 1
    ckpt = bool(scn.strategy.get("activation_checkpointing", False))
    found: dict[str, dict] = {}
    parts = []
    for label, claimed in (("ddp", CLAIM["ddp"]), ("fsdp:FULL_SHARD", CLAIM["fsdp:FULL_SHARD"])):
        spec = parse_strategy_specs(label)[0]
        if reuse and label in done:
            res = done[label]
        else:
            res = search(scn1, spec, ladder, source)
        got = res.largest.rung.params if res.largest else 0
        ratio = got / claimed
        word = ("holds" if 1 / CLAIM_TOLERANCE <= ratio <= CLAIM_TOLERANCE else
                "optimistic" if ratio < 1 else "conservative")
        found[label] = {"claimed_params": claimed, "largest_fit": res.largest.as_dict()
                        if res.largest else None, "first_no_fit": res.first_oom.as_dict()
                        if res.first_oom else None, "verdict": word}
        name = f"{res.largest.rung.model.name} ({got / 1e9:.1f}B)" if res.largest else "nothing"
        short = "DDP" if label == "ddp" else "FSDP FULL_SHARD"
        parts.append(f"{short} {name} vs ~{claimed / 1e9:.0f}B claimed: {word}")
    t = scn1.training
    verdict = (f"folk claim ({CLAIM_TEXT}) at micro_batch 1, seq_len {t.seq_len}, "
               f"activation checkpointing {'on' if ckpt else 'off'}: " + "; ".join(parts) +
               f" (DDP keeps 16 B/param of weights, grads and Adam state on every GPU: "
               f"7B = {16 * CLAIM['ddp'] / GIB:.0f} GiB; FSDP divides it by "
               f"{cluster['gpus']}, then activations decide)")
    return {"claim": CLAIM_TEXT, "checked": True, "micro_batch": 1, "seq_len": t.seq_len,
            "activation_checkpointing": ckpt, "results": found, "verdict": verdict}

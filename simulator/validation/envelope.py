"""The accuracy envelope of an answer: how far a configuration is from the validated ground
and what the simulator's error was there (``run``, ``compare`` and ``capacity`` print it and
put it in their JSON as ``accuracy``).

The ground is ``simulator/data/validated.csv``, one row per validated throughput case
(:mod:`.envelope_data` builds it from ``validation/``). ``error`` is the simulator's
throughput error at that case, simulated / measured - 1 (positive: the simulator was too
optimistic).

Only cases on GPUs of the question's vendor count (:func:`vendor`): an AMD GPU's answer
runs RCCL and AMD kernels, so no error measured on NVIDIA GPUs is quoted for it; with no
validated case of its vendor the envelope says it is outside the validated ground.

Nearest validated case: the held-out (``validation`` split) row *of the same framework*
(the strategy family; ``horovod`` is TensorFlow's, :data:`FRAMEWORK`), of the same
architecture (transformer, CNN or detection model: :func:`architecture_of`), dense or
mixture-of-experts as the question's model is, and pre-training or the same fine-tuning
(LoRA, QLoRA, full) as the question's step (:meth:`Query.kin`), with the smallest distance
(another framework's error, a detection model's for a transformer, or a dense model's for
an MoE one, is never quoted: a family without a held-out case gets none, and says so)

    d = GPU term + precision term + |log10(params / params_case)| + |log10(GPUs / GPUs_case)|

GPU term: 0 for the same GPU type, 0.5 for another GPU of the same generation (A100-SXM4-40GB
against A100-SXM4-80GB, H200 against H100: the catalog's ``family``), 2 for another
generation. Precision term: 0 for the same, 0.25 between fp16 and bf16 (one 16-bit
calibration), 1 otherwise. So a 10x larger model or 10x more GPUs weigh one unit each; ties
go to the first case id. A
calibration row fitted the constants, so its error is no test: when one is nearer it is
named beside the nearest held-out case, not instead of it. Held-out cases exactly as near
(the same configuration on every axis, e.g. two batch sizes) are all reported: the error
becomes the range over them.

Beside the nearest case the envelope says which axes leave the validated ground (no case
of the family, of the GPU type, of the precision; a model or GPU count outside the range of
the family's cases, by how much) and, when the validation split has at least
:data:`MIN_ROWS` rows of that family on that GPU type, their median |error|; and an error
band: the range of the held-out errors of that family on GPUs of that generation (of the
family on any GPU where its generation has too few, and it says so). Left out one at a
time, each held-out case's error falls inside the band of the others at least 80% of the
time on the shipped ground (``tests/test_envelope.py`` keeps it so; docs/envelope.md quotes
the count). It states measured errors only.

Read with the ``csv`` module on first use, so commands start without pandas.
"""

from __future__ import annotations

import csv
import math
import statistics
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

SHIPPED = Path(__file__).resolve().parents[1] / "data" / "validated.csv"
COLUMNS = ("case", "split", "family", "framework", "model", "params", "moe", "gpu", "gpus",
           "nodes", "precision", "metric", "error", "finetune", "architecture")
MIN_ROWS = 5                     # validation rows needed for a median |error|
FAMILY_LABEL = {"ddp": "DDP", "fsdp": "FSDP", "tensorflow": "TensorFlow",
                "horovod": "Horovod", "megatron": "Megatron"}
FINETUNE_LABEL = {"lora": "LoRA", "qlora": "QLoRA", "full": "full fine-tuning"}
_TF = ("tf_mirrored", "tf_multiworker", "tf_ps", "tf_central_storage")
# The framework of a strategy family whose kernels are another family's: the ``horovod``
# strategy is TensorFlow 2 with Horovod's all-reduce (``HorovodConfig`` is a ``TFConfig``:
# the same kernels, autocast and optimizer as ``tf_*``), so a TensorFlow question is
# answered from TensorFlow runs whichever of the two distributed them.
FRAMEWORK = {"horovod": "tensorflow"}
# Model families that are not transformers, by architecture; every other is "transformer".
# A detection model's error comes from what a transformer has none of (anchors, proposals,
# NMS, ROI sampling: docs/tensorflow-strategies.md), a CNN's from convolution kernels.
ARCHITECTURE = {"resnet": "cnn", "maskrcnn": "detection"}
ARCHITECTURE_LABEL = {"cnn": "CNN", "detection": "detection"}


def family_of(strategy: str) -> str:
    """The strategy family of a registry strategy name (``tf_*`` -> ``tensorflow``)."""
    return "tensorflow" if strategy in _TF else strategy


def framework_of(family: str) -> str:
    """The framework whose runs speak for a strategy family (``horovod`` -> ``tensorflow``)."""
    return FRAMEWORK.get(family, family)


def architecture_of(model_family: str) -> str:
    """``transformer``, ``cnn`` or ``detection`` for a catalog model family (``llama``,
    ``resnet``, ``maskrcnn``...)."""
    return ARCHITECTURE.get(model_family, "transformer")


@dataclass(frozen=True)
class Query:
    """The configuration an answer is about."""

    family: str
    model: str
    params: float
    gpu: str
    gpus: int
    precision: str
    moe: bool = False            # a mixture-of-experts model
    finetune: str = ""           # a fine-tuning's mode (lora, qlora, full); "": pre-training
    architecture: str = "transformer"    # :func:`architecture_of` the model's family

    @classmethod
    def of(cls, strategy: str, model: str, params: float, gpu: str, gpus: int,
           precision: str, moe: bool = False, finetune=None,
           model_family: str = "") -> Query:
        """The query of a registry strategy name (``tf_mirrored``...) and the rest;
        ``finetune``: the scenario's ``training.finetune`` (see :func:`finetune_mode`);
        ``model_family``: the catalog family of the model (``llama``, ``resnet``...; ""
        where unknown, a transformer)."""
        return cls(family_of(strategy), model, params, gpu, gpus, precision, moe,
                   finetune_mode(finetune), architecture_of(model_family))

    @property
    def framework(self) -> str:
        return framework_of(self.family)

    @property
    def label(self) -> str:
        """``Megatron``, ``Megatron MoE``, ``Megatron LoRA``, ``TensorFlow detection``: the
        kin whose errors are quoted."""
        arch = ARCHITECTURE_LABEL.get(self.architecture)
        return (FAMILY_LABEL.get(self.framework, self.framework) + (f" {arch}" if arch else "")
                + (" MoE" if self.moe else "")
                + (f" {FINETUNE_LABEL.get(self.finetune, self.finetune)}"
                   if self.finetune else ""))

    def kin(self, row: dict) -> bool:
        """Whether a validated case is of this query's framework and architecture, dense or
        MoE alike, and pre-training or the same fine-tuning alike: another framework's
        error, a detection model's for a transformer (whose error comes from ops the
        transformer has none of), a dense model's for an MoE one, or a pre-training's for a
        LoRA run (whose frozen base, adapter kernels and reductions are other mechanisms),
        says nothing of this one."""
        return (framework_of(row["family"]) == self.framework and row["moe"] == self.moe
                and row.get("finetune", "") == self.finetune
                and row.get("architecture", "transformer") == self.architecture)


def finetune_mode(value) -> str:
    """The mode of a ``training.finetune`` setting (its model, a mapping, or None): ``lora``,
    ``qlora``, ``full``; ``""`` for none (pre-training)."""
    if value is None:
        return ""
    mode = value.get("mode") if isinstance(value, dict) else getattr(value, "mode", None)
    return str(mode or "")


@lru_cache(maxsize=None)
def load_ground(path: str = str(SHIPPED)) -> tuple[dict, ...]:
    """The validated cases of ``path`` (default: the shipped summary)."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        r.update(params=float(r["params"]), gpus=int(r["gpus"]), nodes=int(r["nodes"]),
                 error=float(r["error"]), moe=r["moe"] == "True",
                 finetune=r.get("finetune") or "",
                 architecture=r.get("architecture") or "transformer")
    return tuple(rows)


@lru_cache(maxsize=None)
def generation(gpu: str) -> str:
    """The catalog generation of a GPU type (its calibration ``family``: ``hopper``...);
    its chip name where the catalog has none (B200) or does not know the GPU."""
    from simulator.errors import ConfigError
    from simulator.hardware import gpu_spec
    try:
        family = gpu_spec(gpu).family
    except (ConfigError, KeyError):
        family = ""
    return family or gpu.split("-")[0]


@lru_cache(maxsize=None)
def vendor(gpu: str) -> str:
    """The catalog vendor of a GPU type (``nvidia``, ``amd``); ``nvidia`` for one the
    catalog does not know (every validated case so far ran on NVIDIA GPUs)."""
    from simulator.errors import ConfigError
    from simulator.hardware import gpu_spec
    try:
        return gpu_spec(gpu).vendor
    except (ConfigError, KeyError):
        return "nvidia"


def gpu_term(a: str, b: str) -> float:
    return 0.0 if a == b else 0.5 if generation(a) == generation(b) else 2.0


def precision_term(a: str, b: str) -> float:
    return 0.0 if a == b else 0.25 if {a, b} == {"fp16", "bf16"} else 1.0


def distance(q: Query, row: dict) -> float:
    """The documented distance (module docstring) from ``q`` to a validated case of its
    family."""
    return (gpu_term(q.gpu, row["gpu"]) + precision_term(q.precision, row["precision"])
            + _log_ratio(q.params, row["params"]) + _log_ratio(q.gpus, row["gpus"]))


def _log_ratio(a: float, b: float) -> float:
    """|log10(a / b)|; 0 when either is unknown (0, or a trace that states no size)."""
    return abs(math.log10(a / b)) if a > 0 and b > 0 else 0.0


def _ratio(value: float, lo: float, hi: float) -> float:
    """> 1: ``value`` is that many times above ``hi``; < 1 below ``lo``; 1 inside."""
    return value / hi if value > hi else value / lo if value < lo else 1.0


NEAR = 1.05       # a ratio to the validated range within this is inside it


def _times(r: float, what: str, of: str) -> str | None:
    if 1 / NEAR <= r <= NEAR:
        return None
    word, k = ("larger", r) if r > 1 else ("smaller", 1 / r)
    return f"{what} {k:.3g}x {word} than any validated {of} case"


def differing_axes(q: Query, ground: tuple[dict, ...]) -> list[str]:
    """Where ``q`` leaves the validated ground, in words."""
    fam = q.label
    mine = [r for r in ground if q.kin(r)]
    out = []
    if not mine:
        out.append(f"no validated {fam} case")
    if not any(r["gpu"] == q.gpu for r in ground):
        out.append(f"no validated case on {q.gpu}")
    elif mine and not any(r["gpu"] == q.gpu for r in mine):
        out.append(f"no validated {fam} case on {q.gpu}")
    pool, of = (mine, fam) if mine else (list(ground), "")
    if mine and not any(r["precision"] == q.precision for r in mine):
        out.append(f"no validated {fam} case in {q.precision}")
    params = [r["params"] for r in pool]
    gpus = [r["gpus"] for r in pool]
    of = of or "(any strategy)"
    model = _ratio(q.params, min(params), max(params)) if q.params > 0 else 1.0
    out += [s for s in (_times(model, "model", of),
                        _times(_ratio(q.gpus, min(gpus), max(gpus)), "GPU count", of)) if s]
    return out


@dataclass(frozen=True)
class Band:
    """The range of ``rows`` held-out errors (``scope``: of whom)."""

    low: float
    high: float
    rows: int
    scope: str

    def text(self) -> str:
        return (f"error band {100 * self.low:+.1f}% to {100 * self.high:+.1f}% (the range of "
                f"{self.rows} held-out {self.scope})")


@dataclass
class Envelope:
    """What the ground says about one configuration (see the module docstring)."""

    query: Query
    nearest: dict | None          # None: no held-out case of the family
    distance: float
    differs: list[str]
    median_abs_error: float | None
    median_rows: int
    fitted_nearer: dict | None = None
    tied: list[dict] = field(default_factory=list)   # held-out cases as near as ``nearest``
    band: Band | None = None
    outside: str = ""      # why no case speaks for it at all (no validated case of its vendor)
    beyond_gpus: bool = False    # more GPUs than any validated case of its kin

    def as_dict(self) -> dict:
        n = self.nearest
        fit = self.fitted_nearer
        b = self.band
        return {"nearest": n and {k: n[k] for k in COLUMNS},
                "distance": None if n is None else round(self.distance, 6),
                "error_band": b and {"low": b.low, "high": b.high, "rows": b.rows,
                                     "of": b.scope},
                "equally_near": [{"case": r["case"], "error": r["error"]} for r in self.tied],
                "calibration_case_nearer": fit and {k: fit[k] for k in COLUMNS},
                "differs": self.differs,
                "validation_median_abs_error": self.median_abs_error,
                "validation_rows": self.median_rows,
                "median_of": {"family": self.query.family,
                              "framework": self.query.framework,
                              "architecture": self.query.architecture,
                              "gpu": self.query.gpu, "split": "validation",
                              **({"finetune": self.query.finetune}
                                 if self.query.finetune else {})},
                "outside_validated_ground": self.outside or None,
                "error_meaning": "simulated / measured throughput - 1 at the validated case",
                "ground": "simulator/data/validated.csv (from validation/)"}

    def lines(self) -> list[str]:
        """One or two lines of text (no comment marks)."""
        n = self.nearest
        qf = self.query.label
        if self.outside:
            first = self.outside
        elif n is None:
            first = (f"no validated {qf} case: no measured error to quote (another "
                     f"framework's, another kind of model's or of step's would not say how "
                     f"far this one is off)")
        else:
            first = (f"nearest validated: {qf} {n['model']} ({_b(n['params'])}) on "
                     f"{n['gpus']} {n['gpu']}, {n['precision']}, " + self._errors())
        if self.band is not None:
            first += f"; {self.band.text()}"
        if self.fitted_nearer is not None:
            first += (f"; the calibration case {self.fitted_nearer['case']} is nearer but "
                      f"was fitted, so its error is no test")
        where = "; ".join(self.differs) if self.differs else "inside the validated range " \
                                                               "on every axis"
        if self.median_abs_error is not None:
            med = (f"median |error| of the {self.median_rows} validation cases of {qf} on "
                   f"{self.query.gpu}: {100 * self.median_abs_error:.1f}%")
        elif self.median_rows:
            med = (f"{self.median_rows} validation case(s) of {qf} on {self.query.gpu}, too "
                   f"few for a median (need {MIN_ROWS})")
        else:
            med = f"no validation case of {qf} on {self.query.gpu} to take a median of"
        return [first, f"against the validated ground: {where}; {med}"]

    def _errors(self) -> str:
        """The error at the nearest case, or the range over the equally near ones."""
        n = self.nearest
        if not self.tied:
            return f"error {100 * n['error']:+.1f}% (held-out case {n['case']})"
        errs = sorted(r["error"] for r in [n, *self.tied])
        return (f"error {100 * errs[0]:+.1f}% to {100 * errs[-1]:+.1f}% over "
                f"{len(errs)} held-out cases ({n['case']} and {len(self.tied)} more)")


def _b(params: float) -> str:
    return f"{params / 1e9:.3g}B" if params >= 1e9 else f"{params / 1e6:.3g}M"


def envelope(q: Query, ground: tuple[dict, ...] | None = None) -> Envelope:
    """The accuracy envelope of ``q`` against ``ground`` (default: the shipped summary)."""
    ground = load_ground() if ground is None else ground
    own = tuple(r for r in ground if vendor(r["gpu"]) == vendor(q.gpu))
    if not own:        # another vendor's GPUs, libraries and kernels: their errors say nothing
        return Envelope(q, None, 0.0, [f"no validated case on any {vendor(q.gpu).upper()} GPU: "
                                       f"{q.gpu} is outside the validated ground"], None, 0,
                        outside=f"no validated case on {vendor(q.gpu).upper()} GPUs: no "
                                f"measured error to quote (errors measured on another "
                                f"vendor's GPUs would not say how far this one is off)")
    ground = own
    mine = [r for r in ground if q.kin(r)]
    held_out = [r for r in mine if r["split"] == "validation"]
    best = _nearest(q, held_out)
    tied, fit, far = [], None, 0.0
    if best is not None:
        far = distance(q, best)
        tied = [r for r in held_out if r is not best and distance(q, r) <= far + 1e-12]
        fit = _nearest(q, [r for r in mine if r["split"] != "validation"])
        if fit is not None and distance(q, fit) >= far:
            fit = None
    same = [abs(r["error"]) for r in held_out if r["gpu"] == q.gpu]
    med = statistics.median(same) if len(same) >= MIN_ROWS else None
    beyond = bool(mine) and q.gpus > NEAR * max(r["gpus"] for r in mine)
    return Envelope(q, best, far, differing_axes(q, ground), med, len(same), fit, tied,
                    error_band(q, held_out), beyond_gpus=beyond)


def error_band(q: Query, held_out: list[dict]) -> Band | None:
    """The range of the family's held-out errors (``held_out``: its validation rows) on
    GPUs of ``q``'s generation, else on any GPU; None with fewer than :data:`MIN_ROWS` of
    either."""
    fam = q.label
    gen = generation(q.gpu)
    for rows, scope in (([r for r in held_out if generation(r["gpu"]) == gen],
                         f"{fam} cases on {gen} GPUs"),
                        (held_out, f"{fam} cases on any GPU ({gen}: too few)")):
        errors = [r["error"] for r in rows]
        if len(errors) >= MIN_ROWS:
            return Band(min(errors), max(errors), len(errors), scope)
    return None


def _nearest(q: Query, rows: list[dict]) -> dict | None:
    return min(rows, key=lambda r: (distance(q, r), r["case"]), default=None)


def grouped_lines(by_label: dict[str, list[str]]) -> list[str]:
    """``{strategy: its envelope lines}`` as ``(a, b): line`` lines, strategies with the same
    envelope together, in first-seen order."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for label, lines in by_label.items():
        groups.setdefault(tuple(lines), []).append(label)
    return [f"({', '.join(labels)}) {line}" for lines, labels in groups.items()
            for line in lines]


ROUGH = 0.25           # a median |error| above this: the rows are not to be ranked on


def trust_sentence(envelopes, details: str = "details at the end") -> str:
    """How far to trust a comparison, in one sentence: the median |error| of each family's
    held-out runs on the question's GPU type (saying so where no validated case of the
    family ran on as many GPUs as the question: :attr:`Envelope.beyond_gpus`), and which
    families' rows are too far off to rank (a median above
    :data:`ROUGH`), e.g. ``How far to trust it: median error of the held-out runs on
    A100-SXM4-80GB: FSDP 4.1% (10 runs), TensorFlow 7.4% (8 runs, none on as many GPUs),
    DeepSpeed not measured here (0 runs) (details at the end).``; ``details``: where the
    envelope's lines are, in the closing parenthesis."""
    seen: dict[str, Envelope] = {}
    for e in envelopes:
        seen.setdefault(e.query.label, e)
    if not seen:
        return ""
    gpu = next(iter(seen.values())).query.gpu
    parts, rough = [], []
    for label, e in seen.items():
        if e.median_abs_error is None:
            parts.append(f"{label} not measured here ({e.median_rows} runs)")
            continue
        beyond = ", none on as many GPUs" if e.beyond_gpus else ""
        parts.append(f"{label} {100 * e.median_abs_error:.1f}% ({e.median_rows} runs{beyond})")
        if e.median_abs_error > ROUGH:
            rough.append(label)
    tail = f": the {' and '.join(rough)} rows are too far off to rank" if rough else ""
    return (f"How far to trust it: median error of the held-out runs on {gpu}: "
            f"{', '.join(parts)}{tail} ({details}).")

"""Compare simulated training iterations with published A100 training throughput.

The data live in ``validation/training/`` (repository root):

* ``measurements.csv``: one row per published number, normalised from
  ``shared/validation-data/training`` by :func:`build_measurements` (NVIDIA
  DeepLearningExamples single-node tables for PyTorch ResNet-50 v1.5 and BERT-large
  pre-training; the PyTorch FSDP blog's GPT 175B / 1T rows). Every row keeps its
  ``source`` and the string it was parsed from (``value_raw``, ``scaling_raw``). Measured
  values are parsed, never edited.
* ``cases.yaml``: per case, the scenario that reproduces the run (a shipped scenario name
  plus ``--set`` style overrides, or an inline scenario mapping), the metric compared, the
  measured value (cross-checked with ``measurements.csv``) and the ``split``. A
  ``scaling`` case compares scaling efficiency ``throughput(N GPUs) / (N x throughput(1
  GPU))`` of two other cases with the published scaling factor / N.

Errors are ``(simulated - measured) / measured`` for throughput metrics and ``simulated -
measured`` (a fraction; x100 = percentage points) for scaling efficiency. The gate, on
validation cases only: |throughput error| <= :data:`THROUGHPUT_THRESHOLD`, |scaling
efficiency error| <= :data:`SCALING_THRESHOLD`.
"""

from __future__ import annotations

import dataclasses
import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, ValidationError

from simulator.compute import ComputeCalibration, ComputeModel
from simulator.errors import ConfigError
from simulator.pipeline import Setup, build_setup, run_setup
from simulator.scenario import Scenario, apply_sets, resolve_scenario, scenario_from_dict

SPLITS = ("calibration", "validation")
THROUGHPUT_METRICS = ("samples_per_s", "tflops_per_gpu")
METRICS = THROUGHPUT_METRICS + ("scaling_efficiency",)
THROUGHPUT_THRESHOLD = 0.15    # max |relative error| of a validation throughput case
SCALING_THRESHOLD = 0.05       # max |error| of a validation scaling efficiency (5 points)

CASES_FILE = "cases.yaml"
MEASUREMENTS_FILE = "measurements.csv"
MEASUREMENT_COLUMNS = ["measurement_id", "framework", "model", "hardware", "gpu", "nodes",
                       "gpus", "precision", "precision_label", "micro_batch", "seq_len",
                       "grad_accum", "metric", "unit", "value", "value_raw", "scaling_factor",
                       "scaling_raw", "scaling_type", "settings_note", "notes", "source"]
_REQUIRED = ["measurement_id", "gpu", "gpus", "precision", "micro_batch", "seq_len",
             "grad_accum", "metric", "value", "scaling_factor", "source"]
RESULT_COLUMNS = ["case", "split", "metric", "measurement", "measured", "simulated", "error",
                  "error_kind", "threshold", "ok", "model", "gpus", "precision",
                  "iteration_time_s", "mfu", "compute_s", "exposed_comm_s",
                  "peak_memory_gib", "oom", "sim_wall_s"]

SOURCE_FILES = ("dle_a100_training_scaling.csv", "fsdp_a100_published_throughput.csv")


# ----------------------------------------------------------------------------- root
def default_root() -> Path:
    """``validation/training`` of the repository holding ``simulator``, else of the cwd.

    :raises ConfigError: when neither has a ``cases.yaml``.
    """
    repo = Path(__file__).resolve().parents[2]
    candidates = [repo / "validation" / "training", Path.cwd() / "validation" / "training"]
    for c in candidates:
        if (c / CASES_FILE).is_file():
            return c
    raise ConfigError(f"no {CASES_FILE} found in {' or '.join(map(str, candidates))}",
                      field="--root")


# ------------------------------------------------------------------ measurements.csv
def parse_number(text: Any) -> float:
    """A published number as a float: ``"7,248 img/s"`` -> 7248, ``"7.72 x"`` -> 7.72,
    ``317`` -> 317; ``"N/A"``, ``"-"`` or empty -> NaN.

    :raises ValueError: when the text holds no number or more than one.
    """
    if text is None or (isinstance(text, float) and math.isnan(text)):
        return float("nan")
    s = str(text).strip()
    if s in ("", "-", "N/A", "n/a", "NA"):
        return float("nan")
    nums = re.findall(r"[-+]?\d[\d,]*(?:\.\d+)?", s)
    if len(nums) != 1:
        raise ValueError(f"expected one number in {text!r}, found {len(nums)}")
    return float(nums[0].replace(",", ""))


def _pair(text: Any) -> tuple[str, str]:
    """``"128 and 256"`` -> ("128", "256") (TF32, AMP); a single value serves both."""
    s = "" if text is None or (isinstance(text, float) and math.isnan(text)) else str(text)
    parts = [p.strip() for p in re.split(r"\band\b|,", s) if p.strip()]
    if len(parts) == 2:
        return parts[0], parts[1]
    if len(parts) <= 1:
        v = parts[0] if parts else ""
        return v, v
    raise ValueError(f"expected 'A and B', got {text!r}")


def _gpu_of(hardware: str) -> str:
    h = str(hardware)
    if "80GB" in h.replace(" ", ""):
        return "A100-SXM4-80GB"
    if "40GB" in h.replace(" ", ""):
        return "A100-SXM4-40GB"
    raise ValueError(f"cannot tell the A100 variant from {hardware!r}")


_DLE_MODELS = {"ResNet-50 v1.5 (ImageNet)": ("resnet50", "samples_per_s"),
               "BERT-large pretraining (LAMB)": ("bert_large", "samples_per_s")}
_RESNET_BATCH = ("256", "micro_batch 256 per GPU for both TF32 and AMP: the README's DGX A100 "
                        "configuration, not printed in the table (its batch column is blank)")
_FSDP_IDS = {"GPT 175B": "fsdp_blog_gpt175b", "GPT 1T": "fsdp_blog_gpt1t"}


def build_measurements(shared_dir: Path | str) -> pd.DataFrame:
    """The rows of ``measurements.csv`` from the shared source CSVs (read as text).

    DeepLearningExamples: the PyTorch ResNet-50 v1.5 and BERT-large pre-training rows; each
    source row gives a TF32 and an AMP measurement (precision ``tf32`` / ``fp16``); "128 and
    256" style batch and accumulation columns are (TF32, AMP). FSDP blog: both rows.
    ``value`` and ``scaling_factor`` are parsed from the copied ``value_raw`` /
    ``scaling_raw`` strings and nothing else.
    """
    shared = Path(shared_dir)
    rows = []
    dle = pd.read_csv(shared / SOURCE_FILES[0], dtype=str, keep_default_na=False)
    for r in dle.itertuples(index=False):
        if r.framework != "PyTorch" or r.model not in _DLE_MODELS:
            continue
        stem, metric = _DLE_MODELS[r.model]
        batches, accums = _pair(r.batch_per_gpu), _pair(r.grad_accum_steps)
        for i, (label, prec) in enumerate((("TF32", "tf32"), ("AMP", "fp16"))):
            note = ""
            batch = batches[i]
            if not batch and stem == "resnet50":
                batch, note = _RESNET_BATCH
            seq = f"_seq{r.seq_len}" if r.seq_len else ""
            raw = r.throughput_tf32_or_fp32 if i == 0 else r.throughput_amp
            scal = r.scaling_tf32_or_fp32 if i == 0 else r.scaling_amp
            rows.append({
                "measurement_id": f"dle_pt_{stem}{seq}_{r.gpus}gpu_{label.lower()}",
                "framework": r.framework, "model": r.model, "hardware": r.hardware,
                "gpu": _gpu_of(r.hardware), "nodes": int(r.nodes), "gpus": int(r.gpus),
                "precision": prec, "precision_label": label,
                "micro_batch": int(batch) if batch else None,
                "seq_len": int(r.seq_len) if r.seq_len else None,
                "grad_accum": int(accums[i]) if accums[i] else None,
                "metric": metric, "unit": r.throughput_unit,
                "value": parse_number(raw), "value_raw": raw,
                "scaling_factor": parse_number(scal), "scaling_raw": scal,
                "scaling_type": r.scaling_type, "settings_note": note,
                "notes": f"{r.grad_allreduce}; container {r.container}",
                "source": r.source,
            })
    fsdp = pd.read_csv(shared / SOURCE_FILES[1], dtype=str, keep_default_na=False)
    for r in fsdp.itertuples(index=False):
        key = next(k for k in _FSDP_IDS if r.model.startswith(k))
        if r.metric != "TFLOPS per GPU":
            raise ValueError(f"unexpected FSDP metric {r.metric!r}")
        gpus = int(r.gpus)
        rows.append({
            "measurement_id": f"{_FSDP_IDS[key]}_{gpus}gpu", "framework": "PyTorch FSDP",
            "model": r.model, "hardware": r.hardware, "gpu": _gpu_of(r.hardware),
            "nodes": gpus // 8, "gpus": gpus, "precision": r.precision,
            "precision_label": r.precision, "micro_batch": int(r.batch_per_gpu),
            "seq_len": int(r.seq_len), "grad_accum": None, "metric": "tflops_per_gpu",
            "unit": "TFLOPS per GPU", "value": parse_number(r.value), "value_raw": r.value,
            "scaling_factor": float("nan"), "scaling_raw": "",
            "scaling_type": "", "settings_note": "nodes = gpus / 8 (8 GPUs per p4d node)",
            "notes": (f"{r.sharding}; activation checkpointing {r.activation_checkpointing}; "
                      f"cpu offload: {r.cpu_offload}; {r.interconnect}; mfu as stated: "
                      f"{r.mfu}; {r.notes}"),
            "source": r.source,
        })
    df = pd.DataFrame(rows, columns=MEASUREMENT_COLUMNS)
    for col in ("micro_batch", "seq_len", "grad_accum"):
        df[col] = df[col].astype("Int64")
    return df


def write_measurements(shared_dir: Path | str, root: Path | str) -> pd.DataFrame:
    """Write :func:`build_measurements` to ``<root>/measurements.csv``."""
    df = build_measurements(shared_dir)
    Path(root).mkdir(parents=True, exist_ok=True)
    df.to_csv(Path(root) / MEASUREMENTS_FILE, index=False)
    return df


def load_measurements(root: Path | str | None = None, ids=None,
                      filename: str = MEASUREMENTS_FILE) -> pd.DataFrame:
    """Rows of ``measurements.csv`` (only those of ``ids`` when given), indexed by id.

    :raises ConfigError: unreadable file, missing columns, repeated ids.
    """
    root = Path(root) if root is not None else default_root()
    path = root / filename
    try:
        df = pd.read_csv(path, dtype={"value_raw": str, "scaling_raw": str})
    except (OSError, pd.errors.ParserError) as exc:
        raise ConfigError(f"cannot read measurements: {exc}", source=str(path)) from None
    missing = [c for c in _REQUIRED if c not in df.columns]
    if missing:
        raise ConfigError(f"missing column(s) {', '.join(missing)}", source=str(path),
                          field=missing[0])
    dup = sorted(df["measurement_id"][df["measurement_id"].duplicated()])
    if dup:
        raise ConfigError(f"repeated measurement_id(s) {', '.join(dup)}", source=str(path),
                          field="measurement_id")
    if ids is not None:
        df = df[df["measurement_id"].isin(set(ids))]
    df = df.copy()
    for col in ("micro_batch", "seq_len", "grad_accum"):
        df[col] = df[col].astype("Int64")
    return df.set_index("measurement_id", drop=False)


# ---------------------------------------------------------------------- cases.yaml
class ScalingSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    of: str                 # the N-GPU case
    baseline: str           # the 1-GPU case


class CaseSpec(BaseModel):
    """One entry of ``cases.yaml`` (keyed by case id)."""

    model_config = ConfigDict(extra="forbid")

    scenario: str | dict[str, Any] | None = None
    set: list[str] = []
    scaling: ScalingSpec | None = None
    metric: Literal["samples_per_s", "tflops_per_gpu", "scaling_efficiency"]
    measurement: str
    measured: float
    split: Literal["calibration", "validation"]
    notes: str = ""


class CasesFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    description: str = ""
    measurements: str = MEASUREMENTS_FILE
    cases: dict[str, CaseSpec]


@dataclass
class Case:
    """A measured number and how to simulate it (setup built, measurement attached)."""

    case_id: str
    split: str
    metric: str
    measurement_id: str
    measured: float
    notes: str
    measurement: dict = field(repr=False)
    scenario: Scenario | None = field(default=None, repr=False)
    scenario_ref: str = ""               # shipped name/path, or "inline"
    sets: tuple[str, ...] = ()
    setup: Setup | None = field(default=None, repr=False)
    of: "Case | None" = field(default=None, repr=False)
    baseline: "Case | None" = field(default=None, repr=False)
    source: str = ""

    @property
    def is_scaling(self) -> bool:
        return self.metric == "scaling_efficiency"

    def dependencies(self) -> list["Case"]:
        return [self.of, self.baseline] if self.is_scaling else []


def _read_yaml(path: Path) -> Any:
    from simulator.validation.collectives import _read_yaml as read   # duplicate-key check
    return read(path)


def _pydantic_error(exc: ValidationError, source: str) -> ConfigError:
    first = exc.errors()[0]
    loc = [str(x) for x in first["loc"]
           if not (isinstance(x, str) and (x in ("str", "float", "int", "ScalingSpec")
                                           or x.startswith(("list[", "dict[", "literal["))))]
    if first["type"] == "extra_forbidden":
        reason = "unknown key"
    elif first["type"] == "missing":
        reason = "missing required key"
    else:
        reason = first["msg"]
    return ConfigError(reason, source=source, field=".".join(loc))


def _scenario_data(spec: CaseSpec, source: str, where: str) -> tuple[dict, str]:
    """The scenario mapping of a case (shipped file or inline) with its ``set`` applied."""
    if isinstance(spec.scenario, dict):
        data, ref = spec.scenario, "inline"
    else:
        try:
            path = resolve_scenario(spec.scenario)
        except ConfigError as exc:
            raise ConfigError(exc.reason, source=source, field=f"{where}.scenario") from None
        data = _read_yaml(path)
        if not isinstance(data, dict):
            raise ConfigError(f"scenario {path} is not a mapping", source=source,
                              field=f"{where}.scenario")
        ref = spec.scenario
    try:
        data = apply_sets(data, list(spec.set), source)
    except ConfigError as exc:
        raise ConfigError(exc.reason, source=source, field=f"{where}.set") from None
    return data, ref


def _check_against_measurement(case: Case, source: str, where: str) -> None:
    """The simulated run must be the measured one: GPUs, GPU model, precision, batch..."""
    m, setup = case.measurement, case.setup
    t = case.scenario.training
    got = {"gpus": setup.trace.world_size, "gpu": setup.compute.gpu.name,
           "precision": t.precision, "micro_batch": t.micro_batch, "grad_accum": t.grad_accum,
           "seq_len": t.seq_len if setup.trace.meta.get("tokens_per_sample") else None}
    for key, value in got.items():
        want = m.get(key)
        if want is None:
            continue          # not stated by the source
        if value != want:
            raise ConfigError(f"simulates {key} = {value!r} but measurement "
                              f"{case.measurement_id} has {want!r}", source=source,
                              field=f"{where}.scenario" if key in ("gpu",) else f"{where}.set")


def _measurement_dict(row: pd.Series) -> dict:
    out = {}
    for k, v in row.items():
        if v is pd.NA or (isinstance(v, float) and math.isnan(v)):
            out[k] = None
        elif isinstance(v, (np.integer,)):
            out[k] = int(v)
        elif isinstance(v, (np.floating,)):
            out[k] = float(v)
        else:
            out[k] = v
    return out


def load_cases(root: Path | str | None = None, splits=None) -> list[Case]:
    """Cases of ``<root>/cases.yaml``, setups built and measurements attached.

    ``splits`` keeps only those cases, and only their measurement rows are read (a scaling
    case also builds the two cases it compares). With all splits, every measurement must be
    used by a case.

    :raises ConfigError: naming ``cases.yaml`` and the dotted field: unknown keys, a bad
        scenario or override, a measured value that differs from ``measurements.csv``, a
        simulated setup (GPUs, precision, batch...) that is not the measured one, a
        calibration case that depends on a validation case.
    """
    root = Path(root) if root is not None else default_root()
    path = root / CASES_FILE
    source = str(path)
    data = _read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError("top level must be a mapping with a 'cases' key", source=source)
    try:
        spec = CasesFile.model_validate(data)
    except ValidationError as exc:
        raise _pydantic_error(exc, source) from None
    if splits is not None:
        bad = [s for s in splits if s not in SPLITS]
        if bad:
            raise ConfigError(f"unknown split(s) {bad}; valid: {', '.join(SPLITS)}",
                              field="splits")
    specs = spec.cases
    for cid, c in specs.items():
        where = f"cases.{cid}"
        if (c.metric == "scaling_efficiency") != (c.scaling is not None):
            raise ConfigError("a scaling case has metric scaling_efficiency and a 'scaling' "
                              "entry, other cases neither", source=source,
                              field=f"{where}.{'scaling' if c.scaling else 'metric'}")
        if (c.scenario is None) == (c.scaling is None):
            raise ConfigError("give exactly one of 'scenario' and 'scaling'", source=source,
                              field=f"{where}.scenario")
        if c.scaling is not None:
            for key in ("of", "baseline"):
                ref = getattr(c.scaling, key)
                if ref not in specs or specs[ref].scaling is not None:
                    raise ConfigError(f"{ref!r} is not a (non-scaling) case of this file",
                                      source=source, field=f"{where}.scaling.{key}")
                if c.split == "calibration" and specs[ref].split != "calibration":
                    raise ConfigError(f"a calibration case cannot depend on the validation "
                                      f"case {ref!r}", source=source,
                                      field=f"{where}.scaling.{key}")
    wanted = [cid for cid, c in specs.items() if splits is None or c.split in splits]
    needed = list(dict.fromkeys(
        [d for cid in wanted if specs[cid].scaling
         for d in (specs[cid].scaling.of, specs[cid].scaling.baseline)] + wanted))
    meas = load_measurements(root, ids=None if splits is None else
                             {specs[c].measurement for c in needed}, filename=spec.measurements)
    meas_source = str(root / spec.measurements)
    if splits is None:
        unused = sorted(set(meas.index) - {c.measurement for c in specs.values()})
        if unused:
            raise ConfigError(f"measurement(s) {', '.join(unused)} are not used by any case "
                              f"of {source}", source=meas_source, field="measurement_id")
    built: dict[str, Case] = {}
    order = sorted(needed, key=lambda c: specs[c].scaling is not None)
    for cid in order:             # first every check against measurements.csv (cheap) ...
        c, where = specs[cid], f"cases.{cid}"
        if c.measurement not in meas.index:
            raise ConfigError(f"no measurement {c.measurement!r} in {meas_source}",
                              source=source, field=f"{where}.measurement")
        m = _measurement_dict(meas.loc[c.measurement])
        case = Case(cid, c.split, c.metric, c.measurement, float(c.measured),
                    " ".join(c.notes.split()), m, source=source)
        if c.scaling is None:
            if m["metric"] != c.metric:
                raise ConfigError(f"measurement {c.measurement} is {m['metric']}, not "
                                  f"{c.metric}", source=source, field=f"{where}.metric")
            expected = m["value"]
        else:
            case.of, case.baseline = built[c.scaling.of], built[c.scaling.baseline]
            if case.of.measurement_id != c.measurement:
                raise ConfigError(f"the scaling of {c.scaling.of} is published with its "
                                  f"measurement {case.of.measurement_id}", source=source,
                                  field=f"{where}.measurement")
            base_sf = case.baseline.measurement.get("scaling_factor")
            if base_sf is None or not math.isclose(base_sf, 1.0):
                raise ConfigError(f"{c.scaling.baseline} is not the scaling baseline (its "
                                  f"scaling factor is {base_sf})", source=source,
                                  field=f"{where}.scaling.baseline")
            sf = m.get("scaling_factor")
            if sf is None:
                raise ConfigError(f"measurement {c.measurement} has no scaling factor",
                                  source=source, field=f"{where}.measurement")
            expected = sf * case.baseline.measurement["gpus"] / m["gpus"]
        if not math.isclose(float(c.measured), float(expected), rel_tol=1e-9, abs_tol=1e-12):
            raise ConfigError(f"measured {c.measured} differs from {expected:g} "
                              f"({c.measurement} in {meas_source})", source=source,
                              field=f"{where}.measured")
        built[cid] = case
    for cid in order:             # ... then build the setups (slow) and check them
        c, where, case = specs[cid], f"cases.{cid}", built[cid]
        if c.scaling is not None:
            continue
        data, ref = _scenario_data(c, source, where)
        data.setdefault("name", cid)
        try:
            scn = scenario_from_dict(data, source)
            setup = build_setup(scn, source)
        except ConfigError as exc:
            raise ConfigError(f"scenario {ref} ({exc.field or 'file'}): {exc.reason}",
                              source=source, field=f"{where}.scenario") from None
        case.scenario, case.scenario_ref, case.sets, case.setup = scn, ref, tuple(c.set), setup
        _check_against_measurement(case, source, where)
    return [built[cid] for cid in wanted]


# ----------------------------------------------------------------------- simulation
def _run(case: Case, calibration: ComputeCalibration | None, cache: dict | None):
    """(metrics, wall seconds) of one non-scaling case, memoised in ``cache``."""
    key = case.case_id
    if cache is not None and key in cache:
        return cache[key]
    setup = case.setup
    if calibration is not None:
        setup = dataclasses.replace(setup, compute=ComputeModel(setup.compute.gpu, calibration))
    t0 = time.perf_counter()
    metrics = run_setup(setup).metrics
    out = (metrics, time.perf_counter() - t0)
    if cache is not None:
        cache[key] = out
    return out


def _rel_err(sim: float, meas: float) -> float:
    if not (np.isfinite(sim) and np.isfinite(meas)) or meas <= 0:
        return float("nan")
    return (sim - meas) / meas


def simulate_case(case: Case, calibration: ComputeCalibration | None = None,
                  cache: dict | None = None) -> list[dict]:
    """One row (:data:`RESULT_COLUMNS`): measured and simulated value, error, gate.

    ``calibration`` replaces the shipped compute constants; ``cache`` (a dict) shares the
    replays of cases that scaling cases reuse (use one cache per calibration).
    """
    if case.is_scaling:
        (m_n, w_n), (m_1, w_1) = _run(case.of, calibration, cache), \
            _run(case.baseline, calibration, cache)
        ratio = m_n.world_size / m_1.world_size
        sim = m_n.samples_per_s / (ratio * m_1.samples_per_s) if m_1.samples_per_s else \
            float("nan")
        err = sim - case.measured if np.isfinite(sim) else float("nan")
        kind, thr, m, wall = "points", SCALING_THRESHOLD, m_n, w_n + w_1
        setup = case.of.setup
    else:
        m, wall = _run(case, calibration, cache)
        sim = float(getattr(m, case.metric))
        err = _rel_err(sim, case.measured)
        kind, thr = "relative", THROUGHPUT_THRESHOLD
        setup = case.setup
    return [{
        "case": case.case_id, "split": case.split, "metric": case.metric,
        "measurement": case.measurement_id, "measured": case.measured, "simulated": sim,
        "error": err, "error_kind": kind, "threshold": thr,
        "ok": bool(abs(err) <= thr) if np.isfinite(err) else False,
        "model": setup.trace.meta.get("model", ""), "gpus": m.world_size,
        "precision": setup.engine.precision, "iteration_time_s": m.iteration_time_s,
        "mfu": m.mfu, "compute_s": m.compute_s, "exposed_comm_s": m.exposed_comm_s,
        "peak_memory_gib": m.peak_memory_gib, "oom": bool(m.oom), "sim_wall_s": wall,
    }]


def validate(root: Path | str | None = None, calibration: ComputeCalibration | None = None,
             splits=SPLITS, cases: list[Case] | None = None) -> pd.DataFrame:
    """Simulate every case of ``splits`` (or the given ``cases``); one row per case.

    ``df.attrs``: ``constants`` (the fitted compute constants in use), ``notes`` per case.
    """
    from simulator.validation.training_calibrate import fitted_values
    from simulator.compute.model import load_compute_calibration
    if cases is None:
        cases = load_cases(root, splits=None if tuple(splits) == SPLITS else tuple(splits))
    cache: dict = {}
    rows = [r for c in cases for r in simulate_case(c, calibration, cache)]
    df = pd.DataFrame(rows, columns=RESULT_COLUMNS)
    df.attrs["constants"] = fitted_values(calibration or load_compute_calibration())
    df.attrs["notes"] = {c.case_id: c.notes for c in cases}
    return df


# ---------------------------------------------------------------------------- summary
def summarize(df: pd.DataFrame) -> pd.DataFrame:
    """Per split and kind of error (throughput / scaling): cases, how many pass the gate,
    median and max |error|."""
    rows = []
    for split in SPLITS:
        for kind, name in (("relative", "throughput"), ("points", "scaling_efficiency")):
            g = df[(df["split"] == split) & (df["error_kind"] == kind)]
            if g.empty:
                continue
            e = g["error"].abs().dropna()
            rows.append({"split": split, "kind": name, "n": len(g), "n_ok": int(g["ok"].sum()),
                         "median_abs_err": float(e.median()) if len(e) else float("nan"),
                         "max_abs_err": float(e.max()) if len(e) else float("nan"),
                         "threshold": float(g["threshold"].iloc[0])})
    return pd.DataFrame(rows, columns=["split", "kind", "n", "n_ok", "median_abs_err",
                                       "max_abs_err", "threshold"])


def _err_text(err: float, kind: str) -> str:
    if not np.isfinite(err):
        return "-"
    return f"{100 * err:+.1f}%" if kind == "relative" else f"{100 * err:+.1f} pt"


def _value_text(v: float, metric: str) -> str:
    if not np.isfinite(v):
        return "-"
    return f"{v:.3f}" if metric == "scaling_efficiency" else f"{v:.4g}"


def _gate_text(ok: bool, split: str) -> str:
    mark = "ok" if ok else "FAIL"
    return mark if split == "validation" else f"({mark})"


def results_table(df: pd.DataFrame) -> pd.DataFrame:
    """The per-case rows as display strings (for the CLI and the report)."""
    return pd.DataFrame({
        "case": df["case"], "split": df["split"], "metric": df["metric"],
        "measured": [_value_text(v, m) for v, m in zip(df["measured"], df["metric"])],
        "simulated": [_value_text(v, m) for v, m in zip(df["simulated"], df["metric"])],
        "error": [_err_text(e, k) for e, k in zip(df["error"], df["error_kind"])],
        "gate": [_gate_text(o, s) for o, s in zip(df["ok"], df["split"])],
        "oom": df["oom"].map(lambda v: "OOM" if v else ""),
    })


def format_summary(df: pd.DataFrame) -> str:
    """Per-case table and the gate count, as text."""
    val = df[df["split"] == "validation"]
    lines = [results_table(df).to_string(index=False), "",
             f"gates (validation cases): |throughput err| <= {THROUGHPUT_THRESHOLD:.0%}, "
             f"|scaling efficiency err| <= {100 * SCALING_THRESHOLD:.0f} points; "
             f"{int((~val['ok']).sum())} of {len(val)} fail"]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- report
def _md_table(df: pd.DataFrame) -> str:
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in df.itertuples(index=False):
        lines.append("| " + " | ".join(str(v) for v in row) + " |")
    return "\n".join(lines)


PLOT_FILE = "measured_vs_simulated.png"


def write_report(df: pd.DataFrame, out_dir: Path | str,
                 title: str = "Training validation against published A100 throughput") -> dict:
    """Write ``report.md``, ``results.csv`` and ``measured_vs_simulated.png`` to ``out_dir``.

    Returns the paths written, by kind.
    """
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create report folder: {exc.strerror or exc}",
                          source=str(out)) from None
    results = out / "results.csv"
    df.to_csv(results, index=False)
    plot = out / PLOT_FILE
    _plot(df, plot)
    consts = df.attrs.get("constants") or {}
    notes = df.attrs.get("notes", {})
    val = df[df["split"] == "validation"]
    fails = val[~val["ok"]]["case"].tolist()
    summary = summarize(df)
    shown = summary.assign(
        median_abs_err=[_err_text(v, "relative" if k == "throughput" else "points")
                        .lstrip("+") for v, k in zip(summary["median_abs_err"], summary["kind"])],
        max_abs_err=[_err_text(v, "relative" if k == "throughput" else "points").lstrip("+")
                     for v, k in zip(summary["max_abs_err"], summary["kind"])],
        threshold=[_err_text(v, "relative" if k == "throughput" else "points").lstrip("+")
                   for v, k in zip(summary["threshold"], summary["kind"])])
    table = results_table(df)
    table["iteration s"] = df["iteration_time_s"].map(lambda v: f"{v:.4g}")
    table["MFU"] = df["mfu"].map(lambda v: f"{100 * v:.1f}%")
    table["exposed comm s"] = df["exposed_comm_s"].map(lambda v: f"{v:.3g}")
    table["peak mem GiB"] = df["peak_memory_gib"].map(lambda v: f"{v:.1f}")
    lines = [
        f"# {title}", "",
        "Simulated training iterations compared with published A100 numbers "
        "(`validation/training/measurements.csv`: NVIDIA DeepLearningExamples single-node "
        "PyTorch tables, PyTorch FSDP blog; every row keeps its source).", "",
        "**Split.** Only the *calibration* cases (1-GPU ResNet-50 and 1-GPU BERT-large seq "
        "128, TF32 and AMP) may be used to fit compute constants. Every *validation* case is "
        "held out. Errors are (simulated - measured) / measured for throughput, and simulated "
        "- measured in percentage points for scaling efficiency = throughput(N) / (N x "
        "throughput(1)), measured = the published scaling factor / N.", "",
        f"**Gate** (validation cases): |throughput error| <= {THROUGHPUT_THRESHOLD:.0%}, "
        f"|scaling-efficiency error| <= {100 * SCALING_THRESHOLD:.0f} points.", "",
        ("Compute constants (eff_max): " + ", ".join(f"{k} = {v:.3f}" for k, v in
                                                      consts.items()) + ".") if consts else "",
        "",
        ("**Validation cases failing the gate:** " + ", ".join(fails) + ".") if fails
        else "**All validation cases pass the gate.**", "",
        f"![measured vs simulated]({plot.name})", "",
        "## Summary", "", _md_table(shown), "",
        "## Cases", "", _md_table(table), "",
        "Gate marks in parentheses are calibration cases (information only). OOM: the "
        "simulated peak memory exceeds the GPU's; the measured run did fit.", "",
        "## Notes", "",
    ]
    for cid in df["case"]:
        if notes.get(cid):
            lines.append(f"* **{cid}**: {notes[cid]}")
    (out / "report.md").write_text("\n".join(lines) + "\n")
    return {"report": out / "report.md", "results": results, "plots": [plot]}


def _plot(df: pd.DataFrame, path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    thr = df[df["error_kind"] == "relative"]
    sc = df[df["error_kind"] == "points"]
    fig = Figure(figsize=(12, 0.9 + 0.32 * max(len(thr), len(sc), 4)))
    FigureCanvasAgg(fig)
    ax_t, ax_s = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    for ax, g, title in ((ax_t, thr, "throughput: simulated / measured"),
                         (ax_s, sc, "scaling efficiency (N GPUs / (N x 1 GPU))")):
        y = np.arange(len(g))
        labels = [f"{c} [{s[:3]}]" for c, s in zip(g["case"], g["split"])]
        if ax is ax_t:
            ratio = (g["simulated"] / g["measured"]).to_numpy(dtype=float)
            ax.barh(y - 0.2, np.ones(len(g)), 0.4, color="0.6", label="measured (= 1)")
            ax.barh(y + 0.2, ratio, 0.4, color=["C0" if s == "calibration" else "C1"
                                                for s in g["split"]], label="simulated")
            for lim in (1 - THROUGHPUT_THRESHOLD, 1 + THROUGHPUT_THRESHOLD):
                ax.axvline(lim, color="red", ls="--", lw=1)
            for yi, r in zip(y, ratio):
                ax.text(r, yi + 0.2, f" {r:.2f}", va="center", fontsize=7)
            ax.set_xlim(0, max(2.0, float(np.nanmax(ratio)) * 1.12) if len(g) else 2.0)
        else:
            ax.barh(y - 0.2, g["measured"], 0.4, color="0.6", label="measured")
            ax.barh(y + 0.2, g["simulated"], 0.4, color="C1", label="simulated")
            for yi, m, v in zip(y, g["measured"], g["simulated"]):
                ax.text(m, yi - 0.2, f" {m:.3f}", va="center", fontsize=7)
                ax.text(v, yi + 0.2, f" {v:.3f}", va="center", fontsize=7)
            ax.set_xlim(0.5, 1.1)
        ax.set_yticks(y)
        ax.set_yticklabels(labels, fontsize=7)
        ax.invert_yaxis()
        ax.set_title(title, fontsize=9, pad=22)
        ax.grid(True, axis="x", alpha=0.3)
        ax.legend(fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2,
                  frameon=False)
    fig.suptitle(f"Training validation (blue: calibration, orange: validation; red lines: "
                 f"+-{THROUGHPUT_THRESHOLD:.0%} gate; gate on scaling: "
                 f"+-{100 * SCALING_THRESHOLD:.0f} points)", fontsize=9)
    fig.subplots_adjust(left=0.17, right=0.98, bottom=0.08, top=0.86, wspace=0.65)
    fig.savefig(path, dpi=80)


__all__ = ["METRICS", "SCALING_THRESHOLD", "SPLITS", "THROUGHPUT_THRESHOLD", "Case",
           "build_measurements", "default_root", "format_summary", "load_cases",
           "load_measurements", "parse_number", "results_table", "simulate_case",
           "summarize", "validate", "write_measurements", "write_report"]

"""Single-GPU validation on a GPU the compute constants never saw (``validation/gpu/``).

Measured on one NVIDIA H200 with ``validation/capture/gpu_capture.py`` (README there). Three
kinds of case, all held out (the compute constants were fitted on A100 rows only):

* **generated**: the simulator's own model of the job (catalog model, ``hgx-h200``) against
  the measured median step time. Gate :data:`STEP_GATE_GENERATED` (the training gate).
* **replay**: a profiled step imported as ``clustersim import`` does and replayed, against
  the step the profile recorded. Gate :data:`STEP_GATE_REPLAY` (the A100 trace's gate).
* **optimizer**: the GPU optimizer step alone (AdamW / SGD, foreach / fused, with and
  without a GradScaler) against one simulated optimizer op. Gate as generated.

For the profiled generated cases, ``validate()["classes"]`` puts the recorded kernel time
per class (:func:`recorded_classes`) beside the simulated op time per class: which part of
the model carries to another GPU and which does not (the report's "where the time goes").
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from simulator.errors import ConfigError, validation_error

from simulator.validation.common import read_yaml
from simulator.validation.paths import data_dir

CASES = "cases.yaml"
TOPOLOGY = "hgx-h200"
STEP_GATE_GENERATED = 0.15
STEP_GATE_REPLAY = 0.10
REPORT = "report.md"
# Recorded kernels -> the simulator's op classes, by the ATen operator that launched each one
# (the kernel's "External id" names it in a Kineto trace): a cuDNN convolution may run as a
# GEMM kernel, so kernel names alone misclassify. First match wins; unmatched: elementwise.
OP_CLASSES = (
    ("attention", r"attention|flash|sdpa|efficient_attention"),
    ("optimizer", r"_foreach_|_fused_adam|_fused_sgd|non_finite_check_and_unscale"),
    ("conv", r"convolution"),
    ("matmul", r"aten::(mm|addmm|bmm|baddbmm|matmul|linear|_addmm_activation)$"),
    ("norm", r"batch_norm|layer_norm|group_norm"),
    ("loss", r"nll_loss|log_softmax|cross_entropy"),
    ("embedding", r"embedding"),
)
ALIGN = re.compile(r"_align(\d+)")
HALF = re.compile(r"f16|bf16")


def unaligned_gemm(kernel: str) -> bool:
    """A CUTLASS GEMM kernel built for operands aligned to less than 16 bytes (``alignN``:
    N elements; 2 bytes each for f16/bf16 kernels, else 4): cuBLAS picks one when a
    dimension is not a multiple of 8 halves / 4 floats, e.g. a 50,257-word vocabulary."""
    m = ALIGN.search(kernel)
    return bool(m) and int(m.group(1)) * (2 if HALF.search(kernel) else 4) < 16


class GeneratedCase(BaseModel):
    model_config = ConfigDict(extra="forbid")
    scenario: str
    set: list[str] = Field(default_factory=list)
    model_file: str | None = None      # a model YAML beside cases.yaml (sets model=)
    notes: str = ""
    # calibration: a constant was fitted on this case's profile (compute.yaml names which)
    split: Literal["validation", "calibration"] = "validation"


class CasesFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    description: str = ""
    measurements: list[str]
    generated: dict[str, GeneratedCase]
    replay: dict[str, str]


def default_root() -> Path:
    """``validation/gpu`` of the repository."""
    return data_dir("gpu")


def load(root: Path) -> tuple[CasesFile, dict]:
    """The cases file and the measurements, checked: every case names a measured one.

    :raises ConfigError: unreadable or malformed files, a case with no measurement.
    """
    path = root / CASES
    try:
        cases = CasesFile.model_validate(read_yaml(path))
    except ValidationError as exc:
        raise validation_error(exc, source=str(path), style="raw") from None
    runs, measured = [], {}
    for rel in cases.measurements:
        mpath = root / rel
        try:
            with open(mpath) as f:
                data = json.load(f)
            for c in data["cases"]:
                if c["case"] in measured:
                    raise ConfigError(f"case {c['case']!r} measured twice", source=str(mpath))
                measured[c["case"]] = {**c, "run": rel}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"unreadable measurements ({exc})", source=str(mpath)) from None
        runs.append({"file": rel, **data.get("meta", {}),
                     **{k: data.get(k, []) for k in ("host_optimizer", "copies",
                                                      "gpu_optimizer")}})
    for name in [*cases.generated, *cases.replay]:
        if name not in measured:
            raise ConfigError(f"no measured case {name!r} in {', '.join(cases.measurements)}",
                              source=str(path), field=name)
    return cases, {"runs": runs, "cases": measured}


def median(values: list[float]) -> float:
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def op_class(op_name: str) -> str:
    """The simulator's op class of a recorded ATen operator (see :data:`OP_CLASSES`)."""
    return next((c for c, pat in OP_CLASSES if re.search(pat, op_name)), "elementwise")


def recorded_classes(profile) -> tuple[Counter, float]:
    """Seconds of recorded GPU kernels per class in a :class:`~simulator.importers.kineto.
    KinetoProfile`, and of the matmul class the unaligned GEMMs' (:func:`unaligned_gemm`)."""
    launcher: dict = {}                                 # External id -> innermost cpu_op
    for e in profile.host:
        ext = e.args.get("External id")
        if e.cat == "cpu_op" and ext is not None:
            if ext not in launcher or e.end - e.ts < launcher[ext][0]:
                launcher[ext] = (e.end - e.ts, e.name)
    out, unaligned = Counter(), 0.0
    for e in profile.gpu:
        if e.cat != "kernel":
            continue
        cls, dur = op_class(launcher.get(e.args.get("External id"), (0, ""))[1]), e.end - e.ts
        out[cls] += dur / 1e6                            # Kineto times are microseconds
        if cls == "matmul" and unaligned_gemm(e.name):
            unaligned += dur / 1e6
    return out, unaligned


def _simulate(case: GeneratedCase, root: Path):
    from simulator.pipeline import build_setup, run_setup
    from simulator.scenario import load_scenario
    model = [f"model={root / case.model_file}"] if case.model_file else []
    scn = load_scenario(case.scenario, sets=[*case.set, *model])
    return run_setup(build_setup(scn, source=case.scenario))


def kernel_model_gemm_s(result) -> float:
    """Seconds the step's GEMMs take by the kernel model alone (the roofline by shape, no
    stack fit: :data:`~simulator.compute.training_fit.IDENTITY`), to set beside the recorded
    GEMM kernels: what the GPU's GEMMs cost whatever runs them."""
    from simulator.compute import ComputeModel
    from simulator.compute.pricing import priced_s
    from simulator.compute.training_fit import IDENTITY
    bare = ComputeModel(result.setup.compute.gpu, fit=IDENTITY)
    precision = result.setup.job.precision
    total = 0.0
    for op in result.setup.trace.classes[0].ops:
        if op.kind != "compute" or op.op_class != "matmul" or op.phase == "optimizer":
            continue
        total += priced_s(bare, "matmul", op.flops, op.bytes_accessed, precision,
                          op.attrs) * op.attrs.get("repeat", 1)
    return total


def simulated_classes(result) -> Counter:
    """Seconds of simulated compute per op class (optimizer-phase ops as ``optimizer``; an
    NCHW convolution's layout transposes as ``conv``, where :func:`recorded_classes` finds
    them, launched by the convolution's operator)."""
    from simulator.models.layout import is_transpose
    ops = {op.id: op for op in result.setup.trace.classes[0].ops}
    out = Counter()
    for rec in result.timeline.records:
        op = ops.get(rec.op_id)
        if op is not None and op.kind == "compute":
            cls = ("optimizer" if op.phase == "optimizer" else "conv" if is_transpose(op.name)
                   else op.op_class or "elementwise")
            out[cls] += rec.end_s - rec.start_s
    return out


def _replay(profile) -> tuple[float, float, float]:
    """(recorded step s, replayed step s, replayed GPU busy s: the recorded kernels, copies
    and memsets) of a whole-trace import of ``profile`` (a read Kineto trace)."""
    from simulator.importers.assemble import assemble
    from simulator.importers.pytorch import rank_trace
    from simulator.trace_replay import device_busy_s, replay_trace
    trace = assemble([rank_trace(profile, None)], "pytorch")
    result = replay_trace(trace, TOPOLOGY)
    return (trace.meta["recorded_iteration_s"], result.metrics.iteration_time_s,
            device_busy_s(result))


def optimizer_rows(measured: list[dict]) -> list[dict]:
    """The GPU optimizer microbenchmark against one simulated optimizer op of
    :func:`simulator.strategies.optim.step_bytes` on the H200 (kind ``optimizer``)."""
    from simulator.compute import ComputeModel
    from simulator.hardware import gpu_spec
    from simulator.strategies.optim import OPT_STEP_FLOPS, step_bytes
    model = ComputeModel(gpu_spec("H200-SXM"))
    rows = []
    for m in measured:
        n, opt, impl = m["params"], m["optimizer"], m["impl"]
        sim = model.op_time_s("optimizer", n * OPT_STEP_FLOPS[opt],
                              n * step_bytes(opt, impl, m["grad_scaler"]), "fp32")
        err = sim / m["step_s"] - 1
        name = f"{opt}-{impl}" + ("-gradscaler" if m["grad_scaler"] else "")
        rows.append({"case": f"gpu/optimizer/{name}", "kind": "optimizer",
                     "measured_s": m["step_s"], "simulated_s": sim, "error": err,
                     "bound": STEP_GATE_GENERATED, "ok": abs(err) <= STEP_GATE_GENERATED,
                     "notes": f"{n / 1e6:.0f} M fp32 parameters, "
                              f"{step_bytes(opt, impl, m['grad_scaler'])} B/param"})
    return rows


def validate(root: Path | None = None) -> dict:
    """``cases`` (one row per generated and replay case) and ``classes`` (recorded kernel vs
    simulated op seconds per class, for generated cases that have a profile)."""
    from simulator.importers.kineto import read_kineto
    root = Path(root) if root is not None else default_root()
    cases, data = load(root)
    profiles = {name: read_kineto(root / rel) for name, rel in cases.replay.items()}
    rows, classes = [], []
    for name, case in cases.generated.items():
        m = data["cases"][name]
        measured = median(m["step_s"])
        result = _simulate(case, root)
        sim = result.metrics.iteration_time_s
        err = sim / measured - 1
        rows.append({"case": f"gpu/{name}/generated", "kind": "generated", "measured_s": measured,
                     "simulated_s": sim, "error": err, "bound": STEP_GATE_GENERATED,
                     "ok": abs(err) <= STEP_GATE_GENERATED, "notes": case.notes})
        if name in cases.replay:
            rec, unaligned = recorded_classes(profiles[name])
            simc = simulated_classes(result)
            gemm_s = kernel_model_gemm_s(result)
            for cls in sorted(set(rec) | set(simc)):
                classes.append({"case": name, "class": cls, "recorded_s": rec.get(cls, 0.0),
                                "simulated_s": simc.get(cls, 0.0),
                                "unaligned_gemm_s": unaligned if cls == "matmul" else 0.0,
                                "kernel_model_s": gemm_s if cls == "matmul" else 0.0})
    for name, profile in profiles.items():
        recorded, replayed, busy = _replay(profile)
        err = replayed / recorded - 1
        rows.append({"case": f"gpu/{name}/replay", "kind": "replay", "measured_s": recorded,
                     "simulated_s": replayed, "error": err, "bound": STEP_GATE_REPLAY,
                     "ok": abs(err) <= STEP_GATE_REPLAY,
                     "notes": f"GPU busy {busy / recorded:.0%} of the step; "
                              f"unprofiled median {median(data['cases'][name]['step_s']):.4f} s"})
    rows += optimizer_rows([r for run in data["runs"] for r in run["gpu_optimizer"]])
    host = [r for run in data["runs"] for r in run["host_optimizer"]]
    copies = [r for run in data["runs"] for r in run["copies"]]
    return {"cases": pd.DataFrame(rows), "classes": pd.DataFrame(classes),
            "runs": data["runs"], "host_optimizer": pd.DataFrame(host),
            "copies": pd.DataFrame(copies), "description": cases.description}

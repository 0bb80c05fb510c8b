"""The validated ground that :mod:`.envelope` measures an answer against, built from the
repository's validation results and shipped as ``simulator/data/validated.csv`` (the wheel
carries no ``validation/`` folder).

One row per validated throughput case: every non-scaling row of
``validation/training/report/results.csv`` (published multi-GPU and 1-GPU A100 runs, both
splits), every simulated row of the FSDP throughput tables
(``validation/training/report/fsdp_tables.csv``: llm-foundry on 8-64 A100-80GB and H100,
torchtitan on 64 A100-80GB; their split is ``validation/training/split.yaml``'s, metric
``tokens_per_s``) and every ``generated`` case of ``validation/gpu/results.csv`` (the simulator's own
model of a single-H200 step against the measured step; its step-time error is turned into a
throughput error, ``measured_s / simulated_s - 1``, metric ``steps_per_s``) and every compared
row of NVIDIA's DGX H100 and Blackwell tables in ``validation/parallel/results.csv`` (NeMo
24.07 and Megatron-Bridge, Megatron's own family; metric ``tokens_per_s``; nothing is fitted
on them, so they are ``validation``) and the MLPerf Training v4.1 GPT-3 175B rows (metric ``steps_per_s``, all
``validation``) and SimuMax's simulated Megatron-LM rows on one DGX
B200 (metric ``steps_per_s``, split as ``cases.yaml``'s ``blackwell_split`` declares: the
24 dense rows are the Blackwell fit's ``calibration``) and the MLPerf Llama 2 70B LoRA rows
of ``validation/finetune/results.csv`` (NVIDIA's and AMD's, all ``validation``, metric
``steps_per_s``; their ``finetune`` column ``lora``, which :meth:`.envelope.Query.kin`
keeps apart from pre-training rows). Replayed
profiles, the optimizer-only cases and the scaling-efficiency rows are left out: they do
not test a prediction of a throughput from a configuration.

Regenerate after ``clustersim validate training``, ``gpu`` or ``parallel`` rewrites their
results::

    python -m simulator.validation.envelope_data          # writes simulator/data/validated.csv
    python -m simulator.validation.envelope_data --check  # exit 1 when it is out of step

``tests/test_envelope.py`` fails when the shipped file is out of step with the results.
"""

from __future__ import annotations

import csv
import io
import sys
from pathlib import Path

from ..models import load_model, params_total
from ..outpaths import atomic_write_text
from ..scenario import apply_sets, resolve_scenario, scenario_from_dict
from ..topology.build import scenario_graph
from .common import read_yaml
from .envelope import COLUMNS, SHIPPED, architecture_of, family_of, finetune_mode
from .paths import data_dir
from .training.tables import load_rows

THROUGHPUT = ("samples_per_s", "tflops_per_gpu")


def _scenario(ref, sets: list[str], source: str) -> dict:
    """A case's scenario mapping (shipped name or inline) with its ``set`` applied."""
    data = dict(ref) if isinstance(ref, dict) else read_yaml(resolve_scenario(ref))
    return apply_sets(data, list(sets), source)


def _describe(data: dict, source: str, model_file: Path | None = None) -> dict:
    """Strategy family, model, parameters, GPU type and precision of a scenario mapping."""
    if model_file is not None:
        data = {**data, "model": str(model_file)}
    scn = scenario_from_dict(data, source)
    model = load_model(scn.model)
    return {"family": family_of(str(scn.strategy.get("name"))), "model": model.name,
            "params": params_total(model), "moe": model.is_moe,
            "gpu": str(scenario_graph(scn).graph.get("gpu")),
            "precision": scn.training.precision,
            "finetune": finetune_mode(scn.training.finetune),
            "architecture": architecture_of(model.family)}


def training_rows(root: Path) -> list[dict]:
    """The throughput rows of the training suite (``root``: ``validation/training``)."""
    cases = read_yaml(root / "cases.yaml")["cases"]
    source = str(root / "cases.yaml")
    with open(root / "measurements.csv", newline="") as f:
        meas = {r["measurement_id"]: r for r in csv.DictReader(f)}
    out = []
    with open(root / "report" / "results.csv", newline="") as f:
        for r in csv.DictReader(f):
            if r["metric"] not in THROUGHPUT:
                continue
            spec = cases[r["case"]]
            d = _describe(_scenario(spec["scenario"], spec.get("set", []), source), source)
            m = meas[r["measurement"]]
            out.append({**d, "case": f"training/{r['case']}", "gpus": int(r["gpus"]),
                        "nodes": int(m["nodes"]), "split": r["split"], "metric": r["metric"],
                        "error": float(r["error"]), "framework": m["framework"]})
    return out


FRAMEWORK = {"llm_foundry": "llm-foundry", "torchtitan": "torchtitan", "torchtitan_h100": "torchtitan",
             "torchao": "torchtitan (torchao README)"}


def table_rows(root: Path) -> list[dict]:
    """The simulated rows of the FSDP throughput tables (``root``: ``validation/training``;
    rows not simulated, e.g. published as out of memory, are left out)."""
    with open(root / "report" / "fsdp_tables.csv", newline="") as f:
        done = {r["case"]: r for r in csv.DictReader(f) if r["error"] not in ("", "nan")}
    source = str(root / "split.yaml")
    out = []
    for row in load_rows(root):
        r = done.get(row.row_id)
        if r is None:
            continue
        d = _describe(dict(row.scenario, model=row.model), source)
        out.append({**d, "case": f"training/{row.row_id}", "gpus": row.gpus,
                    "nodes": int(row.scenario["cluster"].get("nodes", 1)), "split": row.split,
                    "metric": "tokens_per_s", "error": float(r["error"]),
                    "framework": FRAMEWORK[row.table]})
    return out


def gpu_rows(root: Path) -> list[dict]:
    """The generated single-GPU cases of the GPU suite (``root``: ``validation/gpu``)."""
    cases = read_yaml(root / "cases.yaml")["generated"]
    source = str(root / "cases.yaml")
    out = []
    with open(root / "results.csv", newline="") as f:
        for r in csv.DictReader(f):
            if r["kind"] != "generated":
                continue
            name = r["case"].split("/")[1]
            spec = cases[name]
            mf = root / spec["model_file"] if spec.get("model_file") else None
            data = _scenario(spec["scenario"], spec.get("set", []), source)
            d = _describe(data, source, mf)
            out.append({**d, "case": r["case"], "gpus": 1, "nodes": 1,
                        "split": spec.get("split", "validation"), "metric": "steps_per_s",
                        "error": float(r["measured_s"]) / float(r["simulated_s"]) - 1.0,
                        "framework": "PyTorch"})
    return out


def parallel_rows(root: Path) -> list[dict]:
    """The simulated iteration rows of Selene (Megatron-LM on A100, their time error as a
    throughput error, measured / simulated - 1), the compared rows of NVIDIA's DGX H100 and
    Blackwell tables and SimuMax's B200 rows (``root``: ``validation/parallel``)."""
    from .parallel import cases as pc
    from .parallel import iteration, nemo
    spec = pc.load(root)
    with open(root / "results.csv", newline="") as f:
        done = {r["case"]: r for r in csv.DictReader(f)
                if r["kind"] in (*nemo.KINDS, "iteration", "simumax", "mlperf")
                and r["error"] not in ("", "nan")}
    source = str(root / pc.CASES_FILE)
    out = []
    selene = str(root / spec.files.iteration)
    for row in pc.read_rows(root, spec.files.iteration).to_dict("records"):
        run = pc.run_of(row, spec, selene)
        case = f"parallel/selene/{pc.short(run.label)}/{run.mode}/iteration"
        if case not in done:
            continue
        data = iteration.scenario_of(run, root, spec.topologies["selene"], case)
        measured, simulated = float(done[case]["measured"]), float(done[case]["simulated"])
        out.append({**_describe(data, source), "case": case, "gpus": run.gpus,
                    "nodes": data["cluster"]["nodes"], "split": "validation",
                    "metric": "steps_per_s", "error": measured / simulated - 1.0,
                    "framework": "Megatron-LM (2022)"})
    for kind in nemo.KINDS:
        for row in nemo.table_rows(root, spec, kind):
            case = nemo.case_id(kind, row)
            if case not in done:
                continue
            data = nemo.scenario_of(row, root, spec, case, kind)
            framework = ("NeMo 24.07" if kind == "nemo"
                         else f"Megatron-Bridge {str(row['release']).split()[0]}")
            out.append({**_describe(data, source), "case": case, "gpus": int(row["gpus"]),
                        "nodes": data["cluster"]["nodes"], "split": "validation",
                        "metric": "tokens_per_s", "error": float(done[case]["error"]),
                        "framework": framework})
    return out + simumax_rows(root, spec, done) + mlperf_rows(root, spec, done)


def mlperf_rows(root: Path, spec, done: dict) -> list[dict]:
    """The MLPerf GPT-3 175B step-time rows (their time error as a throughput error), all
    validation."""
    from .parallel import cases as pc
    from .parallel import mlperf
    source = str(root / pc.CASES_FILE)
    out = []
    for row in mlperf.gpt3_rows(root, spec):
        case = mlperf.case_id(row)
        if case not in done:
            continue
        data = mlperf.scenario_of(row, spec, case)
        measured, simulated = float(done[case]["measured"]), float(done[case]["simulated"])
        out.append({**_describe(data, source), "case": case, "gpus": int(row["gpus"]),
                    "nodes": int(row["nodes"]), "metric": "steps_per_s", "split": "validation",
                    "error": measured / simulated - 1.0,
                    "framework": f"NeMo (MLPerf Training v4.1, {row['submitter']})"})
    return out


def simumax_rows(root: Path, spec, done: dict) -> list[dict]:
    """SimuMax's simulated B200 step-time rows (their time error as a throughput error),
    split as ``cases.yaml``'s ``blackwell_split`` declares."""
    from .parallel import cases as pc
    from .parallel import simumax
    if not spec.files.simumax:
        return []
    calibration = simumax.calibration_cases(spec)
    source = str(root / pc.CASES_FILE)
    out = []
    for row in pc.read_rows(root, spec.files.simumax, simumax.COLUMNS).to_dict("records"):
        case = simumax.case_id(row)
        if case not in done:
            continue
        data = simumax.scenario_of(row, root, spec, case)
        measured, simulated = float(done[case]["measured"]), float(done[case]["simulated"])
        out.append({**_describe(data, source), "case": case, "gpus": int(row["num_gpus"]),
                    "nodes": 1, "metric": "steps_per_s",
                    "split": "calibration" if row["case"] in calibration else "validation",
                    "error": measured / simulated - 1.0,
                    "framework": "Megatron-LM (SimuMax B200 runs)"})
    return out


def finetune_rows(root: Path) -> list[dict]:
    """The MLPerf Llama 2 70B LoRA rows of the fine-tuning suite (``root``:
    ``validation/finetune``), their step-time error as a throughput error (measured /
    simulated - 1); all held out (``split.yaml``: nothing fitted). Megatron-Bridge's rows,
    reported only (packed sequences of unpublished lengths), are left out."""
    from . import finetune as ft
    split = ft.load_split(root)
    rows = {"v4.1": ft.mlperf_rows(root), "v5.0": ft.mlperf_rows(root, ft.DATA_V50)}
    source = str(root / "split.yaml")
    out = []
    with open(root / "results.csv", newline="") as f:
        for r in csv.DictReader(f):
            if r["round"] not in rows or r.get("reported_only") or not r["simulated_s"]:
                continue
            data = ft.scenario_of(rows[r["round"]][r["system"]], split)
            gpus = int(r["gpus"])
            out.append({**_describe(data, source), "case": f"finetune/{r['round']}/{r['system']}",
                        "gpus": gpus, "nodes": int(data["cluster"].get("nodes") or 1),
                        "split": "validation", "metric": "steps_per_s",
                        "error": float(r["measured_s"]) / float(r["simulated_s"]) - 1.0,
                        "framework": f"NeMo (MLPerf {r['round']} LoRA, {r['submitter']})"})
    return out


def validated_rows() -> list[dict]:
    """Every validated case, sorted by case id."""
    rows = (training_rows(data_dir("training")) + table_rows(data_dir("training"))
            + gpu_rows(data_dir("gpu")) + parallel_rows(data_dir("parallel"))
            + finetune_rows(data_dir("finetune")))
    return sorted(rows, key=lambda r: r["case"])


def summary_text(rows: list[dict]) -> str:
    """``rows`` as the CSV text of ``validated.csv`` (errors to 6 significant digits)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({**{k: r[k] for k in COLUMNS}, "error": f"{r['error']:.6g}"})
    return buf.getvalue()


def main(argv: list[str]) -> int:
    """Write (or with ``--check`` compare) ``simulator/data/validated.csv``."""
    text = summary_text(validated_rows())
    if "--check" in argv:
        same = SHIPPED.read_text() == text
        print(f"{SHIPPED}: {'in step' if same else 'OUT OF STEP: regenerate'}")
        return 0 if same else 1
    atomic_write_text(SHIPPED, text)
    print(f"wrote {SHIPPED}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

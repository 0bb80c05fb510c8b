"""One runner per validation of the project, for ``clustersim validate`` (:mod:`.run`).

Each runner runs its validation, writes that validation's own report (the same files as its
own command, into the folder ``folder`` when given, else into the repository's
``validation/``) and returns ``(cases, report path)``; a case is a dict with ``case`` (id),
``what`` (what is compared), ``result`` (text), ``bound`` (text), ``ok`` (True, False, or
None when not gated) and ``error`` (the signed number the status rests on, or None).
"""

from __future__ import annotations

from pathlib import Path

from simulator.outpaths import atomic_write_text
from simulator.validation.commands import (case as _case, collective_cases, parallel_cases,
                                            pct as _pct, trace_cases, training_cases)


def collectives(workers: int = 1, folder: Path | None = None) -> tuple[list[dict], Path]:
    """Median |busbw| and |time| errors per nccl-tests table (validation tables gated)."""
    from simulator.constants import load_constants
    from simulator.validation.collectives import schema
    from simulator.validation.collectives.command import title
    from simulator.validation.collectives.report import summarize, write_report
    from simulator.validation.collectives.validate import validate
    root = schema.default_root()
    k = load_constants()
    df = validate(root, k)
    report = write_report(df, folder or root / "report", k, title=title())["report"]
    return collective_cases(summarize(df)), report


def training(workers: int = 1, folder: Path | None = None) -> tuple[list[dict], Path]:
    """Throughput / scaling-efficiency error per case, and whether a measured run fits in
    the simulated memory (validation cases gated)."""
    from simulator.validation.training.command import title
    from simulator.validation.training.report import write_report
    from simulator.validation.training.schema import default_root
    from simulator.validation.training.validate import validate
    from simulator.validation.training.tables_report import run_and_write
    root = default_root()
    df = validate(root)
    report = write_report(df, folder or root / "report", title=title())["report"]
    return training_cases(df) + run_and_write(folder or root / "report", root)[2], report


def traces(workers: int = 1, folder: Path | None = None) -> tuple[list[dict], Path]:
    """The A100 DDP trace: steady step time (gate) and NCCL kernel durations (goal)."""
    from simulator.validation.traces import validate as vt
    from simulator.validation.traces.report import write_report
    results = vt.validate()
    report = write_report(results, folder)
    return trace_cases(results), report


def captured(workers: int = 1, folder: Path | None = None) -> tuple[list[dict], Path]:
    """The captured CPU runs: replay, what-if, scaling (every case gated)."""
    from simulator.validation.captured.calibration import traces_root
    from simulator.validation.captured.report import write_report
    from simulator.validation.captured.validate import validate
    df = validate()
    report = write_report(df, folder or traces_root())
    return [_case(r.case, f"{r.kind}: {r.source} at {r.bandwidth}, {r.ranks} ranks",
                  _pct(r.error), f"<= {r.bound:.0%}", r.ok, r.error)
            for r in df.itertuples(index=False)], report


def gpu(workers: int = 1, folder: Path | None = None) -> tuple[list[dict], Path]:
    """The H200 single-GPU runs: generated and replayed step times (every case gated)."""
    from simulator.validation.gpu.report import write_report
    from simulator.validation.gpu.validate import validate
    results = validate()
    report = write_report(results, folder)
    return [_case(r.case, f"{r.kind} step time on one H200", _pct(r.error),
                  f"<= {r.bound:.0%}", r.ok, r.error)
            for r in results["cases"].itertuples(index=False)], report


def parallel(workers: int = 1, folder: Path | None = None) -> tuple[list[dict], Path]:
    """Megatron-LM on Selene: memory rows and the median iteration-time error (gated); the
    NeMo H100 and Blackwell rows (reported), ``workers`` runs at once, each in a fresh
    process (:func:`simulator.validation.parallel.runs.run_jobs`, largest first). The Selene
    530B and 1T runs, 5-6 GB each, are not among them here (``selene_max_gpus``); the largest
    that are, GB200's 405B rows, hold about 3.3 GB each."""
    from simulator.validation.parallel.report import validate, write_report
    df = validate(workers=workers)
    return parallel_cases(df), write_report(df, folder)


def reliability(workers: int = 1, folder: Path | None = None, checks=None, text=None,
                out: Path | None = None) -> tuple[list[dict], Path]:
    """Daly, Meta RSC-1 and Llama 3 checks (their own gates), each run once; the report
    (``out``, default ``validation/reliability/report.md``) and the cases come from the same
    rows. ``checks`` runs the checks (default
    :func:`simulator.validation.reliability.report.run_checks`) and ``text`` writes the
    report from their rows (default :func:`~simulator.validation.reliability.report.report_text`)."""
    from simulator.validation.reliability import report as vr
    from simulator.validation.reliability.checks import CASES, load_cases
    cases = load_cases()
    rows = (checks or vr.run_checks)(cases, workers)
    report = (out if out is not None else folder / "report.md" if folder is not None
              else CASES.parent / "report.md")
    report.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(report, (text or vr.report_text)(cases, rows))
    return _reliability_cases(rows), report


def energy(workers: int = 1, folder: Path | None = None) -> tuple[list[dict], Path]:
    """MLPerf v4.1 LoRA power runs (64 x H100): energy per run, and the steady training's
    node power, step time and energy (each gated); 2 s."""
    from simulator.validation import energy as ve
    setup, results, sim, capped = ve.evaluate()
    report = ve.write(results, setup, sim, capped, ve.ROOT, out=folder)
    what = {"energy": "node energy per run (whole window)", "train_power": "steady training "
            "node power", "train_step": "steady training step time",
            "train_energy": "steady training energy"}
    return [_case(c["case"], what.get(c["case"].rsplit("/", 1)[-1], what["energy"]),
                  c["result"], f"<= {c['bound']}", c["ok"], _signed(c["result"]))
            for c in ve.cases(results, setup)], report


def _signed(text: str) -> float | None:
    try:
        return float(text.rstrip("%")) / 100
    except ValueError:
        return None


def _reliability_cases(seen: dict[str, list]) -> list[dict]:
    cases = []
    for r in seen.get("daly_examples", []):
        cases.append(_case(f"reliability/daly/{r['M']}", "Daly's optimum interval",
                           f"{r['daly_min']:.2f} min", f"= {r['printed']} min (printed)",
                           r["ok"]))
    for r in seen.get("daly_simulation", []):
        cases.append(_case(f"reliability/daly-simulation/{r['interval']}",
                           "simulated ETTR vs Daly's closed form",
                           f"{r['sigmas']:.1f} sigma", "within its tolerance", r["ok"]))
    for r in seen.get("meta_ettr", []):
        cases.append(_case(f"reliability/meta-ettr/{r['u0']}/{r['interval']}",
                           "E[ETTR], Meta RSC-1", f"{r['error']:+.3f}", "paper's tolerance",
                           r["ok"], r["error"]))
    for r in seen.get("meta_mttf", []):
        got = r.get("simulated_h", r["formula_h"])
        cases.append(_case(f"reliability/meta-mttf/{r['gpus']}", "MTTF", f"{got:.2f} h",
                           "as printed / tolerance", r["ok"]))
    for r in seen.get("llama3_interruptions", []):
        cases.append(_case(f"reliability/llama3/{r['link_effect']}",
                           "interruptions in 54 days", f"{r['mean']:.0f} vs {r['measured']}",
                           "3 sigma (Poisson)", r["ok"]))
    return cases


RUNNERS = {"collectives": collectives, "training": training, "traces": traces,
           "captured": captured, "gpu": gpu, "parallel": parallel,
           "reliability": reliability, "energy": energy}

__all__ = ["RUNNERS"]

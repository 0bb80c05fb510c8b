"""One runner per validation of the project, for ``clustersim validate`` (:mod:`.run`).

Each runner runs its validation, writes that validation's own report (the same files as its
own command) and returns ``(cases, report path)``; a case is a dict with ``case`` (id),
``what`` (what is compared), ``result`` (text), ``bound`` (text), ``ok`` (True, False, or
None when not gated) and ``error`` (the signed number the status rests on, or None).
"""

from __future__ import annotations

import math
from pathlib import Path



def _case(case, what, result, bound, ok, error=None) -> dict:
    return {"case": case, "what": what, "result": result, "bound": bound,
            "ok": None if ok is None else bool(ok), "error": error}


def _pct(x: float) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{100 * x:+.1f}%"


def collectives(workers: int = 1) -> tuple[list[dict], Path]:
    """Median |busbw| and |time| errors per nccl-tests table (validation tables gated)."""
    from simulator.collectives.constants import load_constants
    from simulator.validation.collectives import schema
    from simulator.validation.collectives.command import title
    from simulator.validation.collectives.report import summarize, write_report
    from simulator.validation.collectives.validate import validate
    root = schema.default_root()
    k = load_constants()
    df = validate(root, k)
    report = write_report(df, root / "report", k, title=title())["report"]
    cases = []
    for r in summarize(df).itertuples(index=False):
        gated = r.split == "validation"
        for metric, med, ok, bound, size in (
                ("busbw", r.busbw_med, r.busbw_ok, schema.BUSBW_THRESHOLD, ">= 1 MiB"),
                ("time", r.time_med, r.time_ok, schema.TIME_THRESHOLD, "<= 64 KiB")):
            if ok is None:
                continue
            cases.append(_case(f"collectives/{r.table_id}/{metric}",
                               f"median |{metric} error| {size} ({r.split})",
                               f"{100 * med:.1f}%", f"<= {bound:.0%}", ok if gated else None,
                               med))
    return cases, report


def training(workers: int = 1) -> tuple[list[dict], Path]:
    """Throughput / scaling-efficiency error per case, and whether a measured run fits in
    the simulated memory (validation cases gated)."""
    from simulator.validation.training.command import title
    from simulator.validation.training.report import write_report
    from simulator.validation.training.schema import default_root
    from simulator.validation.training.validate import validate
    root = default_root()
    df = validate(root)
    report = write_report(df, root / "report", title=title())["report"]
    cases = []
    for r in df.itertuples(index=False):
        gated = r.split == "validation"
        points = r.error_kind == "points"
        err = f"{100 * r.error:+.1f} points" if points else _pct(r.error)
        bound = f"<= {100 * r.threshold:.0f} points" if points else f"<= {r.threshold:.0%}"
        cases.append(_case(f"training/{r.case}", f"{r.metric} ({r.split})", err, bound,
                           r.ok if gated else None, r.error))
        if gated and not points:
            cases.append(_case(f"training/{r.case}/memory", "the measured run fits in the "
                               "simulated memory", f"peak {r.peak_memory_gib:.1f} GiB"
                               + (" (OOM)" if r.oom else ""), "no OOM", not r.oom))
    return cases, report


def traces(workers: int = 1) -> tuple[list[dict], Path]:
    """The A100 DDP trace: steady step time (gate) and NCCL kernel durations (goal)."""
    from simulator.validation.traces import validate as vt
    from simulator.validation.traces.report import write_report
    results = vt.validate()
    report = write_report(results)
    s = vt.summarize(results)
    return [_case("traces/a100/step", f"ProfilerStep#{s['steady_step']} step time error",
                  _pct(s["step_error"]), f"<= {vt.STEP_GATE:.0%}", s["step_ok"],
                  s["step_error"]),
            _case("traces/a100/nccl-kernels", "median |NCCL kernel duration error| (goal)",
                  f"{100 * s['median_abs_error']:.1f}%", f"<= {vt.COLLECTIVE_GOAL:.0%}",
                  s["collectives_ok"], s["median_abs_error"])], report


def captured(workers: int = 1) -> tuple[list[dict], Path]:
    """The captured CPU runs: replay, what-if, scaling (every case gated)."""
    from simulator.validation.captured.calibration import traces_root
    from simulator.validation.captured.report import write_report
    from simulator.validation.captured.validate import validate
    df = validate()
    report = write_report(df, traces_root())
    return [_case(r.case, f"{r.kind}: {r.source} at {r.bandwidth}, {r.ranks} ranks",
                  _pct(r.error), f"<= {r.bound:.0%}", r.ok, r.error)
            for r in df.itertuples(index=False)], report


def gpu(workers: int = 1) -> tuple[list[dict], Path]:
    """The H200 single-GPU runs: generated and replayed step times (every case gated)."""
    from simulator.validation.gpu.report import write_report
    from simulator.validation.gpu.validate import validate
    results = validate()
    report = write_report(results)
    return [_case(r.case, f"{r.kind} step time on one H200", _pct(r.error),
                  f"<= {r.bound:.0%}", r.ok, r.error)
            for r in results["cases"].itertuples(index=False)], report


def reliability(workers: int = 1, checks=None, text=None, out: Path | None = None
                ) -> tuple[list[dict], Path]:
    """Daly, Meta RSC-1 and Llama 3 checks (their own gates), each run once; the report
    (``out``, default ``validation/reliability/report.md``) and the cases come from the same
    rows. ``checks`` runs the checks (default
    :func:`simulator.validation.reliability.report.run_checks`) and ``text`` writes the
    report from their rows (default :func:`~simulator.validation.reliability.report.report_text`)."""
    from simulator.validation.reliability import report as vr
    from simulator.validation.reliability.checks import CASES, load_cases
    cases = load_cases()
    rows = (checks or vr.run_checks)(cases, workers)
    report = out if out is not None else CASES.parent / "report.md"
    report.write_text((text or vr.report_text)(cases, rows))
    return _reliability_cases(rows), report


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
           "captured": captured, "gpu": gpu, "reliability": reliability}

__all__ = ["RUNNERS"]

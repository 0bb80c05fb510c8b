"""One runner per validation of the project, for ``clustersim validate`` (:mod:`.suite`).

Each runner runs its validation, writes that validation's own report (the same files as its
own command) and returns ``(cases, report path)``; a case is a dict with ``case`` (id),
``what`` (what is compared), ``result`` (text), ``bound`` (text), ``ok`` (True, False, or
None when not gated) and ``error`` (the signed number the status rests on, or None).
"""

from __future__ import annotations

import math
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _case(case, what, result, bound, ok, error=None) -> dict:
    return {"case": case, "what": what, "result": result, "bound": bound,
            "ok": None if ok is None else bool(ok), "error": error}


def _pct(x: float) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{100 * x:+.1f}%"


def collectives(workers: int = 1) -> tuple[list[dict], Path]:
    """Median |busbw| and |time| errors per nccl-tests table (validation tables gated)."""
    from .cli import collectives_title
    from simulator.collectives.constants import load_constants
    from . import collectives as vc
    root = vc.default_root()
    k = load_constants()
    df = vc.validate(root, k)
    report = vc.write_report(df, root / "report", k, title=collectives_title())["report"]
    cases = []
    for r in vc.summarize(df).itertuples(index=False):
        gated = r.split == "validation"
        for metric, med, ok, bound, size in (
                ("busbw", r.busbw_med, r.busbw_ok, vc.BUSBW_THRESHOLD, ">= 1 MiB"),
                ("time", r.time_med, r.time_ok, vc.TIME_THRESHOLD, "<= 64 KiB")):
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
    from .cli import training_title
    from . import training as vt
    root = vt.default_root()
    df = vt.validate(root)
    report = vt.write_report(df, root / "report", title=training_title())["report"]
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
    from . import traces as vt
    results = vt.validate()
    report = vt.write_report(results)
    s = vt.summarize(results)
    return [_case("traces/a100/step", f"ProfilerStep#{s['steady_step']} step time error",
                  _pct(s["step_error"]), f"<= {vt.STEP_GATE:.0%}", s["step_ok"],
                  s["step_error"]),
            _case("traces/a100/nccl-kernels", "median |NCCL kernel duration error| (goal)",
                  f"{100 * s['median_abs_error']:.1f}%", f"<= {vt.COLLECTIVE_GOAL:.0%}",
                  s["collectives_ok"], s["median_abs_error"])], report


def captured(workers: int = 1) -> tuple[list[dict], Path]:
    """The captured CPU runs: replay, what-if, scaling (every case gated)."""
    from . import captured as vc
    from .captured_report import write_report
    df = vc.validate()
    report = write_report(df, vc.traces_root())
    return [_case(r.case, f"{r.kind}: {r.source} at {r.bandwidth}, {r.ranks} ranks",
                  _pct(r.error), f"<= {r.bound:.0%}", r.ok, r.error)
            for r in df.itertuples(index=False)], report


def gpu(workers: int = 1) -> tuple[list[dict], Path]:
    """The H200 single-GPU runs: generated and replayed step times (every case gated)."""
    from . import gpu as vg
    from .gpu_report import write_report
    results = vg.validate()
    report = write_report(results)
    return [_case(r.case, f"{r.kind} step time on one H200", _pct(r.error),
                  f"<= {r.bound:.0%}", r.ok, r.error)
            for r in results["cases"].itertuples(index=False)], report


def reliability(workers: int = 1) -> tuple[list[dict], Path]:
    """Daly, Meta RSC-1 and Llama 3 checks (their own gates); writes report.md once."""
    from simulator.reliability import validate as v
    from simulator.reliability import validate_report as vr
    seen: dict[str, list] = {}
    names = ("daly_examples", "daly_simulation", "meta_ettr", "meta_mttf",
             "llama3_interruptions")
    originals = {n: getattr(v, n) for n in names}

    def recorder(name):
        def run(*args, **kwargs):
            rows = originals[name](*args, **kwargs)
            seen.setdefault(name, []).extend(rows)
            return rows
        return run
    try:                                   # the report calls each check once: keep its rows
        for n in names:
            setattr(v, n, recorder(n))
        text = vr.report(workers)
    finally:
        for n, f in originals.items():
            setattr(v, n, f)
    report = v.CASES.parent / "report.md"
    report.write_text(text)
    return _reliability_cases(seen), report


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

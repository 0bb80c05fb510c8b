"""Pieces shared by the ``clustersim validate <suite>`` commands: their ``--root`` and
``--out`` options (:func:`folder_options`), the check of a suite's
folder and write options (:func:`checked_root`), where its report goes
(:func:`report_folder`, :func:`report_file`) and the end of a gated command
(:func:`finish`: summary, cases not passing, exit code; :func:`gated_exit` for the suites
whose cases are built here: collectives, training, traces, parallel)."""

from __future__ import annotations

import math
from pathlib import Path

import click

from simulator.errors import ConfigError
from simulator.outpaths import prepare_out_dir, writable_file
from simulator.validation import known_misses as km
from simulator.validation.paths import CHECKOUT, default_report


def folder_options(data: str, default_data: str, default_out: str):
    """``--root`` (the suite's input folder, holding ``data``; default ``default_data``) and
    ``--out`` (the report folder; default ``default_out``) as one decorator."""
    root = click.option("--root", "root", type=click.Path(file_okay=False, path_type=Path),
                        default=None, help=f"Folder with {data} [default: {default_data}].")
    out = click.option("--out", "out", type=click.Path(file_okay=False, path_type=Path),
                       default=None, help="Report folder: new, empty or written by clustersim "
                                          f"[default: {default_out}].")
    return lambda command: root(out(command))


def checked_root(root, module, write_to, calibrate: bool, overwrite: bool, option: str):
    """The validation folder to use, after checking the write options.

    :raises ConfigError: ``option`` without --calibrate, an existing file without
        --overwrite, or a folder without ``module.CASES_FILE``.
    """
    if write_to is not None and not calibrate:
        raise ConfigError("needs --calibrate (it writes the fitted constants)", source=option)
    if write_to is not None:
        writable_file(write_to, overwrite, option)
    given, root = root is not None, root if root is not None else module.default_root()
    if not (root / module.CASES_FILE).is_file():
        raise ConfigError(f"no {module.CASES_FILE} in {root}" if given else
                          f"the validation data are not installed (no {module.CASES_FILE} "
                          f"in {root})", source="--root" if given else "validate")
    return root


def _ours(path: Path) -> bool:
    """Inside the repository's validation/: the project's own generated reports."""
    return Path(path).resolve().is_relative_to(CHECKOUT.resolve())


def report_folder(out: Path | None, default: Path) -> Path:
    """The folder a suite's report goes to: ``out``, else ``default`` (from a wheel:
    :func:`~simulator.validation.paths.default_report`). Outside the
    repository's validation/ (whose reports the suites regenerate) it is checked as
    ``run --out`` is (:func:`simulator.outpaths.prepare_out_dir`): a folder that is not
    empty and was not written by clustersim is refused."""
    folder = Path(out) if out is not None else default_report(default)
    if _ours(folder):
        return folder
    try:
        return prepare_out_dir(folder)
    except ConfigError as exc:
        if out is not None:
            raise
        # no --out given: the report goes beside the data (--root); say so, rather than
        # naming an --out the user never gave
        raise ConfigError(f"{exc.reason} (without --out the report is written here)",
                          source=exc.source, field="report folder") from None


def report_file(out: Path | None, overwrite: bool) -> Path | None:
    """``out`` (None: the default report) once it may be written: outside the
    repository's validation/, an existing file or a symbolic link needs ``overwrite``
    (:func:`simulator.outpaths.writable_file`)."""
    if out is None or _ours(out):
        return out
    return writable_file(out, overwrite, "--out")


def finish(summary: str, cases, report: Path) -> None:
    """Print the summary, every case not passing (columns case, ok, error, bound) and the
    report; exit with :func:`.known_misses.exit_code`."""
    click.echo(summary)
    status = km.with_status(cases)
    for r in status[status.status != "pass"].itertuples(index=False):
        click.echo(f"{r.status}: {r.case}: {100 * r.error:+.1f}% (bound {r.bound:.0%})")
    click.echo(f"report: {report}")
    code = km.exit_code(status.status)
    if code:
        raise click.exceptions.Exit(code)


# ------------------------------------------------------------ gated cases, exit code
def case(case, what, result, bound, ok, error=None) -> dict:
    """One validation case (``ok`` None: reported, not gated), as the suites report them."""
    return {"case": case, "what": what, "result": result, "bound": bound,
            "ok": None if ok is None else bool(ok), "error": error}


def pct(x: float) -> str:
    """``+1.2%``, or ``-`` for a missing or non-finite number."""
    return "-" if x is None or not math.isfinite(x) else f"{100 * x:+.1f}%"


def collective_cases(summary) -> list[dict]:
    """The gated cases of a collective validation's per-table summary."""
    from simulator.validation.collectives import schema
    cases = []
    for r in summary.itertuples(index=False):
        gated = r.split == "validation"
        for metric, med, ok, bound, size in (
                ("busbw", r.busbw_med, r.busbw_ok, schema.BUSBW_THRESHOLD, ">= 1 MiB"),
                ("time", r.time_med, r.time_ok, schema.TIME_THRESHOLD, "<= 64 KiB")):
            if ok is None:
                continue
            cases.append(case(f"collectives/{r.table_id}/{metric}",
                              f"median |{metric} error| {size} ({r.split})",
                              f"{100 * med:.1f}%", f"<= {bound:.0%}", ok if gated else None,
                              med))
    return cases


def training_cases(df) -> list[dict]:
    """The gated cases of a training validation's results (throughput, scaling, memory)."""
    cases = []
    for r in df.itertuples(index=False):
        gated = r.split == "validation"
        points = r.error_kind == "points"
        err = f"{100 * r.error:+.1f} points" if points else pct(r.error)
        bound = f"<= {100 * r.threshold:.0f} points" if points else f"<= {r.threshold:.0%}"
        cases.append(case(f"training/{r.case}", f"{r.metric} ({r.split})", err, bound,
                          r.ok if gated else None, r.error))
        if gated and not points:
            cases.append(case(f"training/{r.case}/memory", "the measured run fits in the "
                              "simulated memory", f"peak {r.peak_memory_gib:.1f} GiB"
                              + (" (OOM)" if r.oom else ""), "no OOM", not r.oom))
    return cases


def trace_cases(results: dict) -> list[dict]:
    """The A100 trace's cases: the step time (gated) and the NCCL kernel durations (goal)."""
    from simulator.validation.traces import validate as vt
    s = vt.summarize(results)
    return [case("traces/a100/step", f"ProfilerStep#{s['steady_step']} step time error",
                 pct(s["step_error"]), f"<= {vt.STEP_GATE:.0%}", s["step_ok"],
                 s["step_error"]),
            case("traces/a100/nccl-kernels", "median |NCCL kernel duration error| (goal)",
                 f"{100 * s['median_abs_error']:.1f}%", f"<= {vt.COLLECTIVE_GOAL:.0%}",
                 s["collectives_ok"], s["median_abs_error"])]


def parallel_cases(df) -> list[dict]:
    """The parallel suite's cases: the Selene memory rows and the median iteration-time
    error (gated), each Selene and NeMo run's error (reported)."""
    cases = []
    for r in df.itertuples(index=False):
        ok = None if r.ok is None or r.ok != r.ok else bool(r.ok)
        gate = r.kind == "gate"
        result = (f"{100 * r.error:.1f}%" if math.isfinite(r.error) else "-") if gate \
            else pct(r.error)
        bound = f"<= {r.bound:.0%}" if math.isfinite(r.bound) else "reported"
        what = f"{r.quantity} ({r.model}, {r.mode})" if r.mode else r.quantity
        cases.append(case(r.case, what, result, bound, ok, r.error))
    return cases


def gated_exit(cases: list[dict]) -> None:
    """Print each case out of bound with its status and exit by the ``validate`` convention:
    0 when every gated case passes, 3 when only known misses are out of bound, 1 on a FAIL
    (out of bound, not in validation/known_misses.yaml) or an XPASS."""
    import pandas as pd
    status = km.with_status(pd.DataFrame(cases, columns=["case", "ok", "result", "bound"]))
    for r in status[status.status.isin(["known miss", "FAIL", "XPASS"])].itertuples(index=False):
        click.echo(f"{r.status}: {r.case}: {r.result} (bound {r.bound})")
    code = km.exit_code(status.status)
    if code:
        raise click.exceptions.Exit(code)


__all__ = ["case", "checked_root", "collective_cases", "finish", "gated_exit",
           "parallel_cases", "pct", "report_file", "report_folder", "trace_cases", "training_cases"]

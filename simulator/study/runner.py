"""Load a study, run its points on an executor, store each result as it arrives, and write
the table, plots and report."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from .. import progress
from ..yamlio import read_yaml
from .commands import COMMANDS, checker, error_line, evaluate, parse_options
from .executors import make_executor
from .points import LoadedStudy, expand
from .spec import check_columns, parse_study, plot_paths, resolve_study
from .store import ResultStore, open_study_dir, scan_parts
from . import work

if TYPE_CHECKING:           # pandas loads with the first part written (start-up time)
    import pandas as pd


@dataclass
class StudyRun:
    """What one invocation did."""

    out: Path
    table: pd.DataFrame | None        # None until the points have run
    ran: int = 0
    failed: int = 0
    skipped: int = 0
    executor: str = ""
    wall_s: float = 0.0
    files: list[Path] = field(default_factory=list)


def load_study(path: str | Path, max_work: int | None = None) -> LoadedStudy:
    """Read a study file and validate it completely, every point's scenario included.

    :raises ConfigError: naming the file and the field, before anything runs; past
        ``max_work`` units (:mod:`.work`) before the points are resolved.
    """
    path = resolve_study(path)
    source = str(path)
    spec = parse_study(read_yaml(path, "study file"), source)
    columns = [*spec.axis_keys(), *COMMANDS[spec.command].columns]
    check_columns(spec, columns, source)
    options = parse_options(spec.command, spec.options, source)
    work.check(spec, options, source, max_work)
    return LoadedStudy(spec, source, expand(spec, source, checker(spec.command), options))


def run_study(study: LoadedStudy, out: Path | str | None = None, executor: str = "local",
              workers: int | None = None, resume: bool = True, progress: bool = True,
              warn: Callable[[str], None] | None = None) -> StudyRun:
    """Run the points not finished yet and write results, plots and the report.

    The executor is set up (a Dask scheduler reached) before the output folder is touched;
    then the folder is held by this run (another is refused) until the outputs are written.
    A part that cannot be used is moved aside, ``warn`` is called with one line saying so
    (default: on stderr), and its point runs again. A failing point is recorded with its
    error; the others still run.
    """
    out = Path(out) if out is not None else Path("studies") / study.spec.name
    plot_paths(study.spec, out, study.source)    # refused before the folder is touched
    columns = COMMANDS[study.spec.command].columns
    start = time.perf_counter()
    before = scan_parts(out, study.points, columns).status if resume else {}
    ex = make_executor(executor, workers,
                       sum(before.get(p["id"]) != "ok" for p in study.points))
    try:
        with open_study_dir(out, study.spec.name, fresh=not resume) as out:
            store = ResultStore(out, study.points, columns, warn or _warn)
            todo = [p for p in study.points if store.status.get(p["id"]) != "ok"]
            run = StudyRun(out, None, skipped=len(study.points) - len(todo),
                           executor=ex.description)
            _run_points(ex, todo, store, run, _bar(study.spec.name, len(todo), run.skipped,
                                                   progress))
            ex.close()
            run.table = store.compact(study.points, out)
            from .report import write_outputs     # matplotlib: only once the points have run
            run.files = write_outputs(study, run.table, out)
    finally:
        ex.close()
    run.wall_s = time.perf_counter() - start
    return run


def _run_points(ex, todo: list[dict], store: ResultStore, run: StudyRun, bar) -> None:
    """Run ``todo`` on ``ex``, storing each point's rows as it finishes."""
    try:
        for point, result in ex.run(evaluate, todo):
            rows = result if isinstance(result, list) and result else [
                {"status": "error", "error": _failure(result), "wall_s": None, "worker": ""}]
            run.ran += 1
            run.failed += store.write(point, rows) == "error"
            bar.set_postfix_str(f"failed {run.failed}", refresh=False)
            bar.update()
    finally:
        bar.close()


def _failure(result) -> str:
    if isinstance(result, BaseException):
        return f"the worker failed: {error_line(result)}"
    return "the command returned no rows"


def _warn(line: str) -> None:
    print(f"clustersim: warning: {line}", file=sys.stderr, flush=True)


def _bar(name: str, total: int, skipped: int, enabled: bool):
    desc = f"{name}" + (f" ({skipped} done before)" if skipped else "")
    return progress.bar(total, desc, "point", show=enabled)


def ok_rows(table: pd.DataFrame) -> pd.DataFrame:
    """The rows of points that ran to completion."""
    return table[table["status"] == "ok"] if len(table) else table


__all__ = ["StudyRun", "load_study", "resolve_study", "run_study"]

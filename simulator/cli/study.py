"""`clustersim study`: a what-if sweep over a scenario (docs/studies.md)."""

from __future__ import annotations

from pathlib import Path

import click

from ..progress import quiet_option

EXIT_POINTS_FAILED = 1


def register(cli: click.Group) -> None:
    """Add ``study`` to the ``clustersim`` group."""

    @cli.command("study")
    @click.argument("study_file", metavar="FILE")
    @click.option("--executor", default="local", show_default=True,
                  metavar="local|dask://HOST:PORT",
                  help="Run points in local processes, or on an existing Dask scheduler.")
    @click.option("--workers", type=click.IntRange(min=1), default=None, metavar="N",
                  help="Local worker processes [default: min(cores, points)].")
    @click.option("--out", type=click.Path(path_type=Path), default=None,
                  help="Results folder [default: studies/<study name>].")
    @click.option("--resume/--fresh", default=True, show_default=True,
                  help="Skip points already finished in --out, or start over.")
    @click.option("--progress/--no-progress", default=True, show_default=True,
                  help="Progress on stderr (as --quiet).")
    @click.option("--max-work", type=click.IntRange(min=1), default=None, metavar="UNITS",
                  help="Refuse a study past this many units of work (about a millisecond "
                       "each), counted from its axes before any point is resolved "
                       "[default: 3,600,000; docs/studies.md].")
    @quiet_option
    def study_cmd(study_file, executor, workers, out, resume, progress, max_work):
        """Run the study FILE: every point of its axes, then its table, plots and report.

        FILE is a study YAML file or a shipped name (scenarios/studies/). Points run in
        parallel; each finished point is saved at once, so an interrupted study resumes
        where it stopped. A failing point is recorded with its error (exit code 1 at the
        end); the others still run.
        """
        from ..study.spec import resolve_study
        path = resolve_study(study_file)        # a missing file, before the runner loads
        from ..study import load_study, run_study
        study = load_study(path, max_work)
        click.echo(f"# study {study.spec.name}: {len(study.points)} points, command "
                   f"{study.spec.command} ({study.source})")
        run = run_study(study, out, executor=executor, workers=workers, resume=resume,
                        progress=progress)
        from ..study.report import answers          # matplotlib: only once it has run
        ok = run.table[run.table["status"] == "ok"] if len(run.table) else run.table
        click.echo(f"# ran {run.ran} point(s) ({run.failed} failed), {run.skipped} finished "
                   f"before; {run.wall_s:.1f} s on {run.executor}")
        for ask, text in answers(study, ok):
            click.echo(f"Q: {ask}\nA: {text}")
        click.echo(f"# outputs in {run.out}: " + ", ".join(p.name for p in run.files))
        failed = int((run.table["status"] != "ok").sum()) if len(run.table) else 0
        if failed:
            click.echo(f"clustersim: {failed} point(s) failed; their errors are in "
                       f"{run.out / 'report.md'} and the results' error column", err=True)
            click.get_current_context().exit(EXIT_POINTS_FAILED)

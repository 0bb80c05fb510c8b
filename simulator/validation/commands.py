"""Pieces shared by the ``clustersim validate <suite>`` commands: their ``--root`` and
``--out`` options (:func:`folder_options`), the check of a suite's
folder and write options (:func:`checked_root`), where its report goes
(:func:`report_folder`, :func:`report_file`) and the end of a gated command
(:func:`finish`: summary, cases not passing, exit code)."""

from __future__ import annotations

from pathlib import Path

import click

from simulator.errors import ConfigError
from simulator.outpaths import prepare_out_dir, writable_file
from simulator.validation import known_misses as km
from simulator.validation.paths import DATA


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
    root = root if root is not None else module.default_root()
    if not (root / module.CASES_FILE).is_file():
        raise ConfigError(f"no {module.CASES_FILE} in {root}", source="--root")
    return root


def _ours(path: Path) -> bool:
    """Inside the repository's validation/: the project's own generated reports."""
    return Path(path).resolve().is_relative_to(DATA.resolve())


def report_folder(out: Path | None, default: Path) -> Path:
    """The folder a suite's report goes to: ``out``, else ``default``. Outside the
    repository's validation/ (whose reports the suites regenerate) it is checked as
    ``run --out`` is (:func:`simulator.outpaths.prepare_out_dir`): a folder that is not
    empty and was not written by clustersim is refused."""
    folder = Path(out) if out is not None else Path(default)
    return folder if _ours(folder) else prepare_out_dir(folder)


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


__all__ = ["checked_root", "finish", "report_file", "report_folder"]

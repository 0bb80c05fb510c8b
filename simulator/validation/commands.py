"""Pieces shared by the ``clustersim validate <suite>`` commands: the check of a suite's
folder and write options (:func:`checked_root`) and the end of a gated command
(:func:`finish`: summary, cases not passing, exit code)."""

from __future__ import annotations

from pathlib import Path

import click

from simulator.errors import ConfigError
from simulator.validation import known_misses as km


def checked_root(root, module, write_to, calibrate: bool, overwrite: bool, option: str):
    """The validation folder to use, after checking the write options.

    :raises ConfigError: ``option`` without --calibrate, an existing file without
        --overwrite, or a folder without ``module.CASES_FILE``.
    """
    if write_to is not None and not calibrate:
        raise ConfigError("needs --calibrate (it writes the fitted constants)", source=option)
    if write_to is not None and write_to.exists() and not overwrite:
        raise ConfigError("file exists; refusing to overwrite it (add --overwrite)",
                          source=str(write_to), field=option)
    root = root if root is not None else module.default_root()
    if not (root / module.CASES_FILE).is_file():
        raise ConfigError(f"no {module.CASES_FILE} in {root}", source="--root")
    return root


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


__all__ = ["checked_root", "finish"]

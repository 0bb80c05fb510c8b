"""``--config FILE``: a torchtitan TOML, a DeepSpeed JSON or a Megatron argument list merged
over the scenario (:mod:`simulator.configs`), for ``run``, ``trace``, ``compare`` and
``plan``. What it used and ignored goes to stderr."""

from __future__ import annotations

from pathlib import Path

import click

CONFIG_HELP = ("A framework's own config: a torchtitan TOML (.toml), a DeepSpeed JSON (.json) "
               "or a Megatron-LM argument list (any other name), merged over the scenario; "
               "--set still wins. Says on stderr which keys it used and ignored.")
FORMATS = ("torchtitan", "deepspeed", "megatron")


def config_options(command):
    """Add ``--config`` and ``--config-format`` to a command."""
    command = click.option("--config-format", "config_format", type=click.Choice(FORMATS),
                           default=None, help="The format of --config [default: from the "
                           "file name].")(command)
    return click.option("--config", "config", type=click.Path(path_type=Path), default=None,
                        metavar="FILE", help=CONFIG_HELP)(command)


def load(path, sets: list[str], config: Path | None, fmt: str | None):
    """The scenario at ``path`` with ``--config`` merged in and ``sets`` over both."""
    return load_pieces(path, sets, config, fmt)[0]


def load_pieces(path, sets: list[str], config: Path | None, fmt: str | None):
    """(:func:`load`'s scenario, the config's pieces or None)."""
    from ..scenario import load_scenario
    if config is None:
        return load_scenario(path, sets), None
    from ..configs import read_config, scenario_with_config
    pieces = read_config(config, fmt)
    scn = scenario_with_config(path, pieces, sets)
    click.echo(pieces.summary(), err=True)
    if pieces.model_note:
        click.echo(f"{pieces.source}: {pieces.model_note} ({scn.model})", err=True)
    return scn, pieces

"""``clustersim validate``: the validation commands (each defined with its suite, in
``simulator/validation/<suite>/command.py``), attached to the main CLI by :func:`register`::

    from simulator.cli.validate import register
    register(cli)          # adds: clustersim validate collectives|training|traces|...|all

User mistakes raise :class:`~simulator.errors.ClusterSimError` subclasses, which the main
entry point prints as one line.
"""

from __future__ import annotations

import click

from simulator.validation.captured.command import validate_captured
from simulator.validation.collectives.command import validate_collectives
from simulator.validation.gpu.command import validate_gpu
from simulator.validation.parallel.command import validate_parallel
from simulator.validation.suite.command import validate_all
from simulator.validation.traces.command import validate_traces
from simulator.validation.training.command import validate_training


def register(group: click.Group) -> click.Group:
    """Add ``validate collectives|training|traces|captured|gpu|parallel|all`` to ``group`` (creating the
    ``validate`` subgroup if the group has none; without a subcommand it runs ``all``);
    returns the ``validate`` group."""
    commands = {"collectives": validate_collectives, "training": validate_training,
                "traces": validate_traces, "captured": validate_captured, "gpu": validate_gpu,
                "parallel": validate_parallel, "all": validate_all}
    existing = group.commands.get("validate")
    if isinstance(existing, click.Group):
        for name, cmd in commands.items():
            existing.add_command(cmd, name)
        return existing

    @group.group("validate", invoke_without_command=True)
    @click.pass_context
    def validate(ctx):
        """Compare the simulator with real measurements; without a subcommand, run every
        validation (``validate all``) and write validation/REPORT.md.

        Every validate command exits the same way: 0 when every gated case passes, 3 when
        the only cases out of bound are known misses (validation/known_misses.yaml), 1 on
        any other miss (or a recorded miss now within bound)."""
        if ctx.invoked_subcommand is None:
            ctx.invoke(validate_all)

    for name, cmd in commands.items():
        validate.add_command(cmd, name)
    return validate


__all__ = ["register"]

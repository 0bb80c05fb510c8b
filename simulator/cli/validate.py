"""``clustersim validate``: the validation commands (each defined with its suite, in
``simulator/validation/<suite>/command.py``), attached to the main CLI by :func:`register`::

    from simulator.cli.validate import register
    register(cli)          # adds: clustersim validate collectives|training|traces|...|all

User mistakes raise :class:`~simulator.errors.ClusterSimError` subclasses, which the main
entry point prints as one line.
"""

from __future__ import annotations

import click

from simulator.lazy import LazyDict

NAMES = ("collectives", "training", "traces", "captured", "gpu", "parallel", "energy", "all")


def _load(name: str) -> click.Command:
    """The subcommand ``name``; its suite's module is imported here, so a command other than
    ``validate`` (or ``validate --help``, which lists them all) loads none (start-up time)."""
    if name == "collectives":
        from simulator.validation.collectives.command import validate_collectives as cmd
    elif name == "training":
        from simulator.validation.training.command import validate_training as cmd
    elif name == "traces":
        from simulator.validation.traces.command import validate_traces as cmd
    elif name == "captured":
        from simulator.validation.captured.command import validate_captured as cmd
    elif name == "gpu":
        from simulator.validation.gpu.command import validate_gpu as cmd
    elif name == "parallel":
        from simulator.validation.parallel.command import validate_parallel as cmd
    elif name == "energy":
        from simulator.validation.energy import validate_energy as cmd
    elif name == "all":
        from simulator.validation.suite.command import validate_all as cmd
    else:
        raise KeyError(name)
    return cmd


def register(group: click.Group) -> click.Group:
    """Add ``validate collectives|training|traces|captured|gpu|parallel|energy|all`` to ``group`` (creating the
    ``validate`` subgroup if the group has none; without a subcommand it runs ``all``);
    returns the ``validate`` group."""
    existing = group.commands.get("validate")
    if isinstance(existing, click.Group):
        for name in NAMES:
            existing.add_command(_load(name), name)
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
            ctx.invoke(validate.commands["all"])

    validate.commands = LazyDict({}, NAMES, _load)     # click reads its subcommands here
    return validate


__all__ = ["register"]

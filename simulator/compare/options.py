"""The strategies of ``clustersim compare`` (``--strategies``) and the one-off migration
effort charged to them (``--migration-days``).

Strategies are named as :mod:`simulator.choices` names them (``fsdp-full``, ``ddp``,
``tf-mirrored``, or capacity's ``fsdp:SHARDING`` and the registry names); compare prints
each by its key.
"""

from __future__ import annotations

from ..choices import (DEFAULT_COMPARE_STRATEGIES, FRAMEWORK_STRATEGIES, NAMED_STRATEGIES,
                       NamedStrategy, parse_strategy_names)
from ..errors import ConfigError


def _unknown(item: str) -> str:
    return f"unknown strategy {item!r}; valid: {', '.join(NAMED_STRATEGIES)}"


def default_strategies(current: str) -> str:
    """The strategies compare runs when ``--strategies`` is not given: the named ones, and
    the scenario's own (``current``) when it is a framework's (``megatron``, ``torchtitan``,
    ``deepspeed``), which its row runs as the scenario has it (its keys carried: the same
    strategy, :func:`simulator.capacity.probe.strategy_dict`)."""
    own = [current] if current in FRAMEWORK_STRATEGIES else []
    return ",".join([*DEFAULT_COMPARE_STRATEGIES, *own])


def parse_strategies(text: str | list[str] | tuple[str, ...]) -> list[NamedStrategy]:
    """``"fsdp-full,ddp,tf-ps"`` -> named strategies, in order, without repeats.

    :raises ConfigError: (source ``--strategies``) for an empty list or an unknown name.
    """
    return list(parse_strategy_names(text, _unknown))


def migration_plan(items: list[str] | tuple[str, ...], strategies: list[NamedStrategy],
                   current: str | None) -> dict[str, float]:
    """Person-days per strategy key from ``--migration-days`` values: ``DAYS`` charges
    every strategy of another framework than ``current`` (the scenario's own),
    ``STRATEGY=DAYS`` one strategy (and wins over ``DAYS``).

    :raises ConfigError: (source ``--migration-days``) for a bad number or strategy.
    """
    plan: dict[str, float] = {}
    for item in items:
        name, eq, text = str(item).rpartition("=")
        try:
            days = float(text)
        except ValueError:
            days = float("nan")
        if not days >= 0 or days == float("inf"):
            raise ConfigError(f"expected DAYS or STRATEGY=DAYS with DAYS >= 0, got {item!r}",
                              source="--migration-days")
        if eq:
            key = parse_strategies(name)[0].key
            plan[key] = days
            continue
        if current is None:
            raise ConfigError("the scenario's strategy belongs to no known framework; "
                              "write STRATEGY=DAYS", source="--migration-days")
        for n in strategies:
            if n.framework != current:
                plan.setdefault(n.key, days)
    return plan

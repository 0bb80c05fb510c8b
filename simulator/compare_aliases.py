"""Strategy names of ``clustersim compare`` (``--strategies``) and the one-off migration
effort charged to them (``--migration-days``).

An alias (``fsdp-full``, ``ddp``, ``tf-mirrored``...) names a strategy of the registry
(:data:`simulator.strategies.STRATEGIES`), a sharding mode for FSDP, and the framework it
belongs to. Registry names (``tf_central_storage``), underscores (``fsdp_full``) and
capacity's ``fsdp:SHARDING`` are accepted as other spellings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import ConfigError

if TYPE_CHECKING:           # the CLI reads DEFAULT_ALIASES without loading the simulator
    from .capacity_probe import StrategySpec


# ---------------------------------------------------------------------------- aliases
@dataclass(frozen=True)
class Alias:
    """A strategy as ``--strategies`` names it."""

    key: str
    strategy: str            # name in the strategy registry
    sharding: str | None     # FSDP sharding mode
    framework: str
    label: str

    @property
    def spec(self) -> StrategySpec:
        from .capacity_probe import StrategySpec
        return StrategySpec(self.key, self.strategy, self.sharding)


ALIASES: dict[str, Alias] = {a.key: a for a in (
    Alias("fsdp-full", "fsdp", "FULL_SHARD", "pytorch", "FSDP FULL_SHARD (ZeRO-3)"),
    Alias("fsdp-grad-op", "fsdp", "SHARD_GRAD_OP", "pytorch", "FSDP SHARD_GRAD_OP (ZeRO-2)"),
    Alias("fsdp-no-shard", "fsdp", "NO_SHARD", "pytorch", "FSDP NO_SHARD (DDP-like)"),
    Alias("fsdp-hybrid", "fsdp", "HYBRID_SHARD", "pytorch", "FSDP HYBRID_SHARD (HSDP)"),
    Alias("fsdp-hybrid-zero2", "fsdp", "_HYBRID_SHARD_ZERO2", "pytorch",
          "FSDP _HYBRID_SHARD_ZERO2"),
    Alias("ddp", "ddp", None, "pytorch", "PyTorch DDP"),
    Alias("tf-mirrored", "tf_mirrored", None, "tensorflow", "TF MirroredStrategy"),
    Alias("tf-multiworker", "tf_multiworker", None, "tensorflow",
          "TF MultiWorkerMirroredStrategy"),
    Alias("tf-ps", "tf_ps", None, "tensorflow", "TF ParameterServerStrategy"),
    Alias("tf-central", "tf_central_storage", None, "tensorflow",
          "TF CentralStorageStrategy"),
    Alias("horovod", "horovod", None, "tensorflow", "Horovod (TensorFlow)"),
)}
DEFAULT_ALIASES = tuple(ALIASES)

# Other spellings: registry names (tf_mirrored, tf_central_storage), underscores, and
# capacity's fsdp:SHARDING.
_SPELLINGS: dict[str, str] = {}
for _a in ALIASES.values():
    _SPELLINGS[_a.key] = _SPELLINGS[_a.key.replace("-", "_")] = _a.key
    _SPELLINGS[f"{_a.strategy}:{_a.sharding}".lower() if _a.sharding else _a.strategy] = _a.key
_SPELLINGS["fsdp"] = "fsdp-full"


def parse_aliases(text: str | list[str] | tuple[str, ...]) -> list[Alias]:
    """``"fsdp-full,ddp,tf-ps"`` -> aliases, in order, without repeats.

    :raises ConfigError: (source ``--strategies``) for an empty list or an unknown name.
    """
    items = text.split(",") if isinstance(text, str) else list(text)
    out: list[Alias] = []
    for raw in items:
        name = raw.strip().lower()
        if not name:
            raise ConfigError(f"empty strategy in {','.join(items)!r}", source="--strategies")
        if name not in _SPELLINGS:
            raise ConfigError(f"unknown strategy {raw.strip()!r}; valid: "
                              f"{', '.join(ALIASES)}", source="--strategies")
        alias = ALIASES[_SPELLINGS[name]]
        if alias not in out:
            out.append(alias)
    if not out:
        raise ConfigError("no strategy given", source="--strategies")
    return out


def framework_of(strategy_name: str) -> str | None:
    """The framework of a registry strategy name, if an alias names it."""
    return next((a.framework for a in ALIASES.values() if a.strategy == strategy_name), None)


def migration_plan(items: list[str] | tuple[str, ...], aliases: list[Alias],
                   current: str | None) -> dict[str, float]:
    """Person-days per alias from ``--migration-days`` values: ``DAYS`` charges every
    strategy of another framework than ``current`` (the scenario's own), ``ALIAS=DAYS``
    one strategy (and wins over ``DAYS``).

    :raises ConfigError: (source ``--migration-days``) for a bad number or alias.
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
            key = parse_aliases(name)[0].key
            plan[key] = days
            continue
        if current is None:
            raise ConfigError("the scenario's strategy belongs to no known framework; "
                              "write STRATEGY=DAYS", source="--migration-days")
        for a in aliases:
            if a.framework != current:
                plan.setdefault(a.key, days)
    return plan

"""Configs people already have: a torchtitan TOML, a DeepSpeed JSON or a Megatron-LM
argument list, read into scenario pieces (:class:`ConfigPieces`) that ``clustersim run
--config FILE`` merges over a scenario (:func:`scenario_with_config`; ``--set`` wins).

The format comes from the file name (``.toml`` torchtitan, ``.json`` DeepSpeed, anything
else Megatron arguments) unless ``fmt`` names it. Each reader says which keys it used and
which it ignored (:meth:`ConfigPieces.summary`).
"""

from __future__ import annotations

from pathlib import Path

from ..errors import ConfigError
from .deepspeed import read_deepspeed
from .megatron import read_megatron
from .merge import scenario_with_config
from .pieces import ConfigPieces
from .torchtitan import read_torchtitan

READERS = {"torchtitan": read_torchtitan, "deepspeed": read_deepspeed,
           "megatron": read_megatron}
SUFFIXES = {".toml": "torchtitan", ".json": "deepspeed"}


def config_format(path, fmt: str | None = None) -> str:
    """``fmt`` if given, else the format the file name says."""
    if fmt is not None:
        if fmt not in READERS:
            raise ConfigError(f"unknown config format {fmt!r}; valid: {', '.join(READERS)}",
                              source="--config-format")
        return fmt
    return SUFFIXES.get(Path(str(path)).suffix.lower(), "megatron")


def read_config(path, fmt: str | None = None) -> ConfigPieces:
    """The scenario pieces of one framework config file."""
    return READERS[config_format(path, fmt)](path)


__all__ = ["READERS", "ConfigPieces", "config_format", "read_config", "read_deepspeed",
           "read_megatron", "read_torchtitan", "scenario_with_config"]

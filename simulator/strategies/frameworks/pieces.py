"""What a framework's own config file gives a scenario, and the typed look-ups the readers
share.

A reader (:mod:`.torchtitan`, :mod:`.deepspeed`, :mod:`.megatron`) turns one file into
:class:`ConfigPieces`: the strategy mapping in the framework's spelling, the training
fields it fills, the global batch (turned into ``training.grad_accum`` once the GPU count
is known, :mod:`simulator.cli.configfile`), the catalog model it names, and the keys it
used and ignored.
Every wrong value is one :class:`~simulator.errors.ConfigError` naming the file and the
dotted key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from simulator.errors import ConfigError
from simulator.inputs import limit, over_limit


SHOWN = 80                  # characters of one ignored key a summary shows


@dataclass
class ConfigPieces:
    """The scenario pieces one framework config file fills."""

    framework: str                      # torchtitan | deepspeed | megatron
    source: str                         # the file
    strategy: dict[str, Any] = field(default_factory=dict)
    training: dict[str, Any] = field(default_factory=dict)
    global_batch: int | None = None     # samples per step; -> training.grad_accum
    local_batch: int | None = None      # samples per DP rank per step (torchtitan)
    model: str | None = None            # a catalog model name
    model_note: str = ""                # why the file's model was not used, when it was not
    used: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)    # defaults the file left to us

    def use(self, key: str) -> None:
        self.used.append(key)

    def ignore(self, key: str, why: str = "") -> None:
        key = key if len(key) <= SHOWN else key[:SHOWN - 3] + "..."   # a whole file, misread
        self.ignored.append(f"{key} ({why})" if why else key)

    def nothing_used(self) -> ConfigError:
        """The refusal of a file none of whose keys this framework's reader uses (a
        DeepSpeed JSON read as Megatron arguments, lines of ``\\``): running the scenario
        unchanged would pass the file off as applied."""
        shown = ", ".join(self.ignored[:4]) + (f" and {len(self.ignored) - 4} more"
                                               if len(self.ignored) > 4 else "")
        return ConfigError(f"nothing in it is a {self.framework} setting clustersim reads "
                           f"(ignored: {shown or 'nothing'}); is it a {self.framework} config? "
                           f"(--config-format names the format)", source=self.source)

    def summary(self) -> str:
        """``used: a, b; ignored: c, d``: the line ``run --config`` prints on stderr."""
        text = (f"{self.source}: {self.framework} config, used: "
                f"{', '.join(self.used) or 'nothing'}; ignored: "
                f"{', '.join(self.ignored) or 'nothing'}")
        return "; ".join([text, *self.notes])


class Doc:
    """Typed reads from one parsed document (a nested mapping): each names its dotted
    key in the error."""

    def __init__(self, source: str):
        self.source = source

    def fail(self, key: str, reason: str) -> ConfigError:
        return ConfigError(reason, source=self.source, field=key)

    def integer(self, value: Any, key: str, low: int = 1) -> int:
        """A whole number >= ``low`` (JSON's ``5e8`` is fine when whole)."""
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(key, f"must be a whole number, got {value!r}")
        if value < low:
            raise self.fail(key, f"must be >= {low}, got {value}")
        return value

    def boolean(self, value: Any, key: str) -> bool:
        if not isinstance(value, bool):
            raise self.fail(key, f"must be true or false, got {value!r}")
        return value

    def text(self, value: Any, key: str, choices: tuple[str, ...] | None = None) -> str:
        if not isinstance(value, str):
            raise self.fail(key, f"must be a string, got {value!r}")
        if choices is not None and value not in choices:
            raise self.fail(key, f"must be one of {', '.join(choices)}, got {value!r}")
        return value

    def table(self, value: Any, key: str) -> dict:
        if not isinstance(value, dict):
            raise self.fail(key, f"must be a table/object of keys, got {value!r}")
        return value


def check_depth(data: Any, source: str) -> Any:
    """``data`` if it nests no deeper than the ``config_depth`` limit."""
    most = limit("config_depth")
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > most:
            raise over_limit("config_depth", "nested too deeply", source)
        children = value.values() if isinstance(value, dict) else \
            value if isinstance(value, list) else ()
        stack.extend((v, depth + 1) for v in children)
    return data


def flat_keys(data: dict, prefix: str = "") -> list[str]:
    """Dotted keys of the leaves of a nested mapping, in file order."""
    out: list[str] = []
    for key, value in data.items():
        where = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict) and value:
            out += flat_keys(value, where)
        else:
            out.append(where)
    return out


def precision_of(name: str, doc: Doc, key: str) -> str:
    """A framework's dtype spelling (``bfloat16``, ``bf16``, ``float32``...) as ours."""
    spelled = {"bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "fp16": "fp16",
               "half": "fp16", "float32": "fp32", "fp32": "fp32", "float": "fp32"}
    got = spelled.get(doc.text(name, key).lower())
    if got is None:
        raise doc.fail(key, f"must be one of {', '.join(spelled)}, got {name!r}")
    return got

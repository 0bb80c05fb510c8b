"""The fields of a Chakra node as clustersim reads them, each checked where it is read.

A Chakra file is a user's file like any other: a node type or collective type past the
enum, a size that is a string, a double of 1e300 or a negative number, a node id given twice
are refused here, as one :class:`~simulator.errors.ConfigError` naming the file and the
field as the file spells it (``node 12.comm_size``), before any op is built from them.
"""

from __future__ import annotations

import math

from ..errors import ConfigError
from ..trace.fields import MAX_SIZE_BYTES
from .chakra_pb import COLLECTIVE_TYPES, NODE_TYPES

MAX_FLOPS = 1e21                 # one op: ~39 days on a 300 TFLOP/s GPU, past any kernel


def attrs(message) -> dict:
    """``{name: value}`` of a node's or metadata's AttributeProto list."""
    out = {}
    for a in message.attr:
        kind = a.WhichOneof("value")
        value = getattr(a, kind) if kind else None
        out[a.name] = list(value.values) if kind and kind.endswith("_list") else value
    return out


class NodeFields:
    """Typed reads of node ``n`` of the Chakra file ``source``."""

    def __init__(self, n, source: str):
        self.n, self.source, self.a = n, source, attrs(n)

    def fail(self, key: str, reason: str) -> ConfigError:
        return ConfigError(reason, source=self.source, field=f"node {self.n.id}.{key}")

    def kind(self) -> str:
        """The node's ``type`` by name (``COMP_NODE``...)."""
        t = self.n.type
        if not 0 <= t < len(NODE_TYPES):
            raise self.fail("type", f"unknown node type {t}; valid: 0..{len(NODE_TYPES) - 1} "
                                    f"(NodeType of et_def.proto)")
        return NODE_TYPES[t]

    def collective(self) -> str:
        """``comm_type`` as our collective name (``all_reduce``...)."""
        t = self.whole("comm_type", 0, len(COLLECTIVE_TYPES) - 1)
        return COLLECTIVE_TYPES[t].lower()

    def whole(self, key: str, default: int = 0, most: int = MAX_SIZE_BYTES,
              least: int = 0) -> int:
        """An integer attribute in [``least``, ``most``] (a whole double is fine)."""
        value = self.a.get(key, default)
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(key, f"must be a whole number, got {_shown(value)}")
        if not least <= value <= most:
            raise self.fail(key, f"must be in [{least:,}, {most:,}], got {number(value)}")
        return value

    def amount(self, key: str, most: float) -> float:
        """A finite number attribute in [0, ``most``] (0 when absent)."""
        value = self.a.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value) or not 0 <= value <= most:
            raise self.fail(key, f"must be a finite number in [0, {most:g}], got "
                                 f"{_shown(value)}")
        return float(value)

    def text(self, key: str, default: str = "") -> str:
        value = self.a.get(key, default)
        if not isinstance(value, str):
            raise self.fail(key, f"must be a string, got {_shown(value)}")
        return value

    def flag(self, key: str) -> bool:
        value = self.a.get(key, False)
        if not isinstance(value, bool):
            raise self.fail(key, f"must be true or false, got {_shown(value)}")
        return value


def number(value: int) -> str:
    """An integer as a refusal shows it: with commas, or ``1.2e+300`` when huge."""
    return f"{value:,}" if abs(value) < 10 ** 18 else f"{float(value):.3g}"


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_ids(nodes, source: str) -> None:
    """No node id given twice (dependencies name nodes by id)."""
    seen = set()
    for n in nodes:
        if n.id in seen:
            raise ConfigError("node id given twice", source=source, field=f"node {n.id}.id")
        seen.add(n.id)

"""The NCCL knobs that real measurements differ by: a scenario's ``nccl:`` block and the
``clustersim collective`` options (NCCL_ALGO, NCCL_PROTO, NCCL_MIN/MAX_NCHANNELS,
NCCL_COLLNET_ENABLE, NCCL_NVLS_ENABLE, the NCCL release: its algorithms and its tuner
constants, nccl.yaml ``tuner_releases``).

``algo`` and ``proto`` take NCCL's list syntax: ``"ring,tree"`` allows those only,
``"^nvls"`` everything but NVLS (names case-insensitive: ``Tree``, ``NVLSTree``,
``CollNetDirect`` and the simulator's ``nvls_tree``, ``collnet_direct`` are the same).
They restrict what the tuner may choose; ``--algo``/``--proto`` force one.
"""

from __future__ import annotations

import re
from functools import cache

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..choices import ALGOS, PROTOS
from ..constants import read_data

_VERSION = re.compile(r"^\s*(\d+)\.(\d+)(?:\.(\d+))?\s*$")


def _key(name: str) -> str:
    return name.strip().lower().replace("_", "").replace("-", "")


_ALGO_NAMES = {_key(a): a for a in ALGOS}
_PROTO_NAMES = {_key(p): p for p in PROTOS}


def parse_version(text: str) -> tuple[int, int]:
    """``"2.19.3"`` -> ``(2, 19)``.

    :raises ValueError: for text that is not MAJOR.MINOR[.PATCH].
    """
    m = _VERSION.match(str(text))
    if not m:
        raise ValueError(f"NCCL version must look like 2.19 or 2.19.3, got {text!r}")
    return int(m.group(1)), int(m.group(2))


def parse_list(text: str | None, names: dict[str, str], what: str) -> tuple[str, ...] | None:
    """NCCL's list syntax (``"ring,tree"``, ``"^nvls"``) -> the allowed names; None = all.

    :raises ValueError: naming an unknown entry.
    """
    if text is None:
        return None
    negate = text.strip().startswith("^")
    items = [t for t in text.strip().lstrip("^").split(",") if t.strip()]
    chosen = []
    for item in items:
        if _key(item) not in names:
            raise ValueError(f"unknown {what} {item.strip()!r}; valid: "
                             f"{', '.join(names.values())}")
        chosen.append(names[_key(item)])
    if negate:
        return tuple(n for n in names.values() if n not in chosen)
    return tuple(dict.fromkeys(chosen))


@cache
def _releases() -> tuple[dict, str]:
    data = read_data("nccl.yaml")
    return data["algorithm_since"], str(data["default_version"])


@cache
def _pxn_since() -> str:
    return str(read_data("nccl.yaml")["pxn_since"])


@cache
def _tuner_releases() -> tuple[tuple[tuple[int, int], dict], ...]:
    table = read_data("nccl.yaml")["tuner_releases"]
    return tuple(sorted((parse_version(v), entry) for v, entry in table.items()))


def release_entry(version: str) -> tuple[str, dict]:
    """The ``tuner_releases`` entry of nccl.yaml that NCCL ``version`` uses: the newest
    listed release not newer than it (the oldest, for a version older than all)."""
    have = parse_version(version)
    releases = _tuner_releases()
    chosen = releases[0]
    for key, entry in releases:
        if key <= have:
            chosen = (key, entry)
    return "%d.%d" % chosen[0], chosen[1]


@cache
def _allowed_algos(version: str, algo: str | None, collnet_enable: bool,
                   nvls_enable: bool) -> tuple[str, ...]:
    since, _ = _releases()
    have = parse_version(version)
    out = [a for a in ALGOS if parse_version(since[a]) <= have]
    listed = parse_list(algo, _ALGO_NAMES, "algorithm")
    if listed is not None:
        out = [a for a in out if a in listed or a == "direct"]   # p2p is not tuned
    if not collnet_enable:
        out = [a for a in out if not a.startswith("collnet")]
    if not nvls_enable:
        out = [a for a in out if not a.startswith("nvls")]
    return tuple(out)


class NcclConfig(BaseModel):
    """NCCL environment of a run (defaults: NCCL's own, at :data:`default_version`). A
    ``version`` given also picks that release's tuner constants (:meth:`tuner_release`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    version: str = Field(default_factory=lambda: _releases()[1],
                         description="NCCL release whose algorithms the tuner may use")
    algo: str | None = Field(None, description="NCCL_ALGO list, e.g. 'ring,tree' or '^nvls'")
    proto: str | None = Field(None, description="NCCL_PROTO list, e.g. '^LL128'")
    min_channels: int | None = Field(None, ge=1, le=64, description="NCCL_MIN_NCHANNELS")
    max_channels: int | None = Field(None, ge=1, le=64, description="NCCL_MAX_NCHANNELS")
    collnet_enable: bool = Field(False, description="NCCL_COLLNET_ENABLE (SHARP plugin)")
    nvls_enable: bool = Field(True, description="NCCL_NVLS_ENABLE")
    ib_qps_per_connection: int = Field(1, ge=1, le=128,
                                       description="NCCL_IB_QPS_PER_CONNECTION: with hash "
                                       "ECMP each queue pair takes its own hashed path")

    @field_validator("version", mode="before")
    @classmethod
    def _version_text(cls, v):
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            raise ValueError(f"quote the version, e.g. '2.20' (YAML reads 2.20 as the number "
                             f"2.2), got {v!r}")
        return v

    @field_validator("version")
    @classmethod
    def _version(cls, v: str) -> str:
        parse_version(v)
        return str(v)

    @field_validator("algo")
    @classmethod
    def _algo(cls, v: str | None) -> str | None:
        parse_list(v, _ALGO_NAMES, "algorithm")
        return v

    @field_validator("proto")
    @classmethod
    def _proto(cls, v: str | None) -> str | None:
        parse_list(v, _PROTO_NAMES, "protocol")
        return v

    def tuner_release(self) -> str | None:
        """The release whose tuner constants apply: the version when one was given, None
        (the calibrated tables of nccl.yaml) when it was left at its default."""
        return self.version if "version" in self.model_fields_set else None

    def allowed_algos(self) -> tuple[str, ...]:
        """Algorithms this release has, minus those NCCL_ALGO and the enable flags drop
        (worked out once per setting: asked by every plan)."""
        return _allowed_algos(self.version, self.algo, self.collnet_enable, self.nvls_enable)

    def has_pxn(self) -> bool:
        """Whether this release sends to a NIC off the GPU's PCIe switch over NVLink through
        the GPU next to it (PXN, ``pxn_since`` in nccl.yaml), or through the CPU."""
        return parse_version(self.version) >= parse_version(_pxn_since())

    def allowed_protos(self) -> tuple[str, ...]:
        """Protocols NCCL_PROTO leaves."""
        listed = parse_list(self.proto, _PROTO_NAMES, "protocol")
        return PROTOS if listed is None else tuple(p for p in PROTOS if p in listed)

    def channels(self, default: int) -> int:
        """``default`` clamped to [min_channels, max_channels]."""
        lo = self.min_channels or 1
        hi = self.max_channels or max(default, lo)
        return max(lo, min(default, hi))

    def since(self, algo: str) -> str:
        """First release with ``algo``."""
        return _releases()[0][algo]

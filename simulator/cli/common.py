"""Pieces the ``clustersim`` commands share: argument types (collective names, sizes,
rank specs), the topology argument, and the metrics lines of an iteration.

Kept apart from the commands so each command module stays short, and so these pieces can
be tested without running a command.
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..choices import OPS
from ..errors import ConfigError
from ..units import UnitError, parse_size

if TYPE_CHECKING:           # the simulator loads only when a command runs
    from ..metrics import Metrics

PROG = "clustersim"
DEFAULT_TOPOLOGY = "dgx-a100"


# ------------------------------------------------------------------ collectives by name
# nccl-tests binaries and NCCL API names: all_reduce_perf, allreduce, AllReduce, sendrecv...
_OP_ALIASES = {op.replace("_", ""): op for op in OPS}


def normalise_op(name: str) -> str | None:
    """``"all_reduce_perf"``, ``"allreduce"``, ``"All-Reduce"`` -> ``"all_reduce"``; else None."""
    key = name.strip().lower()
    key = key[: -len("_perf")] if key.endswith("_perf") else key
    return _OP_ALIASES.get(key.replace("_", "").replace("-", ""))


class OpType(click.ParamType):
    """A collective name, nccl-tests spellings accepted."""

    name = "op"

    def convert(self, value, param, ctx):
        op = normalise_op(str(value))
        if op is None:
            self.fail(f"unknown collective {value!r}; choose from {', '.join(OPS)} "
                      f"(nccl-tests names such as all_reduce_perf or sendrecv also work)",
                      param, ctx)
        return op


class SizeType(click.ParamType):
    """A positive byte count with an optional binary prefix: 8, 64K, 1M, 8G."""

    name = "size"

    def convert(self, value, param, ctx):
        if isinstance(value, int) and not isinstance(value, bool):
            size = value
        else:
            text = str(value).strip()
            if text.startswith("-"):
                self.fail(f"{text!r} is negative; sizes are positive byte counts "
                          f"such as 8, 64K, 1M or 8G", param, ctx)
            try:
                size = parse_size(text)
            except UnitError as exc:
                self.fail(str(exc), param, ctx)
        if size <= 0:
            self.fail(f"size must be positive, got {value!r}", param, ctx)
        return size


class FactorType(click.ParamType):
    """A finite number greater than 1 (``-f 2``, ``-f 1.5``): not ``inf``, not ``nan``."""

    name = "factor"

    def convert(self, value, param, ctx):
        try:
            factor = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        if not math.isfinite(factor) or factor <= 1:
            self.fail(f"must be a finite number > 1, got {value!r}", param, ctx)
        return factor


# ------------------------------------------------------------------------- rank specs
_ITEM = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$")


def parse_ranks(spec: str, n: int, option: str = "--ranks") -> list[int]:
    """Ranks named by ``spec`` (``"0-7"``, ``"0,8,16"``, ``"0-3,8-11"``), in the order given.

    :param n: GPUs in the cluster; valid ranks are ``0 .. n-1``.
    :raises ConfigError: (source ``option``) for an unreadable item, a reversed range, a
        rank outside the cluster, or a rank named twice.
    """
    valid = f"valid ranks are 0-{n - 1} ({n} GPUs)" if n > 1 else "the only valid rank is 0"
    if not spec or not spec.strip():
        raise ConfigError(f"empty rank list; {valid}", source=option)
    ranks: list[int] = []
    for item in spec.split(","):
        m = _ITEM.match(item)
        if not m:
            raise ConfigError(f"cannot read {item.strip()!r} in {spec!r}; write ranks like "
                              f"0-7, 0,8,16 or 0-3,8-11", source=option)
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo:
            raise ConfigError(f"range {item.strip()!r} runs backwards; write {hi}-{lo}",
                              source=option)
        if hi >= n:
            raise ConfigError(f"rank {hi} is outside the cluster; {valid}", source=option)
        ranks.extend(range(lo, hi + 1))
    dup = [r for r, c in Counter(ranks).items() if c > 1]
    if dup:
        raise ConfigError(f"rank {dup[0]} is named more than once in {spec!r}", source=option)
    return ranks


def format_ranks(ranks: list[int]) -> str:
    """``[0, 1, 2, 3, 8]`` -> ``"0-3,8"`` (runs of consecutive ranks collapsed)."""
    parts, i = [], 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        parts.append(str(ranks[i]) if i == j else f"{ranks[i]}-{ranks[j]}")
        i = j + 1
    return ",".join(parts)


# --------------------------------------------------------------------- shared options
def load_topology_arg(topology: str, nodes: int | None, option: str):
    """(path, graph) of a topology name or file; errors name ``option`` or the file."""
    from ..topology.loader import load_topology, resolve_topology
    try:
        path = resolve_topology(topology)
    except ConfigError as exc:
        raise ConfigError(exc.reason, source=option) from None
    try:
        return path, load_topology(path, nodes=nodes)
    except ConfigError as exc:
        # a shipped topology given by its bare name is named as the user named it, not by
        # the path of its file inside the checkout or the installed package
        if exc.source != str(path) or Path(topology).is_file():
            raise
        raise ConfigError(exc.reason, source=f"topology {topology}", field=exc.field) from None


format_option = click.option("--format", "fmt", type=click.Choice(["table", "json"]),
                             default="table", show_default=True,
                             help="A table for people, or JSON for programs.")


def price_options(command):
    """``--price-per-gpu-hour USD`` (``price``) and ``--instance NAME`` (``instance``): the
    price ``run``, ``compare`` and ``plan`` cost a step at
    (:func:`simulator.compare.cost.resolve_price`)."""
    command = click.option("--instance", default=None, metavar="NAME",
                           help="Price from this prices.yaml entry (e.g. "
                                "gcp-a2-ultragpu-8g).")(command)
    return click.option("--price-per-gpu-hour", "price", type=float, default=None,
                        metavar="USD",
                        help="Price of one GPU-hour [default: the list on-demand price of "
                             "the topology's GPU in simulator/data/prices.yaml].")(command)


def names_sets(command):
    """Decorate a command taking ``scenario`` (or ``cluster``'s ``mix``) and ``sets``
    (``--set KEY=VALUE``; ``cluster``'s ``--against`` too): an error in a value one gave
    names it (``quickstart.yaml: --set cluster.links.x.bw: ...``,
    :func:`simulator.scenario.from_sets`). Put it under the click decorators."""
    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except ConfigError as exc:
            given = (("--set", kwargs.get("sets") or ()),
                     ("--against", kwargs.get("against") or ()))
            if not any(items for _option, items in given):
                raise
            from ..scenario import from_sets
            source = _set_file(kwargs)
            for option, items in given:
                marked = from_sets(exc, list(items), source, option)
                if marked is not exc:
                    raise marked from None
            raise
    return wrapper


def _set_file(kwargs: dict) -> str:
    """The file a command's ``--set`` values change, as its errors name it: ``cluster``'s
    mix (``MIX``), else the scenario."""
    if "mix" in kwargs:
        from ..fleet.mix import resolve_mix
        return str(resolve_mix(kwargs["mix"]))
    from ..scenario import resolve_scenario
    from ..shipped import shown_as
    return shown_as(resolve_scenario(kwargs["scenario"]), "scenarios", "scenario")


def bad_parameter(message: str, option: str) -> click.BadParameter:
    """A usage error of ``option`` (click prints it as ``Invalid value for 'OPTION'``)."""
    return click.BadParameter(message, param_hint=f"'{option}'")


# ----------------------------------------------------------------------- metrics lines
def metric_rows(m: Metrics, capacity_gib: float = 0.0) -> list[tuple[str, str]]:
    """(name, value) lines of an iteration's metrics, as ``run`` and ``replay`` print them;
    ``capacity_gib`` (GPU memory) is named beside an out-of-memory verdict."""
    over = (f" (peak {m.peak_memory_gib:.1f} GiB > {capacity_gib:.1f} GiB per GPU)"
            if capacity_gib else "")
    return [
        ("iteration_time_s", f"{m.iteration_time_s:.4f} s"),
        ("samples_per_s", f"{m.samples_per_s:,.1f}"),
        ("tokens_per_s", f"{m.tokens_per_s:,.0f}"),
        ("tokens_per_s_per_gpu", f"{m.tokens_per_s_per_gpu:,.0f}"),
        ("tflops_per_gpu", f"{m.tflops_per_gpu:.1f} TFLOP/s"),
        ("mfu", f"{100 * m.mfu:.1f} %"),
        ("compute_s", f"{m.compute_s:.4f} s"),
        ("comm_s", f"{m.comm_s:.4f} s"),
        ("exposed_comm_s", f"{m.exposed_comm_s:.4f} s"),
        ("wait_s", f"{m.wait_s:.4f} s"),
        ("memory_wait_s", f"{m.memory_wait_s:.4f} s"),
        ("gpu_utilization", f"{100 * m.gpu_utilization:.1f} %"),
        ("peak_memory_gib", f"{m.peak_memory_gib:.2f} GiB"),
        ("oom", "yes: " + "; ".join(f"{c} at {op}" for c, op in m.oom_at.items()) + over
         if m.oom else "no"),
    ]

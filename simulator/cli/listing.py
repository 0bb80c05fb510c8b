"""`clustersim list`: what is shipped (scenarios, studies, mixes, topologies, models, GPUs), by the
bare names the other commands take, with one line about each."""

from __future__ import annotations

import click

KINDS = ("scenarios", "studies", "mixes", "topologies", "models", "gpus")


def _described(kind: str) -> list[tuple[str, str]]:
    """(name, description) of the shipped YAML files of ``kind``."""
    from ..shipped import find_shipped, shipped_names
    from ..yamlio import read_yaml
    rows = []
    for name in shipped_names(kind, cwd=False):
        data = read_yaml(find_shipped(kind, name))
        text = data.get("description", "") if isinstance(data, dict) else ""
        rows.append((name, " ".join(str(text).split())))
    return rows


def _models() -> list[tuple[str, str]]:
    from ..models.spec import load_model, model_names
    rows = []
    for name in model_names():
        spec = load_model(name)
        shape = (f"{spec.layers} layers, hidden {spec.hidden}" if spec.is_transformer
                 else f"depth {spec.depth}" if spec.depth else "")
        rows.append((name, ", ".join(p for p in (spec.family, shape) if p)))
    return rows


def _gpus() -> list[tuple[str, str]]:
    from ..hardware import gpu_names, gpu_spec
    rows = []
    for name in gpu_names():
        g = gpu_spec(name)
        rows.append((name, f"{g.hbm_bytes / 2**30:.0f} GiB, {g.hbm_bw_bytes_per_s / 1e9:,.0f} GB/s,"
                           f" bf16 {g.peak_flops.get('bf16', 0) / 1e12:,.0f} TFLOP/s"))
    return rows


def list_rows(kind: str) -> list[tuple[str, str]]:
    """(name, one line) of everything shipped of ``kind`` (one of :data:`KINDS`)."""
    return {"models": _models, "gpus": _gpus}.get(kind, lambda: _described(kind))()


def register(cli: click.Group) -> None:
    @cli.command("list")
    @click.argument("kind", type=click.Choice(KINDS), default="scenarios")
    def list_command(kind: str) -> None:
        """Show what is shipped: KIND is scenarios (default), studies, mixes, topologies,
        models or gpus. Every name listed works as an argument from any folder (`clustersim
        run NAME`, `--topology NAME`, `--set model=NAME`, `clustersim study NAME`,
        `clustersim cluster NAME`)."""
        rows = list_rows(kind)
        width = max((len(n) for n, _ in rows), default=0)
        for name, text in rows:
            click.echo(f"{name:<{width}}  {text}".rstrip())

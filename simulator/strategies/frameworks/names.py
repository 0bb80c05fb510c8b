"""Framework model names -> catalog models (``simulator/data/config_models.yaml``)."""

from __future__ import annotations

import functools
from typing import NamedTuple

from simulator.models import load_model, model_names
from simulator.yamlio import read_yaml
from ...yamlio import data_file


@functools.cache
def _table() -> dict:
    return read_yaml(data_file("config_models.yaml"),
                     "config model names")


class Found(NamedTuple):
    """The catalog model a file names (None: none), and, when there is none, why."""

    model: str | None
    note: str


def catalog_model(framework: str, name: str) -> Found:
    """The catalog model a framework's ``name`` stands for."""
    names = _table().get(framework, {}).get("names", {})
    got = names.get(name)
    if got is None:
        return Found(model=None, note=f"{framework} model {name!r} has no catalog entry "
                                      f"here; the scenario's model is simulated")
    if got not in model_names():
        return Found(model=None, note=f"catalog model {got!r} is not in this build; the "
                                      f"scenario's model is simulated")
    return Found(model=got, note="")


def model_by_sizes(sizes: dict) -> Found:
    """The catalog transformer whose sizes are all ``sizes`` (layers, hidden, heads,
    kv_heads, ffn_hidden)."""
    for name in model_names():
        spec = load_model(name)
        if spec.is_transformer and all(getattr(spec, k) == v for k, v in sizes.items()):
            return Found(model=name, note="")
    told = ", ".join(f"{k}={v}" for k, v in sizes.items())
    return Found(model=None, note=f"no catalog model has {told}; the scenario's model is "
                                  f"simulated")

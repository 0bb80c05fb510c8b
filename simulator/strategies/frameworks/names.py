"""Framework model names -> catalog models (``simulator/data/config_models.yaml``)."""

from __future__ import annotations

import functools
from importlib import resources

from simulator.models import load_model, model_names
from simulator.yamlio import read_yaml


@functools.cache
def _table() -> dict:
    return read_yaml(resources.files("simulator") / "data" / "config_models.yaml",
                     "config model names")


def catalog_model(framework: str, name: str) -> tuple[str | None, str]:
    """The catalog model a framework's ``name`` stands for, and, when there is none, why."""
    names = _table().get(framework, {}).get("names", {})
    got = names.get(name)
    if got is None:
        return None, (f"{framework} model {name!r} has no catalog entry here; the "
                      f"scenario's model is simulated")
    if got not in model_names():
        return None, f"catalog model {got!r} is not in this build; the scenario's model is simulated"
    return got, ""


def model_by_sizes(sizes: dict) -> tuple[str | None, str]:
    """The catalog transformer whose sizes are all ``sizes`` (layers, hidden, heads,
    kv_heads, ffn_hidden), and, when none is, why."""
    for name in model_names():
        spec = load_model(name)
        if spec.is_transformer and all(getattr(spec, k) == v for k, v in sizes.items()):
            return name, ""
    told = ", ".join(f"{k}={v}" for k, v in sizes.items())
    return None, f"no catalog model has {told}; the scenario's model is simulated"

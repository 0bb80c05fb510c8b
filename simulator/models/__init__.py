"""Model catalog and per-layer training costs (see docs/training-interfaces.md, section 1)."""

from simulator.models.costs import (
    BYTES_PER_ELEMENT, LayerCost, OpCost, layer_costs, lookup_params, model_flops_per_sample,
    params_total, precision_bytes, tokens_per_sample)
from simulator.models.spec import ModelSpec, load_model, model_names, parse_model

__all__ = [
    "BYTES_PER_ELEMENT", "LayerCost", "ModelSpec", "OpCost", "layer_costs", "load_model",
    "lookup_params", "model_flops_per_sample", "model_names", "params_total", "parse_model",
    "precision_bytes", "tokens_per_sample",
]

"""Model catalog and per-layer training costs (see docs/training-interfaces.md, section 1)."""

from simulator.models.costs import (
    layer_costs, lookup_params, model_flops_per_sample, params_total, tokens_per_sample)
from simulator.models.ops import LayerCost, OpCost
from simulator.models.spec import ModelSpec, load_model, model_names, parse_model

__all__ = [
    "LayerCost", "ModelSpec", "OpCost", "layer_costs", "load_model", "lookup_params",
    "model_flops_per_sample", "model_names", "params_total", "parse_model", "tokens_per_sample",
]

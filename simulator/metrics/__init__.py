"""Metrics and outputs of a replayed iteration."""

from .summary import Metrics, compute_metrics, layer_breakdown, link_utilization

__all__ = ["Metrics", "compute_metrics", "layer_breakdown", "link_utilization"]

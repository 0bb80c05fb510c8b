"""Metrics and outputs of a replayed iteration."""

from .summary import Metrics, compute_metrics

__all__ = ["Metrics", "compute_metrics"]

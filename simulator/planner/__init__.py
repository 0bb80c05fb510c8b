"""``clustersim plan``: which parallel plan, micro-batch and checkpointing mode to train a
model with on a cluster. Enumerate (:mod:`.space`), estimate and prune (:mod:`.estimate`),
replay the best (:mod:`.search`), rank and explain (:mod:`.explain`, :mod:`.report`).
docs/plan.md describes it and its limits."""

from .estimate import Estimate, Estimator
from .search import Row, Search, search
from .space import Candidate, Limits, candidates

__all__ = ["Candidate", "Estimate", "Estimator", "Limits", "Row", "Search", "candidates",
           "search"]

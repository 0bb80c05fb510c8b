"""One sentence per question, computed from the results table (never written by hand):
``scaling`` (:mod:`.scaling`), ``effect`` (:mod:`.effect`), ``best`` (:mod:`.best`)."""

from __future__ import annotations

import pandas as pd

from .best import best_answer
from .effect import effect_answer
from .scaling import scaling_answer
from .spec import BestQuestion, EffectQuestion, ScalingQuestion, Study

__all__ = ["answer"]


def answer(q, ok: pd.DataFrame, study: Study, keys: tuple[str, ...] = ()) -> str:
    """The answer to question ``q`` from the rows of finished points ``ok``."""
    needed = [c for c in (getattr(q, "x", None), q.metric) if c]
    ok = ok.dropna(subset=needed) if all(c in ok for c in needed) else ok.iloc[0:0]
    if ok.empty:
        return "No point finished with these numbers, so there is no answer."
    if isinstance(q, ScalingQuestion):
        return scaling_answer(q, ok, study)
    if isinstance(q, EffectQuestion):
        return effect_answer(q, ok, study)
    if isinstance(q, BestQuestion):
        return best_answer(q, ok, study, keys)
    raise TypeError(f"unknown question {q!r}")

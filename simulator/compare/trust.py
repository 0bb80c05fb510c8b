"""How far to trust a comparison: the accuracy envelope of each strategy that ran
(:mod:`simulator.validation.envelope`), shared by ``clustersim compare`` and a study of
``command: compare`` so both say the same sentence for the same rows."""

from __future__ import annotations

from ..validation.envelope import Query, envelope, trust_sentence

__all__ = ["envelopes", "trust_of"]


def envelopes(cmp, model_name_or_path: str) -> dict:
    """The accuracy envelope of each strategy that ran, by strategy key; the model as the
    scenario names it (a catalog name or the user's own model file)."""
    from ..models import load_model, params_total
    model = load_model(model_name_or_path)
    params = float(params_total(model))
    return {r.alias.key: envelope(Query.of(r.alias.strategy, cmp.model, params,
                                           str(cmp.cluster["gpu"]), r.metrics.world_size,
                                           cmp.settings["precision"], model.is_moe,
                                           cmp.settings.get("finetune"), model.family))
            for r in cmp.rows if r.metrics is not None}


def trust_of(cmp, model_name_or_path: str, details: str) -> str:
    """The comparison's one-sentence trust line (:func:`trust_sentence`, ``details`` saying
    where the envelope's lines are), "" when no strategy ran."""
    return trust_sentence(envelopes(cmp, model_name_or_path).values(), details)

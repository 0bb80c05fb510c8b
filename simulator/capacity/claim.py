"""The folk claim ``clustersim capacity`` checks: "on 8x A100-80GB, DDP trains about 7B,
FSDP about 30B" (:func:`check_folk_claim`, docs/capacity.md)."""

from __future__ import annotations

from ..scenario import Scenario
from ..strategies.checkpointing import ac_label, ac_setting
from .ladder import Rung
from .probe import GIB, parse_strategy_specs
from .search import StrategyResult, search

# Folk claim checked by the command: 8 x A100-80GB, DDP ~7B, FSDP ~30B (FULL_SHARD).
CLAIM = {"gpu": "A100", "gib": 80, "gpus": 8, "ddp": 7e9, "fsdp:FULL_SHARD": 30e9}
CLAIM_TEXT = "on 8x A100-80GB, DDP trains about 7B, FSDP about 30B"
CLAIM_TOLERANCE = 1.25      # "about": within a factor 1.25 either way


def _claim_checked(label: str, claimed: float, res: StrategyResult) -> tuple[dict, str]:
    """(the claim's entry for ``label``, its phrase in the verdict)."""
    got = res.largest.rung.params if res.largest else 0
    ratio = got / claimed
    word = ("holds" if 1 / CLAIM_TOLERANCE <= ratio <= CLAIM_TOLERANCE else
            "optimistic" if ratio < 1 else "conservative")
    entry = {"claimed_params": claimed, "largest_fit": res.largest.as_dict()
             if res.largest else None, "first_no_fit": res.first_oom.as_dict()
             if res.first_oom else None, "verdict": word}
    name = f"{res.largest.rung.model.name} ({got / 1e9:.1f}B)" if res.largest else "nothing"
    short = "DDP" if label == "ddp" else "FSDP FULL_SHARD"
    return entry, f"{short} {name} vs ~{claimed / 1e9:.0f}B claimed: {word}"


def check_folk_claim(scn: Scenario, ladder: list[Rung], cluster: dict, source: str,
                     done: dict[str, StrategyResult], probers: dict) -> dict:
    """Compare "8x A100-80GB: DDP ~7B, FSDP ~30B" with the search at micro_batch 1."""
    # An "80GB" A100 reports 79.2 GiB usable; compare within 2 GiB of the claim's size.
    if CLAIM["gpu"] not in cluster["gpu"] or abs(cluster["gpu_memory_gib"] - CLAIM["gib"]) > 2 \
            or cluster["gpus"] != CLAIM["gpus"]:
        return {"claim": CLAIM_TEXT, "checked": False,
                "verdict": f"folk claim ({CLAIM_TEXT}) not checked: this cluster is "
                           f"{cluster['gpus']} x {cluster['gpu']}"}
    if scn.training.finetune is not None:
        return {"claim": CLAIM_TEXT, "checked": False,
                "verdict": f"folk claim ({CLAIM_TEXT}) not checked: it is about training "
                           f"every weight; this scenario fine-tunes (training.finetune)"}
    scn1 = scn.model_copy(update={"training": scn.training.model_copy(
        update={"micro_batch": 1})}, deep=True)
    reuse = scn.training.micro_batch == 1
    ckpt = ac_setting(scn.strategy)
    found: dict[str, dict] = {}
    parts = []
    for label, claimed in (("ddp", CLAIM["ddp"]), ("fsdp:FULL_SHARD", CLAIM["fsdp:FULL_SHARD"])):
        spec = parse_strategy_specs(label)[0]
        if reuse and label in done:
            res = done[label]
        else:
            res = search(scn1, spec, ladder, source)
        found[label], part = _claim_checked(label, claimed, res)
        parts.append(part)
    t = scn1.training
    verdict = (f"folk claim ({CLAIM_TEXT}) at micro_batch 1, seq_len {t.seq_len}, "
               f"activation checkpointing {ac_label(ckpt)}: " + "; ".join(parts) +
               f" (DDP keeps 16 B/param of weights, grads and Adam state on every GPU: "
               f"7B = {16 * CLAIM['ddp'] / GIB:.0f} GiB; FSDP divides it by "
               f"{cluster['gpus']}, then activations decide)")
    return {"claim": CLAIM_TEXT, "checked": True, "micro_batch": 1, "seq_len": t.seq_len,
            "activation_checkpointing": ckpt, "results": found, "verdict": verdict}


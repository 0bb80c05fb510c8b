"""Megatron-Core's custom pipeline layout, ``pipeline_model_parallel_layout``
(``megatron/core/transformer/pipeline_parallel_layer_layout.py``), read into the blocks of
each model stage the plan takes outright (``ParallelPlan.stage_blocks``).

The string lists the layers of every model stage in order, stages separated by ``|``:
``E`` the embedding, ``t`` a transformer layer, ``m`` a multi-token-prediction layer, ``L``
the loss (final norm, output layer and loss). As ``PipelineParallelLayerLayout.
parse_str_to_list`` reads it: commas are dropped (cosmetic), then each ``(...)*N`` is
unrolled (no nesting), then each ``x*N``; ``"Et*3|(tt|)*29,m|L"`` is
``[E t t t] [t t] x 29 [m] [L]``, DeepSeek-V3's 61 layers (and its MTP layer) on 32 model
stages. Stage ``k`` runs on pipeline rank ``k mod pp`` as its chunk ``k div pp``, so the
stages are a multiple of ``pp`` and their quotient is the virtual pipeline size
(Megatron-LM's ``arguments.py``).

Checked as Megatron-Core checks it (``validate_layer_layout``), each refusal one line naming
the field: the embedding exactly once and first, the loss exactly once and last, no other
symbol, as many ``t`` as the model's layers (the plan's check), and besides what this
simulator cannot run: ``m`` anywhere but just before the loss on the last model stage
(the generator puts a model's multi-token-prediction layers there, as Megatron-Bridge's
DeepSeek-V3 layouts do; their number must be the model file's ``mtp_layers``,
:func:`check_layout_mtp`), the
embedding anywhere but at the start of model stage 0 or the loss anywhere but at the end of
the last one (where the generator puts them), and a stage between the ends with no layer.
"""

from __future__ import annotations

import re

from simulator.errors import ConfigError

FIELD = "strategy.pipeline_model_parallel_layout"
SYMBOLS = {"E": "the embedding", "t": "a transformer layer",
           "m": "a multi-token-prediction layer", "L": "the loss"}
MAX_CHARS = 10_000           # the string as written
MAX_SYMBOLS = 100_000        # once unrolled (DeepSeek-V3's layout: 95)
_GROUP = re.compile(r"\(([^)]+)\)\*(\d+)")      # Megatron's two patterns, in its order
_ONE = re.compile(r"(.)\*(\d+)")


def _unroll(text: str, pattern: re.Pattern) -> str:
    """``text`` with each match of ``pattern`` (a piece and ``*N``) repeated N times,
    refused once it would pass :data:`MAX_SYMBOLS`."""
    def repeat(match: re.Match) -> str:
        piece, times = match.group(1), int(match.group(2))
        if len(piece) * times > MAX_SYMBOLS:
            raise ConfigError(f"{match.group(0)[:40]!r} unrolls to more than "
                              f"{MAX_SYMBOLS:,} symbols", field=FIELD)
        return piece * times
    out = pattern.sub(repeat, text)
    if len(out) > MAX_SYMBOLS:
        raise ConfigError(f"unrolls to more than {MAX_SYMBOLS:,} symbols", field=FIELD)
    return out


def parse_layout(text: str) -> list[str]:
    """The model stages of a layout string, each the string of its symbols
    (``"Et*2|tt,L"`` -> ``["Ett", "ttL"]``); ConfigError naming the field for one that is
    not Megatron's grammar or holds a symbol other than ``E t m L``."""
    if len(text) > MAX_CHARS:
        raise ConfigError(f"{len(text):,} characters; at most {MAX_CHARS:,}", field=FIELD)
    flat = _unroll(_unroll(text.replace(",", ""), _GROUP), _ONE)
    bad = sorted({c for c in flat if c not in SYMBOLS and c != "|"})
    if bad:
        hint = ("; repeats are (...)*N, without nesting, or x*N"
                if set(bad) & set("()*0123456789") else "")
        raise ConfigError(f"unknown symbol(s) {' '.join(repr(c) for c in bad)} in {text!r}: "
                          f"the layers are E (embedding), t (transformer layer), m (MTP "
                          f"layer), L (loss), stages split by |{hint}", field=FIELD)
    return flat.split("|")


def layout_blocks(text: str, pp: int) -> tuple[int, tuple[int, ...]]:
    """The virtual pipeline size and the transformer layers of each model stage of layout
    ``text`` on ``pp`` pipeline ranks (see the module doc for what is refused)."""
    stages = parse_layout(text)
    if len(stages) % pp:
        raise ConfigError(f"{len(stages)} stages do not divide over "
                          f"pipeline_model_parallel_size {pp}", field=FIELD)
    flat = "".join(stages)
    for symbol, where in (("E", "the start of the first stage"),
                          ("L", "the end of the last stage")):
        if flat.count(symbol) != 1:
            raise ConfigError(f"{SYMBOLS[symbol]} ({symbol}) must appear exactly once, at "
                              f"{where}; found {flat.count(symbol)}", field=FIELD)
    if not stages[0].startswith("E") or not stages[-1].endswith("L"):
        raise ConfigError("the embedding (E) must open the first stage and the loss (L) "
                          "close the last one (Megatron requires them first and last; the "
                          "simulator places them on the end stages)", field=FIELD)
    if "m" in "".join(stages[:-1]) + stages[-1].removesuffix("L").rstrip("m"):
        raise ConfigError("multi-token-prediction layers (m) are modelled on the last stage, "
                          "just before the loss (L): move them there", field=FIELD)
    blocks = tuple(stage.count("t") for stage in stages)
    empty = [k for k in range(1, len(stages) - 1) if not blocks[k]]
    if empty:
        raise ConfigError(f"model stage {empty[0]} (of {len(stages)}) holds no layer: a "
                          f"stage between the ends without a transformer layer is not "
                          f"modelled", field=FIELD)
    return len(stages) // pp, blocks


def check_layout_mtp(text: str, mtp_layers: int) -> None:
    """Refuse layout ``text`` when its ``m`` are not the model's ``mtp_layers``, as
    Megatron-Core's ``validate_layer_layout`` checks them against ``mtp_num_layers``."""
    found = "".join(parse_layout(text)).count("m")
    if found != mtp_layers:
        raise ConfigError(f"{found} multi-token-prediction layer(s) (m) in the layout, the "
                          f"model has {mtp_layers} (its file's mtp_layers)", field=FIELD)

"""A Megatron-LM argument list -> scenario pieces (``clustersim run --config gpt3.args``).

The file holds the arguments as ``pretrain_gpt.py`` takes them: on one line or many, with
``\\`` continuations, ``#`` comments and shell quoting; anything before the first ``--``
(``torchrun ... pretrain_gpt.py``) is skipped. Read (``megatron/training/arguments.py``):

* parallelism and recompute flags -> the ``megatron`` strategy, spelled as its fields
  (``--tensor-model-parallel-size 8`` -> ``tensor_model_parallel_size: 8``;
  ``--num-layers-per-virtual-pipeline-stage N`` -> ``virtual_pipeline_model_parallel_size``;
  ``--recompute-activations`` -> ``recompute_granularity: selective``);
* ``--seq-length``, ``--micro-batch-size``, ``--global-batch-size``, ``--bf16``/``--fp16``,
  ``--use-flash-attn`` -> training fields and the global batch;
* ``--num-layers``, ``--hidden-size``, ``--num-attention-heads``, ``--ffn-hidden-size``,
  ``--num-query-groups`` -> the catalog model of those sizes, if there is one.

Every other flag (data, optimizer, logging, checkpointing...) is listed as ignored.
"""

from __future__ import annotations

import shlex

from ..errors import ConfigError
from ..inputs import decode_text, read_bytes
from .names import model_by_sizes
from .pieces import ConfigPieces, Doc

# flag -> (megatron strategy field, kind): kind int, flag (a switch), or a tuple of choices
STRATEGY_FLAGS = {
    "--tensor-model-parallel-size": ("tensor_model_parallel_size", int),
    "--pipeline-model-parallel-size": ("pipeline_model_parallel_size", int),
    "--virtual-pipeline-model-parallel-size": ("virtual_pipeline_model_parallel_size", int),
    "--context-parallel-size": ("context_parallel_size", int),
    "--expert-model-parallel-size": ("expert_model_parallel_size", int),
    "--sequence-parallel": ("sequence_parallel", "flag"),
    "--use-distributed-optimizer": ("use_distributed_optimizer", "flag"),
    "--overlap-grad-reduce": ("overlap_grad_reduce", "flag"),
    "--overlap-param-gather": ("overlap_param_gather", "flag"),
    "--tp-comm-overlap": ("tp_comm_overlap", "flag"),
    "--use-torch-fsdp2": ("use_torch_fsdp2", "flag"),
    "--account-for-embedding-in-pipeline-split": ("account_for_embedding_in_pipeline_split",
                                                  "flag"),
    "--account-for-loss-in-pipeline-split": ("account_for_loss_in_pipeline_split", "flag"),
    "--recompute-granularity": ("recompute_granularity", ("full", "selective")),
    "--recompute-method": ("recompute_method", ("uniform", "block")),
    "--recompute-num-layers": ("recompute_num_layers", int),
}
TRAINING_FLAGS = {"--seq-length": ("seq_len", int), "--micro-batch-size": ("micro_batch", int),
                  "--use-flash-attn": ("flash_attention", "flag")}
MODEL_FLAGS = {"--num-layers": "layers", "--hidden-size": "hidden",
               "--num-attention-heads": "heads", "--ffn-hidden-size": "ffn_hidden",
               "--num-query-groups": "kv_heads"}
PRECISION_FLAGS = {"--bf16": "bf16", "--fp16": "fp16"}
MAX_ARGS = 10_000            # a real pretrain_gpt.py command line has about 100


def split_args(path) -> list[str]:
    """The shell words of an argument file (continuations joined, comments dropped)."""
    source = str(path)
    text = decode_text(read_bytes(path, "Megatron argument file", "config_bytes"), source,
                       "Megatron argument file")
    try:
        words = shlex.split(text.replace("\\\r\n", " ").replace("\\\n", " "), comments=True)
    except ValueError as exc:            # an unclosed quote
        raise ConfigError(f"cannot split into arguments: {exc}", source=source) from None
    if len(words) > MAX_ARGS:
        raise ConfigError(f"{len(words):,} arguments; at most {MAX_ARGS:,}", source=source)
    return words


def parse_flags(words: list[str], source: str) -> tuple[list[tuple[str, list[str]]], list[str]]:
    """``[(flag, values)]`` in order, and the words before the first flag (the launcher and
    script: everything up to a ``*.py`` word, whose own options are not Megatron's)."""
    script = [i for i, w in enumerate(words) if w.endswith(".py") and not w.startswith("-")]
    first = script[-1] + 1 if script else 0          # after `torchrun ... pretrain_gpt.py`
    start = next((i for i, w in enumerate(words) if i >= first and w.startswith("--")),
                 len(words))
    flags: list[tuple[str, list[str]]] = []
    for word in words[start:]:
        if word.startswith("--"):
            name, eq, value = word.partition("=")
            flags.append((name, [value] if eq else []))
        else:
            flags[-1][1].append(word)
    return flags, words[:start]


def read_megatron(path) -> ConfigPieces:
    """The scenario pieces of a Megatron-LM argument file."""
    source = str(path)
    flags, prefix = parse_flags(split_args(path), source)
    doc = Doc(source)
    out = ConfigPieces("megatron", source, strategy={"name": "megatron"})
    if prefix:
        out.ignore(" ".join(prefix), "the command before the arguments")
    sizes: dict[str, int] = {}
    seen: set[str] = set()
    for flag, values in flags:
        if flag in seen and flag in _KNOWN:
            raise doc.fail(flag, "given twice")
        seen.add(flag)
        _one(flag, values, doc, out, sizes)
    _model(sizes, out)
    return out


def _value(flag: str, values: list[str], kind, doc: Doc):
    if kind == "flag":
        if values:
            raise doc.fail(flag, f"is a switch and takes no value, got {' '.join(values)!r}")
        return True
    if len(values) != 1:
        raise doc.fail(flag, f"takes one value, got {len(values)}")
    if kind is int:
        try:
            number = int(values[0])
        except ValueError:
            raise doc.fail(flag, f"must be a whole number, got {values[0]!r}") from None
        return doc.integer(number, flag)
    return doc.text(values[0], flag, kind)


def _one(flag: str, values: list[str], doc: Doc, out: ConfigPieces, sizes: dict) -> None:
    if flag in STRATEGY_FLAGS:
        key, kind = STRATEGY_FLAGS[flag]
        out.strategy[key] = _value(flag, values, kind, doc)
    elif flag == "--recompute-activations":
        _value(flag, values, "flag", doc)
        out.strategy.setdefault("recompute_granularity", "selective")
    elif flag == "--num-layers-per-virtual-pipeline-stage":
        out.strategy["_layers_per_virtual_stage"] = _value(flag, values, int, doc)
    elif flag in TRAINING_FLAGS:
        key, kind = TRAINING_FLAGS[flag]
        out.training[key] = _value(flag, values, kind, doc)
    elif flag == "--global-batch-size":
        out.global_batch = _value(flag, values, int, doc)
    elif flag in PRECISION_FLAGS:
        _value(flag, values, "flag", doc)
        if "precision" in out.training:
            raise doc.fail(flag, "--bf16 and --fp16 are both given")
        out.training["precision"] = PRECISION_FLAGS[flag]
    elif flag in MODEL_FLAGS:
        sizes[MODEL_FLAGS[flag]] = _value(flag, values, int, doc)
    else:
        out.ignore(flag)
        return
    out.use(flag)


def _virtual_stages(sizes: dict, out: ConfigPieces) -> None:
    """``--num-layers-per-virtual-pipeline-stage N`` as the virtual stages it makes."""
    per = out.strategy.pop("_layers_per_virtual_stage", None)
    if per is None:
        return
    pp = out.strategy.get("pipeline_model_parallel_size", 1)
    layers = sizes.get("layers")
    if layers is None or layers % (pp * per):
        raise ConfigError(f"needs --num-layers divisible by the pipeline size {pp} x {per}",
                          source=out.source, field="--num-layers-per-virtual-pipeline-stage")
    out.strategy["virtual_pipeline_model_parallel_size"] = layers // (pp * per)


def _model(sizes: dict, out: ConfigPieces) -> None:
    """The catalog model of the given sizes (Megatron's defaults fill ffn = 4h and query
    groups = heads); the size flags move to ignored when they name none."""
    _virtual_stages(sizes, out)
    if not sizes:
        return
    if {"layers", "hidden", "heads"} <= set(sizes):
        full = {"ffn_hidden": 4 * sizes["hidden"], "kv_heads": sizes["heads"], **sizes}
        out.model, out.model_note = model_by_sizes(full)
    else:
        out.model_note = ("--num-layers, --hidden-size and --num-attention-heads are needed "
                          "to name a model; the scenario's model is simulated")
    if out.model is None:
        flags = [f for f, k in MODEL_FLAGS.items() if k in sizes]
        out.used = [k for k in out.used if k not in flags]
        out.ignored += flags


_KNOWN = set(STRATEGY_FLAGS) | set(TRAINING_FLAGS) | set(MODEL_FLAGS) | set(PRECISION_FLAGS) | {
    "--recompute-activations", "--num-layers-per-virtual-pipeline-stage", "--global-batch-size"}

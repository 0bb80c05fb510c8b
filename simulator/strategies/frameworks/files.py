"""A framework's own config file (``clustersim run --config FILE``): a torchtitan TOML, a
DeepSpeed JSON or a Megatron-LM argument list, read by that framework's module into
scenario pieces (:class:`~.pieces.ConfigPieces`; the merge over a scenario is
:mod:`simulator.cli.configfile`'s).

The format comes from the file name (``.toml`` torchtitan, ``.json`` DeepSpeed, anything
else Megatron arguments) unless ``fmt`` names it. Each reader says which keys it used and
which it ignored (:meth:`ConfigPieces.summary`).
"""

from __future__ import annotations

from pathlib import Path

from simulator.errors import ConfigError

from . import deepspeed, megatron, torchtitan
from .pieces import ConfigPieces

# framework -> its module: read_file(path), file_key(field), GLOBAL_BATCH_KEY
FRAMEWORKS = {"torchtitan": torchtitan, "deepspeed": deepspeed, "megatron": megatron}
SUFFIXES = {".toml": "torchtitan", ".json": "deepspeed"}


def config_format(path, fmt: str | None = None) -> str:
    """``fmt`` if given, else the format the file name says."""
    if fmt is not None:
        if fmt not in FRAMEWORKS:
            raise ConfigError(f"unknown config format {fmt!r}; valid: {', '.join(FRAMEWORKS)}",
                              source="--config-format")
        return fmt
    return SUFFIXES.get(Path(str(path)).suffix.lower(), "megatron")


def read_config(path, fmt: str | None = None) -> ConfigPieces:
    """The scenario pieces of one framework config file."""
    return FRAMEWORKS[config_format(path, fmt)].read_file(path)


def file_key(framework: str, field: str) -> str:
    """A strategy field (``tensor_model_parallel_size``, ``parallelism.tp...``) as the
    ``framework``'s file spells it."""
    return FRAMEWORKS[framework].file_key(field)


# training field -> the keys of each framework's file that give it, in the order tried
TRAINING_KEYS = {
    "deepspeed": {"micro_batch": ("train_micro_batch_size_per_gpu",),
                  "grad_accum": ("gradient_accumulation_steps",),
                  "precision": ("bf16.enabled", "fp16.enabled")},
    "torchtitan": {"micro_batch": ("parallelism.pipeline_parallel_microbatch_size",
                                   "training.local_batch_size"),
                   "seq_len": ("training.seq_len",),
                   "precision": ("model.converters", "float8.enable_float8_linear",
                                 "training.mixed_precision_param"),
                   "fp8_recipe": ("float8.recipe_name", "quantize.linear.float8.recipe_name"),
                   "compile": ("compile.enable", "training.compile")},
    "megatron": {"micro_batch": ("--micro-batch-size",), "seq_len": ("--seq-length",),
                 "flash_attention": ("--use-flash-attn",),
                 "precision": ("--fp8-format", "--fp4-format", "--bf16", "--fp16"),
                 "fp8_recipe": ("--fp8-recipe", "--fp8-format")},
}


def training_key(framework: str, field: str, used: list[str]) -> str:
    """A training field (``seq_len``) as the ``framework``'s file spelled it: the first
    of its keys the file used (``training.seq_len``, ``--seq-length``)."""
    keys = TRAINING_KEYS.get(framework, {}).get(field, ())
    return next((k for k in keys if k in used), keys[0] if keys else f"training.{field}")


def global_batch_key(framework: str) -> str:
    """The key of the global batch in the ``framework``'s file."""
    return FRAMEWORKS[framework].GLOBAL_BATCH_KEY

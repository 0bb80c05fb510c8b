"""DeepSpeed's JSON config -> scenario pieces (``clustersim run --config ds_config.json``).

Read (DeepSpeed ``deepspeed/runtime/config.py``, ``runtime/zero/config.py``):

* ``zero_optimization``: the keys the ``deepspeed`` strategy models
  (:data:`simulator.strategies.frameworks.deepspeed.ZERO_KEYS`) -> its ``zero_optimization``;
* ``tensor_parallel.autotp_size`` (AutoTP training) and ``pipeline.stages`` -> its
  ``tensor_parallel`` / ``pipeline``;
* ``train_micro_batch_size_per_gpu``, ``gradient_accumulation_steps``, ``train_batch_size``
  -> ``training.micro_batch``, ``training.grad_accum``, the global batch;
* ``bf16.enabled`` / ``fp16.enabled`` -> ``training.precision``.

A value ``"auto"`` (the Hugging Face integration fills it in) is left to the scenario and
listed as ignored. Everything else (optimizer, scheduler, logging, activation_checkpointing:
the model code decides whether to checkpoint) is listed as ignored.
"""

from __future__ import annotations

import json

from ..errors import ConfigError
from ..inputs import check_finite, decode_text, read_bytes
from .pieces import ConfigPieces, Doc, check_depth, flat_keys

ZERO_KEYS = ("stage", "overlap_comm", "contiguous_gradients", "reduce_bucket_size",
             "allgather_bucket_size", "reduce_scatter", "allgather_partitions",
             "offload_optimizer", "offload_param", "stage3_prefetch_bucket_size",
             "stage3_param_persistence_threshold", "stage3_max_live_parameters",
             "zero_hpz_partition_size")
BATCH_KEYS = {"train_micro_batch_size_per_gpu": "micro_batch",
              "gradient_accumulation_steps": "grad_accum"}
AUTO = "auto"


def _no_constant(name: str):
    raise ValueError(name)


def load_json(path) -> dict:
    """The checked document of a JSON file (bounded size and depth, UTF-8, no NaN)."""
    source = str(path)
    text = decode_text(read_bytes(path, "DeepSpeed config", "config_bytes"), source,
                       "DeepSpeed config")
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"not valid JSON: {exc.msg} at line {exc.lineno}, column "
                          f"{exc.colno}", source=source) from None
    except ValueError as exc:            # NaN, Infinity: parse_constant
        raise ConfigError(f"must be a finite number, got {exc}", source=source) from None
    except RecursionError:
        raise ConfigError("not valid JSON: nested too deeply", source=source) from None
    if not isinstance(data, dict):
        raise ConfigError("top level must be an object of keys", source=source)
    return check_finite(check_depth(data, source), source)


def read_deepspeed(path) -> ConfigPieces:
    """The scenario pieces of a DeepSpeed JSON config."""
    data = load_json(path)
    doc = Doc(str(path))
    out = ConfigPieces("deepspeed", str(path), strategy={"name": "deepspeed"})
    seen = _zero(data, doc, out) | _batch(data, doc, out) | _precision(data, doc, out)
    seen |= _degrees(data, doc, out)
    for key in flat_keys(data):
        if key not in seen:
            out.ignore(key)
    return out


def _zero(data: dict, doc: Doc, out: ConfigPieces) -> set[str]:
    if "zero_optimization" not in data:
        return set()
    table = doc.table(data["zero_optimization"], "zero_optimization")
    zero, seen = {}, set()
    for key in ZERO_KEYS:
        if key not in table:
            continue
        where = f"zero_optimization.{key}"
        seen |= {where} | {k for k in flat_keys(table, "zero_optimization")
                           if k.startswith(where + ".")}
        if table[key] == AUTO:
            out.ignore(where, "auto")
            continue
        zero[key] = table[key]
        out.use(where)
    out.strategy["zero_optimization"] = zero
    return seen


def _batch(data: dict, doc: Doc, out: ConfigPieces) -> set[str]:
    seen = set()
    for key, ours in BATCH_KEYS.items():
        if key in data:
            seen.add(key)
            if data[key] == AUTO:
                out.ignore(key, "auto")
            else:
                out.training[ours] = doc.integer(data[key], key)
                out.use(key)
    if "train_batch_size" in data:
        seen.add("train_batch_size")
        if data["train_batch_size"] == AUTO:
            out.ignore("train_batch_size", "auto")
        else:
            out.global_batch = doc.integer(data["train_batch_size"], "train_batch_size")
            out.use("train_batch_size")
    return seen


def _precision(data: dict, doc: Doc, out: ConfigPieces) -> set[str]:
    seen = set()
    for section, precision in (("bf16", "bf16"), ("fp16", "fp16")):
        if section not in data:
            continue
        table = doc.table(data[section], section)
        if "enabled" not in table:
            continue
        seen.add(f"{section}.enabled")
        if table["enabled"] == AUTO:
            out.ignore(f"{section}.enabled", "auto")
        elif doc.boolean(table["enabled"], f"{section}.enabled"):
            if "precision" in out.training:
                raise doc.fail(f"{section}.enabled", "bf16 and fp16 are both enabled")
            out.training["precision"] = precision
            out.use(f"{section}.enabled")
        else:
            out.use(f"{section}.enabled")
    return seen


def _degrees(data: dict, doc: Doc, out: ConfigPieces) -> set[str]:
    seen = set()
    for section, key in (("tensor_parallel", "autotp_size"), ("pipeline", "stages")):
        if section not in data:
            continue
        table = doc.table(data[section], section)
        if key not in table:
            continue
        seen.add(f"{section}.{key}")
        if table[key] == AUTO:
            out.ignore(f"{section}.{key}", "auto")
            continue
        out.strategy[section] = {key: table[key]}
        out.use(f"{section}.{key}")
    return seen

"""torchtitan's TOML job config -> scenario pieces (``clustersim run --config job.toml``).

Read (torchtitan ``torchtitan/config/job_config.py``):

* ``[parallelism]``: the mesh degrees, schedule, async TP, loss parallel, FSDP resharding ->
  the ``torchtitan`` strategy's ``parallelism`` mapping, as spelled;
  ``pipeline_parallel_microbatch_size`` -> ``training.micro_batch`` when pipelining;
* ``[activation_checkpoint]`` ``mode`` / ``selective_ac_option`` -> the strategy's
  ``activation_checkpoint``;
* ``[training]`` ``local_batch_size`` (older ``batch_size``), ``global_batch_size``,
  ``seq_len``, ``mixed_precision_param`` / ``mixed_precision_reduce``;
* ``[model]`` ``name`` + ``flavor`` -> a catalog model (``simulator/data/config_models.yaml``);
* ``[optimizer]`` ``name`` (AdamW/Adam -> adam, SGD -> sgd).

Everything else (job, metrics, checkpoint, lr, dataset, compile, float8...) is listed as
ignored.
"""

from __future__ import annotations

import sys
from typing import Any

from ..errors import ConfigError
from ..inputs import check_finite, decode_text, read_bytes
from ..strategies.frameworks.translate import has_ac_modes
from .names import catalog_model
from .pieces import ConfigPieces, Doc, check_depth, flat_keys, precision_of

if sys.version_info >= (3, 11):
    import tomllib
else:                                    # pragma: no cover - Python 3.10
    import tomli as tomllib

PARALLELISM_KEYS = ("data_parallel_replicate_degree", "data_parallel_shard_degree",
                    "tensor_parallel_degree", "pipeline_parallel_degree",
                    "pipeline_parallel_schedule", "pipeline_parallel_layers_per_stage",
                    "context_parallel_degree",
                    "context_parallel_rotate_method", "expert_parallel_degree",
                    "enable_async_tensor_parallel", "disable_loss_parallel",
                    "fsdp_reshard_after_forward")
AC_KEYS = ("mode", "selective_ac_option")
OPTIMIZERS = {"adamw": "adam", "adam": "adam", "sgd": "sgd"}


def load_toml(path) -> dict:
    """The checked document of a TOML file (bounded size and depth, UTF-8, finite)."""
    source = str(path)
    text = decode_text(read_bytes(path, "torchtitan config", "config_bytes"), source,
                       "torchtitan config")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"not valid TOML: {exc}", source=source) from None
    except RecursionError:
        raise ConfigError("not valid TOML: nested too deeply", source=source) from None
    return check_finite(check_depth(data, source), source)


def read_torchtitan(path) -> ConfigPieces:
    """The scenario pieces of a torchtitan job TOML."""
    data = load_toml(path)
    doc = Doc(str(path))
    out = ConfigPieces("torchtitan", str(path), strategy={"name": "torchtitan"})
    seen: set[str] = set()
    for section, reader in (("parallelism", _parallelism), ("activation_checkpoint", _ac),
                            ("training", _training), ("model", _model),
                            ("optimizer", _optimizer)):
        if section in data:
            seen |= reader(doc.table(data[section], section), doc, out)
    if "activation_checkpoint" not in data:
        _default_ac(out)
    for key in flat_keys(data):
        if key not in seen:
            out.ignore(key)
    return out


def _default_ac(out: ConfigPieces) -> None:
    """No ``[activation_checkpoint]``: torchtitan's default, selective every 2nd block,
    where this build has selective checkpointing."""
    if has_ac_modes():
        out.strategy["activation_checkpoint"] = {}
        out.notes.append("no [activation_checkpoint]: torchtitan's default, selective "
                         "every 2nd block")
    else:
        out.notes.append("no [activation_checkpoint]: torchtitan's default (selective) is "
                         "not in this build; the scenario's checkpointing is kept")


def _parallelism(table: dict, doc: Doc, out: ConfigPieces) -> set[str]:
    par: dict[str, Any] = {}
    for key in PARALLELISM_KEYS:
        if key in table:
            par[key] = table[key]
            out.use(f"parallelism.{key}")
    pp = table.get("pipeline_parallel_degree", 1)
    if "pipeline_parallel_microbatch_size" in table:
        key = "parallelism.pipeline_parallel_microbatch_size"
        if doc.integer(pp, "parallelism.pipeline_parallel_degree") > 1:
            out.training["micro_batch"] = doc.integer(
                table["pipeline_parallel_microbatch_size"], key)
            out.use(key)
        else:
            out.ignore(key, "no pipeline")
    out.strategy["parallelism"] = par
    return {f"parallelism.{k}" for k in par} | {"parallelism.pipeline_parallel_microbatch_size"}


def _ac(table: dict, doc: Doc, out: ConfigPieces) -> set[str]:
    ac = {k: table[k] for k in AC_KEYS if k in table}
    for key in ac:
        out.use(f"activation_checkpoint.{key}")
    out.strategy["activation_checkpoint"] = ac
    return {f"activation_checkpoint.{k}" for k in ac}


def _training(table: dict, doc: Doc, out: ConfigPieces) -> set[str]:
    used: set[str] = set()
    local = next((k for k in ("local_batch_size", "batch_size") if k in table), None)
    if local is not None:
        local_batch = doc.integer(table[local], f"training.{local}")
        used.add(f"training.{local}")
        mb = out.training.get("micro_batch")
        if mb is None:                       # no pipeline: the local batch is one micro-batch
            out.training["micro_batch"] = local_batch
        elif local_batch % mb:
            raise doc.fail(f"training.{local}", f"{local_batch} is not a multiple of "
                           f"parallelism.pipeline_parallel_microbatch_size {mb}")
        out.local_batch = local_batch
    if "global_batch_size" in table:
        gbs = table["global_batch_size"]
        if not (isinstance(gbs, int) and gbs == -1):         # -1: local batch x dp
            out.global_batch = doc.integer(gbs, "training.global_batch_size")
        used.add("training.global_batch_size")
    if "seq_len" in table:
        out.training["seq_len"] = doc.integer(table["seq_len"], "training.seq_len")
        used.add("training.seq_len")
    if "mixed_precision_param" in table:
        out.training["precision"] = precision_of(table["mixed_precision_param"], doc,
                                                 "training.mixed_precision_param")
        used.add("training.mixed_precision_param")
    if "mixed_precision_reduce" in table:
        out.strategy["reduce_dtype"] = precision_of(table["mixed_precision_reduce"], doc,
                                                    "training.mixed_precision_reduce")
        used.add("training.mixed_precision_reduce")
    for key in sorted(used):
        out.use(key)
    return used


def _model(table: dict, doc: Doc, out: ConfigPieces) -> set[str]:
    if "name" not in table:
        return set()
    name = doc.text(table["name"], "model.name")
    flavor = doc.text(table.get("flavor", ""), "model.flavor")
    out.model, out.model_note = catalog_model("torchtitan", f"{name}/{flavor}")
    keys = {"model.name"} | ({"model.flavor"} if "flavor" in table else set())
    for key in sorted(keys):
        (out.use if out.model else out.ignore)(key)
    return keys


def _optimizer(table: dict, doc: Doc, out: ConfigPieces) -> set[str]:
    if "name" not in table:
        return set()
    name = doc.text(table["name"], "optimizer.name")
    if name.lower() not in OPTIMIZERS:
        out.ignore("optimizer.name", f"{name} is not modelled; Adam's memory is used")
        return {"optimizer.name"}
    out.strategy["optimizer"] = OPTIMIZERS[name.lower()]
    out.use("optimizer.name")
    return {"optimizer.name"}

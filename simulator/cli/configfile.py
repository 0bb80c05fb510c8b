"""``--config FILE``: a torchtitan TOML, a DeepSpeed JSON or a Megatron argument list merged
over the scenario, for ``run``, ``trace``, ``compare`` and ``plan``. The file is read by its
framework's module (:mod:`simulator.strategies.frameworks.files`); what it used and ignored
goes to stderr.

Order, weakest first: the scenario file, then the config file (its strategy replaces the
scenario's; its training fields and model replace the scenario's), then ``--set``. The
merged strategy is validated once, by the framework's config, and a bad value the config
file gave is named in that file, as the file spells it (``--tensor-model-parallel-size``).
The plan is checked on the scenario's GPUs here, so a degree that does not divide them is
named in the config file too. A file none of whose keys the reader uses is refused.
A global batch becomes ``training.grad_accum`` once the GPU count is known: micro-batches
per step = global batch / (micro-batch x data-parallel ranks), the data-parallel ranks
being those of the strategy's plan on those GPUs; a ``--set training.grad_accum`` wins.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from ..errors import ConfigError
    from ..scenario import Scenario
    from ..strategies import CommonConfig
    from ..strategies.frameworks.pieces import ConfigPieces

CONFIG_HELP = ("A framework's own config: a torchtitan TOML (.toml), a DeepSpeed JSON (.json) "
               "or a Megatron-LM argument list (any other name), merged over the scenario; "
               "--set still wins. Says on stderr which keys it used and ignored.")
FORMATS = ("torchtitan", "deepspeed", "megatron")


def config_options(command):
    """Add ``--config`` and ``--config-format`` to a command."""
    command = click.option("--config-format", "config_format", type=click.Choice(FORMATS),
                           default=None, help="The format of --config [default: from the "
                           "file name].")(command)
    return click.option("--config", "config", type=click.Path(path_type=Path), default=None,
                        metavar="FILE", help=CONFIG_HELP)(command)


def load(path, sets: list[str], config: Path | None, fmt: str | None):
    """The scenario at ``path`` with ``--config`` merged in and ``sets`` over both."""
    return load_pieces(path, sets, config, fmt)[0]


def load_pieces(path, sets: list[str], config: Path | None, fmt: str | None):
    """(:func:`load`'s scenario, the config's pieces or None)."""
    from ..scenario import load_scenario
    if config is None:
        return load_scenario(path, sets), None
    from ..shipped import file_or_shipped
    from ..strategies.frameworks.files import read_config
    config = file_or_shipped(config, Path(config), "configs", "config")
    pieces = read_config(config, fmt)
    scn = scenario_with_config(path, pieces, sets)
    click.echo(pieces.summary(), err=True)
    if pieces.model_note:
        click.echo(f"{pieces.source}: {pieces.model_note} ({scn.model})", err=True)
    return scn, pieces


def scenario_with_config(scenario, pieces: ConfigPieces, sets: list[str]) -> Scenario:
    """The scenario ``scenario`` (a file or shipped name) with ``pieces`` over it and
    ``sets`` over both."""
    from ..errors import ConfigError
    from ..scenario import apply_sets, resolve_scenario, scenario_from_dict
    from ..shipped import shown_as
    from ..topology.build import scenario_graph
    from ..yamlio import read_yaml
    if not pieces.used:
        raise pieces.nothing_used()
    path = resolve_scenario(scenario)
    source = shown_as(path, "scenarios", "scenario")
    data = read_yaml(path, "scenario file")
    if not isinstance(data, dict):
        raise ConfigError("top level must be a mapping", source=source)
    data["strategy"] = dict(pieces.strategy)
    training = data.get("training") if isinstance(data.get("training"), dict) else {}
    data["training"] = {**training, **pieces.training}
    if pieces.model:
        data["model"] = pieces.model
    data = apply_sets(data, sets, source)
    set_keys = {s.partition("=")[0].strip() for s in sets}
    try:
        scn = scenario_from_dict(data, source)
    except ConfigError as exc:
        raise _named_training(exc, pieces, set_keys) from None
    cfg = check_strategy(scn, pieces, set_keys)
    G = scenario_graph(scn)             # built once for the two checks below
    check_gpu(scn, G, pieces, set_keys)
    dp = data_parallel_ranks(cfg, scn, G, pieces, set_keys)    # the plan fits the GPUs
    if "training.grad_accum" not in set_keys and (pieces.global_batch is not None
                                                  or pieces.local_batch is not None):
        accum = grad_accum(pieces, scn.training.micro_batch, dp)
        scn = scn.model_copy(update={"training": scn.training.model_copy(
            update={"grad_accum": accum})})
    return scn


def check_strategy(scn: Scenario, pieces: ConfigPieces, set_keys: set[str]) -> CommonConfig:
    """The merged strategy validated (the one validation of its values), or the error
    named where the value came from (:func:`_named`)."""
    from ..errors import ConfigError
    from ..pipeline import strategy_dict
    from ..strategies import parse_strategy
    try:
        return parse_strategy(strategy_dict(scn))
    except ConfigError as exc:
        raise _named(exc, scn, pieces, set_keys) from None


def _named(exc: ConfigError, scn: Scenario, pieces: ConfigPieces,
           set_keys: set[str]) -> ConfigError:
    """``exc`` placed in the config file under the file's spelling when it names a
    strategy field the file gave, else in the scenario (a ``--set`` key, a cluster field)."""
    from ..errors import ConfigError
    from ..strategies.frameworks.files import file_key
    field = exc.field or ""
    if not field.startswith("strategy.") or any(
            field == k or field.startswith(k + ".") for k in set_keys):
        return exc.located(scn.source)
    return ConfigError(exc.reason, source=pieces.source,
                       field=file_key(pieces.framework, field.removeprefix("strategy.")))


def _named_training(exc: ConfigError, pieces: ConfigPieces,
                    set_keys: set[str]) -> ConfigError:
    """``exc`` placed in the config file, under its own key, when it is about a training
    field the file gave (``seq_len = 1e50`` in a TOML is the TOML's ``training.seq_len``)."""
    from ..errors import ConfigError
    from ..strategies.frameworks.files import training_key
    field = exc.field or ""
    name = field.removeprefix("training.").split(".")[0]
    if not field.startswith("training.") or name not in pieces.training or field in set_keys:
        return exc
    return ConfigError(exc.reason, source=pieces.source,
                       field=training_key(pieces.framework, name, pieces.used))


def check_gpu(scn: Scenario, G, pieces: ConfigPieces, set_keys: set[str]) -> None:
    """The GPU of ``scn``'s cluster graph ``G`` runs the precision and FP8 recipe the config
    gave, or the refusal named in the config file (a TOML's float8 converter on an A100 is
    the TOML's ``model.converters``, not the scenario's ``training.precision``)."""
    from ..errors import ConfigError
    from ..hardware import check_gpu_training, gpu_spec
    try:
        check_gpu_training(gpu_spec(str(G.graph.get("gpu"))),
                           scn.training.precision, scn.fp8_recipe)
    except ConfigError as exc:
        raise _named_training(exc, pieces, set_keys).located(scn.source) from None


def data_parallel_ranks(cfg: CommonConfig, scn: Scenario, G, pieces: ConfigPieces,
                        set_keys: set[str]) -> int:
    """The data-parallel ranks of the strategy's plan on the GPUs of ``scn`` (its cluster
    graph ``G``)."""
    from ..errors import ConfigError
    from ..topology.build import scenario_gpus
    gpus = scenario_gpus(scn, G)
    try:
        return cfg.plan(gpus).dp
    except ConfigError as exc:
        raise _named(exc, scn, pieces, set_keys) from None


def grad_accum(pieces: ConfigPieces, micro: int, dp: int) -> int:
    """Micro-batches per step from the config's global (and local) batch, with micro-batches
    of ``micro`` samples over ``dp`` data-parallel ranks."""
    from ..errors import ConfigError
    from ..scenario import MAX_GRAD_ACCUM
    from ..strategies.frameworks.files import global_batch_key
    key = global_batch_key(pieces.framework)
    per_rank = pieces.local_batch or micro
    steps = 1
    if pieces.global_batch is not None:
        steps, rest = divmod(pieces.global_batch, per_rank * dp)
        if rest or steps < 1:
            raise ConfigError(f"global batch {pieces.global_batch} is not a multiple of "
                              f"{per_rank} samples x {dp} data-parallel ranks",
                              source=pieces.source, field=key)
    if per_rank % micro:
        raise ConfigError(f"local batch {per_rank} is not a multiple of the micro-batch "
                          f"{micro}", source=pieces.source, field=key)
    accum = steps * (per_rank // micro)
    if accum > MAX_GRAD_ACCUM:
        raise ConfigError(f"{pieces.global_batch} samples make {accum} micro-batches of "
                          f"{micro} x {dp} data-parallel ranks a step; at most "
                          f"{MAX_GRAD_ACCUM}", source=pieces.source, field=key)
    told = pieces.training.get("grad_accum")
    if told is not None and told != accum:
        raise ConfigError(f"{pieces.global_batch} samples = {micro} x {told} micro-batches x "
                          f"{dp} ranks does not hold ({micro * told * dp})",
                          source=pieces.source, field=key)
    return accum

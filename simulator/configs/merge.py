"""A framework config's pieces merged over a scenario (``clustersim run --config``).

Order, weakest first: the scenario file, then the config file (its strategy replaces the
scenario's; its training fields and model replace the scenario's), then ``--set``. A global
batch becomes ``training.grad_accum`` once the GPU count is known: micro-batches per step =
global batch / (micro-batch x data-parallel ranks), where the data-parallel ranks are the
GPUs over the model-parallel ones (tp x pp x cp); a ``--set training.grad_accum`` wins.
"""

from __future__ import annotations

from ..errors import ConfigError
from ..scenario import Scenario, apply_sets, resolve_scenario, scenario_from_dict
from ..yamlio import read_yaml
from .pieces import ConfigPieces

# strategy keys of the model-parallel degrees, per framework: dp = GPUs / their product
_MP_DEGREES = {
    "torchtitan": (("parallelism", "tensor_parallel_degree"),
                   ("parallelism", "pipeline_parallel_degree"),
                   ("parallelism", "context_parallel_degree")),
    "megatron": (("tensor_model_parallel_size",), ("pipeline_model_parallel_size",),
                 ("context_parallel_size",)),
    "deepspeed": (("tensor_parallel", "autotp_size"), ("pipeline", "stages")),
}
GLOBAL_BATCH_KEY = {"torchtitan": "training.global_batch_size",
                    "deepspeed": "train_batch_size", "megatron": "--global-batch-size"}


def scenario_with_config(scenario, pieces: ConfigPieces, sets: list[str]) -> Scenario:
    """The scenario ``scenario`` (a file or shipped name) with ``pieces`` over it and
    ``sets`` over both."""
    path = resolve_scenario(scenario)
    source = str(path)
    data = read_yaml(path, "scenario file")
    if not isinstance(data, dict):
        raise ConfigError("top level must be a mapping", source=source)
    data["strategy"] = dict(pieces.strategy)
    training = data.get("training") if isinstance(data.get("training"), dict) else {}
    data["training"] = {**training, **pieces.training}
    if pieces.model:
        data["model"] = pieces.model
    data = apply_sets(data, sets, source)
    scn = scenario_from_dict(data, source)
    set_keys = {s.partition("=")[0].strip() for s in sets}
    if "training.grad_accum" not in set_keys and (pieces.global_batch is not None
                                                  or pieces.local_batch is not None):
        accum = grad_accum(pieces, scn)
        scn = scn.model_copy(update={"training": scn.training.model_copy(
            update={"grad_accum": accum})})
    check_strategy(scn, pieces, set_keys)
    return scn


def check_strategy(scn: Scenario, pieces: ConfigPieces, set_keys: set[str]) -> None:
    """Validate the merged strategy now; a bad value the config file gave is named in
    that file, as the file spells it (``--tensor-model-parallel-size``)."""
    from ..pipeline import strategy_dict
    from ..strategies import parse_strategy
    try:
        parse_strategy(strategy_dict(scn))
    except ConfigError as exc:
        field = exc.field or ""
        key = field.removeprefix("strategy.")
        if not field.startswith("strategy.") or any(
                field == k or field.startswith(k + ".") for k in set_keys):
            raise exc.located(scn.source) from None
        raise ConfigError(exc.reason, source=pieces.source,
                          field=_config_key(pieces.framework, key)) from None


def _config_key(framework: str, key: str) -> str:
    """A strategy field as the framework's file spells it."""
    if framework == "megatron":
        from .megatron import STRATEGY_FLAGS
        flags = {field: flag for flag, (field, _) in STRATEGY_FLAGS.items()}
        return flags.get(key.split(".")[0], key)
    return key


def data_parallel_ranks(pieces: ConfigPieces, scn: Scenario) -> int:
    """The GPUs of ``scn`` over the model-parallel degrees of its strategy."""
    from ..topology.build import scenario_graph
    G = scenario_graph(scn)
    gpus = scn.cluster.gpus or sum(1 for _, d in G.nodes(data=True) if d.get("kind") == "gpu")
    degree = 1
    for path in _MP_DEGREES.get(pieces.framework, ()):
        node = scn.strategy
        for key in path:
            node = node.get(key, 1) if isinstance(node, dict) else 1
        degree *= node if isinstance(node, int) and not isinstance(node, bool) and node > 0 else 1
    if gpus % degree:
        raise ConfigError(f"{gpus} GPUs are not a multiple of the model-parallel degrees "
                          f"(product {degree})", source=pieces.source)
    return gpus // degree


def grad_accum(pieces: ConfigPieces, scn: Scenario) -> int:
    """Micro-batches per step from the config's global (and local) batch."""
    dp = data_parallel_ranks(pieces, scn)
    micro = scn.training.micro_batch
    key = GLOBAL_BATCH_KEY[pieces.framework]
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
    told = pieces.training.get("grad_accum")
    if told is not None and told != accum:
        raise ConfigError(f"{pieces.global_batch} samples = {micro} x {told} micro-batches x "
                          f"{dp} ranks does not hold ({micro * told * dp})",
                          source=pieces.source, field=key)
    return accum

"""Names the command line offers as choices (collectives, algorithms, protocols, fabrics...).

Each is defined here once and imported from here by the module that owns it
(:mod:`simulator.collectives.model`, :mod:`simulator.network.fabric`, ...), so that
``clustersim`` can build its options without importing numpy, networkx, pandas or the
simulator behind them. Keep its imports to the standard library and the import-free
:mod:`simulator.errors`: ``clustersim --help`` loads it.

The named strategies are owned here: :data:`NAMED_STRATEGIES` and their spellings, read
by ``clustersim compare`` and ``clustersim capacity`` alike (:func:`parse_strategy_names`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from .errors import ConfigError

# --------------------------------------------------------------------- collectives
OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all",
       "send_recv")
ALGOS_FOR_OP = {
    "all_reduce": ("ring", "tree", "nvls", "nvls_tree", "collnet_direct", "collnet_chain",
                   "one_shot"),
    "all_gather": ("ring", "nvls", "pat"),
    "reduce_scatter": ("ring", "nvls", "pat"),
    "broadcast": ("ring",),
    "reduce": ("ring",),
    "all_to_all": ("direct",),
    "send_recv": ("direct",),
}
ALGOS = ("ring", "tree", "direct", "nvls", "nvls_tree", "collnet_direct", "collnet_chain",
         "pat", "one_shot")    # one_shot: RCCL's MSCCL all_reduce on a full mesh (AMD)
PROTOS = ("LL", "LL128", "Simple")
STAR_OPS = ("reduce", "broadcast")      # what the 'star' algorithm (copies to/from a root) does

# ------------------------------------------------------------------------- network
ECMP_MODES = ("spread", "hash")
# training.attention (simulator/compute/families.py): PyTorch SDPA, the FlashAttention-2 and
# -3 libraries, or unfused (eager) attention
ATTENTION = ("sdpa", "flash2", "flash3", "eager")
# training.fp8_recipe (simulator/models/fp8.py): torchao's tensorwise or rowwise dynamic
# scaling (rowwise_with_gw_hp: its weight gradient in bf16), Transformer Engine's delayed
# scaling, its current (per-tensor) scaling, or its MXFP8 block scaling (Blackwell only)
TORCHAO_RECIPES = ("tensorwise", "rowwise", "rowwise_with_gw_hp")
TE_RECIPES = ("delayed", "current", "mxfp8")   # Transformer Engine's (fp8_attention needs one)
FP8_RECIPES = TORCHAO_RECIPES + TE_RECIPES
# training.fp8_recipe left unset: the framework's own default. Megatron-LM (and NeMo,
# Megatron-Bridge: the megatron strategy) runs Transformer Engine only, its --fp8-recipe
# defaulting to delayed (megatron/training/arguments.py); the PyTorch strategies run torchao's
# Float8Linear, whose Float8LinearConfig defaults to tensorwise dynamic scaling
TE_ONLY_STRATEGIES = ("megatron",)
# ... and torchtitan runs torchao's only: its float8 converter builds a Float8LinearConfig
# (tensorwise, or recipe_name rowwise / rowwise_with_gw_hp), it has no Transformer Engine
# path (torchtitan/components/quantization/float8.py; its MX converter is not modelled)
TORCHAO_ONLY_STRATEGIES = ("torchtitan",)


def default_fp8_recipe(strategy: str) -> str:
    """The FP8 recipe a step under ``strategy`` runs where ``training.fp8_recipe`` is unset."""
    return "delayed" if strategy in TE_ONLY_STRATEGIES else "tensorwise"


# training.elementwise: the model code's norms, rotary, activation (simulator/models/eager.py)
ELEMENTWISE = ("fused", "eager", "eager_fused_norm")
# training.memory_format: the layout of a convolutional network's activations
# (simulator/models/layout.py): channels first (NCHW, PyTorch's default contiguous format) or
# channels last (NHWC, torch.channels_last, the layout cuDNN's tensor-core convolutions use)
MEMORY_FORMATS = ("nchw", "nhwc")
# Fabric fidelity -> what it models (the classes: simulator.network.fabric.FABRICS).
FIDELITIES = {
    "analytical": "closed-form alpha-beta, congestion-unaware; fastest, exact when alone",
    "flow": "max-min fair sharing of every link among concurrent flows; use for contention",
}

# ------------------------------------------------------------------------ scenarios
DEFAULT_SCENARIO = "quickstart"

# ----------------------------------------------------------------------- strategies
@dataclass(frozen=True)
class NamedStrategy:
    """A strategy as the command line names it: a strategy of the registry
    (:data:`simulator.strategies.STRATEGIES`), a sharding mode for FSDP, its framework.

    ``clustersim compare`` prints its ``key`` (``fsdp-grad-op``), ``clustersim capacity``
    its ``registry_name`` (``fsdp:SHARD_GRAD_OP``); both accept every spelling of
    :func:`strategy_named`.
    """

    key: str
    strategy: str            # name in the strategy registry
    sharding: str | None     # FSDP sharding mode
    framework: str
    label: str
    options: tuple[tuple[str, object], ...] = ()   # dotted strategy keys a variant sets

    @property
    def registry_name(self) -> str:
        return registry_spelling(self.strategy, self.sharding)


def registry_spelling(strategy: str, sharding: str | None) -> str:
    """``ddp``, ``tf_mirrored``, ``fsdp:FULL_SHARD``: a strategy as capacity prints it."""
    return strategy if sharding is None else f"{strategy}:{sharding}"


NAMED_STRATEGIES: dict[str, NamedStrategy] = {n.key: n for n in (
    NamedStrategy("fsdp-full", "fsdp", "FULL_SHARD", "pytorch", "FSDP FULL_SHARD (ZeRO-3)"),
    NamedStrategy("fsdp-grad-op", "fsdp", "SHARD_GRAD_OP", "pytorch",
                  "FSDP SHARD_GRAD_OP (ZeRO-2)"),
    NamedStrategy("fsdp-no-shard", "fsdp", "NO_SHARD", "pytorch", "FSDP NO_SHARD (DDP-like)"),
    NamedStrategy("fsdp-hybrid", "fsdp", "HYBRID_SHARD", "pytorch", "FSDP HYBRID_SHARD (HSDP)"),
    NamedStrategy("fsdp-hybrid-zero2", "fsdp", "_HYBRID_SHARD_ZERO2", "pytorch",
                  "FSDP _HYBRID_SHARD_ZERO2"),
    NamedStrategy("ddp", "ddp", None, "pytorch", "PyTorch DDP"),
    NamedStrategy("tf-mirrored", "tf_mirrored", None, "tensorflow", "TF MirroredStrategy"),
    NamedStrategy("tf-multiworker", "tf_multiworker", None, "tensorflow",
                  "TF MultiWorkerMirroredStrategy"),
    NamedStrategy("tf-ps", "tf_ps", None, "tensorflow", "TF ParameterServerStrategy"),
    NamedStrategy("tf-central", "tf_central_storage", None, "tensorflow",
                  "TF CentralStorageStrategy"),
    NamedStrategy("horovod", "horovod", None, "tensorflow", "Horovod (TensorFlow)"),
)}
DEFAULT_COMPARE_STRATEGIES = tuple(NAMED_STRATEGIES)
# The framework strategies (simulator.strategies.frameworks), named bare or as a variant
# (framework_variant); not among the default rows.
FRAMEWORK_STRATEGIES: dict[str, NamedStrategy] = {n.key: n for n in (
    NamedStrategy("megatron", "megatron", None, "megatron", "Megatron-LM"),
    NamedStrategy("torchtitan", "torchtitan", None, "torchtitan", "torchtitan"),
    NamedStrategy("deepspeed", "deepspeed", None, "deepspeed", "DeepSpeed"),
)}

# Framework strategies with their degrees in the name, e.g. megatron:tp8pp2vp2dopt,
# torchtitan:tp8, deepspeed:zero3tp2: each part a short name and a number (or a switch),
# set on the strategy as the framework spells it.
_VARIANT_KEYS: dict[str, dict[str, str]] = {
    "megatron": {"tp": "tensor_model_parallel_size", "pp": "pipeline_model_parallel_size",
                 "vp": "virtual_pipeline_model_parallel_size", "cp": "context_parallel_size",
                 "ep": "expert_model_parallel_size", "dopt": "use_distributed_optimizer",
                 "sp": "sequence_parallel"},
    "torchtitan": {"tp": "parallelism.tensor_parallel_degree",
                   "pp": "parallelism.pipeline_parallel_degree",
                   "cp": "parallelism.context_parallel_degree",
                   "ep": "parallelism.expert_parallel_degree",
                   "rep": "parallelism.data_parallel_replicate_degree"},
    "deepspeed": {"zero": "zero_optimization.stage", "tp": "tensor_parallel.autotp_size",
                  "pp": "pipeline.stages"},
}
_VARIANT_PART = re.compile(r"([a-z]+)(\d*)")


def framework_variant(name: str, spec: str) -> NamedStrategy | None:
    """``megatron`` + ``tp8pp2`` -> the named strategy setting those degrees; None when
    ``spec`` is not made of the framework's parts (:data:`_VARIANT_KEYS`)."""
    keys = _VARIANT_KEYS.get(name)
    parts = _VARIANT_PART.findall(spec) if keys else []
    if not parts or "".join(a + b for a, b in parts) != spec:
        return None
    options = []
    for short, number in parts:
        if short not in keys or (number == "") != (short in ("dopt", "sp")):
            return None
        options.append((keys[short], int(number) if number else True))
    base = FRAMEWORK_STRATEGIES[name]
    return NamedStrategy(f"{name}:{spec}", name, None, base.framework, f"{base.label} {spec}",
                         tuple(options))
DEFAULT_CAPACITY_STRATEGIES = tuple(NAMED_STRATEGIES[k].registry_name
                                    for k in ("ddp", "fsdp-full", "fsdp-grad-op", "fsdp-hybrid"))

# Every spelling, lower case: the key (fsdp-full), with underscores (fsdp_full), the
# registry name (tf_central_storage; bare fsdp is FULL_SHARD) and strategy:SHARDING.
_SPELLINGS: dict[str, str] = {"fsdp": "fsdp-full"}
for _n in NAMED_STRATEGIES.values():
    for _spelling in (_n.key, _n.key.replace("-", "_"), _n.registry_name.lower()):
        _SPELLINGS.setdefault(_spelling, _n.key)


def strategy_named(text: str) -> NamedStrategy | None:
    """The strategy a spelling names, case and spaces around ``:`` ignored; else None."""
    name, _, sharding = text.strip().lower().partition(":")
    key = f"{name.strip()}:{sharding.strip()}" if sharding.strip() else name.strip()
    if name.strip() in FRAMEWORK_STRATEGIES:
        spec = sharding.strip()
        return framework_variant(name.strip(), spec) if spec else \
            FRAMEWORK_STRATEGIES[name.strip()]
    return NAMED_STRATEGIES.get(_SPELLINGS.get(key, ""))


def parse_strategy_names(text: str | list[str] | tuple[str, ...],
                         unknown: Callable[[str], str], example: str = "",
                         option: str = "--strategies") -> dict[NamedStrategy, str]:
    """``"fsdp-full, ddp"`` -> each named strategy with its first spelling as written,
    in order, without repeats.

    :param unknown: the reason given for an item that names no strategy (each command
        lists the names in its own spelling).
    :param example: appended to the reason for an empty item.
    :raises ConfigError: (source ``option``) for an empty item or list, an unknown name.
    """
    items = text.split(",") if isinstance(text, str) else list(text)
    out: dict[NamedStrategy, str] = {}
    for raw in items:
        item = raw.strip()
        if not item:
            raise ConfigError(f"empty strategy in {','.join(items)!r}{example}", source=option)
        named = strategy_named(item)
        if named is None:
            raise ConfigError(unknown(item), source=option)
        out.setdefault(named, item)
    if not out:
        raise ConfigError("no strategy given", source=option)
    return out


def framework_of(strategy_name: str) -> str | None:
    """The framework of a registry strategy name, if a named strategy has it."""
    return next((n.framework for n in (*NAMED_STRATEGIES.values(),
                                       *FRAMEWORK_STRATEGIES.values())
                 if n.strategy == strategy_name), None)


# ------------------------------------------------------------------------- capacity
# Size-ladder anchors (catalog models) per model family (simulator.capacity.ladder).
FAMILIES: dict[str, tuple[str, ...]] = {
    "llama": ("llama-2-7b", "llama-2-13b", "llama-2-34b", "llama-2-70b", "llama-3-405b"),
    "gpt": ("gpt3-1.3b", "gpt3-2.7b", "gpt3-6.7b", "gpt3-13b", "gpt3-175b"),
}

# Megatron-Core TransformerConfig fields that are training settings here: a megatron
# strategy may spell them so, and the scenario reads them as the training key, with its
# checks (simulator/scenario.py, before any strategy module loads)
MEGATRON_TRAINING_SPELLINGS = {"fp8_dot_product_attention": "fp8_attention",
                               "activation_func_fp8_input_store": "fp8_activation_input"}

"""Model catalog: architectures read from ``simulator/data/models/*.yaml`` or a user YAML.

One YAML file describes one model; users add models without code by writing a file with
the same schema and passing its path to :func:`load_model`. The file is checked with
pydantic (unknown keys refused) and then for architectural consistency; every error is a
:class:`~simulator.errors.ConfigError` naming the file and the offending key.

Transformer families (``gpt``, ``llama``, ``bert``) take ``layers``, ``hidden``, ``heads``,
``kv_heads`` (default ``heads``), ``head_dim`` (default ``hidden / heads``; Qwen3's heads are
128 wide whatever the model width, so its queries are ``heads x head_dim`` wide, not
``hidden``), ``ffn_hidden`` (default ``4 * hidden``), ``vocab``,
``max_seq_len``, ``mlp`` (``gelu`` two matrices, ``swiglu`` three), ``norm`` (``layernorm``,
``rmsnorm``), ``tied_embeddings``, ``bias``, ``position_embedding`` (``learned``, ``rope``)
``type_vocab`` (BERT's segment embeddings) and ``dropout`` (probability; dropout kernels and
their masks exist only when it is above 0: 0.1 for BERT, 0 for GPT and Llama unless the
file says otherwise); defaults follow the family. The ``resnet``
family takes ``depth`` (50, 101, 152: bottleneck ResNet v1.5), ``image_size`` (pixels) and
``num_classes``; ``maskrcnn`` (Mask R-CNN on a ResNet-FPN backbone, :mod:`maskrcnn`) takes
the same keys, with ``image_size`` a multiple of 32.

A mixture-of-experts transformer adds a ``moe`` mapping: ``num_experts`` routed experts,
``top_k`` of them per token, each expert an MLP of width ``ffn_hidden`` (the same ``mlp``
kind as the model), ``shared_experts`` always-on experts of that width, which blocks are
MoE (``first_dense_layers`` dense blocks first, of the model's ``ffn_hidden``, then every
``layer_freq``-th block), ``capacity_factor`` (tokens an expert takes, relative to an
even share; absent: dropless, Megatron-LM's default) and ``latent_size`` (LatentMoE: the
routed experts run on tokens projected to this width). :mod:`simulator.models.moe` costs it.

Sliding-window attention (GPT-OSS, Mistral): ``sliding_window`` (``w``, the keys a query
sees, itself included: Hugging Face's ``sliding_window``, Megatron-Core's ``window_size``
``(w - 1, 0)``) and ``attention_pattern``, which blocks have the window: ``sliding`` every
block (the default), ``alternating`` blocks 0, 2, 4, ... with full causal attention between
(Hugging Face ``layer_types`` sliding, full, ...; Megatron-Core ``window_attn_skip_freq: 2``).
Causal models only. :mod:`simulator.models.window` costs it.
DeepSeek's multi-head latent attention (MLA) is an ``attention`` mapping: ``kind: mla``,
``q_lora_rank``, ``kv_lora_rank``, ``qk_nope_head_dim``, ``qk_rope_head_dim``,
``v_head_dim`` (:mod:`simulator.models.mla` costs it; no ``kv_heads``, ``head_dim`` or
``bias`` beside it, rotary positions only). ``mtp_layers`` (default 0) adds DeepSeek-V3's
multi-token-prediction layers (Megatron-Core's ``mtp_num_layers``; each runs the model's
last block, :mod:`simulator.models.mtp`).

A hybrid model (Nemotron-H, Nemotron 3) adds ``layer_pattern``, one character per layer as
Megatron-Core's ``hybrid_layer_pattern`` spells it: ``M`` a Mamba-2 layer, ``*`` an
attention layer, ``-`` a dense MLP layer, ``E`` an MoE layer (each a pre-norm residual
layer with one mixer), and a ``mamba`` mapping (``heads``, ``head_dim``, ``state``,
``groups``, ``conv_kernel``, ``chunk``); :mod:`simulator.models.mamba` costs it. An ``mtp``
mapping (``layers``, ``pattern``) gives a hybrid's multi-token prediction layers, each
running the layers of ``pattern`` (a transformer says ``mtp_layers`` instead).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from simulator.errors import ConfigError, did_you_mean, validation_error
from simulator.inputs import path_name, regular_file
from simulator.yamlio import read_yaml
from ..yamlio import data_file

FAMILIES = ("gpt", "llama", "bert", "resnet", "maskrcnn")
CONV_FAMILIES = ("resnet", "maskrcnn")
TRANSFORMER_FAMILIES = ("gpt", "llama", "bert")
RESNET_BLOCKS = {50: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3)}

# Per-family defaults for optional transformer keys.
_DEFAULTS = {
    "gpt": dict(mlp="gelu", norm="layernorm", tied_embeddings=True, bias=True,
                position_embedding="learned", type_vocab=0, dropout=0.0),
    "llama": dict(mlp="swiglu", norm="rmsnorm", tied_embeddings=False, bias=False,
                  position_embedding="rope", type_vocab=0, dropout=0.0),
    "bert": dict(mlp="gelu", norm="layernorm", tied_embeddings=True, bias=True,
                 position_embedding="learned", type_vocab=2, dropout=0.1),
}

PosInt = Annotated[int, Field(strict=True, gt=0)]
NonNegInt = Annotated[int, Field(strict=True, ge=0)]


@dataclass(frozen=True)
class MambaSizes:
    """A Mamba-2 mixer (the model file's ``mamba`` mapping, Megatron-Core MambaMixer's
    arguments): ``heads`` of ``head_dim`` channels, ``groups`` of B/C with ``state`` size,
    conv1d ``conv_kernel``, SSD ``chunk``."""

    heads: int
    head_dim: int
    state: int
    groups: int
    conv_kernel: int
    chunk: int


@dataclass(frozen=True)
class ModelSpec:
    """One model architecture (sizes are element counts, not bytes).

    Transformer fields are 0 / empty for ResNets and ResNet fields are 0 for
    transformers. For a ResNet, ``layers`` is the number of bottleneck blocks.
    """

    name: str
    family: str                  # "gpt" | "llama" | "bert" | "resnet" | "maskrcnn"
    source: str
    layers: int = 0              # transformer blocks (ResNet: bottleneck blocks)
    hidden: int = 0              # model width h
    heads: int = 0               # query heads a
    kv_heads: int = 0            # key/value heads (GQA when < heads)
    head_size: int = 0           # width of one head (0: hidden / heads; the file's head_dim)
    ffn_hidden: int = 0          # MLP inner width
    vocab: int = 0
    max_seq_len: int = 0         # tokens
    mlp: str = ""                # "gelu" | "swiglu"
    norm: str = ""               # "layernorm" | "rmsnorm"
    tied_embeddings: bool = False
    bias: bool = False
    position_embedding: str = ""  # "learned" | "rope"
    type_vocab: int = 0          # segment (token-type) embeddings, BERT
    dropout: float = 0.0         # dropout probability (0: no dropout kernels or masks)
    depth: int = 0               # ResNet depth (50, 101, 152)
    image_size: int = 0          # ResNet input side, pixels
    num_classes: int = 0
    num_experts: int = 0         # routed experts of an MoE block (0: dense model)
    top_k: int = 0               # experts per token
    moe_ffn_hidden: int = 0      # MLP width of one expert
    shared_experts: int = 0      # always-on experts (DeepSeek), each moe_ffn_hidden wide
    moe_layer_freq: int = 1      # every n-th block after the dense ones is MoE
    first_dense_layers: int = 0  # leading dense blocks (DeepSeek-V3: 3)
    capacity_factor: float | None = None   # expert capacity / even share; None: dropless
    sliding_window: int = 0      # keys per query of a windowed block (0: no window)
    attention_pattern: str = ""  # which blocks are windowed: "sliding" (all), "alternating"
    # multi-head latent attention (simulator/models/mla.py; 0: not MLA): latent ranks, head widths
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_dim: int = 0
    qk_rope_dim: int = 0
    v_dim: int = 0
    moe_latent: int = 0          # LatentMoE: routed experts on this width (0: on hidden)
    # hybrid models (simulator/models/mamba.py): one character per layer, "" for a plain
    # transformer; the Mamba-2 mixer's sizes (None without Mamba layers)
    layer_pattern: str = ""
    mamba: MambaSizes | None = None
    # multi-token-prediction layers (simulator/models/mtp.py), each the model's last block or
    # a hybrid's layers of mtp_pattern
    mtp_layers: int = 0
    mtp_pattern: str = ""
    # what trains (simulator/models/finetune.py Finetune; None: every weight, as pre-training)
    finetune: Any = None
    # samples packed into each sequence (simulator/models/packing.py Pack; None: one each)
    pack: Any = None
    # saved tensors the step keeps in FP8 (simulator/models/fp8_store.py FP8_STORES)
    fp8_stores: tuple[str, ...] = ()
    # the GPU's FP8 GEMMs take any operand layout: no transposed FP8 copies under Transformer
    # Engine's per-tensor recipes (simulator/models/fp8.py; set from the GPU by the pipeline)
    fp8_any_layout: bool = False
    # a convolutional network's activation layout (simulator/models/layout.py): "nhwc" (what
    # the kernel curves describe) or "nchw" (cuDNN's layout transposes and channel-parallel
    # batch norm; set from training.memory_format by the pipeline)
    memory_format: str = "nhwc"

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        """Whether attention is multi-head latent attention (:mod:`simulator.models.mla`)."""
        return self.kv_lora_rank > 0

    @property
    def is_transformer(self) -> bool:
        return self.family in TRANSFORMER_FAMILIES

    @property
    def head_dim(self) -> int:
        """Width of one attention head: the file's ``head_dim``, else ``hidden / heads``."""
        if self.head_size:
            return self.head_size
        return self.hidden // self.heads if self.heads else 0

    @property
    def q_width(self) -> int:
        """Width of the queries and of the attention output, ``heads x head_dim``: ``hidden``
        unless the file gives a ``head_dim`` (Qwen3: 32 heads of 128 on a 2048-wide model)."""
        return self.heads * self.head_dim

    @property
    def causal(self) -> bool:
        """Whether attention is causal (decoders): flash attention then skips the masked half."""
        return self.family in ("gpt", "llama")


class _MoeFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    num_experts: Annotated[int, Field(strict=True, ge=2)]
    top_k: PosInt
    ffn_hidden: PosInt
    shared_experts: NonNegInt = 0
    layer_freq: PosInt = 1
    first_dense_layers: NonNegInt = 0
    capacity_factor: Annotated[float, Field(gt=0.0)] | None = None
    latent_size: PosInt | None = None     # LatentMoE (Nemotron 3 Super's moe_latent_size)


class _MambaFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    heads: PosInt
    head_dim: PosInt
    state: PosInt
    groups: PosInt = 1
    conv_kernel: PosInt = 4        # Megatron-Core MambaMixer's d_conv default
    chunk: PosInt = 128            # Megatron-Core MambaMixer's chunk_size default


class _MtpFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    layers: PosInt                 # Megatron's mtp_num_layers
    pattern: str                   # mtp_hybrid_override_pattern ("*E")


class _AttentionFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["mla"]
    q_lora_rank: PosInt
    kv_lora_rank: PosInt
    qk_nope_head_dim: PosInt
    qk_rope_head_dim: PosInt
    v_head_dim: PosInt


class _TransformerFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    family: Literal["gpt", "llama", "bert"]
    source: str = ""               # required in the catalog, optional in a user's file
    layers: PosInt
    hidden: PosInt
    heads: PosInt
    kv_heads: PosInt | None = None
    head_dim: PosInt | None = None   # None: hidden / heads
    ffn_hidden: PosInt | None = None
    vocab: PosInt
    max_seq_len: PosInt
    mlp: Literal["gelu", "swiglu", "squared_relu"] | None = None
    norm: Literal["layernorm", "rmsnorm"] | None = None
    tied_embeddings: Annotated[bool, Field(strict=True)] | None = None
    bias: Annotated[bool, Field(strict=True)] | None = None
    position_embedding: Literal["learned", "rope", "none"] | None = None
    type_vocab: NonNegInt | None = None
    dropout: Annotated[float, Field(ge=0.0, lt=1.0)] | None = None
    moe: _MoeFile | None = None
    sliding_window: PosInt | None = None
    attention_pattern: Literal["sliding", "alternating"] | None = None
    attention: _AttentionFile | None = None
    mtp_layers: NonNegInt = 0
    layer_pattern: str | None = None
    mamba: _MambaFile | None = None
    mtp: _MtpFile | None = None
    description: str = ""


class _ResNetFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    family: Literal["resnet", "maskrcnn"]
    source: str = ""               # required in the catalog, optional in a user's file
    depth: PosInt
    image_size: PosInt = 224
    num_classes: PosInt = 1000
    description: str = ""


def load_model(name_or_path: str | Path) -> ModelSpec:
    """Return a catalog model (name, any case) or the model described by a YAML file.

    Parameters
    ----------
    name_or_path : str or Path
        A catalog name such as ``"llama-2-7b"`` or ``"GPT3-175B"``, or a path to a YAML
        file with the catalog schema.

    Raises
    ------
    ConfigError
        Unknown name (the message lists the catalog), unreadable file, or an invalid
        entry (``source`` is the file, ``field`` the key).
    """
    key = str(name_or_path).lower()
    spec = _catalog_model(key)
    if spec is not None:
        return spec
    path = path_name(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        regular_file(path, "model file")      # missing, a folder, a device: said so
        return parse_model_file(path)
    raise ConfigError(f"unknown model {str(name_or_path)!r}"
                      f"{did_you_mean(str(name_or_path), model_names())}; "
                      f"valid: {', '.join(model_names())}"
                      " (or a path to a model YAML file)")


def model_names() -> list[str]:
    """Names of the catalog models, sorted."""
    return sorted(_catalog())


def _catalog_folder():
    return data_file("models")


@functools.cache
def _catalog_files() -> dict:
    """File name -> the catalog's file (one listing of the folder)."""
    return {entry.name: entry for entry in _catalog_folder().iterdir()}


@functools.cache
def _catalog_model(key: str) -> ModelSpec | None:
    """The catalog model named ``key`` (lower case), None if there is none.

    A catalog file is named after its model (a test), so a name is read from its own file
    alone: a run reads one model file, not the whole catalog (34 files, ~30 ms of every
    start); a file that names another model, or a name without a file, asks the catalog.
    The name is looked up in the folder's listing, never opened as a path (a name too long
    for the system is refused later, as a path)."""
    entry = _catalog_files().get(f"{key}.yaml")
    if entry is not None:
        spec = _catalog_file(entry)
        if spec.name.lower() == key:
            return spec
    return _catalog().get(key)


def _catalog_file(entry) -> ModelSpec:
    spec = parse_model_file(entry)
    if spec.source.startswith(USER_SOURCE):
        raise ConfigError("a catalog model must cite its source", source=str(entry),
                          field="source")
    return spec


@functools.cache
def _catalog() -> dict[str, ModelSpec]:
    out: dict[str, ModelSpec] = {}
    for entry in sorted(_catalog_folder().iterdir(), key=lambda p: p.name):
        if entry.name.endswith((".yaml", ".yml")):
            spec = _catalog_file(entry)
            if spec.name.lower() in out:
                raise ConfigError(f"duplicate model name {spec.name!r}", source=str(entry),
                                  field="name")
            out[spec.name.lower()] = spec
    return out


def parse_model_file(path) -> ModelSpec:
    """Read and check one model YAML file.

    Raises
    ------
    ConfigError
        With ``source`` = the file and ``field`` = the key at fault.
    """
    src = str(path)
    return parse_model(read_yaml(path, "model file"), src)


USER_SOURCE = "user-defined model, file"


def parse_model(data: Any, source: str) -> ModelSpec:
    """Check the mapping ``data`` (a parsed model file) and build its :class:`ModelSpec`.

    Raises
    ------
    ConfigError
        With ``source`` and the dotted ``field`` at fault.
    """
    if not isinstance(data, dict):
        raise ConfigError("a model file must be a mapping (name, family, source, ...)",
                          source=source)
    family = data.get("family")
    if family is None:
        raise ConfigError("missing required key", source=source, field="family")
    if family not in FAMILIES:
        raise ConfigError(f"unknown family {family!r}; valid: {', '.join(FAMILIES)}",
                          source=source, field="family")
    schema = _ResNetFile if family in CONV_FAMILIES else _TransformerFile
    try:
        parsed = schema.model_validate(data)
    except ValidationError as exc:
        loc = exc.errors()[0]["loc"]
        nested = {"moe": _MoeFile, "attention": _AttentionFile, "mamba": _MambaFile,
                  "mtp": _MtpFile}.get(
            loc[0] if loc else "")
        raise validation_error(exc, source=source, depth=2 if nested else 1, style="got",
                               valid=(nested or schema).model_fields) from None
    if not parsed.source:
        parsed = parsed.model_copy(update={"source": f"{USER_SOURCE} {source}"})
    if family in CONV_FAMILIES:
        return _resnet_spec(parsed, source)
    return _transformer_spec(parsed, source)


def _transformer_spec(f: _TransformerFile, source: str) -> ModelSpec:
    d = _DEFAULTS[f.family]
    kv_heads = f.kv_heads or f.heads
    if f.head_dim is None and f.hidden % f.heads:
        raise ConfigError(f"heads ({f.heads}) must divide hidden ({f.hidden})",
                          source=source, field="heads")
    if f.heads % kv_heads:
        raise ConfigError(f"kv_heads ({kv_heads}) must divide heads ({f.heads})",
                          source=source, field="kv_heads")

    def pick(key: str):
        value = getattr(f, key)
        return d[key] if value is None else value

    mla = _mla_fields(f, source)
    return ModelSpec(
        name=f.name, family=f.family, source=f.source, layers=f.layers, hidden=f.hidden,
        heads=f.heads, kv_heads=kv_heads, head_size=mla.pop("head_size", f.head_dim or 0),
        ffn_hidden=f.ffn_hidden or 4 * f.hidden,
        vocab=f.vocab, max_seq_len=f.max_seq_len, mlp=pick("mlp"), norm=pick("norm"),
        tied_embeddings=pick("tied_embeddings"), bias=pick("bias"),
        position_embedding=pick("position_embedding"), type_vocab=pick("type_vocab"),
        dropout=pick("dropout"), **_mtp_fields(f, source), **_moe_fields(f, source),
        **mla, **_window_fields(f, source), **_hybrid_fields(f, source))


def _window_fields(f: _TransformerFile, source: str) -> dict:
    """The ModelSpec fields of ``sliding_window`` and ``attention_pattern`` (none without)."""
    if f.sliding_window is None:
        if f.attention_pattern is not None:
            raise ConfigError("needs sliding_window (the keys a windowed query sees)",
                              source=source, field="attention_pattern")
        return {}
    if f.family not in ("gpt", "llama"):
        raise ConfigError(f"a sliding window is modelled for causal models only (family gpt "
                          f"or llama), not {f.family}", source=source, field="sliding_window")
    return dict(sliding_window=f.sliding_window,
                attention_pattern=f.attention_pattern or "sliding")


def _mtp_fields(f: _TransformerFile, source: str) -> dict:
    """``mtp_layers`` and ``mtp_pattern`` from the file's ``mtp_layers`` (a transformer's:
    each MTP layer runs the last block) or its ``mtp`` mapping (a hybrid's: each runs the
    layers of ``pattern``, symbols of the ``layer_pattern``); decoders only (they predict
    the next tokens), one spelling at a time."""
    if f.mtp is not None and f.mtp_layers:
        raise ConfigError("give mtp_layers (a transformer) or an mtp mapping (a hybrid), not "
                          "both", source=source, field="mtp_layers")
    if f.mtp_layers and f.family == "bert":
        raise ConfigError("multi-token prediction needs a decoder (gpt, llama), not bert",
                          source=source, field="mtp_layers")
    if f.mtp is None:
        return {"mtp_layers": f.mtp_layers}
    if f.layer_pattern is None:
        raise ConfigError("an mtp mapping needs a layer_pattern (a transformer gives "
                          "mtp_layers)", source=source, field="mtp")
    if not f.mtp.pattern or set(f.mtp.pattern) - set(f.layer_pattern):
        raise ConfigError(f"must be layer symbols of the layer_pattern, got "
                          f"{f.mtp.pattern!r}", source=source, field="mtp.pattern")
    return {"mtp_layers": f.mtp.layers, "mtp_pattern": f.mtp.pattern}


def _mla_fields(f: _TransformerFile, source: str) -> dict:
    """The ModelSpec fields of the ``attention`` mapping (none for multi-head attention).
    MLA's widths replace ``kv_heads`` and ``head_dim``: a file giving either beside it, or
    biases, or learned positions, is refused (Megatron-Core's MLASelfAttention has one key
    head per query head, bias-free projections and rotary positions on ``qk_rope_head_dim``).
    ``head_size`` is set to ``(qk_nope + qk_rope + v) / 2``: the width whose multi-head
    attention core has the same FLOPs per query-key pair and the same Q + K + V + O
    elements (:mod:`simulator.models.mla`)."""
    a = f.attention
    if a is None:
        return {}
    for key, bad in (("kv_heads", f.kv_heads not in (None, f.heads)),
                     ("head_dim", f.head_dim is not None), ("bias", bool(f.bias)),
                     ("position_embedding", f.position_embedding not in (None, "rope")),
                     ("family", f.family == "bert")):
        if bad:
            raise ConfigError(f"{key} cannot be set with attention kind mla (MLA has one key "
                              f"head per query head, no biases, rotary positions, decoders "
                              f"only)", source=source, field=key)
    widths = a.qk_nope_head_dim + a.qk_rope_head_dim + a.v_head_dim
    if widths % 2:
        raise ConfigError(f"qk_nope_head_dim + qk_rope_head_dim + v_head_dim ({widths}) must "
                          f"be even (the attention core is priced at half of it per head)",
                          source=source, field="attention.v_head_dim")
    return dict(q_lora_rank=a.q_lora_rank, kv_lora_rank=a.kv_lora_rank,
                qk_nope_dim=a.qk_nope_head_dim, qk_rope_dim=a.qk_rope_head_dim,
                v_dim=a.v_head_dim, head_size=widths // 2)


PATTERN_SYMBOLS = {"M": "Mamba-2", "*": "attention", "-": "MLP", "E": "MoE"}


def _hybrid_fields(f: _TransformerFile, source: str) -> dict:
    """The ModelSpec fields of ``layer_pattern`` and ``mamba`` (none for a transformer)."""
    pattern = f.layer_pattern
    if pattern is None:
        if f.mamba is not None:         # (an mtp mapping without one: _mtp_fields)
            raise ConfigError("a mamba mapping needs a layer_pattern", source=source,
                              field="mamba")
        return {}
    bad = sorted(set(pattern) - set(PATTERN_SYMBOLS))
    if bad:
        raise ConfigError(f"unknown layer symbol {bad[0]!r}; valid: M (Mamba-2), * "
                          f"(attention), - (MLP), E (MoE)", source=source,
                          field="layer_pattern")
    if len(pattern) != f.layers:
        raise ConfigError(f"{len(pattern)} symbols for {f.layers} layers", source=source,
                          field="layer_pattern")
    if "E" in pattern and f.moe is None:
        raise ConfigError("E (MoE) layers need a moe mapping", source=source,
                          field="layer_pattern")
    if f.moe is not None and "E" not in pattern:
        raise ConfigError("a moe mapping needs E layers in the pattern", source=source,
                          field="layer_pattern")
    m = f.mamba
    if "M" in pattern and m is None:
        raise ConfigError("M (Mamba-2) layers need a mamba mapping", source=source,
                          field="layer_pattern")
    if m is None:
        return {"layer_pattern": pattern}
    if m.heads % m.groups:
        raise ConfigError(f"groups ({m.groups}) must divide heads ({m.heads})",
                          source=source, field="mamba.groups")
    return {"layer_pattern": pattern, "mamba": MambaSizes(**m.model_dump())}


def _moe_fields(f: _TransformerFile, source: str) -> dict:
    """The ModelSpec fields of the ``moe`` mapping (none for a dense model)."""
    m = f.moe
    if m is None:
        return {}
    if m.top_k > m.num_experts:
        raise ConfigError(f"top_k ({m.top_k}) exceeds num_experts ({m.num_experts})",
                          source=source, field="moe.top_k")
    if f.layer_pattern is not None and (m.first_dense_layers or m.layer_freq != 1):
        raise ConfigError("a layer_pattern places the MoE layers itself (E): leave out "
                          "first_dense_layers and layer_freq", source=source,
                          field="moe.first_dense_layers")
    if m.first_dense_layers >= f.layers:
        raise ConfigError(f"first_dense_layers ({m.first_dense_layers}) leaves no MoE block "
                          f"of the {f.layers} layers", source=source,
                          field="moe.first_dense_layers")
    return dict(num_experts=m.num_experts, top_k=m.top_k, moe_ffn_hidden=m.ffn_hidden,
                shared_experts=m.shared_experts, moe_layer_freq=m.layer_freq,
                first_dense_layers=m.first_dense_layers, capacity_factor=m.capacity_factor,
                moe_latent=m.latent_size or 0)


def _resnet_spec(f: _ResNetFile, source: str) -> ModelSpec:
    if f.depth not in RESNET_BLOCKS:
        raise ConfigError(f"depth {f.depth} not supported; valid: "
                          f"{', '.join(map(str, RESNET_BLOCKS))} (bottleneck ResNets)",
                          source=source, field="depth")
    if f.image_size < 32:
        raise ConfigError("image_size must be at least 32 pixels (five stride-2 stages)",
                          source=source, field="image_size")
    if f.family == "maskrcnn" and f.image_size % 32:
        raise ConfigError(f"image_size must be a multiple of 32 (FPN levels P2..P5), got "
                          f"{f.image_size}", source=source, field="image_size")
    return ModelSpec(name=f.name, family=f.family, source=f.source,
                     layers=sum(RESNET_BLOCKS[f.depth]), depth=f.depth,
                     image_size=f.image_size, num_classes=f.num_classes)

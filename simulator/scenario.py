"""Scenario files: model + training setup + cluster + strategy + simulation knobs.

A scenario is YAML::

    name: quickstart
    model: llama-2-7b                 # catalog name, or a path to a model YAML
    training: {micro_batch: 1, seq_len: 4096, grad_accum: 1, precision: bf16}
    cluster: {topology: dgx-a100}     # plus nodes: N for multi-node topologies
    strategy: {name: fsdp, sharding: FULL_SHARD}
    simulation: {fidelity: flow, overlap_slowdown: 0.0, stragglers: {3: 1.2},
                 variability: default, seed: 0}   # variability: none = the ideal machine

``--set a.b=value`` overrides any key before validation (value parsed as YAML). Every
mistake is one ConfigError naming the file and the dotted field.
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

from pydantic import (BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator,
                      model_serializer, model_validator)

from .choices import (ATTENTION, DEFAULT_SCENARIO, ECMP_MODES, ELEMENTWISE, FIDELITIES,
                      FP8_RECIPES, MEGATRON_TRAINING_SPELLINGS, MEMORY_FORMATS, TE_RECIPES,
                      TORCHAO_ONLY_STRATEGIES, default_fp8_recipe)
from .collectives.nccl_config import NcclConfig
from .errors import ConfigError, validation_error
from .hardware import LOW_PRECISIONS
from .inputs import path_name, regular_file
from .parsedcache import fresh_copy
from .precision import PRECISIONS
from .reliability.config import BASELINE_KEY, ReliabilityCfg, drop_scenario_rates
from .shipped import file_or_shipped, shown_as
from .yamlio import parse_value, read_yaml

TOPOLOGY_PREFIX = "topology."      # --set topology.params.node.gpu=H100-SXM


def fp8_attention_refusal(recipe: str, strategy: str = "") -> str | None:
    """Why ``training.fp8_attention`` cannot run under the FP8 ``recipe`` and ``strategy``
    (None: it can; unset: not known yet)."""
    if strategy in TORCHAO_ONLY_STRATEGIES:
        return (f"fp8_attention is Transformer Engine's FP8 DotProductAttention; {strategy} "
                f"runs torchao's float8, which has none")
    if recipe in TE_RECIPES:
        return None
    return (f"fp8_attention is Transformer Engine's FP8 DotProductAttention: fp8_recipe "
            f"{recipe} (torchao) has none; use {', '.join(TE_RECIPES)}")


def _one_of(value: str, choices) -> str:
    """``value`` if it is one of ``choices``, else the validation error naming them."""
    if value not in choices:
        raise ValueError(f"must be one of {', '.join(choices)}, got {value!r}")
    return value


class SequenceLengths(BaseModel):
    """Real samples of varying length, each micro-batch padded to its longest
    (simulator/models/seqlen.py)."""
    model_config = ConfigDict(extra="forbid")
    histogram: str = Field(description="catalog name (simulator/data/seq_lengths.yaml) or a "
                                       "YAML file with 'counts'")
    bin_size: int | None = Field(None, gt=0, description="LDDL-style length bins; null: "
                                                         "no binning")


class PackedSequences(BaseModel):
    """Several samples packed into each sequence, attention within each
    (simulator/models/packing.py)."""
    model_config = ConfigDict(extra="forbid", strict=True)
    lengths: list[int] | None = Field(None, description="tokens of each sample packed into a "
                                      "sequence (their sum at most seq_len; the rest is "
                                      "padding)")
    histogram: str | None = Field(None, description="or a dataset's length histogram "
                                  "(simulator/data/seq_lengths.yaml or a YAML file with "
                                  "'counts') packed into full rows")

    @model_validator(mode="after")
    def _one(self):
        if (self.lengths is None) == (self.histogram is None):
            raise ValueError("set one of lengths (one pack) or histogram (a dataset)")
        return self


# Numbers in scenarios: integers are integers (``true`` is not a micro-batch of 1) and
# floats are finite; the boundary (simulator.inputs) has already refused inf/nan in files.
_STRICT = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)
# A slowdown factor past this is a typo, not a straggler (docs/inputs.md).
MAX_SLOWDOWN = 1000.0
MAX_SEQ_LEN = 1 << 24           # 16M tokens: past the longest context any model trains on
MAX_MICRO_BATCH = 1 << 20       # samples per GPU per micro-step
# Micro-steps per step: real runs take thousands at most (Llama 3.1 405B's 16M tokens on 8
# data-parallel ranks: 256); many identical ones are extrapolated (simulator/accum.py), so
# this only refuses a typo before any work. A global batch is bounded likewise.
MAX_GRAD_ACCUM = 1 << 24
MAX_GLOBAL_BATCH = 1 << 40      # samples per step across the job


class Evaluation(BaseModel):
    """The run's evaluation pass (simulator/evaluation.py, docs/energy.md): every
    ``every_steps`` training steps, forward-only passes over a fixed evaluation set of
    ``samples`` samples, in batches of ``global_batch`` (default: the training's)."""
    model_config = _STRICT
    every_steps: int = Field(gt=0, le=MAX_GRAD_ACCUM, description="training steps between "
                             "two evaluations")
    samples: int = Field(gt=0, le=MAX_GLOBAL_BATCH, description="samples of the evaluation "
                         "set (each evaluation runs them all)")
    first_step: int | None = Field(None, gt=0, le=MAX_GLOBAL_BATCH, description="the step "
                                   "of the first evaluation [default: every_steps]")
    global_batch: int | None = Field(None, gt=0, le=MAX_GLOBAL_BATCH, description="samples "
                                     "per evaluation batch across the job [default: the "
                                     "training's global batch]")
    dense_mask_workers: int | None = Field(None, gt=0, le=1024, description="DataLoader "
                                           "workers per data-parallel rank that collate "
                                           "each evaluation sample with a dense seq x seq "
                                           "causal mask (NeMo's packed SFT dataset with "
                                           "return_cu_seqlen false; simulator/loader.py) "
                                           "[default: the loader is not modelled]")

    @property
    def first(self) -> int:
        return self.first_step or self.every_steps

    def count(self, steps: int) -> int:
        """Evaluations in a run of ``steps`` training steps (:func:`evaluations_in`)."""
        return evaluations_in(steps, self.first, self.every_steps)


def evaluations_in(steps: int, first: int, every: int) -> int:
    """Evaluations in a run of ``steps`` training steps that evaluates at the steps
    ``first``, ``first + every``, ... up to ``steps``."""
    return 0 if steps < first else 1 + (steps - first) // every


class Training(BaseModel):
    model_config = _STRICT
    micro_batch: int = Field(1, gt=0, le=MAX_MICRO_BATCH,
                             description="samples per GPU per micro-step")
    seq_len: int = Field(2048, gt=0, le=MAX_SEQ_LEN,
                         description="tokens per sample (ignored for CNNs)")
    grad_accum: int = Field(1, ge=1, le=MAX_GRAD_ACCUM)
    global_batch: int | None = Field(None, gt=0, le=MAX_GLOBAL_BATCH, description="samples per step across the "
                                     "job: grad_accum then follows from the strategy's "
                                     "data-parallel ranks (docs/compare.md)")
    precision: str = "bf16"
    flash_attention: bool = True
    compile: bool = Field(False, description="torch.compile's fused elementwise/norm kernels "
                                             "(docs/compute.md)")
    elementwise: str = Field("fused", description="the model code's norms, rotary and "
                             "activation: fused (one kernel each) or eager (Llama's "
                             "reference code op by op, as torchtitan runs it, a GEMM per "
                             "Q/K/V and gate/up Linear; a BERT: Hugging Face's BertLayer); "
                             "docs/compute.md")
    memory_format: str | None = Field(None, description="a convolutional network's "
                                      "activation layout: nchw or nhwc [default: the "
                                      "framework's: nchw in PyTorch, TensorFlow's layout "
                                      "optimizer's (nhwc at fp16 or bf16, else nchw)]; "
                                      "docs/compute.md")
    sequence_lengths: SequenceLengths | None = None
    packed_sequences: PackedSequences | None = Field(None, description="samples packed into "
                                                     "each sequence: lengths; docs/finetuning.md")
    attention: str | None = Field(None, description="attention kernels: sdpa (PyTorch SDPA, "
                                  "the default), flash2, flash3 (Hopper), eager (no fused "
                                  "kernel); docs/compute.md")
    finetune: dict[str, Any] | None = Field(None, description="fine-tuning: mode full, lora "
                                            "or qlora, rank, alpha, target_modules, dropout, "
                                            "freeze_*; docs/finetuning.md")
    evaluation: Evaluation | None = Field(None, description="the run's evaluation pass: "
                                          "every_steps, samples, first_step (docs/energy.md)")
    dense_mask_workers: int | None = Field(None, gt=0, le=1024, description="training "
                                           "DataLoader workers per data-parallel rank that "
                                           "collate each sample with a dense seq x seq "
                                           "causal mask (as training.evaluation's; "
                                           "simulator/loader.py) [default: the loader is not "
                                           "modelled]")
    fp8_recipe: str | None = Field(None, description="precision fp8: tensorwise, "
                                   "rowwise or rowwise_with_gw_hp (torchao dynamic scaling "
                                   "per tensor or per row; the last with bf16 weight "
                                   "gradients; not under megatron), delayed or current "
                                   "(Transformer Engine's delayed or current scaling) or "
                                   "mxfp8 (Transformer Engine's MXFP8 block scaling, "
                                   "Blackwell; these three not under torchtitan) [default: "
                                   "the framework's: delayed under megatron, Megatron-LM's "
                                   "--fp8-recipe default; tensorwise, torchao's, otherwise]; "
                                   "docs/compute.md")

    fp8_attention: bool = Field(False, description="precision fp8 with a Transformer Engine "
                                "recipe: attention in FP8 too (TE's FP8 DotProductAttention, "
                                "Megatron's fp8_dot_product_attention, NeMo's FP8_DPA=1); "
                                "docs/compute.md")
    fp8_activation_input: bool = Field(False, description="megatron, a SwiGLU model: the "
                                       "activation keeps its input for backward in FP8 "
                                       "(Megatron's activation_func_fp8_input_store, NeMo's "
                                       "FP8_ACT=1); docs/finetuning.md")

    @field_validator("precision")
    @classmethod
    def _precision(cls, v: str) -> str:
        return _one_of(v, PRECISIONS + LOW_PRECISIONS)   # fp8/fp4: checked per GPU

    @field_validator("fp8_recipe")
    @classmethod
    def _fp8_recipe(cls, v: str | None) -> str | None:
        return v if v is None else _one_of(v, FP8_RECIPES)

    @field_validator("elementwise")
    @classmethod
    def _elementwise(cls, v: str) -> str:
        return _one_of(v, ELEMENTWISE)

    @field_validator("attention")
    @classmethod
    def _attention(cls, v: str | None) -> str | None:
        return v if v is None else _one_of(v, ATTENTION)

    @field_validator("memory_format")
    @classmethod
    def _memory_format(cls, v: str | None) -> str | None:
        return v if v is None else _one_of(v, MEMORY_FORMATS)

    @model_validator(mode="after")
    def _attention_flash(self) -> "Training":
        if self.attention == "eager":
            self.flash_attention = False
        elif self.attention is not None and not self.flash_attention:
            raise ValueError(f"attention {self.attention} is a fused kernel: drop "
                             f"flash_attention: false (or set attention: eager)")
        return self

    @model_validator(mode="after")
    def _fp8_attention(self) -> "Training":
        if not self.fp8_attention:
            return self
        if self.precision != "fp8":
            raise ValueError("fp8_attention needs precision: fp8 (the attention's FP8 scales "
                             "come from the FP8 step's recipe)")
        why = self.fp8_recipe and fp8_attention_refusal(self.fp8_recipe)
        if why:                     # unset: checked once the strategy is known (pipeline)
            raise ValueError(why)
        if not self.flash_attention:
            raise ValueError("fp8_attention runs the fused (cuDNN) attention kernel: not with "
                             "eager attention")
        if self.attention in ("flash2", "flash3"):
            raise ValueError(f"fp8_attention runs Transformer Engine's fused (cuDNN) attention "
                             f"kernel, not FlashAttention's: attention {self.attention} has "
                             f"no FP8 training kernel (drop attention or fp8_attention)")
        return self

    def recipe_for(self, strategy: str) -> str:
        """The FP8 recipe a step under ``strategy`` runs: ``fp8_recipe``, else that
        framework's default (:func:`~simulator.choices.default_fp8_recipe`)."""
        return self.fp8_recipe or default_fp8_recipe(strategy)

    @property
    def attention_impl(self) -> str:
        """The attention implementation the step runs (``attention``, else by the flag)."""
        return self.attention or ("sdpa" if self.flash_attention else "eager")

    @model_serializer(mode="wrap")
    def _dump(self, handler):
        out = handler(self)
        if isinstance(out, dict):     # unset: the same echo as before the fields existed
            for key in ("attention", "global_batch", "finetune", "evaluation",
                        "packed_sequences", "memory_format"):
                if key in out and out[key] is None:
                    out.pop(key)
            if "fp8_recipe" in out and out["fp8_recipe"] is None:
                out.pop("fp8_recipe")
            for key in ("fp8_attention", "fp8_activation_input"):
                if out.get(key) is False:
                    out.pop(key)
            if out.get("elementwise") == "fused":
                out.pop("elementwise")
        return out


class ClusterCfg(BaseModel):
    model_config = _STRICT
    topology: str = "dgx-a100"
    nodes: int | None = Field(None, gt=0)
    gpus: int | None = Field(None, gt=0, description="use only the first N GPUs (ranks)")
    links: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="what-if per link type, e.g. {ib-hdr: {bw: 400 Gb/s}}")
    ecmp: str = "spread"
    topology_set: dict[str, Any] = Field(default_factory=dict,
                                         description="topology key -> value (--set topology.K=V)")
    power_cap_w: float | None = Field(None, gt=0, description="board power limit of every "
                                      "GPU in watts: a what-if that lowers the tensor-core "
                                      "rate by the sourced clock curve and clips the power "
                                      "(power.yaml power_caps; docs/energy.md)")

    @field_validator("ecmp")
    @classmethod
    def _ecmp(cls, v: str) -> str:
        return _one_of(v, ECMP_MODES)


class Simulation(BaseModel):
    model_config = _STRICT
    fidelity: str = "flow"
    overlap_slowdown: float = Field(0.0, ge=0.0, le=MAX_SLOWDOWN,
                                    description="slowdown of a compute op that starts while a "
                                                "comm kernel runs")
    stragglers: dict[int, float] = Field(default_factory=dict,
                                         description="rank -> compute slowdown factor")
    seed: int = Field(0, ge=0, lt=1 << 64, description="seed of ECMP hashing and of "
                      "rank-to-rank variability: an integer in [0, 2^64)")
    variability: Any = Field(
        "default", description="rank-to-rank variability: default (sigmas of "
        "data/variability.yaml), none (the ideal machine), or op class -> sigma")
    full_replay: bool = Field(False, description="replay every micro-step of a long step "
                              "instead of a few extrapolated (simulator/accum.py; at most "
                              "1,024 micro-steps)")

    @field_validator("fidelity")
    @classmethod
    def _fidelity(cls, v: str) -> str:
        return _one_of(v, FIDELITIES)

    @field_validator("variability")
    @classmethod
    def _variability(cls, v):
        if v in ("default", "none"):         # the engine (numpy, SimPy) loads for a mapping only
            return v
        from .engine.variability import resolve_sigmas
        try:
            resolve_sigmas(v)
        except ConfigError as exc:
            raise ValueError(exc.reason) from None
        return v

    @field_validator("stragglers")
    @classmethod
    def _stragglers(cls, v: dict[int, float]) -> dict[int, float]:
        for rank, factor in v.items():
            if rank < 0:
                raise ValueError(f"rank {rank} is negative; ranks count from 0")
            if not 0 < factor <= MAX_SLOWDOWN:
                raise ValueError(f"slowdown of rank {rank} must be > 0 and <= {MAX_SLOWDOWN:g}, "
                                 f"got {factor}")
        return v


class Scenario(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    description: str = ""
    model: str
    training: Training = Field(default_factory=Training)
    cluster: ClusterCfg = Field(default_factory=ClusterCfg)
    strategy: dict[str, Any] = Field(default_factory=lambda: {"name": "fsdp"})
    simulation: Simulation = Field(default_factory=Simulation)
    reliability: ReliabilityCfg | None = None   # job-level failures (docs/reliability.md)
    nccl: NcclConfig = Field(default_factory=NcclConfig)   # NCCL knobs (docs/collective-model.md)
    _source: str = PrivateAttr("<scenario>")

    @property
    def source(self) -> str:
        """The file (or point) this scenario was read from: what its errors name."""
        return self._source

    @property
    def fp8_recipe(self) -> str:
        """The FP8 recipe this scenario's strategy runs (:meth:`Training.recipe_for`)."""
        return self.training.recipe_for(str(self.strategy.get("name", "")))

    def located(self, exc: ConfigError, prefix: str = "") -> ConfigError:
        """``exc`` if it names its own file (a topology or model YAML), else the same
        reason in this scenario's file, under ``prefix`` (``cluster``: ``links.x.bw`` ->
        ``cluster.links.x.bw``)."""
        if exc.source:
            return exc
        field = ".".join(p for p in (prefix, exc.field or "") if p)
        return ConfigError(exc.reason, source=self.source, field=field or None)


def apply_sets(data: dict, sets: list[str], source: str) -> dict:
    """Apply ``--set key.path=value`` overrides (value parsed as YAML) to a copy of data
    (``reliability.failures.baseline=none`` drops the file's own failure rates too,
    :func:`~simulator.reliability.config.drop_scenario_rates`)."""
    data = fresh_copy(data)
    set_keys = {item.partition("=")[0].strip() for item in sets}
    for item in sets:
        key, eq, text = item.partition("=")
        if not eq or not key.strip():
            raise ConfigError(f"expected KEY=VALUE, got {item!r}", field="--set")
        value = parse_value(text, source, f"--set {key.strip()}")
        if key.strip().startswith(TOPOLOGY_PREFIX):      # a key of the topology file
            topo = data.setdefault("cluster", {}).setdefault("topology_set", {})
            topo[key.strip()[len(TOPOLOGY_PREFIX):]] = value
            continue
        node = data
        parts = key.strip().split(".")
        for part in parts[:-1]:
            nxt = node.get(part) if isinstance(node, dict) else None
            if nxt is None:
                nxt = node[part] = {}
            if not isinstance(nxt, dict):
                raise ConfigError(f"{part!r} is not a mapping, cannot set {key}",
                                  source=source, field=f"--set {key}")
            node = nxt
        if key.strip() == BASELINE_KEY and value == "none":
            drop_scenario_rates(data, set_keys)
        node[parts[-1]] = value
    return data


def load_scenario(path: str | Path | None = None, sets: list[str] | None = None) -> Scenario:
    """Read and validate a scenario (default ``scenarios/quickstart.yaml``)."""
    path = resolve_scenario(path or DEFAULT_SCENARIO)
    source = shown_as(path, "scenarios", "scenario")
    data = read_yaml(path, "scenario file")
    if not isinstance(data, dict):
        raise ConfigError("top level must be a mapping", source=source)
    data = apply_sets(data, sets or [], source)
    return scenario_from_dict(data, source)


def scenario_from_dict(data: dict, source: str = "<dict>") -> Scenario:
    """Validate ``data`` as a scenario read from ``source`` (what its errors name)."""
    try:
        data = training_spellings(data) if isinstance(data, dict) else data
    except ConfigError as exc:
        raise ConfigError(exc.reason, source=source, field=exc.field) from None
    try:
        scn = Scenario.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc, source=source, style="paren",
                               suggest=lambda loc: keys_at(Scenario, loc)) from None
    scn._source = source
    return scn


def training_spellings(data: dict) -> dict:
    """The scenario mapping ``data`` with its megatron strategy's spellings of training
    settings (``fp8_dot_product_attention: true``, Megatron-Core's;
    :data:`~simulator.choices.MEGATRON_TRAINING_SPELLINGS`) moved to their training keys
    (``training.fp8_attention``); one setting given both ways, differently, is refused.

    :raises ConfigError: (``strategy.<Megatron's name>``) for the two spellings disagreeing.
    """
    strategy, training = data.get("strategy"), data.get("training", {})
    if not (isinstance(strategy, dict) and strategy.get("name") == "megatron"
            and isinstance(training, dict)
            and set(strategy) & set(MEGATRON_TRAINING_SPELLINGS)):
        return data
    strategy, training = dict(strategy), dict(training)
    for megatron, key in MEGATRON_TRAINING_SPELLINGS.items():
        if megatron not in strategy:
            continue
        value = strategy.pop(megatron)
        if key in training and training[key] != value:
            raise ConfigError(f"is {value!r} where training.{key} is {training[key]!r}: one "
                              f"setting, two spellings", field=f"strategy.{megatron}")
        training[key] = value
    return {**data, "strategy": strategy, "training": training}


def keys_at(model, loc) -> list[str]:
    """The key names a pydantic ``model`` accepts at the parent of location ``loc`` (the
    fields of the nested model there; none where the walk meets anything else)."""
    for key in loc[:-1]:
        field = model.model_fields.get(str(key)) if isinstance(model, type) and \
            issubclass(model, BaseModel) else None
        if field is None:
            return []
        model = next((a for a in (field.annotation, *typing.get_args(field.annotation))
                      if isinstance(a, type) and issubclass(a, BaseModel)), None)
    return list(model.model_fields) if isinstance(model, type) and \
        issubclass(model, BaseModel) else []


def from_sets(exc: ConfigError, sets: list[str], source: str,
              option: str = "--set") -> ConfigError:
    """``exc`` with its field marked ``option`` when the value came from one of ``sets``
    (``KEY=VALUE`` items of ``option``, ``--set`` or ``cluster``'s ``--against``) of the
    scenario or mix ``source``: ``--set cluster.links.x.bw``."""
    field = exc.field or ""
    keys = [item.partition("=")[0].strip() for item in sets]
    if field.startswith("--set "):     # apply_sets' own label, for items of either option
        field = field.removeprefix("--set ")
    if exc.source != source or not field or field.startswith(("--set", "--against")):
        return exc
    if not any(field == k or field.startswith(k + ".") or k.startswith(field + ".")
               for k in keys if k):
        return exc
    return ConfigError(exc.reason, source=source, field=f"{option} {field}")


def resolve_scenario(name_or_path: str | Path) -> Path:
    """A path, or a bare name looked up in ``scenarios/`` (cwd, then the shipped ones)."""
    path = path_name(name_or_path, "scenario")
    if path.exists() and not path.is_file():    # a folder, FIFO or device: say which
        regular_file(path, "scenario file")
    return file_or_shipped(name_or_path, path, "scenarios", "scenario")

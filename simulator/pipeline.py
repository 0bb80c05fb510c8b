"""From a scenario to a replayed iteration: the wiring of every layer, in one place."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from .accum import (AccumPlan, Extrapolation, check_whole, class_busy, deepened, extrapolate,
                    full_trace, mapped, plan_accum, plan_trace)
from .cluster import Cluster
from .constants import load_constants
from .collectives.model import CollectiveModel
from .compute import ComputeModel
from .engine import JobConfig, MachineConfig, Placement, Timeline, replay
from .engine.variability import resolve_sigmas
from .choices import framework_of
from .energy.power import capped_gpu
from .errors import ConfigError
from .gcpause import gc_paused
from .hardware import ANY_LAYOUT_FP8_FAMILIES, GpuSpec, check_gpu_training, gpu_spec
from .loader import loader_batch_s
from .metrics import Metrics, compute_metrics
from .models import (ModelSpec, layer_costs, load_model, model_flops_per_sample,
                     tokens_per_sample)
from .models.finetune_spellings import FINETUNE_KEYS, resolve as resolve_finetune
from .models.layout import resolve as resolve_layout
from .models.packing import FIELD as PACK_FIELD, Pack, PackedDataset, check_pack
from .models.seqlen import load_histogram, mean_length, mixed_layer_costs, padded_length_weights
from .models.nvfp4 import NVFP4
from .precision import FP4, FP8, compute_precision, is_half
from .scenario import MAX_GRAD_ACCUM, Scenario, fp8_attention_refusal
from .strategies import CommonConfig, World, build_trace, parse_strategy
from .topology.build import scenario_cluster
from .trace import Trace
from .trace.transform import apply_stragglers

_TRAINING_KEYS = ("precision", "micro_batch", "grad_accum")


@dataclass
class Setup:
    """Everything built from a scenario before the replay.

    With ``accum`` (a step of many identical micro-steps), ``trace`` holds the last replayed
    micro-steps only: derive another trace from it through :func:`with_trace`. A trace put
    in by hand (``dataclasses.replace(setup, trace=...)``) is replayed as it is.

    ``checked``: the traces the generators built and validated here, which the replay does
    not validate again (a trace changed in place after :func:`build_setup` is not seen).
    """

    scenario: Scenario
    cluster: Cluster
    collectives: CollectiveModel
    compute: ComputeModel
    trace: Trace
    machine: MachineConfig
    job: JobConfig
    capacity_bytes: int
    peak_flops: float
    accum: AccumPlan | None = None       # identical micro-steps: replay a few (accum.py)
    checked: tuple = ()                  # traces validated by their generator

    def __post_init__(self):
        if self.accum is not None and not self.accum.owns(self.trace):
            self.accum = None


def step_fp8_recipe(setup: Setup) -> str:
    """The FP8 recipe the step runs (``training.fp8_recipe``, else its strategy's framework's
    default), "" for a step that is not FP8."""
    scn = setup.scenario
    return scn.fp8_recipe if scn.training.precision == FP8 else ""


def kernel_stack(setup: Setup) -> str:
    """What prices the step's kernels (the compute model's stack) and, for an FP8 step, the
    recipe it runs (:func:`step_fp8_recipe`)."""
    stack = setup.compute.stack(setup.job.precision)
    recipe = step_fp8_recipe(setup)
    if not recipe:
        return stack
    default = "" if setup.scenario.training.fp8_recipe else ", its framework's default"
    return f"{stack}; FP8 recipe {recipe}{default}"


def replayed_ops(setup: Setup) -> int:
    """The ops one replay of ``setup`` runs: every rank class's ops of each trace it replays
    (a step of identical micro-steps: its few replayed ones, :mod:`simulator.accum`)."""
    traces = setup.accum.traces if setup.accum is not None else (setup.trace,)
    return sum(len(c.ops) for t in traces for c in t.classes)


@dataclass
class RunResult:
    setup: Setup
    timeline: Timeline
    metrics: Metrics
    extrapolation: Extrapolation | None = None   # set when the step was extrapolated
    loader_s: float = 0.0        # a rank's DataLoader per step (0: not modelled; loader.py)
    loader_wait_s: float = 0.0   # of the step, the GPUs' wait for it (in metrics, idle)


def strategy_dict(scn: Scenario) -> dict:
    """The scenario's strategy mapping with the training keys it shares filled in."""
    return _strategy_dict(scn)


def job_config(scn: Scenario) -> JobConfig:
    """The job knobs of ``scn`` (its simulation section, its compute precision)."""
    return JobConfig(overlap_slowdown=scn.simulation.overlap_slowdown,
                     precision=compute_precision(scn.training.precision),
                     variability=resolve_sigmas(scn.simulation.variability),
                     seed=scn.simulation.seed)


def run_meta(scn: Scenario, model: ModelSpec) -> dict:
    """What a Trace written from ``scn`` for ``model`` carries so that a replay of it costs
    what ``run`` costs (its ``meta.run``, :mod:`simulator.trace_replay`): the training
    precision (the peak FLOP/s are counted at it), the attention kernels (and
    ``fp8_attention`` where set), the model's family (whose code decides whether the
    eager stack's fitted mechanisms apply, :mod:`simulator.compute.training_fit`), the job
    knobs and the NCCL knobs the scenario set."""
    job = job_config(scn)
    fp8_attention = {"fp8_attention": True} if scn.training.fp8_attention else {}
    return {"precision": scn.training.precision, "attention": scn.training.attention_impl,
            **fp8_attention, "model_family": model.family,
            "overlap_slowdown": job.overlap_slowdown, "variability": job.variability,
            "seed": job.seed, "nccl": scn.nccl.model_dump(exclude_unset=True)}


def make_trace(scn: Scenario, model: ModelSpec, cfg: CommonConfig, world: World,
               source: str = "<scenario>") -> Trace:
    """Per-layer costs of ``model`` under the scenario's training setup (and its
    fine-tuning, :func:`with_finetune`: a model put in by ``capacity``'s ladder gets it
    too), turned into the strategy's Trace, with the scenario's stragglers split off."""
    t = scn.training
    try:
        model = with_memory_format(
            with_packing(with_fp8_stores(with_finetune(model, scn), scn), scn), scn, cfg.name)
    except ConfigError as exc:
        raise exc.located(source) from None
    if hasattr(cfg, "plan"):
        return _planned_trace(scn, model, cfg, world, source)
    try:
        if t.sequence_lengths is None:
            layers = layer_costs(model, t.micro_batch, t.seq_len, t.precision,
                                 t.flash_attention, autocast=autocasts(cfg), compile=t.compile,
                                 fp8_recipe=scn.fp8_recipe, elementwise=t.elementwise)
            tokens = tokens_per_sample(model, t.seq_len)
            flops = model_flops_per_sample(model, t.seq_len)
        else:
            layers, tokens, flops = _variable_lengths(model, scn, autocasts(cfg))
    except ConfigError as exc:
        raise _located(exc, source, "training") from None
    try:
        trace = build_trace(layers, cfg, world, model=model.name, tokens_per_sample=tokens,
                            model_flops_per_sample=flops)
    except ConfigError as exc:           # a strategy option this model or cluster refuses
        raise exc.located(source) from None
    try:
        return _with_run_meta(apply_stragglers(trace, scn.simulation.stragglers), scn, model)
    except ConfigError as exc:           # a straggler rank outside this cluster
        raise exc.located(source) from None


def _with_run_meta(trace: Trace, scn: Scenario, model: ModelSpec) -> Trace:
    trace.meta["run"] = run_meta(scn, model)
    return trace


def _planned_trace(scn: Scenario, model: ModelSpec, cfg: CommonConfig, world: World,
                   source: str) -> Trace:
    """A strategy with a parallel plan (:mod:`simulator.strategies.parallel`): its generator builds
    the TP/SP/CP-sharded layer costs from the model itself."""
    t = scn.training
    if t.sequence_lengths is not None:
        raise ConfigError(f"{cfg.name} runs fixed-length sequences", source=source,
                          field="training.sequence_lengths")
    try:
        tokens = tokens_per_sample(model, t.seq_len)
        flops = model_flops_per_sample(model, t.seq_len)
    except ConfigError as exc:
        raise _located(exc, source, "training") from None
    try:
        trace = build_trace(None, cfg, world, spec=model, seq_len=t.seq_len,
                            flash=t.flash_attention, autocast=autocasts(cfg),
                            compile=t.compile, elementwise=t.elementwise,
                            fp8_recipe=gemm_recipe(t.precision, scn.fp8_recipe),
                            model=model.name, tokens_per_sample=tokens,
                            model_flops_per_sample=flops)
        return _with_run_meta(apply_stragglers(trace, scn.simulation.stragglers), scn, model)
    except ConfigError as exc:          # a layer-cost field is a training key
        training = exc.field in ("seq_len", "batch")
        raise (_located(exc, source, "training") if training else exc.located(source)) \
            from None


def _variable_lengths(model: ModelSpec, scn: Scenario, autocast: bool):
    """Layer costs, real tokens and model FLOPs per sample for ``training.sequence_lengths``
    (padding costs time but is neither a token nor a model FLOP)."""
    t = scn.training
    spec = t.sequence_lengths
    if not model.is_transformer:
        raise ConfigError(f"{model.name} has no sequence length", field="sequence_lengths")
    counts = load_histogram(spec.histogram, field="sequence_lengths.histogram")
    if len(counts) != t.seq_len:
        raise ConfigError(f"histogram {spec.histogram!r} covers lengths 1..{len(counts)}; "
                          f"training.seq_len is {t.seq_len} (they must match)",
                          field="sequence_lengths.histogram")
    if spec.bin_size is not None and t.seq_len % spec.bin_size:
        raise ConfigError(f"{spec.bin_size} does not divide seq_len {t.seq_len}",
                          field="sequence_lengths.bin_size")
    weights = padded_length_weights(counts, t.micro_batch, spec.bin_size)
    layers = mixed_layer_costs(model, t.micro_batch, weights, t.precision, t.flash_attention,
                               autocast, t.compile, scn.fp8_recipe, t.elementwise)
    total = sum(counts)
    flops = sum(c * model_flops_per_sample(model, i + 1) for i, c in enumerate(counts) if c)
    return layers, mean_length(counts), flops / total


def _with_global_batch(scn: Scenario, cfg: CommonConfig, world: World,
                       source: str) -> tuple[Scenario, CommonConfig]:
    """``scn`` and ``cfg`` with the micro-batches per step that make ``training.global_batch``
    on the strategy's data-parallel ranks (as Megatron derives them from
    ``--global-batch-size``).

    :raises ConfigError: (``training.global_batch``) where it is not a whole number of
        micro-steps, or a ``training.grad_accum`` set beside it says otherwise.
    """
    t = scn.training
    try:
        dp = cfg.data_parallel_ranks(world)
    except ConfigError as exc:
        raise exc.located(source) from None
    per_step = t.micro_batch * dp
    accum, rest = divmod(t.global_batch, per_step)
    if rest or accum < 1:
        raise ConfigError(f"{t.global_batch} samples is not a whole number of micro-steps of "
                          f"{per_step} (micro-batch {t.micro_batch} on {dp} data-parallel "
                          f"ranks of {cfg.name})", source=source,
                          field="training.global_batch")
    if accum > MAX_GRAD_ACCUM:
        raise ConfigError(f"gives {accum} micro-batches of {per_step} samples a step; at "
                          f"most {MAX_GRAD_ACCUM}", source=source,
                          field="training.global_batch")
    if "grad_accum" in t.model_fields_set and t.grad_accum != accum:
        raise ConfigError(f"gives {accum} micro-batches a step; training.grad_accum says "
                          f"{t.grad_accum}: set one of the two", source=source,
                          field="training.global_batch")
    training = t.model_copy(update={"grad_accum": accum})
    return (scn.model_copy(update={"training": training}),
            cfg.model_copy(update={"grad_accum": accum}))


def _check_fp8(model: ModelSpec, scn: Scenario, strategy: str, source: str) -> None:
    """FP8 where the step can run it: a transformer's Linear GEMMs (torchao's Float8Linear
    or Transformer Engine), under a PyTorch framework; FP8 attention where the strategy's
    recipe (``training.fp8_recipe``, else its framework's default) is Transformer Engine's.

    :raises ConfigError: (``training.precision``) for a model without such GEMMs or a
        TensorFlow strategy (Keras' mixed precision is 16-bit); (``training.fp8_attention``)
        under a torchao recipe.
    """
    why = scn.training.fp8_attention and fp8_attention_refusal(scn.fp8_recipe, strategy)
    if why:
        raise ConfigError(why, source=source, field="training.fp8_attention")
    if framework_of(strategy) == "tensorflow":
        raise ConfigError(f"{strategy} runs no FP8 GEMMs (Keras mixed precision is fp16 or "
                          f"bf16): use bf16", source=source, field="training.precision")
    if not model.is_transformer:
        raise ConfigError(f"{model.name} has no transformer Linear layers to run in FP8: use "
                          f"bf16", source=source, field="training.precision")


def gemm_recipe(precision: str, fp8_recipe: str) -> str | None:
    """The low-precision GEMM recipe of a step at ``precision``: ``training.fp8_recipe`` for
    fp8, Transformer Engine's NVFP4 (:mod:`simulator.models.nvfp4`) for fp4, else None."""
    return {FP8: fp8_recipe, FP4: NVFP4}.get(precision)


def _check_fp4(model: ModelSpec, strategy: str, source: str) -> None:
    """NVFP4 where the step can run it: a transformer's Linear GEMMs under Megatron with
    Transformer Engine (``NVFP4BlockScaling``), the only modelled framework that runs it.

    :raises ConfigError: (``training.precision``) for another strategy or a model without
        Linear GEMMs.
    """
    if strategy != "megatron":
        raise ConfigError(f"fp4 is Transformer Engine's NVFP4 recipe, which the megatron "
                          f"strategy runs; {strategy} has no NVFP4 training path here: use "
                          f"fp8 or bf16", source=source, field="training.precision")
    if not model.is_transformer:
        raise ConfigError(f"{model.name} has no transformer Linear layers to run in NVFP4: "
                          f"use bf16", source=source, field="training.precision")


def _check_elementwise(model: ModelSpec, strategy: str, value: str, source: str) -> None:
    """``training.elementwise: eager`` where it means something: Llama's PyTorch reference
    code (RMSNorm, rotary, SwiGLU, grouped-query K/V) or Hugging Face's BERT (separate
    Q/K/V Linears; ``eager`` only: its LayerNorm is one kernel either way), under a PyTorch
    framework (:mod:`simulator.models.eager`).

    :raises ConfigError: (``training.elementwise``) under a TensorFlow strategy, or for a
        model with none of those ops.
    """
    if framework_of(strategy) == "tensorflow":
        raise ConfigError(f"{value} is PyTorch's op-by-op model code; {strategy} runs Keras: "
                          f"use fused", source=source, field="training.elementwise")
    if model.family == "bert" and value == "eager":
        return
    if not (model.is_transformer and (model.norm == "rmsnorm" or model.mlp == "swiglu"
                                      or model.position_embedding == "rope"
                                      or model.kv_heads < model.heads)):
        bert = " (a BERT takes eager: Hugging Face's BertLayer)" if model.family == "bert" \
            else ""
        raise ConfigError(f"{value} is Llama's reference code (RMSNorm, rotary, SwiGLU, "
                          f"grouped-query attention); {model.name} has none of them: use "
                          f"fused{bert}", source=source, field="training.elementwise")


def _located(exc: ConfigError, source: str, prefix: str) -> ConfigError:
    """``exc`` if it already names its file (a model or histogram YAML), else the same
    reason placed in the scenario under ``prefix``."""
    if exc.source:
        return exc
    field = f"{prefix}.{exc.field}" if exc.field else prefix
    if exc.field and exc.field.startswith(f"{prefix}."):    # a field named in full already
        field = exc.field
    return ConfigError(exc.reason, source=source, field=field)


def autocasts(cfg: CommonConfig) -> bool:
    """16-bit compute on fp32 weights: torch.autocast (DDP's default under fp16/bf16) or
    Keras' mixed policy, not FSDP's MixedPrecision (16-bit parameters)."""
    return is_half(cfg.precision) and cfg.weight_bytes() == 4


def _strategy_dict(scn: Scenario) -> dict:
    data = {k: v for k, v in scn.strategy.items() if k not in FINETUNE_KEYS}
    for key in _TRAINING_KEYS:
        ours = getattr(scn.training, key)
        if key == "precision":       # an FP8 step is bf16 outside its GEMMs
            ours = compute_precision(ours)
        if key in data and data[key] != ours:
            raise ConfigError(f"set {key} once, under training ({ours!r}); strategy says "
                              f"{data[key]!r}", field=f"strategy.{key}")
        data[key] = ours
    return data


def with_finetune(model: ModelSpec, scn: Scenario) -> ModelSpec:
    """``model`` as ``scn`` fine-tunes it (``training.finetune``, or the strategy's own
    spelling: :mod:`simulator.models.finetune_spellings`)."""
    ft = resolve_finetune(scn.training.finetune, dict(scn.strategy), model.mlp == "swiglu")
    if ft is None:
        return model
    name = scn.strategy.get("name", "")
    if not ft.trains_all and framework_of(name) == "tensorflow":
        raise ConfigError(f"frozen weights and adapters are modelled in the PyTorch "
                          f"frameworks; {name} runs Keras", field="training.finetune")
    if ft.base_precision == FP8 and scn.training.precision != FP8:
        raise ConfigError(f"an FP8 base feeds FP8 GEMMs: training.precision is "
                          f"{scn.training.precision}", field="training.finetune.base_precision")
    return replace(model, finetune=ft)


def with_fp8_stores(model: ModelSpec, scn: Scenario) -> ModelSpec:
    """``model`` with the saved tensors its step keeps in FP8
    (:mod:`simulator.models.fp8_store`): Q, K, V and O under ``training.fp8_attention``, the
    SwiGLU input under ``training.fp8_activation_input`` (Megatron-Core's fused SwiGLU only)."""
    t = scn.training
    stores = (("attention",) if t.fp8_attention else ()) + \
        (("activation_input",) if t.fp8_activation_input else ())
    if t.fp8_activation_input:
        field, name = "training.fp8_activation_input", scn.strategy.get("name", "")
        if name != "megatron":
            raise ConfigError(f"is Megatron-Core's activation_func_fp8_input_store: the "
                              f"megatron strategy, not {name}", field=field)
        if model.mlp != "swiglu" or model.is_moe:
            raise ConfigError(f"keeps a dense SwiGLU MLP's input in FP8 (Megatron-Core "
                              f"refuses other activations; experts are not modelled): "
                              f"{model.name} has {'experts' if model.is_moe else model.mlp}",
                              field=field)
        if t.compile or t.elementwise != "fused":
            raise ConfigError("is a setting of Megatron-Core's fused SwiGLU kernel: not with "
                              "compile or elementwise kernels other than fused", field=field)
    return replace(model, fp8_stores=stores) if stores else model


def with_gpu_fp8(model: ModelSpec, gpu: GpuSpec) -> ModelSpec:
    """``model`` with its FP8 GEMMs' operands as ``gpu`` takes them: in any layout on
    :data:`~simulator.hardware.ANY_LAYOUT_FP8_FAMILIES` (no transposed FP8 copies under
    Transformer Engine's per-tensor recipes, :mod:`simulator.models.fp8`)."""
    return replace(model, fp8_any_layout=gpu.family in ANY_LAYOUT_FP8_FAMILIES)


def with_memory_format(model: ModelSpec, scn: Scenario, strategy: str) -> ModelSpec:
    """``model`` in the activation layout its step runs (:mod:`simulator.models.layout`):
    ``training.memory_format``, else the framework's of ``strategy``.

    :raises ConfigError: (``training.memory_format``) for a layout set on a model without
        convolutions."""
    layout = memory_format_of(scn, model, strategy)
    return model if layout is None else replace(model, memory_format=layout[0])


def memory_format_of(scn: Scenario, model: ModelSpec, strategy: str) -> tuple[str, str] | None:
    """``(layout, why)`` of ``model``'s step under ``strategy`` (None: no convolutions)."""
    t = scn.training
    return resolve_layout(model.family, model.name, t.memory_format,
                          framework_of(strategy) == "tensorflow", compute_precision(t.precision))


def with_packing(model: ModelSpec, scn: Scenario) -> ModelSpec:
    """``model`` with the samples ``training.packed_sequences`` packs into each sequence
    (:mod:`simulator.models.packing`)."""
    t = scn.training
    if t.packed_sequences is None:
        return model
    if not model.is_transformer:
        raise ConfigError(f"{model.name} has no sequences to pack", field=PACK_FIELD)
    if t.sequence_lengths is not None:
        raise ConfigError("packed sequences are full rows of seq_len tokens: drop "
                          "training.sequence_lengths (padding to the longest sample)",
                          field=PACK_FIELD)
    spec = t.packed_sequences
    if spec.histogram is not None:
        counts = load_histogram(spec.histogram, field=f"{PACK_FIELD}.histogram")
        pack = PackedDataset(tuple(counts), t.seq_len)
    else:
        pack = Pack(tuple(spec.lengths))
    check_pack(pack, t.seq_len)
    return replace(model, pack=pack)


def portable_finetune(scn: Scenario) -> Scenario:
    """``scn`` with a strategy's own fine-tuning spelling (``peft: lora``, ``lora_config``)
    moved into ``training.finetune``, so that switching the strategy (``compare``,
    ``capacity``) keeps it."""
    if not any(key in scn.strategy for key in FINETUNE_KEYS):
        return scn
    try:
        model = load_model(scn.model)
    except ConfigError as exc:
        raise _located(exc, "<scenario>", "model") from None
    ft = resolve_finetune(scn.training.finetune, dict(scn.strategy), model.mlp == "swiglu")
    strategy = {k: v for k, v in scn.strategy.items() if k not in FINETUNE_KEYS}
    training = scn.training.model_copy(update={"finetune": ft.section()})
    return scn.model_copy(update={"strategy": strategy, "training": training}, deep=True)


def job_world(cluster: Cluster, n_gpus: int) -> World:
    """A job of ``n_gpus`` ranks, ``gpus_per_node`` of them to a server, as the strategies
    lay it out; :func:`~simulator.engine.replay` puts its ranks on the cluster's first
    GPUs (:class:`~simulator.engine.Placement`)."""
    return World(n_gpus, min(int(cluster.G.graph["gpus_per_node"]), n_gpus))


def build_setup(scn: Scenario, source: str = "<scenario>", cluster: Cluster | None = None,
                extrapolate_steps: bool = True) -> Setup:
    """Load the model and topology, generate the trace, build the cost models.

    ``cluster`` replaces the scenario's cluster (one already built, or a degraded fabric's:
    :func:`~simulator.topology.build.scenario_cluster` with a graph). With
    ``extrapolate_steps``, a step of many identical micro-steps gets the few replayed traces
    of :mod:`simulator.accum` (``Setup.accum``) instead of the whole trace.
    """
    with gc_paused():          # millions of graph, index and trace objects, no cycles
        return _build_setup(scn, source, cluster, extrapolate_steps)


def _build_setup(scn: Scenario, source: str, cluster: Cluster | None,
                 extrapolate_steps: bool) -> Setup:
    try:
        model = load_model(scn.model)
    except ConfigError as exc:
        raise _located(exc, source, "model") from None
    k = load_constants()
    cluster = cluster or scenario_cluster(scn, k)
    try:
        gpu = capped_gpu(gpu_spec(cluster.G.graph["gpu"]), scn.cluster.power_cap_w)
        check_gpu_training(gpu, scn.training.precision, scn.fp8_recipe)
        strategy = _strategy_dict(scn)
        model = with_gpu_fp8(with_packing(with_fp8_stores(with_finetune(model, scn), scn), scn),
                             gpu)
    except ConfigError as exc:
        raise exc.located(source) from None
    cfg = parse_strategy(strategy, source=source)
    t = scn.training
    if t.precision == FP8:
        _check_fp8(model, scn, cfg.name, source)
    if t.precision == FP4:
        _check_fp4(model, cfg.name, source)
    if t.elementwise != "fused":
        _check_elementwise(model, cfg.name, t.elementwise, source)
    n_gpus = scn.cluster.gpus or cluster.n_gpus
    if n_gpus > cluster.n_gpus:
        raise ConfigError(f"the topology has {cluster.n_gpus} GPUs, cannot use {n_gpus}",
                          source=source, field="cluster.gpus")
    world = job_world(cluster, n_gpus)
    if t.global_batch is not None:
        scn, cfg = _with_global_batch(scn, cfg, world, source)
        t = scn.training
    accum = None
    try:
        if extrapolate_steps and not scn.simulation.full_replay:
            accum = plan_accum(cfg, t, lambda c: make_trace(scn, model, c, world, source),
                               world.world_size)
        else:
            check_whole(cfg)
    except ConfigError as exc:        # a step too long to build whole
        raise exc.located(source) from None
    trace = plan_trace(accum) if accum else make_trace(scn, model, cfg, world, source)
    machine = MachineConfig(fidelity=scn.simulation.fidelity)
    job = job_config(scn)
    try:
        compute = ComputeModel(gpu, attention=t.attention_impl, strategy=cfg.name,
                               fp8_attention=t.fp8_attention, model_family=model.family)
    except ConfigError as exc:
        raise exc.located(source) from None
    built = accum.traces if accum else (trace,)
    return Setup(scn, cluster, CollectiveModel(cluster, k, scn.nccl), compute, trace, machine,
                 job, gpu.memory_capacity_bytes, compute.peak_flops("matmul", t.precision), accum,
                 tuple(x for x in built if x.validated))


def run_setup(setup: Setup, placement: Placement | None = None) -> RunResult:
    """Replay one iteration and compute its metrics (a step of many identical micro-steps:
    a few replays extrapolated, :mod:`simulator.accum`), its ranks on the GPUs of
    ``placement`` (the cluster's first GPUs when None); a step fed by a DataLoader that is
    slower than it (``training.dense_mask_workers``) waits for it (:func:`fed_by_loader`)."""
    return fed_by_loader(_stepped(setup, placement))


def fed_by_loader(result: RunResult) -> RunResult:
    """``result``'s step fed by the scenario's training DataLoader (``training.
    dense_mask_workers``; :mod:`simulator.loader`): its workers prefetch the next batch while
    the step runs (the iterator lives through the run), so a step takes max(step, loader);
    a loader that outlasts the step adds its excess as a wait with every GPU idle."""
    t = result.setup.scenario.training
    if t.dense_mask_workers is None:
        return result
    meta = result.setup.trace.meta       # a data-parallel rank's samples: its micro-steps'
    if not meta.get("micro_batch"):
        raise ConfigError("the step's trace does not say how many samples a rank takes "
                          "(no micro_batch): no loader to feed it", field="training."
                          "dense_mask_workers")
    per_rank = int(meta["micro_batch"]) * int(meta.get("grad_accum") or 1)
    loader_s = loader_batch_s(per_rank, t.seq_len, t.dense_mask_workers)
    wait_s = max(loader_s - result.metrics.iteration_time_s, 0.0)
    return replace(result, metrics=result.metrics.waiting(wait_s), loader_s=loader_s,
                   loader_wait_s=wait_s)


def _stepped(setup: Setup, placement: Placement | None) -> RunResult:
    plan = setup.accum
    if plan is None:
        return _replayed(setup, setup.trace, placement)
    ran: dict[int, Metrics] = {}             # micro-steps -> its replay's metrics
    busy: dict[int, dict] = {}               # micro-steps -> its classes' busy time
    events = 0                               # of every replay, the ones let go included
    while plan is not None:
        last = None                          # the timeline of the longest replay only
        for k, trace in zip(plan.replayed, plan.traces):
            if k not in ran:
                last = _replayed(setup, trace, placement)
                ran[k], busy[k] = last.metrics, class_busy(last.timeline)
                events += last.metrics.events
        done = extrapolate(plan, [ran[k] for k in plan.replayed], setup.peak_flops, events,
                           [busy[k] for k in plan.replayed])
        if done is not None:
            return RunResult(setup, last.timeline, *done)
        plan = deepened(plan)          # a pipeline not yet periodic: longer replays
    last = None                        # its timeline freed before the full replay
    # not periodic: every micro-step
    return _replayed(setup, full_trace(setup.accum), placement)


def with_trace(setup: Setup, fn: Callable[[Trace], Trace]) -> Setup:
    """``setup`` with ``fn(setup.trace)`` as its trace (for an extrapolated step, ``fn`` of
    each replayed trace and of the whole step's)."""
    if setup.accum is None:
        return replace(setup, trace=fn(setup.trace))
    plan = mapped(setup.accum, fn)
    return replace(setup, trace=plan_trace(plan), accum=plan)


def _replayed(setup: Setup, trace: Trace, placement: Placement | None = None) -> RunResult:
    try:
        tl = replay(trace, setup.collectives, setup.compute, setup.job, setup.machine,
                    setup.capacity_bytes, placement=placement,
                    checked=any(x is trace for x in setup.checked))
    except ConfigError as exc:   # an nccl: knob the cluster cannot honour, met at its first op
        raise setup.scenario.located(exc) from None
    return RunResult(setup, tl, compute_metrics(tl, trace.world_size, setup.peak_flops))

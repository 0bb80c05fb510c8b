"""The parallel plan: a named device mesh [pp, dp_replicate, dp_shard, cp, tp] (+ ep).

One small typed object that every generator, the memory model, the placement and
``clustersim plan`` read. Framework spellings (Megatron, torchtitan, DeepSpeed) are thin
translators into it (:mod:`simulator.strategies.frameworks`).

Ranks are numbered in mixed radix over ``order`` (outermost first, innermost last and
fastest-varying): with the default order ``(pp, dp_replicate, dp_shard, cp, tp)`` the
``tp`` ranks of one group are consecutive (inside a server, when ``tp`` divides the GPUs
per node) and the pipeline stages are the slowest-varying coordinate, as Megatron-LM's
``RankGenerator`` orders them with ``order="tp-cp-ep-dp-pp"`` (innermost first there).

The routed experts of an MoE model have a mesh of their own over the same ranks, as
Megatron-Core lays it out (``parallel_state.initialize_model_parallel``: an expert
``RankGenerator`` of order ``tp-ep-dp-pp``): the ``tp x cp x dp`` ranks of one pipeline
stage, ``tp`` fastest and then the data-parallel and context-parallel coordinates in the
plan's order, are cut into expert-tensor groups of ``etp`` consecutive ranks (``etp``
defaults to ``tp``, as Megatron-Core's ``expert_tensor_parallel_size`` does), ``ep`` of
those strided by ``etp`` make an expert-parallel group, and the
ranks that hold the same expert shard make its expert-data-parallel group of ``edp =
tp cp dp / (etp ep)`` (:meth:`ParallelPlan.groups` of ``ep``, ``etp``, ``edp``). With
``etp = tp`` an EP group is ``ep`` consecutive ranks of the ``dp x cp`` ranks of one
(pp, tp) coordinate; with ``etp = 1`` it takes TP ranks too (Megatron-Core's "MoE parallel
folding": TP2 x DP16 for attention, EP32 for the experts of the same 32 ranks). ``ep`` and
``etp`` are not mesh dimensions and do not enter :attr:`ParallelPlan.size`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Mapping

import numpy as np

from simulator.errors import ConfigError

from ..fsdp_copies import MECHANISMS as COPY_MECHANISMS
from .schedules import stage_location

DIMS = ("pp", "dp_replicate", "dp_shard", "cp", "tp")
SCHEDULE_NAMES = ("gpipe", "1f1b", "interleaved_1f1b", "zb_h1", "zbv")
DP_MODES = ("ddp", "zero1", "zero2", "fsdp")
CP_MODES = ("ring", "allgather", "a2a")
# composite group names: the mesh dimensions they span
EXPERT_DIMS = ("ep", "etp", "edp")      # the expert mesh (module doc)
ALIASES = {"dp": ("dp_replicate", "dp_shard"), "dp_cp": ("dp_replicate", "dp_shard", "cp"),
           "shard_cp": ("dp_shard", "cp")}


@dataclass(frozen=True)
class ParallelPlan:
    """How a job's ranks are split; see the module doc for the rank numbering.

    ``first_stage_layers`` / ``last_stage_layers``: blocks on the first and last pipeline
    stage when they differ from the even split (Megatron's
    ``decoder_first_pipeline_num_layers`` / ``decoder_last_pipeline_num_layers``); 0 = even.
    ``embedding_in_split`` / ``loss_in_split``: the embedding / the loss count as one layer
    in the split (Megatron's ``account_for_embedding_in_pipeline_split``,
    ``account_for_loss_in_pipeline_split``; Llama 3 405B's balancing).
    ``etp``: expert tensor parallelism, ranks that split each routed expert; 0 = ``tp``
    (Megatron-Core's default), see :attr:`expert_tp`.
    ``stage_blocks``: the blocks of each of the ``pp x vp`` model stages, given outright
    (torchtitan's ``pipeline_parallel_split_points`` or its weighted split, a custom layout);
    empty: the rules above.
    ``tp_async_backward``: a backward TP collective after an input-gradient GEMM is waited
    for after the weight-gradient GEMM that follows (Megatron's asynchronous TP all-reduce,
    the default since Megatron-LM 2022); false: by the next kernel (Megatron-LM of 2021,
    whose all-reduces were synchronous, as SC21 ran it; torchtitan's DTensor TP, whose
    reduce-scatter autograd issues after both gradient GEMMs of a Linear).
    ``bucket_params``: DDP / distributed-optimizer gradient bucket size in parameters
    (Megatron's ``DistributedDataParallelConfig.bucket_size``: max(40M, 1M x dp) when
    overlapping the gradient reduction).
    ``lockstep``: the ``interleaved_1f1b`` schedule as torch.distributed.pipelining runs it
    (torchtitan's ``Interleaved1F1B``): a table of time steps every rank walks in step,
    each step's sends and receives waited for before the next
    (:func:`.schedules.lockstep_steps`); false: each pass waits only for the data it needs
    (Megatron-LM).
    ``fsdp_copies``: the copy kernels an ``fsdp`` plan runs around its collectives, by the
    framework that runs it (:mod:`simulator.strategies.fsdp_copies`): ``fsdp2`` (per-
    parameter tensors gathered into and reduced from flat buffers), ``deepspeed``
    (ZeRO-3's per-parameter cat after a coalesced gather, its bucket copy, interleave and
    pre-divide before a reduce-scatter), ``none`` (sharded data parallelism on contiguous
    buffers whose parameters and gradients are views of what is gathered and
    reduce-scattered: Megatron-FSDP).
    ``reshard_after_forward``: an ``fsdp`` plan without a pipeline frees each block's
    gathered parameters after its forward and gathers them again for its backward (FSDP2's
    default); false keeps them from the forward to the backward, one all-gather per block
    and micro-batch (FSDP2's ``reshard_after_forward=False``, torchtitan's
    ``fsdp_reshard_after_forward: never``). Under a pipeline an ``fsdp`` plan keeps them
    anyway (see :mod:`.dp`), so the field is FSDP's without a pipeline only.
    ``async_tp``: the TP overlap is PyTorch's async TP (symmetric memory, torchtitan's
    ``enable_async_tensor_parallel``) rather than Transformer Engine's userbuffers: its
    fused matmul + reduce-scatter runs in backward too and ends with a reduction kernel
    (:func:`.tp.async_tp_layer`); needs ``tp_overlap``.
    ``moe_a2a_overlap``: Megatron-Core's combined 1F1B, each forward issued with another
    micro-batch's backward, MoE blocks node by node, so that one's EP all-to-alls run
    under the other's kernels (:mod:`.a2a_overlap`).
    """

    pp: int = 1
    dp_replicate: int = 1
    dp_shard: int = 1
    cp: int = 1
    tp: int = 1
    ep: int = 1
    etp: int = 0
    vp: int = 1
    sequence_parallel: bool = False
    schedule: str = "1f1b"
    dp_mode: str = "fsdp"
    tp_overlap: bool = False
    async_tp: bool = False
    tp_async_backward: bool = True
    cp_mode: str = "ring"
    order: tuple[str, ...] = DIMS
    overlap_grad_reduce: bool = True
    overlap_param_gather: bool = False
    bucket_params: int = 40_000_000
    first_stage_layers: int = 0
    last_stage_layers: int = 0
    embedding_in_split: bool = False
    loss_in_split: bool = False
    stage_blocks: tuple[int, ...] = ()
    lockstep: bool = False
    moe_a2a_overlap: bool = False
    fsdp_copies: str = "fsdp2"
    reshard_after_forward: bool = True

    def __post_init__(self):
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type in ("int",) and (isinstance(value, bool) or not isinstance(value, int)):
                raise ConfigError(f"must be an integer, got {value!r}", field=f"plan.{f.name}")
        for name in (*DIMS, "ep", "vp", "bucket_params"):
            if getattr(self, name) < 1:
                raise ConfigError(f"must be >= 1, got {getattr(self, name)}",
                                  field=f"plan.{name}")
        for name in ("etp", "first_stage_layers", "last_stage_layers"):
            if getattr(self, name) < 0:
                raise ConfigError(f"must be >= 0, got {getattr(self, name)}",
                                  field=f"plan.{name}")
        for name, valid in (("schedule", SCHEDULE_NAMES), ("dp_mode", DP_MODES),
                            ("cp_mode", CP_MODES), ("fsdp_copies", COPY_MECHANISMS)):
            if getattr(self, name) not in valid:
                raise ConfigError(f"unknown {name} {getattr(self, name)!r}; valid: "
                                  f"{', '.join(valid)}", field=f"plan.{name}")
        for name in ("lockstep", "reshard_after_forward", "async_tp"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"must be true or false, got {getattr(self, name)!r}",
                                  field=f"plan.{name}")
        if self.async_tp and not self.tp_overlap:
            raise ConfigError("PyTorch's async TP is a TP communication overlap: needs "
                              "tp_overlap", field="plan.async_tp")
        if not self.reshard_after_forward and (self.dp_mode != "fsdp" or self.pp > 1):
            raise ConfigError("keeping parameters gathered from forward to backward is "
                              "FSDP's without a pipeline (dp_mode fsdp, pp 1), got dp_mode "
                              f"{self.dp_mode!r}, pp {self.pp}",
                              field="plan.reshard_after_forward")
        if self.lockstep and self.schedule != "interleaved_1f1b":
            raise ConfigError(f"lockstep time steps are torch's interleaved 1F1B table: needs "
                              f"schedule interleaved_1f1b, got {self.schedule!r}",
                              field="plan.lockstep")
        if isinstance(self.order, list):
            object.__setattr__(self, "order", tuple(self.order))
        if not isinstance(self.order, tuple) or sorted(map(str, self.order)) != sorted(DIMS):
            raise ConfigError(f"must name each of {', '.join(DIMS)} once, got "
                              f"{list(self.order)}", field="plan.order")

    # ------------------------------------------------------------------ mesh
    @property
    def size(self) -> int:
        """Ranks in the mesh: pp * dp_replicate * dp_shard * cp * tp."""
        n = 1
        for d in DIMS:
            n *= getattr(self, d)
        return n

    @property
    def dp(self) -> int:
        """Data-parallel ranks of one (pp, cp, tp) coordinate: dp_replicate * dp_shard."""
        return self.dp_replicate * self.dp_shard

    @property
    def expert_tp(self) -> int:
        """Expert tensor parallelism: ranks that split each routed expert's GEMMs, ``etp``
        or, where it is 0, ``tp``."""
        return self.etp or self.tp

    @property
    def edp(self) -> int:
        """Expert data parallelism: the ranks holding the same expert shard, ``tp x cp x dp
        / (etp x ep)`` of a pipeline stage."""
        return self.tp * self.cp * self.dp // (self.expert_tp * self.ep)

    @property
    def experts_apart(self) -> bool:
        """Whether the routed experts' gradients reduce over other ranks than the dense
        parameters' (expert parallelism, or experts split otherwise than by ``tp``): then
        they have their own buckets on the ``edp`` groups, as Megatron keeps the expert
        parameters in their own buffers."""
        return self.ep > 1 or self.expert_tp != self.tp

    def _strides(self) -> dict[str, int]:
        strides, s = {}, 1
        for d in reversed(self.order):
            strides[d] = s
            s *= getattr(self, d)
        return strides

    def coords(self, rank: int) -> dict[str, int]:
        """The mesh coordinates of global ``rank``."""
        if not 0 <= rank < self.size:
            raise ConfigError(f"rank {rank} outside the mesh of {self.size}", field="rank")
        st = self._strides()
        return {d: (rank // st[d]) % getattr(self, d) for d in DIMS}

    def rank(self, **coords: int) -> int:
        """The global rank at ``coords`` (missing dimensions: 0)."""
        st = self._strides()
        unknown = set(coords) - set(DIMS)
        if unknown:
            raise ConfigError(f"unknown mesh dimension(s) {sorted(unknown)}", field="coords")
        return sum(coords.get(d, 0) * st[d] for d in DIMS)

    def groups(self, dim: str | tuple[str, ...]) -> list[tuple[int, ...]]:
        """Every group of ranks that differ only along ``dim`` (a mesh dimension, a tuple
        of them, an alias of :data:`ALIASES`, or a dimension of the expert mesh: ``ep``,
        ``etp``, ``edp``), each in rank order, groups sorted by their first rank."""
        if dim in EXPERT_DIMS:
            return self._expert_groups(dim)
        dims = ALIASES.get(dim, (dim,) if isinstance(dim, str) else tuple(dim))
        if not set(dims) <= set(DIMS):
            raise ConfigError(f"unknown mesh dimension {dim!r}", field="dim")
        grid = self._grid()
        inner = [self.order.index(d) for d in dims]
        outer = [i for i in range(len(self.order)) if i not in inner]
        n = 1
        for d in dims:
            n *= getattr(self, d)
        rows = grid.transpose(outer + inner).reshape(-1, n)
        return sorted(tuple(sorted(row)) for row in rows.tolist())

    def _grid(self) -> np.ndarray:
        """Global ranks laid out on the mesh, axes in ``order``."""
        return np.arange(self.size).reshape([getattr(self, d) for d in self.order])

    def _expert_groups(self, dim: str) -> list[tuple[int, ...]]:
        """The groups of ``dim`` (``ep``, ``etp`` or ``edp``) on the expert mesh (see the
        module doc): each stage's ranks, ``tp`` fastest, as ``[edp, ep, etp]``."""
        inner = [self.order.index(d) for d in self.order if d not in ("pp", "tp")]
        axes = [self.order.index("pp"), *inner, self.order.index("tp")]
        mesh = self._grid().transpose(axes).reshape(self.pp, self.edp, self.ep,
                                                    self.expert_tp)
        last = {"etp": (0, 1, 2, 3), "ep": (0, 1, 3, 2), "edp": (0, 2, 3, 1)}[dim]
        rows = mesh.transpose(last).reshape(-1, mesh.shape[last[-1]])
        return sorted(tuple(sorted(row)) for row in rows.tolist())

    def stage_ranks(self, stage: int) -> tuple[int, ...]:
        """Every rank with pipeline coordinate ``stage``, in rank order."""
        ranks = np.take(self._grid(), stage, axis=self.order.index("pp"))
        return tuple(sorted(ranks.ravel().tolist()))

    # ------------------------------------------------------------------ checks
    def check(self, model, world_size: int, *, seq_len: int, layers_field: str = "model.layers",
              names: Mapping[str, str] | None = None) -> None:
        """ConfigError naming the field for a plan the model or the job cannot run.

        ``names`` maps a plan attribute (``tp``, ``pp``, ``vp``, ``cp``, ``ep``,
        ``sequence_parallel``, ``first_stage_layers``, ``size``...) to the config field the
        user wrote it as (default ``strategy.<attribute>``)."""
        def field(attr: str) -> str:
            return (names or {}).get(attr, f"strategy.{attr}")

        if self.size != world_size:
            raise ConfigError(f"the mesh {self.describe()} has {self.size} ranks, the job "
                              f"has {world_size} GPUs", field=field("size"))
        if not getattr(model, "is_transformer", False):
            if self.size != self.dp:
                raise ConfigError(f"{model.name} is not a transformer: only data "
                                  f"parallelism applies", field=field("tp"))
            return
        if self.cp > 1 and getattr(model, "layer_pattern", ""):
            raise ConfigError(f"context parallelism of {model.name}, a hybrid "
                              f"(layer_pattern) model, is not modelled", field=field("cp"))
        self._check_tp(model, seq_len, field)
        self._check_pp(model, layers_field, field)
        if self.cp > 1 and seq_len % (2 * self.cp):
            raise ConfigError(f"context parallelism {self.cp} splits the sequence into "
                              f"2 x {self.cp} chunks (causal load balancing); seq_len "
                              f"{seq_len} is not divisible by {2 * self.cp}", field=field("cp"))
        if self.cp > 1 and self.cp_mode == "a2a":
            for attr in ("heads", "kv_heads"):
                local = getattr(model, attr) // self.tp
                if local % self.cp:
                    raise ConfigError(f"a2a context parallelism splits each rank's {local} "
                                      f"{attr} ({model.name}'s {getattr(model, attr)} / tp "
                                      f"{self.tp}) over cp {self.cp}: not divisible",
                                      field=field("cp_mode"))
        self._check_ep(model, field)

    def _check_tp(self, model, seq_len: int, field) -> None:
        mamba = getattr(model, "mamba", None)
        sizes = (("mamba heads", mamba.heads), ("mamba groups", mamba.groups)) if mamba else ()
        for attr, n in (("heads", model.heads), ("kv_heads", model.kv_heads),
                        ("ffn_hidden", model.ffn_hidden), *sizes):
            if n % self.tp:
                raise ConfigError(f"tensor parallelism {self.tp} does not divide "
                                  f"{model.name}'s {n} {attr}", field=field("tp"))
        if self.sequence_parallel and self.tp > 1 and (seq_len // self.cp) % self.tp:
            raise ConfigError(f"sequence parallelism splits the {seq_len // self.cp} tokens "
                              f"of a rank's sequence over tp {self.tp}: not divisible",
                              field=field("sequence_parallel"))

    def _check_pp(self, model, layers_field: str, field) -> None:
        if self.pp > model.layers:
            raise ConfigError(f"pipeline parallelism {self.pp} exceeds {model.name}'s "
                              f"{model.layers} layers ({layers_field})", field=field("pp"))
        self.model_stage_blocks(model.layers, field)

    def _check_ep(self, model, field) -> None:
        experts = getattr(model, "experts", 0) or getattr(model, "num_experts", 0)
        etp, stage = self.expert_tp, self.tp * self.cp * self.dp
        if not experts:
            for attr, on in (("ep", self.ep > 1), ("etp", etp != self.tp)):
                if on:
                    raise ConfigError(f"expert {'tensor ' if attr == 'etp' else ''}"
                                      f"parallelism {getattr(self, attr)} needs a "
                                      f"mixture-of-experts model; {model.name} has no "
                                      f"experts", field=field(attr))
            return
        if self.tp > 1 and not self.sequence_parallel:
            raise ConfigError(f"a mixture of experts under tensor parallelism {self.tp} "
                              f"needs sequence parallelism (Megatron-Core's MoE layer "
                              f"refuses to train without it)", field=field("sequence_parallel"))
        if experts % self.ep:
            raise ConfigError(f"expert parallelism {self.ep} does not divide {model.name}'s "
                              f"{experts} experts", field=field("ep"))
        if etp > 1 and model.moe_ffn_hidden % etp:
            raise ConfigError(f"expert tensor parallelism {etp} does not divide the "
                              f"experts' {model.moe_ffn_hidden} hidden width",
                              field=field("etp"))
        if stage % (etp * self.ep):
            raise ConfigError(f"expert tensor x expert parallelism {etp} x {self.ep} = "
                              f"{etp * self.ep} does not divide the tp x cp x dp = {self.tp} x "
                              f"{self.cp} x {self.dp} = {stage} ranks of a pipeline stage it "
                              f"is carved from", field=field("etp" if stage % etp else "ep"))
        if self.experts_apart and self.dp_mode == "fsdp" and self.dp_replicate > 1:
            raise ConfigError(f"expert parallelism under HSDP (dp_replicate "
                              f"{self.dp_replicate}): the experts' own sharding and "
                              f"replication are not modelled; use dp_replicate 1",
                              field=field("ep"))

    # ------------------------------------------------------------------ layers
    def model_stage_blocks(self, layers: int, field=None) -> list[int]:
        """Blocks of each of the ``pp x vp`` model stages (0 holds the embedding), as
        Megatron-LM splits them (``get_num_layers_to_build``): evenly; or with the first /
        last pipeline rank's blocks given (``first_stage_layers``, ``last_stage_layers``,
        split evenly over that rank's chunks, the rest evenly over the other ranks); or
        with the embedding and / or the loss counted as one layer each
        (``embedding_in_split``, ``loss_in_split``). ConfigError naming the field when
        they do not divide."""
        field = field or (lambda attr: f"strategy.{attr}")
        n, vp = self.pp * self.vp, self.vp
        if vp > 1 and self.schedule not in ("interleaved_1f1b", "zbv"):
            raise ConfigError(f"{vp} virtual stages need schedule interleaved_1f1b (or "
                              f"zbv), got {self.schedule}", field=field("vp"))
        if self.stage_blocks:
            return self._given_blocks(layers, field)
        if self.first_stage_layers or self.last_stage_layers:
            return self._uneven_blocks(layers, field)
        total = layers + self.embedding_in_split + self.loss_in_split
        if total % n:
            what = (f"pp x vp = {self.pp} x {vp}" if vp > 1 else f"pp {self.pp} stages")
            raise ConfigError(f"{layers} layers" + (" (+ embedding/loss counted as layers)"
                              if total != layers else "") + f" do not split evenly over "
                              f"{what}" + ("" if vp > 1 else " (set first/last stage "
                              "layers for an uneven split)"),
                              field=field("vp" if vp > 1 else "pp"))
        out = [total // n] * n
        out[0] -= self.embedding_in_split
        out[-1] -= self.loss_in_split
        if min(out) < 0:
            raise ConfigError(f"{layers} layers leave a stage without a block",
                              field=field("pp"))
        return out

    def stage_layers(self, layers: int) -> list[int]:
        """Blocks on each pipeline rank (its chunks together)."""
        out = [0] * self.pp
        for v, n in enumerate(self.model_stage_blocks(layers)):
            out[stage_location(self.schedule, self.pp, self.vp, v).rank] += n
        return out

    def _given_blocks(self, layers: int, field) -> list[int]:
        """``stage_blocks`` checked against the model: one entry per model stage, none
        negative, ``layers`` in all, a block or more on every stage between the ends."""
        given, n = list(self.stage_blocks), self.pp * self.vp
        if len(given) != n or sum(given) != layers or min(given) < 0 or \
                any(b == 0 for b in given[1:-1]):
            raise ConfigError(f"the stages' blocks {given} ({sum(given)} in all) are not "
                              f"{layers} layers over pp x vp = {self.pp} x {self.vp} model "
                              f"stages (each stage but the ends needs a block)",
                              field=field("stage_blocks"))
        return given

    def _uneven_blocks(self, layers: int, field) -> list[int]:
        first, last, vp = self.first_stage_layers, self.last_stage_layers, self.vp
        if self.pp < 2 or self.embedding_in_split or self.loss_in_split:
            raise ConfigError("an uneven first/last stage needs pp >= 2 and cannot be "
                              "combined with the embedding or loss counted as a layer",
                              field=field("first_stage_layers"))
        middle = self.pp - (first > 0) - (last > 0)
        rest = layers - first - last
        if first % vp or last % vp or rest < 0 or (middle and rest % (middle * vp)) or \
                (not middle and rest):
            raise ConfigError(f"{layers} layers minus first {first} and last {last} do not "
                              f"split evenly over the other {middle} stages x {vp} chunks",
                              field=field("first_stage_layers"))
        per_rank = [rest // (middle * vp) if middle else 0] * self.pp
        if first:
            per_rank[0] = first // vp
        if last:
            per_rank[-1] = last // vp
        return [per_rank[stage_location(self.schedule, self.pp, vp, v).rank]
                for v in range(self.pp * vp)]

    def describe(self) -> str:
        """``pp 4 x dp_replicate 1 x dp_shard 8 x cp 1 x tp 8`` (+ ep, vp when set, etp
        when it is not tp)."""
        text = " x ".join(f"{d} {getattr(self, d)}" for d in self.order)
        parts = (("ep", self.ep, self.ep > 1),
                 ("etp", self.expert_tp, self.expert_tp != self.tp), ("vp", self.vp, self.vp > 1))
        extra = [f"{name} {n}" for name, n, on in parts if on]
        return text + (f" ({', '.join(extra)})" if extra else "")

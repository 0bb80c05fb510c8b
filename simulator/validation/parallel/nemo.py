"""NVIDIA's published Megatron runs: NeMo 24.07's performance summary on DGX H100
(``nemo_h100_3d.csv``, kind ``nemo``) and Megatron-Bridge's performance tables of releases
25.09 to 26.08, on DGX H100 (``megatron_bridge_h100.csv``, kind ``bridge``) and on Blackwell
(``megatron_bridge_blackwell.csv``, kind ``blackwell``: B200, GB200, B300, GB300; its
``variant`` primary rows, one per table row, read in the H100 table's column names by
:func:`table_rows`). Reported, not gated; nothing is fitted on them (``cases.yaml``).

Each row whose model ``cases.yaml`` names (``nemo_models``) runs as a ``megatron`` scenario
on the topology of its GPU (``cases.yaml`` ``topologies``: ``dgx-h100-superpod``,
``dgx-b200-superpod``, ``gb200-nvl72``; a GPU not in the catalog, B300 and GB300, is listed
as not simulated) with the row's TP, PP, CP, VP, EP, global and micro batch, set up as
NeMo's launcher configurations run (sequence parallelism when TP > 1, the distributed
optimizer with its gradient reduce-scatter and parameter all-gather overlapped, fused/flash
attention, no recompute; per model ``cases.yaml``'s ``nemo_strategy``: TP communication
overlap, recompute; ``nemo_layouts``: the recipe's ``pipeline_model_parallel_layout`` for
the row's ``pp x vp`` model stages). A Megatron-Bridge row with ``FSDP`` above 0 shards
over that many ranks (Megatron-FSDP, ``use_megatron_fsdp``: ZeRO-3 traffic on contiguous
buffers, without FSDP2's copy kernels). The precision column maps to the scenario's precision and FP8 recipe by
``cases.yaml``'s ``nemo_precision`` (NeMo 24.07's FP8 is Transformer Engine's delayed
scaling, ``fp8: hybrid``; Megatron-Bridge's FP8 is current scaling, FP8-CS; its Blackwell
MXFP8 is Transformer Engine's MXFP8 block scaling): the blocks' Linear GEMMs in FP8 with
their cast kernels, everything else bf16. A fine-tuning row (``task`` SFT, LoRA) runs with
its task's setup in ``cases.yaml``'s ``bridge_tasks`` (LoRA: the adapters and frozen FP8
base of its performance config), else is listed with the reason in ``nemo_not_modelled``.
Compared: tokens
per second per GPU. A run the simulator finds out of memory is not compared (the measured
run fit; its time would be the memory model's, not the step's): its row says so.
"""

from __future__ import annotations

import functools
import math
import re
from pathlib import Path

from simulator.errors import ConfigError
from simulator.hardware import gpu_spec
from simulator.validation.parallel.cases import CasesFile, nemo_id, read_rows
from simulator.validation.parallel.iteration import simulate

NEMO_COLUMNS = ["model", "gpus", "TP", "PP", "CP", "VP", "GBS", "MBS", "seq_len",
                "precision", "tokens_per_s_per_gpu", "source"]
BRIDGE_COLUMNS = [*NEMO_COLUMNS, "EP", "FSDP", "release"]
# the Blackwell table's columns -> the H100 tables' names (the file itself is unedited)
BLACKWELL_NAMES = {"model_as_printed": "model", "num_gpus": "gpus", "tp": "TP", "pp": "PP",
                   "cp": "CP", "vp": "VP", "ep": "EP", "fsdp": "FSDP",
                   "global_batch": "GBS", "micro_batch": "MBS"}
BLACKWELL_COLUMNS = [*BLACKWELL_NAMES, "seq_len", "precision", "tokens_per_s_per_gpu",
                     "source", "release", "gpu_type", "task", "variant"]
KINDS = ("nemo", "bridge", "blackwell")
H100_KINDS = ("nemo", "bridge")


def table_rows(root: Path, spec: CasesFile, kind: str) -> list[dict]:
    """The rows of ``kind``'s table in the H100 tables' column names; the Blackwell table's
    ``variant`` primary rows (a ``paren`` row is the second measurement a table cell gave in
    parentheses), its ``model_as_printed`` as the model."""
    if kind == "nemo":
        return read_rows(root, spec.files.nemo, NEMO_COLUMNS).to_dict("records")
    if kind == "bridge":
        return read_rows(root, spec.files.bridge, BRIDGE_COLUMNS).to_dict("records")
    df = read_rows(root, spec.files.bridge_blackwell, BLACKWELL_COLUMNS)
    df = df[df["variant"] == "primary"].drop(columns="model")
    return df.rename(columns=BLACKWELL_NAMES).to_dict("records")


def gpu_of(row) -> str:
    """The row's GPU (``gpu_type``; NeMo 24.07's table has only H100)."""
    return str(row.get("gpu_type") or "H100")


@functools.cache
def _node(topology: str):
    from simulator.topology import load_topology, resolve_topology
    return load_topology(resolve_topology(topology), nodes=1)


def gpus_per_node(topology: str) -> int:
    """GPUs in one node of a shipped topology (8 in a DGX, 72 in an NVL72 rack)."""
    from simulator.topology.build import graph_gpus
    return graph_gpus(_node(topology))


def memory_gib(topology: str) -> float:
    """Memory of one GPU of a shipped topology, GiB (the OOM verdict's capacity)."""
    return gpu_spec(_node(topology).graph["gpu"]).memory_capacity_bytes / 2 ** 30


def _degree(row, col: str) -> int:
    value = str(row.get(col, "")).strip()
    return int(value) if value.isdigit() else 1


def _precision(spec: CasesFile, kind: str, row) -> tuple[str, str | None]:
    """(training.precision, fp8_recipe) of a row's precision column."""
    table = spec.nemo_precision.get(kind, {})
    label = str(row["precision"]).strip()
    if label not in table:
        raise ConfigError(f"precision {label!r} has no mapping in cases.yaml "
                          f"(nemo_precision.{kind})", field="precision")
    precision, _, recipe = table[label].partition(" ")
    return precision, recipe or None


def case_id(kind: str, row) -> str:
    """``parallel/nemo/llama2-70b-64gpu``; a Megatron-Bridge row with its release,
    ``parallel/bridge/26.04/llama3-70b-64gpu``; a Blackwell row with its GPU, precision,
    task (other than pretraining) and global batch (two rows differ only there),
    ``parallel/bridge/gb200/26.04/llama3-70b-64gpu-mxfp8-gbs256``."""
    if kind == "nemo":
        return f"parallel/nemo/{nemo_id(row)}"
    release = release_of(row) or "unknown"
    if kind == "bridge":
        return f"parallel/bridge/{release}/{nemo_id(row)}"
    precision = str(row["precision"]).strip().lower() or "unstated"
    task = "" if row["task"] == "pretrain" else f"-{str(row['task']).lower()}"
    return (f"parallel/bridge/{gpu_of(row).lower()}/{release}/{nemo_id(row)}-{precision}"
            f"{task}-gbs{row['GBS']}")


def release_of(row) -> str:
    """The release number of a Megatron-Bridge row (``26.02.01`` of ``26.02.01 NeMo
    Container``; "" where it has none)."""
    release = re.match(r"[0-9.]+", str(row.get("release", "")).strip())
    return release.group(0) if release else ""


def scenario_of(row, root: Path, spec: CasesFile, name: str, kind: str = "nemo") -> dict:
    """The scenario mapping of one row (its model in ``spec.nemo_models``)."""
    tp, pp, cp, vp, ep = (_degree(row, c) for c in ("TP", "PP", "CP", "VP", "EP"))
    gpus = int(row["gpus"])
    micro = int(row["MBS"])
    model = spec.nemo_models[row["model"]]
    fsdp = _degree(row, "FSDP") > 1
    strategy = {"name": "megatron", "tensor_model_parallel_size": tp,
                "pipeline_model_parallel_size": pp, "context_parallel_size": cp,
                "sequence_parallel": tp > 1, "optimizer": "adam"}
    if fsdp:
        strategy["use_megatron_fsdp"] = True
    else:
        strategy.update(use_distributed_optimizer=True, overlap_grad_reduce=True,
                        overlap_param_gather=True)
    if vp > 1:
        strategy["virtual_pipeline_model_parallel_size"] = vp
    if ep > 1:
        strategy["expert_model_parallel_size"] = ep
    strategy.update(spec.nemo_strategy.get(row["model"], {}))
    layout = spec.nemo_layouts.get(row["model"], {}).get(pp * vp)
    if layout:          # the recipe's pipeline layout for its pp x vp model stages
        strategy["pipeline_model_parallel_layout"] = layout
    label = str(row["precision"]).strip()
    # what the release's precision config sets with its recipe (FP8 parameters), before a
    # model's own presets, which may turn it off
    strategy.update(spec.bridge_precision_strategy.get(kind, {}).get(label, {}))
    for recipe in spec.bridge_recipes:
        if recipe.matches(row["model"], gpu_of(row), label, release_of(row)):
            strategy.update(recipe.strategy)
    precision, recipe = _precision(spec, kind, row)
    training = {"micro_batch": micro, "seq_len": int(row["seq_len"]),
                "grad_accum": micro_batches(row), "precision": precision,
                "flash_attention": True}
    if recipe:
        training["fp8_recipe"] = recipe
    task = spec.bridge_tasks.get(str(row.get("task") or "pretrain"))
    if task is not None:                  # a fine-tuning row's setup (cases.yaml bridge_tasks)
        strategy.update(task.strategy)
        training.update(task.training)
    return {"name": name,
            "model": str(Path(root) / model) if model.endswith(".yaml") else model,
            "training": training, "cluster": _cluster(spec, row, gpus),
            "strategy": strategy}


def _cluster(spec: CasesFile, row, gpus: int) -> dict:
    """The row's GPU's topology, as many nodes as its GPUs fill (the first ``gpus`` of a
    part-filled last node: 64 of an NVL72 rack). A job of several NVLink domains whose Slurm
    nodes are trays (``cases.yaml`` ``slurm_node_gpus``) fills each domain with
    :func:`segment_gpus` GPUs, as Slurm's ``--segment`` places it."""
    topology = spec.topologies[gpu_of(row)]
    per_node = gpus_per_node(topology)
    tray = spec.slurm_node_gpus.get(gpu_of(row))
    if tray and gpus > per_node:
        domain = segment_gpus(gpus, tray, per_node)
        return {"topology": topology, "nodes": gpus // domain,
                "topology_set": {"params.node.gpus": domain}}
    out = {"topology": topology, "nodes": -(-gpus // per_node)}
    if gpus % per_node:
        out["gpus"] = gpus
    return out


def segment_gpus(gpus: int, tray_gpus: int, domain_gpus: int) -> int:
    """GPUs per NVLink domain of a job of ``gpus`` on trays of ``tray_gpus`` in domains of
    ``domain_gpus``, as Megatron-Bridge's launcher sets Slurm's ``--segment`` (trays kept in
    one domain): every tray when they fit in one domain, else the largest divisor of the
    tray count that does (256 GB200 GPUs: 64 trays, segments of 16: 64 GPUs per rack)."""
    trays, most = gpus // tray_gpus, domain_gpus // tray_gpus
    if gpus % tray_gpus:
        raise ConfigError(f"{gpus} GPUs do not fill trays of {tray_gpus}", field="num_gpus")
    if trays <= most:
        return trays * tray_gpus
    return next(s for s in range(most, 0, -1) if trays % s == 0) * tray_gpus


def _not_simulated(spec: CasesFile, row) -> str:
    """Why a row is not simulated, or ""."""
    task = str(row.get("task") or "pretrain")
    if task != "pretrain" and task not in spec.bridge_tasks:
        return spec.nemo_not_modelled.get(task, f"task {task} is not modelled")
    if row["model"] not in spec.nemo_models:
        return spec.nemo_not_modelled.get(row["model"], "no model config in cases.yaml")
    gpu = gpu_of(row)
    if gpu not in spec.topologies:
        try:
            gpu_spec(gpu)
        except ConfigError:
            return f"no {gpu} in the catalog (simulator/data/gpus.yaml)"
        return f"no topology for {gpu} in cases.yaml (topologies)"
    if int(row["gpus"]) > spec.nemo_max_gpus:
        return (f"{row['gpus']} GPUs, more than the suite simulates for a reported row "
                f"(nemo_max_gpus {spec.nemo_max_gpus})")
    micro = micro_batches(row)
    if micro > spec.nemo_max_micro_batches:
        return (f"{micro} micro-batches per pipeline, more than the suite simulates for a "
                f"reported row (nemo_max_micro_batches {spec.nemo_max_micro_batches})")
    return ""


def micro_batches(row) -> int:
    """Micro-batches each pipeline runs per step: GBS / (MBS x data-parallel ranks)."""
    dp = int(row["gpus"]) // (_degree(row, "TP") * _degree(row, "PP") * _degree(row, "CP"))
    return int(row["GBS"]) // (int(row["MBS"]) * dp)


def _simulated(metrics, row) -> float:
    tokens = int(row["GBS"]) * int(row["seq_len"])
    return tokens / metrics.iteration_time_s / int(row["gpus"])


def nemo_rows(root: Path, spec: CasesFile, simulate_fn=None,
              kinds: tuple[str, ...] = KINDS) -> list[dict]:
    """One reported row per row of the tables ``kinds`` (not simulated: no model config,
    more GPUs than ``nemo_max_gpus``, or what the simulator refused)."""
    simulate_fn = simulate_fn or simulate
    return [_row(kind, row, root, spec, simulate_fn)
            for kind in kinds for row in table_rows(root, spec, kind)]


def preset_layout(spec: CasesFile, row) -> tuple[dict, str]:
    """``row`` with its parallel columns as its release's preset ran them where
    ``cases.yaml``'s ``bridge_recipes`` give a ``layout`` for it, and that recipe's note
    ("" and the row itself where none does)."""
    for recipe in spec.bridge_recipes:
        if recipe.layout and recipe.matches(row["model"], gpu_of(row),
                                            str(row["precision"]).strip(), release_of(row)):
            return {**row, **{col: str(v) for col, v in recipe.layout.items()}}, recipe.note
    return row, ""


def _row(kind: str, row, root: Path, spec: CasesFile, simulate_fn) -> dict:
    case = case_id(kind, row)
    row, preset = preset_layout(spec, row)
    measured = float(row["tokens_per_s_per_gpu"])
    mode = " ".join(f"{c}{_degree(row, c)}" for c in ("TP", "PP", "CP", "VP", "EP")
                    if c != "EP" or _degree(row, c) > 1)
    base = {"case": case, "kind": kind, "model": row["model"], "mode": mode,
            "quantity": "tokens/s per GPU", "unit": "tokens/s", "measured": measured,
            "bound": math.nan, "ok": None, "source": row["source"], "gpu": gpu_of(row),
            "simulated": math.nan, "error": math.nan}
    why = _not_simulated(spec, row)
    if why:
        return {**base, "note": f"not simulated: {why}"}
    scenario = scenario_of(row, root, spec, case, kind)
    try:
        m = simulate_fn(scenario, case)
    except ConfigError as exc:
        return {**base, "note": f"not simulated: {exc}"}
    precision, recipe = _precision(spec, kind, row)
    task = spec.bridge_tasks.get(str(row.get("task") or "pretrain"))
    params = " with FP8 parameters" if scenario["strategy"].get("fp8_param_gather") else ""
    ran = f"{row['precision'] or 'unstated precision'} run simulated in {precision}" + (
        f" ({recipe} scaling{params})" if recipe else "") + (f"; {preset}" if preset else "") + (
        f"; {task.note}" if task is not None and task.note else "")
    if m.oom:
        gib = memory_gib(spec.topologies[gpu_of(row)])
        return {**base, "note": f"not compared: simulated out of memory (peak "
                                f"{m.peak_memory_gib:.1f} GiB of {gib:.0f}) where "
                                f"the measured run fit; {ran}"}
    sim = _simulated(m, row)
    return {**base, "simulated": sim, "error": (sim - measured) / measured, "note": ran}


__all__ = ["BLACKWELL_COLUMNS", "BLACKWELL_NAMES", "BRIDGE_COLUMNS", "H100_KINDS", "KINDS",
           "NEMO_COLUMNS", "case_id", "gpu_of", "gpus_per_node", "memory_gib", "micro_batches",
           "nemo_rows", "preset_layout", "release_of", "scenario_of", "segment_gpus", "table_rows"]

"""MLPerf Training v4.1 and v5.0 Llama 2 70B LoRA step times against the simulator
(``validation/finetune/``: ``split.yaml`` declares the rows and the setup; nothing is
fitted). Each validation row runs as a ``megatron`` scenario with the row's GPU, GPU count,
TP, CP, global and micro batch, activation recompute, FP8 attention where the config sets
``FP8_DPA=1`` (v5.0: the table's ``fp8_dpa``; v4.1: ``split.yaml`` ``v41_fp8_dpa``), the
SwiGLU input kept in FP8 where its NeMo config sets ``activation_func_fp8_input_store``
(v5.0: the table's ``fp8_act``, ``FP8_ACT=1`` in NVIDIA's TP1 CP1 configs; v4.1:
``split.yaml`` ``v41_fp8_act``), context parallelism's communication as the config's NeMo
config sets ``cp_comm_type`` (v5.0: the table's ``cp_comm_type``; v4.1: ``split.yaml``
``v41_cp_comm_type``; blank: Megatron-Core's default, ``p2p``), and the
MLPerf reference LoRA setup
of ``split.yaml`` (``mlperf_setup``, with a vendor's ``v50.strategy`` changes: AMD's NeMo
runs fused Adam, not the distributed optimizer); the simulated iteration time is compared
with the row's median step time. ``python -m simulator.validation.finetune [--max-gpus N]
[--rows ID ...]`` writes ``results.csv`` and ``report.md`` beside the split.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path
from statistics import median

import yaml

ROOT = Path(__file__).resolve().parents[2] / "validation" / "finetune"
DATA = "mlperf_v41_steps.csv"
DATA_V50 = "mlperf_v50_lora.csv"       # extract_mlperf_v50.py's output (validation only)
GPUS_PER_NODE = 8
RESULT_COLUMNS = ["round", "vendor", "gpu", "system", "submitter", "gpus", "tp", "cp",
                  "recompute", "global_batch",
                  "grad_accum", "measured_s", "simulated_s", "error", "peak_memory_gib",
                  "oom", "reported_only", "note"]


def load_split(root: Path = ROOT) -> dict:
    return yaml.safe_load((root / "split.yaml").read_text())


def mlperf_rows(root: Path = ROOT, data: str = DATA) -> dict[str, dict]:
    """The LoRA rows of an MLPerf table (``DATA`` v4.1, ``DATA_V50`` v5.0), by system."""
    with open(root / data, newline="") as f:
        return {r["system"]: r for r in csv.DictReader(f) if r["benchmark"] == "llama2_70b_lora"}


def vendor_of(gpu: str) -> str:
    from simulator.validation.envelope import vendor
    return vendor(gpu).upper() if vendor(gpu) == "amd" else "NVIDIA"


def _recompute(row: dict) -> dict:
    """The row's NeMo activation checkpointing (``ACG/ACM/ACL``: ``full/block/21``)."""
    if not row.get("recompute"):
        return {}
    granularity, method, layers = row["recompute"].split("/")
    return {"recompute_granularity": granularity, "recompute_method": method,
            "recompute_num_layers": int(layers)}


def _cluster(row: dict, topologies: dict) -> dict:
    """The row's topology: ``{one: server, many: fabric}`` picks a single server (8 GPUs
    or fewer) or a fabric of as many nodes as the GPUs fill. An H200 runs on the H100
    SuperPOD with its GPU swapped (as the v4.1 rows)."""
    from simulator.validation.parallel.nemo import gpus_per_node
    gpu, gpus = row["gpu_model"], _int(row["gpus"])
    topology = topologies[gpu]
    if isinstance(topology, dict) and gpus <= GPUS_PER_NODE:
        cluster = {"topology": topology["one"]}
        if gpus < GPUS_PER_NODE:
            cluster["gpus"] = gpus
        return cluster
    topology = topology["many"] if isinstance(topology, dict) else topology
    per_node = gpus_per_node(topology)
    cluster = {"topology": topology, "nodes": -(-gpus // per_node)}
    if gpus % per_node:
        cluster["gpus"] = gpus
    if gpu == "H200":
        cluster["topology_set"] = {"params.node.gpu": "H200-SXM"}
    return cluster


def _int(value: str, default: int = 1) -> int:
    return int(float(value)) if value not in ("", None) else default


def scenario_of(row: dict, split: dict) -> dict:
    """The scenario mapping of one MLPerf row under the split's ``mlperf_setup``, with
    context parallelism's communication as the row's config sets it (v5.0: the table's
    ``cp_comm_type``; v4.1: ``split.yaml`` ``v41_cp_comm_type``)."""
    setup = split["mlperf_setup"]
    if row.get("round") != "v5.0" and row["system"] in split.get("v41_cp_comm_type", {}):
        row = {**row, "cp_comm_type": split["v41_cp_comm_type"][row["system"]]}
    gpu = row["gpu_model"]
    gpus, per_node = _int(row["gpus"]), _int(row["gpus_per_node"], GPUS_PER_NODE)
    tp, cp = _int(row["tp"]), _int(row["cp"])
    micro = _int(row["micro_batch"], setup["blank_micro_batch"])
    strategy = {**setup["strategy"], "tensor_model_parallel_size": tp,
                "context_parallel_size": cp, "sequence_parallel": tp > 1}
    if not strategy["sequence_parallel"] or tp == 1:
        strategy.pop("tp_comm_overlap", None)
    if row["cuda_graph"].startswith("yes"):
        strategy["cuda_graph_impl"] = "transformer_engine"
    if cp > 1 and row.get("cp_comm_type"):    # the config's NeMo cp_comm_type (blank: p2p)
        strategy["cp_comm_type"] = row["cp_comm_type"]
    if row.get("round") == "v5.0":
        strategy = {**strategy, **_recompute(row)}
        for key, value in split["v50"]["strategy"].get(vendor_of(gpu), {}).items():
            if value is None:
                strategy.pop(key, None)
            else:
                strategy[key] = value
        return _scenario(row, setup, strategy, micro, _cluster(row, split["v50"]["topologies"]))
    if row["system"] in split.get("v41_fp8_dpa", ()):     # its config sets FP8_DPA=1
        row = {**row, "fp8_dpa": "yes"}
    if row["system"] in split.get("v41_fp8_act", ()):     # FP8_ACTIVATION=True
        row = {**row, "fp8_act": "yes"}
    cluster = {"topology": split["topologies"][gpu], "nodes": -(-gpus // GPUS_PER_NODE)}
    if gpus < GPUS_PER_NODE or per_node != GPUS_PER_NODE:
        cluster["gpus"] = gpus
    if gpu == "H200":
        cluster = {**cluster, "topology": "dgx-h100-superpod",
                   "topology_set": {"params.node.gpu": "H200-SXM"}}
    return _scenario(row, setup, strategy, micro, cluster)


def _scenario(row: dict, setup: dict, strategy: dict, micro: int, cluster: dict) -> dict:
    # rank-to-rank variability as `run` answers (its default, data/variability.yaml): the
    # training suite, where the compute constants were fitted, and the parallel suite run
    # it too (split.yaml's 2026-12-06 amendment)
    # a config that sets FP8_DPA=1 (the v5.0 table's fp8_dpa column) runs attention in FP8;
    # one whose NeMo config sets activation_func_fp8_input_store (FP8_ACT=1: fp8_act) keeps
    # the SwiGLU input for backward in FP8
    fp8_dpa = {"fp8_attention": True} if row.get("fp8_dpa") == "yes" else {}
    if row.get("fp8_act") == "yes":
        fp8_dpa["fp8_activation_input"] = True
    return {"name": f"mlperf-lora-{row['system']}", "model": setup["model"],
            "training": {"micro_batch": micro, "seq_len": setup["seq_len"],
                         "global_batch": _int(row["global_batch"]),
                         "precision": setup["precision"], "fp8_recipe": setup["fp8_recipe"],
                         "flash_attention": True, "finetune": setup["finetune"], **fp8_dpa},
            "cluster": cluster, "strategy": strategy}


def simulate_row(row: dict, split: dict) -> dict:
    """One result row (see :data:`RESULT_COLUMNS`)."""
    metrics = _simulate(scenario_of(row, split))
    measured = float(row["median_step_time_s"])
    sim = metrics.iteration_time_s
    dp = _int(row["gpus"]) // (_int(row["tp"]) * _int(row["cp"]))
    return {"round": row["round"], "vendor": vendor_of(row["gpu_model"]),
            "gpu": row["gpu_model"], "system": row["system"],
            "recompute": row.get("recompute", ""),
            "submitter": row["submitter"], "gpus": row["gpus"], "tp": _int(row["tp"]),
            "cp": _int(row["cp"]), "global_batch": row["global_batch"],
            "grad_accum": _int(row["global_batch"]) // (dp * _int(row["micro_batch"], 1)),
            "measured_s": measured, "simulated_s": round(sim, 4),
            "error": round(sim / measured - 1, 4),
            "peak_memory_gib": round(metrics.peak_memory_gib, 1),
            "oom": bool(metrics.oom), "note": ""}


def bridge_rows() -> list[dict]:
    """Megatron-Bridge 26.06's fine-tuning rows on GB200 (``megatron_bridge_blackwell.csv``
    of validation/parallel), reported, not gated (``split.yaml``: packed sequences of
    unpublished lengths). Set up as validation/parallel sets up a Bridge row
    (:func:`simulator.validation.parallel.nemo.scenario_of`), with what the 26.06 (v0.5.0)
    performance configs of these rows set beyond it
    (scripts/performance/configs/llama/llama3_llm_finetune.py at v0.5.0:
    ``set_llama3_common_peft_configs``): ``disable_parameter_transpose_cache`` (Transformer
    Engine casts each weight to FP8 on every micro-batch); a LoRA row's adapters (dim 16,
    alpha 32, dropout 0 on ``linear_qkv``, FP8 base) come with its scenario from
    validation/parallel's ``cases.yaml`` ``bridge_tasks``, the one setup of these rows; SFT
    is full fine-tuning, a pre-training step."""
    from simulator.errors import ConfigError
    from simulator.validation.parallel.cases import default_root, load
    from simulator.validation.parallel.nemo import scenario_of as bridge_scenario
    from simulator.validation.parallel.nemo import table_rows
    proot = default_root()
    spec = load(proot)
    out = []
    for row in table_rows(proot, spec, "blackwell"):
        if row["task"] not in ("LoRA", "SFT") or row["gpu_type"] != "GB200":
            continue
        name = f"bridge-{row['task'].lower()}-{row['gpus']}gpu-{str(row['precision']).lower()}"
        scn = bridge_scenario(row, proot, spec, name, "blackwell")
        scn["strategy"]["disable_parameter_transpose_cache"] = True
        measured = float(row["tokens_per_s_per_gpu"])
        base = {"round": "bridge", "vendor": "NVIDIA", "gpu": "GB200", "system": name,
                "submitter": f"Megatron-Bridge 26.06 {row['task']}", "gpus": row["gpus"],
                "tp": int(row["TP"]), "cp": int(row["CP"]), "global_batch": row["GBS"],
                "measured_s": round(int(row["GBS"]) * int(row["seq_len"]) / measured /
                                    int(row["gpus"]), 4), "reported_only": True}
        try:
            m = _simulate(scn)
        except ConfigError as exc:
            out.append({**base, "note": f"not simulated: {exc}"})
            continue
        err = m.iteration_time_s / base["measured_s"] - 1
        out.append({**base, "grad_accum": scn["training"]["grad_accum"],
                    "simulated_s": round(m.iteration_time_s, 4), "error": round(err, 4),
                    "peak_memory_gib": round(m.peak_memory_gib, 1), "oom": bool(m.oom),
                    "note": f"reported only: packed sequences; PP{row['PP']} VP{row['VP']}, "
                            f"{row['precision']}"})
        print(f"{name}: {out[-1]['simulated_s']} s vs {base['measured_s']} s ({err:+.1%})",
              flush=True)
    return out


def _simulate(scn: dict):
    from simulator.pipeline import build_setup, run_setup
    from simulator.scenario import scenario_from_dict
    return run_setup(build_setup(scenario_from_dict(scn, scn["name"]), scn["name"])).metrics


def validation_rows(split: dict, root: Path = ROOT) -> list[tuple[dict, str]]:
    """(MLPerf row, GPU) of every validation row, v4.1 then v5.0."""
    out = []
    for systems, rows in ((split["validation"], mlperf_rows(root)),
                          (split["v50"]["validation"], mlperf_rows(root, DATA_V50))):
        out += [(rows[system], gpu) for gpu, names in systems.items() for system in names]
    return out


def run(max_gpus: int, only: list[str] | None = None, root: Path = ROOT) -> list[dict]:
    split = load_split(root)
    out = []
    for row, gpu in validation_rows(split, root):
        system = row["system"]
        if only and system not in only:
            continue
        if _int(row["gpus"]) > max_gpus:
            out.append({"round": row["round"], "vendor": vendor_of(gpu), "gpu": gpu,
                        "system": system, "submitter": row["submitter"], "gpus": row["gpus"],
                        "measured_s": float(row["median_step_time_s"]),
                        "note": f"not simulated: more than --max-gpus {max_gpus}"})
            continue
        out.append(simulate_row(row, split))
        print(f"{row['round']} {system}: {out[-1]['simulated_s']} s vs "
              f"{out[-1]['measured_s']} s ({out[-1]['error']:+.1%})", flush=True)
    return out


def summary(results: list[dict]) -> list[dict]:
    """Per GPU and per vendor, over both rounds and per round: rows, median and worst
    |error| (Megatron-Bridge's reported-only rows are left out)."""
    groups: dict[str, list[float]] = {}
    for r in results:
        if r.get("error") in (None, "") or r.get("reported_only"):
            continue
        for key in (r["gpu"], f"vendor {r['vendor']}"):
            for name in (key, f"{r['round']} {key}"):
                groups.setdefault(name, []).append(float(r["error"]))
    return [{"group": k, "rows": len(v), "median_abs": median(abs(e) for e in v),
             "worst": max(v, key=abs)} for k, v in groups.items()]


def write(results: list[dict], root: Path = ROOT) -> None:
    from simulator.outpaths import atomic_write_text, atomic_writer
    with atomic_writer(root / "results.csv", text=True) as f:    # a link replaced, not followed
        w = csv.DictWriter(f, RESULT_COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(results)
    lines = ["# Llama 2 70B LoRA (MLPerf Training v4.1 and v5.0): simulated vs measured "
             "step time", "",
             "Written by `python -m simulator.validation.finetune`; split and setup in "
             "`split.yaml` (declared before any row ran; nothing fitted; its amendment, "
             "the FP8 base the H200 TP1 runs' memory requires, is recorded there).", "",
             "v5.0 rows (`mlperf_v50_lora.csv`, `extract_mlperf_v50.py`) are published data "
             "outside ../shared: validation only.", "",
             "| round | GPU | system | GPUs | TP | CP | recompute | GA | measured s | "
             "simulated s | error | peak GiB |", "|---" * 12 + "|"]
    for r in results:
        if r.get("error") in (None, ""):
            lines.append(f"| {r['round']} | {r['gpu']} | {r['system']} | {r['gpus']} | | | | | "
                         f"{r['measured_s']} | | {r['note']} | |")
            continue
        lines.append(f"| {r['round']} | {r['gpu']} | {r['system']} | {r['gpus']} | {r['tp']} | "
                     f"{r['cp']} | {r.get('recompute') or ''} | "
                     f"{r['grad_accum']} | {r['measured_s']} | {r['simulated_s']} | "
                     f"{r['error']:+.1%}{' (reported only)' if r.get('reported_only') else ''}"
                     f" | {r['peak_memory_gib']}{' OOM' if r['oom'] else ''} |")
    lines += ["", "Groups: the split's validation rows (Megatron-Bridge's GB200 rows are "
              "reported only).", "",
              "| group | rows | median abs error | worst error |", "|---|---|---|---|"]
    for s in summary(results):
        lines.append(f"| {s['group']} | {s['rows']} | {s['median_abs']:.1%} | "
                     f"{s['worst']:+.1%} |")
    atomic_write_text(root / "report.md", "\n".join(lines) + "\n")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--max-gpus", type=int, default=1024)
    p.add_argument("--rows", nargs="*")
    args = p.parse_args(argv)
    results = run(args.max_gpus, args.rows)
    if not args.rows:
        write([*results, *bridge_rows()])
    for s in summary(results):
        print(f"{s['group']}: {s['rows']} rows, median |error| {s['median_abs']:.1%}, "
              f"worst {s['worst']:+.1%}")


if __name__ == "__main__":
    main()


__all__ = ["scenario_of", "simulate_row", "summary", "run"]

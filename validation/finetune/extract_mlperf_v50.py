"""Llama 2 70B LoRA step times of MLPerf Training v5.0, one row per (submitter, system).

Reads a bare git mirror of mlcommons/training_results_v5.0 (``git show HEAD:path``) and
writes ``mlperf_v50_lora.csv`` with the methods of ``MLPERF_V41.md`` (the v4.1 table's
read-me, copied from ../shared): each run's steady-state step time from its MLLOG result
file by the first method that applies,

* A per-step ``tracked_stats`` ``train_step_time`` events carrying ``metadata.step``
  (median, the first max(10, 2 %) steps skipped);
* B per-block ``tracked_stats.train_step_time`` (mlperf_common, NeMo): median over blocks,
  the first dropped when there is more than one;
* C ``global_batch_size / tracked_stats.throughput`` (samples/s per block; AMD, MangoBoost):
  median over blocks, the first dropped;
* D ``(block_stop - block_start) / steps in the block`` (steps from samples_count / GBS);

then the median over runs. Parallelism (TP, PP, CP, VP, micro and mini batch, FP8, FP8
attention, the SwiGLU input kept in FP8, context parallelism's communication, activation
recompute, CUDA graphs) comes from the submitter's ``config_*.sh`` of
``benchmarks/llama2_70b_lora`` (with the ``config_common.sh`` it sources) whose nodes x
GPUs equal the systems JSON and whose MINIBS x DP equals the logged global batch.

Validation only: these are published numbers outside ../shared; nothing is fitted on them.

    python validation/finetune/extract_mlperf_v50.py /path/to/training_results_v5.0 [out.csv]
"""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from difflib import SequenceMatcher
from pathlib import Path
from statistics import median

BENCH = "llama2_70b_lora"
REPO = "mlcommons/training_results_v5.0"
SEQ_LEN = 8192
COLUMNS = ["benchmark", "round", "submitter", "system", "system_name", "gpu_model",
           "accelerator_model_name", "gpus", "nodes", "gpus_per_node",
           "accelerator_interconnect", "host_networking", "framework", "tp", "pp", "cp", "vp",
           "micro_batch", "global_batch", "grad_accum_logged", "seq_len", "precision",
           "fp8_dpa", "fp8_act", "cp_comm_type", "recompute", "cuda_graph", "n_result_files",
           "n_runs_with_step_time",
           "step_time_method", "median_step_time_s", "min_run_step_time_s",
           "max_run_step_time_s", "tokens_per_s_per_gpu", "xcheck_block_interval_s",
           "ttt_min_mean", "n_ttt_runs", "config_file", "config_match", "source",
           "systems_json"]
GPU_NAMES = ["GB200", "B200", "H200-NVL", "H200", "H100", "MI325X", "MI300X", "MI355X", "MI350X"]


class Mirror:
    """Files of one commit of a bare git repository."""

    def __init__(self, path: str):
        self.path = path
        out = subprocess.run(["git", "-C", path, "ls-tree", "-r", "--name-only", "HEAD"],
                             check=True, capture_output=True, text=True).stdout
        self.files = out.splitlines()

    def read(self, name: str) -> str:
        return subprocess.run(["git", "-C", self.path, "show", f"HEAD:{name}"], check=True,
                              capture_output=True, text=True).stdout


def mllog(text: str) -> list[dict]:
    return [json.loads(line.split(":::MLLOG", 1)[1]) for line in text.splitlines()
            if ":::MLLOG" in line]


def _stats(events: list[dict], key: str) -> list[dict]:
    return [e for e in events if e["key"] == "tracked_stats" and isinstance(e["value"], dict)
            and key in e["value"]]


def _blocks(events: list[dict]) -> list[tuple[dict, dict]]:
    starts = [e for e in events if e["key"] == "block_start"]
    stops = [e for e in events if e["key"] == "block_stop"]
    return list(zip(starts, stops))


def _after_first(values: list[float]) -> list[float]:
    return values[1:] if len(values) > 1 else values


def _block_interval(events: list[dict], gbs: int) -> float | None:
    """Method D: block wall time over the steps in it (samples_count / GBS)."""
    out = []
    for start, stop in _blocks(events):
        n0 = start["metadata"].get("samples_count", 0)
        n1 = stop["metadata"].get("curr_global_step")
        steps = n1 - n0 // gbs if n1 is not None else 0
        if not steps:
            stop_samples = stop["metadata"].get("samples_count", 0)
            steps = (stop_samples - n0) // gbs if stop_samples > n0 else 0
        if steps > 0:
            out.append((stop["time_ms"] - start["time_ms"]) / 1000 / steps)
    return median(_after_first(out)) if out else None


def step_time(events: list[dict], gbs: int) -> tuple[float | None, str]:
    """One run's steady-state step time and the method (A-D) that gave it."""
    per_step = [e for e in _stats(events, "train_step_time") if "step" in e["metadata"]
                and e["metadata"]["step"] > 0]
    blocks = _stats(events, "train_step_time")
    if len(per_step) > 2 * len(_blocks(events)) > 0:            # A: logged every step
        skip = max(10, len(per_step) // 50)
        return median(e["value"]["train_step_time"] for e in per_step[skip:]), "A"
    if blocks:                                                  # B: once per block
        return median(_after_first([e["value"]["train_step_time"] for e in blocks])), "B"
    thr = _stats(events, "throughput")
    if thr:                                                     # C: samples/s per block
        return median(_after_first([gbs / e["value"]["throughput"] for e in thr])), "C"
    d = _block_interval(events, gbs)
    return (d, "D") if d else (None, "")


def shell_vars(text: str, env: dict | None = None) -> dict:
    """``export NAME=value`` assignments of a config script (``${X:-d}`` gives d)."""
    env = dict(env or {})
    for line in text.splitlines():
        line = line.split("#", 1)[0]
        for part in re.split(r"&&|;", line):
            m = re.match(r"\s*(?:export\s+)?([A-Z_][A-Z0-9_]*)=(\S*)", part)
            if not m:
                continue
            value = m.group(2).strip("\"'")
            d = re.fullmatch(r"\$\{[A-Z0-9_]+:-(.*)\}", value)
            env[m.group(1)] = d.group(1) if d else value
    return env


def config_settings(mirror: Mirror, path: str) -> dict:
    text = mirror.read(path)
    env = {}
    for line in text.splitlines():        # a sourced config_common.sh, when it is there
        common = re.match(r"\s*source\s+\$\(dirname \$\{BASH_SOURCE\[0\]\}\)/(\S+\.sh)", line)
        name = str(Path(path).parent / common.group(1)) if common else ""
        if name in mirror.files:
            env = shell_vars(mirror.read(name), env)
    return shell_vars(text, env)


def _int(env: dict, name: str, default: int = 1) -> int:
    try:
        return int(env.get(name, default))
    except ValueError:
        return default


def _true(env: dict, name: str) -> bool:
    return str(env.get(name, "")).lower() in ("1", "true", "yes")


def parallelism(env: dict) -> dict:
    tp, pp, cp = _int(env, "TP"), _int(env, "PP"), _int(env, "CP")
    gpus = _int(env, "DGXNNODES") * _int(env, "DGXNGPU", 8)
    recompute = ""
    if env.get("ACG") not in (None, "", "null"):
        recompute = f"{env['ACG']}/{env.get('ACM', '')}/{env.get('ACL', '')}"
    graphs = [k for k in ("LAYER_CUDA_GRAPH", "MCORE_CUDA_GRAPH") if _true(env, k)]
    return {"tp": tp, "pp": pp, "cp": cp, "vp": env.get("VP", ""),
            "micro_batch": _int(env, "MBS"), "gbs": _int(env, "MINIBS") * gpus // (tp * pp * cp),
            "gpus": gpus, "gpus_per_node": _int(env, "DGXNGPU", 8),
            "precision": ("FP8" if _true(env, "FP8") else "BF16") if "FP8" in env else "",
            "fp8_dpa": "yes" if _true(env, "FP8_DPA") else "",
            "recompute": recompute,
            "cuda_graph": f"yes:{','.join(graphs)}" if graphs else ""}


FP8_ACT_KEY = "activation_func_fp8_input_store"     # Megatron-Core's TransformerConfig field
CP_COMM_KEY = "cp_comm_type"                         # Megatron-Core's (Transformer Engine's)
NEMO_CONF = "megatron_gpt_peft_tuning_config.yaml"


def nemo_setting(mirror: Mirror, path: str, env: dict, key: str) -> str | None:
    """The value of ``model.<key>`` in the NeMo config of the config's implementation, where
    that config maps it to an environment variable with a default (``key:
    ${oc.decode:${oc.env:VAR,default}}``): the variable as the config script sets it, else the
    default (quotes dropped); None where the NeMo config has no such line (the framework's own
    default then holds). The implementation is the config's directory under
    ``benchmarks/<bench>/`` (``implementations/`` where there is one: Oracle's v4.1 files sit
    beside it). One that ships no NeMo config (Lambda's, Oracle's, Lenovo's: NVIDIA's
    container, its README and run.sub) is read through NVIDIA's own: the implementation
    named after the config's GPU where NVIDIA has one (v4.1 ``h200_ngc24.09_nemo``), else
    any of NVIDIA's."""
    def confs(prefix: str) -> list[str]:
        return [f for f in mirror.files if f.startswith(prefix) and f.endswith(f"/{NEMO_CONF}")
                and not re.search(r"/(NeMo|Megatron-LM)/", f)]
    impl = re.match(rf"[^/]+/benchmarks/{BENCH}/(implementations/)?[^/]+/", path)
    found = confs(impl.group(0)) if impl else []
    nvidia = sorted(confs(f"NVIDIA/benchmarks/{BENCH}/implementations/"))
    gpu = gpu_model(Path(path).name).lower()
    named = [c for c in nvidia if gpu in c.split("/")[4].lower()]    # implementation names
    for conf in found or named or nvidia:
        m = re.search(rf"^\s*{key}:\s*\$\{{oc\.decode:\$\{{oc\.env:([A-Z0-9_]+),"
                      rf"\s*'?([\w+]+)'?\}}\}}", mirror.read(conf), re.M)
        if m:
            return str(env.get(m.group(1), m.group(2))).strip("'\"")
    return None


def fp8_act(mirror: Mirror, path: str, env: dict) -> str:
    """``yes`` where the config's implementation maps an environment variable to Megatron-Core's
    ``activation_func_fp8_input_store`` in its NeMo config (NVIDIA's 25.04 code ``FP8_ACT``,
    the 24.09 copies ``FP8_ACTIVATION``: ``model.activation_func_fp8_input_store:
    ${oc.decode:${oc.env:FP8_ACT,0}}``) and the config sets it true (:func:`nemo_setting`).
    AMD's configuration names another key (``fp8_activation_input_store``) that no file of
    its code reads: not this."""
    return "yes" if _true({FP8_ACT_KEY: nemo_setting(mirror, path, env, FP8_ACT_KEY)},
                          FP8_ACT_KEY) else ""


def cp_comm_type(mirror: Mirror, path: str, env: dict) -> str:
    """Megatron-Core's ``cp_comm_type`` as the config's NeMo config sets it (NVIDIA's 25.04
    code: ``${oc.decode:${oc.env:CP_COMM_TYPE,'a2a'}}``, all-to-all context parallelism);
    blank where the NeMo config does not set it: Megatron-Core's default, ``p2p``."""
    return nemo_setting(mirror, path, env, CP_COMM_KEY) or ""


def find_config(mirror: Mirror, submitter: str, system: str, gpu: str, gpus: int,
                per_node: int, gbs: int) -> tuple[str, dict | None, str]:
    """The config of one system: (path, settings, how it was matched). A file named after
    another GPU, or after another of the submitter's systems with another GPU, is not it,
    nor one that names no GPU beside files that name this one (HPE's XD670 vs XD670_H200)."""
    others = {Path(f).stem: gpu_model(json.loads(mirror.read(f)).get("accelerator_model_name", ""))
              for f in mirror.files if f.startswith(f"{submitter}/systems/") and f.endswith(".json")
              and Path(f).stem != system}
    prefix = f"{submitter}/benchmarks/{BENCH}/implementations/"
    paths = [f for f in mirror.files if f.startswith(prefix) and re.search(r"/config_[^/]*\.sh$", f)
             and not re.search(r"/(NeMo|Megatron-LM)/", f)
             and not re.search(r"config_(\S*_)?(common|mounts)\.sh$", f)]
    found = []
    for p in paths:
        named = gpu_model(Path(p).name)          # the GPU a file name names, if any
        named = named if named in GPU_NAMES else others.get(_named_system(p, others), named)
        own = system.lower() in p.lower()
        if not own and named in GPU_NAMES and named != gpu:
            continue                             # another GPU's config
        if not own and named != gpu and any(gpu_model(Path(q).name) == gpu for q in paths
                                            if Path(q).parent == Path(p).parent):
            continue         # the directory names this GPU's configs; an unnamed one is not
        env = config_settings(mirror, p)
        s = {**parallelism(env), "fp8_act": fp8_act(mirror, p, env),
             "cp_comm_type": cp_comm_type(mirror, p, env)}
        if s["gpus"] == gpus and s["gpus_per_node"] == per_node and s["gbs"] == gbs:
            similarity = SequenceMatcher(None, system.lower(), Path(p).name.lower()).ratio()
            found.append(((not own, named != gpu), -similarity, p, s))
    if not found:
        return "", None, "no config matching nodes/gpus-per-node/GBS"
    found.sort(key=lambda f: f[:3])
    best = [f for f in found if f[0] == found[0][0]]     # the system's or GPU's own first
    keys = ("tp", "pp", "cp", "micro_batch", "precision", "recompute")
    if any(tuple(f[3][k] for k in keys) != tuple(best[0][3][k] for k in keys) for f in best):
        return best[0][2], best[0][3], ("ambiguous(settings differ): "
                                        + ", ".join(f[2] for f in best))
    return best[0][2], best[0][3], "matched nodes/gpus/gbs"


def _named_system(path: str, others: dict) -> str:
    """The other system of the submitter a config file is named after (``G893-SD1``)."""
    name = Path(path).name
    return next((o for o in others if o.split("_")[0] in name), "")


def gpu_model(name: str) -> str:
    """The catalog GPU a name mentions (``DGXB200`` -> B200), else the name."""
    return next((g for g in GPU_NAMES if g in name.replace(" ", "").upper()), name)


def system_row(mirror: Mirror, submitter: str, system: str, results: list[str]) -> dict:
    sj_path = f"{submitter}/systems/{system}.json"
    sj = json.loads(mirror.read(sj_path)) if sj_path in mirror.files else {}
    accel = sj.get("accelerator_model_name", "")
    nodes, per_node = int(sj.get("number_of_nodes", 1)), int(sj.get("accelerators_per_node", 8))
    runs, methods, intervals, ttt, gbs, ga = [], [], [], [], 0, ""
    for path in results:
        events = mllog(mirror.read(path))
        gbs = next(int(e["value"]) for e in events if e["key"] == "global_batch_size")
        ga = next((e["value"] for e in events if e["key"] == "gradient_accumulation_steps"), "")
        t, method = step_time(events, gbs)
        if t:
            runs.append(t)
            methods.append(method)
        d = _block_interval(events, gbs)
        if d:
            intervals.append(d)
        start = next((e for e in events if e["key"] == "run_start"), None)
        stop = next((e for e in events if e["key"] == "run_stop"), None)
        if start and stop and stop["metadata"].get("status") == "success":
            ttt.append((stop["time_ms"] - start["time_ms"]) / 60000)
    gpus, gpu = nodes * per_node, gpu_model(accel)
    cfg_path, cfg, match = find_config(mirror, submitter, system, gpu, gpus, per_node, gbs)
    cfg = cfg or {}
    t = median(runs) if runs else None
    counts = {m: methods.count(m) for m in sorted(set(methods))}
    return {"benchmark": BENCH, "round": "v5.0", "submitter": submitter, "system": system,
            "system_name": sj.get("system_name", ""), "gpu_model": gpu,
            "accelerator_model_name": accel, "gpus": gpus, "nodes": nodes,
            "gpus_per_node": per_node,
            "accelerator_interconnect": sj.get("accelerator_interconnect", "").strip(),
            "host_networking": sj.get("host_networking", ""),
            "framework": sj.get("framework", ""),
            **{k: cfg.get(k, "") for k in ("tp", "pp", "cp", "vp", "micro_batch", "precision",
                                           "fp8_dpa", "fp8_act", "cp_comm_type",
                                           "recompute", "cuda_graph")},
            "global_batch": gbs, "grad_accum_logged": ga, "seq_len": SEQ_LEN,
            "n_result_files": len(results), "n_runs_with_step_time": len(runs),
            "step_time_method": "+".join(f"{m}x{n}" for m, n in counts.items()),
            "median_step_time_s": round(t, 4) if t else "",
            "min_run_step_time_s": round(min(runs), 4) if runs else "",
            "max_run_step_time_s": round(max(runs), 4) if runs else "",
            "tokens_per_s_per_gpu": round(gbs * SEQ_LEN / t / gpus, 1) if t else "",
            "xcheck_block_interval_s": round(median(intervals), 4) if intervals else "",
            "ttt_min_mean": round(sum(ttt) / len(ttt), 3) if ttt else "",
            "n_ttt_runs": len(ttt),
            "config_file": f"{REPO}:{cfg_path}" if cfg_path else "", "config_match": match,
            "source": f"{REPO}:{submitter}/results/{system}/{BENCH}/result_*.txt",
            "systems_json": f"{REPO}:{sj_path}" if sj else ""}


def extract(path: str) -> list[dict]:
    mirror = Mirror(path)
    systems: dict[tuple[str, str], list[str]] = {}
    for f in mirror.files:
        m = re.fullmatch(rf"([^/]+)/results/([^/]+)/{BENCH}/result_\d+\.txt", f)
        if m:
            systems.setdefault((m.group(1), m.group(2)), []).append(f)
    return [system_row(mirror, sub, sys_, files)
            for (sub, sys_), files in sorted(systems.items())]


def main(argv: list[str]) -> None:
    if not argv:
        sys.exit(__doc__)
    out = Path(argv[1]) if len(argv) > 1 else Path(__file__).with_name("mlperf_v50_lora.csv")
    rows = extract(argv[0])
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, COLUMNS)
        w.writeheader()
        w.writerows(rows)
    print(f"{len(rows)} rows -> {out}")


if __name__ == "__main__":
    main(sys.argv[1:])

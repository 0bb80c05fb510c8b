"""torchtitan's published H100 runs (``validation/training/torchtitan_h100.csv``, a copy of
``shared/validation-data/training``), each row mapped to a ``torchtitan`` scenario.

The rows come from four torchtitan files (the ``file`` column; ``source`` names the commit
and line): ``benchmarks/llama3_h100_202412_torchtitan.md`` (torch 1963fc8, torchtitan
9dec370, December 2024: Llama 3.1 8B FSDP on 8 and 128 GPUs with and without
torch.compile and Float8, a CP sweep, 70B FSDP x TP, 405B 3-D and 4-D),
``benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md`` (June 2025: vanilla and async TP,
bf16 and two Float8 recipes), ``benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md``
(8B FSDP on 32 and 64 H200) and ``docs/performance.md`` at 3faaa1a0 (August 2024: 405B
FSDP x TP on 128 GPUs). The mapping, per column:

* GPU: Meta's Grand Teton H100, 96 GB HBM2e at a 500 W limit, the catalog's
  ``H100-SXM-96GB-500W`` (report label :data:`H100_LABEL`; the 2024-08 rows' "94GB" part
  is the same lower-TDP HBM2e H100, their footnote); H200 rows on ``H200-SXM``.
* Cluster: one host is ``dgx-h100`` with that GPU; more are ``hgx-h100-roce`` (400 Gb/s
  RoCE per GPU, the "backend RDMA network with 400 Gb/s per GPU" of Meta's RoCE fabric);
  the H200 rows (WhiteFiber, ConnectX-7 at 400 Gb/s per GPU, fabric not named) on
  ``dgx-h100-superpod`` (InfiniBand NDR) with the H200: an assumption.
* Model: Llama 3.1 8B / 70B / 405B as ``llama-3-8b`` / ``llama-3-70b`` / ``llama-3-405b``
  (3.1 changes the RoPE scaling and the context, not the kernels).
* Strategy: ``torchtitan`` with the row's ``parallelism`` column as torchtitan's
  ``[parallelism]`` keys (FSDP = ``data_parallel_shard_degree``, TP, CP, PP and its
  schedule, AsyncTP = ``enable_async_tensor_parallel``), bf16 parameters and fp32
  gradient reduction (torchtitan's ``mixed_precision_param`` / ``_reduce`` defaults).
* Checkpointing: ``full``; ``selective`` rows as the per-op policy (the 9dec370 and
  820504e ``llama3_8b.toml`` set ``selective_ac_option = 'op'``; the table does not print it).
* Batch: ``local_batch`` sequences per rank; with PP they are split into torchtitan's
  default number of microbatches, the pipeline degree, for every schedule
  (``pipeline_parallel_microbatches`` unset: 9dec370's ``build_pipeline_schedule`` takes
  ``pipeline_parallel_degree``, though the option's help says "the number of pipeline
  stages"; Interleaved1F1B's two stages per rank do not double it). ``seq_len`` where given,
  else 8,192 (the train configs' default).
* ``compile`` -> ``training.compile``; blank (the 2024-08 rows) -> the train config of that
  commit (``llama3_405b.toml`` at 3faaa1a0: ``compile = true``).
* Model code: torchtitan's Llama is the reference code (``training.elementwise: eager``:
  RMSNorm op by op, the train configs' ``norm_type = "rmsnorm"``, complex rotary, SiLU
  then multiply, ``repeat_kv``; :mod:`simulator.models.eager`); compiled, what Inductor
  leaves of it. The eager rows do not print ``norm_type``; ``llama3_8b.toml`` at 9dec370
  says ``rmsnorm`` (``torchtitan/models/norms.py``: the op-by-op ``RMSNorm`` class; the
  Triton ``FusedRMSNorm`` is the ``fused_rmsnorm`` option).
* Attention: PyTorch SDPA, whose flash backend is FlashAttention-2's kernel
  (``training.attention: flash2``): PyTorch made cuDNN attention opt-in after 2.5
  (pytorch/pytorch#138522; #142132: the 2024-12-04 nightly's SDPA on H100 runs at half of
  cuDNN's rate), and picks cuDNN by default only with cuDNN above 9.15 (2.10 on), later
  than every row here (torch 1963fc8 2024-12, 38410cf9 2025-06, 2.8.0a0 in NGC 25.05).
* Float8 -> ``training.precision: fp8`` with torchao's tensorwise dynamic scaling
  (``yes``, ``float8 tensorwise``) or its rowwise recipe (``float8 rowwise``:
  ``training.fp8_recipe: rowwise``; the 2025-06 rows ran torchtitan 820504e, before its
  recipe-aware filter (torchtitan#1319) left the small ``wk`` / ``wv`` Linears in bf16, so
  every block Linear is converted, as modelled). A row whose float8 column says it ran
  torchao's FSDP float8 all-gather (the two H200 rows: ``enable_fsdp_float8_all_gather``,
  their benchmark's L32-35) sets the strategy's field of that name; the others' files do
  not say, and torchtitan's default is off.

Nothing here fits a constant: the split (``split.yaml``, rule by GPU count) is declared
before any fit, as for the other tables.
"""

from __future__ import annotations

import re

from simulator.choices import TORCHAO_RECIPES
from simulator.validation.training.rows import TableRow

H100_LABEL = "H100-500W"
H100_GPU = "H100-SXM-96GB-500W"
H200_GPU = "H200-SXM"
MODELS = {"Llama 3.1 8B": "llama-3-8b", "Llama 3.1 70B": "llama-3-70b",
          "Llama 3.1 405B": "llama-3-405b"}
DEFAULT_SEQ = 8192
ATTENTION = "flash2"         # SDPA's flash backend at these PyTorch versions (module doc)
ELEMENTWISE = "eager"        # torchtitan's reference-code Llama, norm_type rmsnorm
# torchtitan's selective_ac_option of the rows' train configs (module doc)
SELECTIVE = {"activation_checkpoint": {"mode": "selective", "selective_ac_option": "op"}}
FULL = {"activation_checkpoint": {"mode": "full"}}
SCHEDULES = {"": "1F1B", "1F1B": "1F1B", "Interleaved 1F1B": "Interleaved1F1B"}
# the file a row comes from -> the tag of its row id (when it was measured)
VERSIONS = {"llama3_h100_202412_torchtitan.md": "2412",
            "asyncTP_llama3_h100_2025-06_torchtitan.md": "2506",
            "llama3-8b_h200_202506_trainy-whitefiber.md": "2506",
            "performance.md": "2408"}


def _degrees(parallelism: str, gpus: int) -> dict[str, int]:
    """``FSDP=8, TP=8 (AsyncTP), PP=8`` -> {fsdp: 8, tp: 8, pp: 8, cp: 1}; a blank column
    (the H200 rows: 1-D FSDP, the train config's ``data_parallel_shard_degree = -1``) is
    FSDP over every GPU."""
    found = {k.lower(): int(v) for k, v in re.findall(r"\b(FSDP|TP|PP|CP)=(\d+)", parallelism)}
    out = {"fsdp": gpus, "tp": 1, "pp": 1, "cp": 1} if not found else \
        {"fsdp": 1, "tp": 1, "pp": 1, "cp": 1}
    out.update(found)
    return out


FSDP_FP8 = "FSDP float8 all-gather"     # the float8 column of a row that says it ran it


def _float8(value: str) -> str:
    """``none``, ``tensorwise`` or ``rowwise`` from the float8 column."""
    v = value.strip().lower()
    if v in ("", "no") or v.startswith("no ") or v.startswith("none"):
        return "none"
    return "rowwise" if "rowwise" in v else "tensorwise"


def _compile(value: str, version: str) -> bool:
    """The compile column; blank only in the 2024-08 rows, whose train config compiles."""
    if value == "":
        return version == "2408"
    return value.lower() == "yes"


def row_id(r: dict, version: str, deg: dict, f8: str, compiled: bool, seq: int) -> str:
    """A readable id unique over the table: when, model, mesh, options, batch, sequence."""
    gpu = "h200" if r["gpu_type"].startswith("H200") else "h100"
    mesh = f"fsdp{deg['fsdp']}" + "".join(f"_{k}{deg[k]}" for k in ("cp", "tp", "pp")
                                            if deg[k] > 1)
    if "async" in r["parallelism"].lower():
        mesh += "async"
    if r["schedule"]:
        mesh += "-" + SCHEDULES[r["schedule"]].lower()
    opts = ("_compile" if compiled else "") + ("" if f8 == "none" else f"_f8{f8}")
    return (f"torchtitan/{gpu}-{version}/{MODELS[r['model']]}_{mesh}{opts}"
            f"_mb{r['local_batch']}_s{seq}")


def titan_row(r: dict, split: str) -> TableRow:
    """One row of ``torchtitan_h100.csv`` and its scenario (module doc)."""
    gpus, version = int(r["gpus"]), VERSIONS[r["file"].rsplit("/", 1)[-1]]
    deg, f8 = _degrees(r["parallelism"], gpus), _float8(r["float8"])
    compiled, seq = _compile(r["compile"], version), int(r["seq_len"] or DEFAULT_SEQ)
    h200 = r["gpu_type"].startswith("H200")
    local = int(r["local_batch"])
    schedule = SCHEDULES[r["schedule"]]
    micro, accum = local, 1
    if deg["pp"] > 1:            # one microbatch per pipeline rank (torchtitan's default)
        accum = deg["pp"]
        micro = local // accum
    ac = "full" if r["ac"] == "full" else "selective op"
    rid = row_id(r, version, deg, f8, compiled, seq)
    row = TableRow(rid, "torchtitan_h100", "H200" if h200 else H100_LABEL, split,
                   MODELS[r["model"]], gpus, seq, micro, accum,
                   "bf16" if f8 == "none" else f"float8 {f8}", ac, float(r["value"]),
                   r["source"], job=re.sub(r"_fsdp\d+", "_fsdp*", rid, count=1))
    par = {"data_parallel_shard_degree": deg["fsdp"], "tensor_parallel_degree": deg["tp"],
           "context_parallel_degree": deg["cp"], "pipeline_parallel_degree": deg["pp"]}
    if deg["pp"] > 1:
        par["pipeline_parallel_schedule"] = schedule
    if "async" in r["parallelism"].lower():
        par["enable_async_tensor_parallel"] = True
    gpu = H200_GPU if h200 else H100_GPU
    nodes = gpus // 8
    cluster = ({"topology": "dgx-h100"} if nodes == 1 else
               {"topology": "dgx-h100-superpod" if h200 else "hgx-h100-roce", "nodes": nodes})
    cluster["topology_set"] = {"params.node.gpu": gpu}
    training = {"micro_batch": micro, "seq_len": seq, "grad_accum": accum,
                "precision": "bf16" if f8 == "none" else "fp8", "compile": compiled,
                **({"fp8_recipe": "rowwise"} if f8 == "rowwise" else {}),
                "attention": ATTENTION, "elementwise": ELEMENTWISE}
    fsdp_fp8 = {"enable_fsdp_float8_all_gather": True} if FSDP_FP8 in r["float8"] else {}
    row.scenario = {
        "name": rid, "model": row.model, "training": training, "cluster": cluster,
        "strategy": {"name": "torchtitan", "parallelism": par, "param_dtype": "bf16",
                     "reduce_dtype": "fp32", **(FULL if ac == "full" else SELECTIVE),
                     **fsdp_fp8},
    }
    return row


# torchao's float8 README runs (validation/training/torchao_float8.csv): the report group
# and the cluster of each GPU. Its H100 is not named: the catalog's 700 W H100-SXM (an
# assumption); the MI300X runs on its 8-GPU platform. Attention through PyTorch's SDPA:
# FlashAttention-2's kernel at PyTorch 2.7 on the H100 (as ATTENTION above), ROCm's SDPA
# kernel on the MI300X (the catalog's CDNA 3 attention curve).
TORCHAO = {"H100": ("torchao H100", {"topology": "dgx-h100"}, ATTENTION),
           "MI300X": ("torchao MI300X", {"topology": "mi300x-8gpu"}, "sdpa")}


def torchao_row(r: dict, split: str) -> TableRow:
    """One row of ``torchao_float8.csv``: torchtitan's Llama 3 8B on one node of 8 GPUs,
    FSDP2, compiled, per-op checkpointing, one sequence of 8,192 tokens a GPU, in bf16 or a
    torchao float8 recipe (tensorwise with FSDP's float8 all-gather, rowwise and
    rowwise_with_gw_hp with a bf16 all-gather, as the README's rows say); a recipe the
    simulator did not take would be kept, not modelled."""
    label, cluster, attention = TORCHAO[r["gpu"]]
    scaling, seq, micro = r["scaling"], int(r["seq_len"]), int(r["local_batch"])
    rid = (f"torchao/{r['gpu'].lower()}/llama-3-8b_fsdp{r['gpus']}_compile"
           f"{'' if scaling == 'bf16' else '_f8' + scaling}_mb{micro}_s{seq}")
    row = TableRow(rid, "torchao", label, split, "llama-3-8b", int(r["gpus"]), seq, micro, 1,
                   "bf16" if scaling == "bf16" else f"float8 {scaling}", "selective op",
                   float(r["tokens_per_s"]), r["source"])
    training = {"micro_batch": micro, "seq_len": seq, "grad_accum": 1, "compile": True,
                "precision": "bf16" if scaling == "bf16" else "fp8",
                **({"fp8_recipe": scaling} if scaling != "bf16" else {}),
                "attention": attention, "elementwise": ELEMENTWISE}
    fsdp_fp8 = {"enable_fsdp_float8_all_gather": True} if scaling == "tensorwise" else {}
    row.scenario = {
        "name": rid, "model": row.model, "training": training, "cluster": dict(cluster),
        "strategy": {"name": "torchtitan",
                     "parallelism": {"data_parallel_shard_degree": int(r["gpus"])},
                     "param_dtype": "bf16", "reduce_dtype": "fp32", **SELECTIVE, **fsdp_fp8},
    }
    if scaling != "bf16" and scaling not in TORCHAO_RECIPES:
        row.not_modelled = (f"torchao's {scaling} recipe is not modelled (training.fp8_recipe "
                            f"takes {', '.join(TORCHAO_RECIPES)} for torchao)")
    return row


__all__ = ["H100_GPU", "H100_LABEL", "H200_GPU", "MODELS", "TORCHAO", "row_id", "titan_row",
           "torchao_row"]

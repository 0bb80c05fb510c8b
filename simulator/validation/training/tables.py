"""The FSDP throughput tables of the training validation: llm-foundry's MPT benchmarks,
torchtitan's 64-GPU A100 runs and its H100 runs (``validation/training/llm_foundry_fsdp.csv``,
``torchtitan_a100_64gpu.csv``, ``torchtitan_h100.csv``, copies of
``shared/validation-data/training``), each row
mapped to a scenario, with the split declared in ``validation/training/split.yaml``.

:func:`load_rows` reads them into :class:`TableRow` s; :mod:`.tables_run` simulates them.
The mapping of a row to a scenario (:func:`scenario_of`) is written out in
``validation/training/README.md`` ("FSDP tables"); in short:

* llm-foundry (Composer FSDP, ``fsdp_config`` of its yamls): FULL_SHARD, one unit per MPT
  block, ``limit_all_gathers``, Composer's ``backward_prefetch: BACKWARD_POST``;
  ``mixed_precision: DEFAULT`` = bf16 params and fp32 gradient reduction, ``PURE`` = bf16
  both; ``amp_bf16`` = bf16 compute, ``amp_fp8`` = FP8 GEMMs (Transformer Engine,
  :mod:`simulator.models.fp8`); attention by the FlashAttention-2 library
  (:data:`LLM_FOUNDRY_ATTENTION`); the row's micro-batch, accumulation and checkpointing.
  H100 80GB on DGX H100 servers (the README gives no fabric), A100 80GB on servers with
  16x 100 GbE RoCE (its "1600 Gbps node-node interconnect (RoCE)"); one node: the DGX.
* torchtitan (FSDP2, ``reshard_after_forward`` true, bf16 params, fp32 reduction): 64
  A100-80GB on DGX A100 servers (interconnect not stated: an assumption); checkpointing
  as :data:`TORCHTITAN_AC`; the model code as :data:`TORCHTITAN_ELEMENTWISE`.
* torchtitan's H100 runs (``torchtitan_h100.csv``) and torchao's float8 README runs on 8
  H100 and 8 MI300X (``torchao_float8.csv``, published outside ``shared/``: validation
  only): :mod:`.tables_titan`.

A row the simulator cannot express (an OOM row without a number; ``split.yaml``'s
``not_modelled_until``, empty now that amp_fp8 runs through the FP8 model) is kept with its
reason in
``not_modelled`` and reported, never dropped.
"""

from __future__ import annotations

import csv
from pathlib import Path

from simulator.errors import ConfigError
from simulator.validation.common import read_yaml
from simulator.validation.training.rows import TableRow
from simulator.validation.training.tables_titan import titan_row, torchao_row
from simulator.validation.training.schema import default_root

SPLIT_FILE = "split.yaml"
SOURCE_PREFIX = "shared/validation-data/training/"
# llm-foundry's table name -> (GPU type of the report, catalog GPU)
GPU_TYPES = {"h100_80gb": ("H100", "H100-SXM"), "a100_80gb": ("A100", "A100-SXM4-80GB"),
             "A100 80GB": ("A100", "A100-SXM4-80GB")}
# torchtitan's activation_checkpoint modes: "selective layer" = its default train config's
# selective_ac_option '2' (every 2nd block; an assumption: the table does not print it),
# "selective op" = the per-op policy.
TORCHTITAN_AC = {"none": {"activation_checkpointing": "none"},
                 "full": {"activation_checkpointing": "full"},
                 "selective layer": {"activation_checkpointing": "selective",
                                     "selective_ac_option": 2},
                 "selective op": {"activation_checkpointing": "selective",
                                  "selective_ac_option": "op"}}
# llm-foundry's benchmark runs: submit_benchmarks.py sets attn_config.attn_impl from
# --attn_impl (default 'flash') and installs llm-foundry '.[gpu-flash2]' (the flash-attn 2
# package; its FP8 runs pip install flash-attn==2.4.2): mosaicml/llm-foundry@51652eae
# scripts/train/benchmarking/submit_benchmarks.py, validation/training/llm_foundry_setup.md
LLM_FOUNDRY_ATTENTION = "flash2"
# torchtitan's Llama at 217cc94e is the reference code run eagerly; its train configs'
# norm_type: "fused_rmsnorm" (a Triton RMSNorm) for llama3_8b and llama2_13b, "rmsnorm" (op
# by op) for llama3_70b and llama2_70b (train_configs/*.toml at 217cc94e); the rest is op by
# op either way (simulator/models/eager.py)
TORCHTITAN_ELEMENTWISE = {"llama-3-8b": "eager_fused_norm", "llama-2-13b": "eager_fused_norm",
                          "llama-3-70b": "eager", "llama-2-70b": "eager"}
TORCHTITAN_MODELS = {"Llama 3 8B": "llama-3-8b", "Llama 3 70B": "llama-3-70b",
                     "Llama 2 13B": "llama-2-13b", "Llama 2 70B": "llama-2-70b"}


def _rule_split(rule: dict, value: int, where: str) -> str:
    for split in ("calibration", "validation"):
        if value in rule.get(split, []):
            return split
    raise ConfigError(f"{rule['column']} = {value} is in neither split", field=where)


def _llm_foundry_row(r: dict, split: str) -> TableRow:
    gpu_type, _ = GPU_TYPES[r["gpu_type"]]
    model = f"mpt-{r['model']}"
    ac = "full" if r["activation_checkpointing"] == "True" else "none"
    rid = (f"llmfoundry/{gpu_type.lower()}_{r['precision']}/{r['model']}_s{r['seq_len']}"
           f"_g{r['gpus']}_mb{r['micro_batch']}")
    row = TableRow(rid, "llm_foundry", gpu_type, split, model, int(r["gpus"]),
                   int(r["seq_len"]), int(r["micro_batch"]), int(r["grad_accum"]),
                   r["precision"], ac, float(r["tokens_per_s_per_gpu"]), r["source"])
    row.scenario = llm_foundry_scenario(row, r["mp_mode"])
    return row


def llm_foundry_scenario(row: TableRow, mp_mode: str) -> dict:
    """The scenario of an llm-foundry row (module docstring)."""
    if row.gpu_type == "H100":
        cluster = ({"topology": "dgx-h100"} if row.gpus <= 8 else
                   {"topology": "dgx-h100-superpod", "nodes": row.gpus // 8})
    else:
        cluster = ({"topology": "dgx-a100"} if row.gpus <= 8 else
                   {"topology": "a100-roce-leaf-spine", "nodes": row.gpus // 8,
                    "topology_set": {"params.node.gpu": "A100-SXM4-80GB"}})
    precision = "fp8" if "fp8" in row.precision else "bf16"
    # amp_fp8: Transformer Engine v0.10 (submit_benchmarks.py pip installs it for the H100
    # FP8 runs; llm_foundry_setup.md), Composer's te.fp8_autocast with delayed scaling
    recipe = {"fp8_recipe": "delayed"} if precision == "fp8" else {}
    return {
        "name": row.row_id, "model": row.model,
        "training": {"micro_batch": row.micro_batch, "seq_len": row.seq_len,
                     "grad_accum": row.grad_accum, "precision": precision,
                     "flash_attention": True, "attention": LLM_FOUNDRY_ATTENTION, **recipe},
        "cluster": cluster,
        "strategy": {"name": "fsdp", "sharding": "FULL_SHARD", "param_dtype": "bf16",
                     "reduce_dtype": "fp32" if mp_mode == "DEFAULT" else "bf16",
                     "backward_prefetch": "BACKWARD_POST", "limit_all_gathers": True,
                     "activation_checkpointing": row.checkpointing == "full"},
    }


def _torchtitan_row(r: dict, split: str) -> TableRow:
    model = TORCHTITAN_MODELS.get(r["model"], "llama-2-70b")
    ac = r["ac"]
    slug = ac.replace(" ", "-")
    rid = f"torchtitan/a100/{model}_{slug}_mb{r['local_batch']}"
    if r["row_label"] == "OOM":
        rid += "_oom-v1"
    value = float(r["value"]) if r["value"] else float("nan")
    seq = int(r["seq_len"]) if r["seq_len"] else 4096
    row = TableRow(rid, "torchtitan", "A100", split, model, int(r["gpus"]), seq,
                   int(r["local_batch"]), 1, "bf16", ac, value, r["source"])
    row.scenario = {
        "name": rid, "model": model,
        "training": {"micro_batch": row.micro_batch, "seq_len": seq, "grad_accum": 1,
                     "precision": "bf16", "flash_attention": True,
                     "elementwise": TORCHTITAN_ELEMENTWISE[model]},
        "cluster": {"topology": "dgx-a100-superpod", "nodes": row.gpus // 8},
        "strategy": {"name": "fsdp", "reshard_after_forward": True, "param_dtype": "bf16",
                     "reduce_dtype": "fp32", **TORCHTITAN_AC[ac]},
    }
    if r["row_label"] == "OOM":
        row.not_modelled = "published as OOM (no throughput to compare)"
    return row


def _makers() -> dict:
    return {"llm_foundry": _llm_foundry_row, "torchtitan": _torchtitan_row,
            "torchtitan_h100": titan_row, "torchao": torchao_row}


def load_rows(root: Path | str | None = None) -> list[TableRow]:
    """Every row of the tables named in ``split.yaml``, in file order, split attached.

    :raises ConfigError: a missing file or a row that falls in neither split.
    """
    root = Path(root) if root is not None else default_root()
    spec = read_yaml(root / SPLIT_FILE)
    rows: list[TableRow] = []
    makers = _makers()
    for name, table in spec["tables"].items():
        path = root / table["file"]
        if not path.is_file():
            raise ConfigError("table file not found", source=str(path))
        with path.open(newline="") as fh:
            data = list(csv.DictReader(fh))
        make = makers[name]
        rule = table["rule"]
        for i, r in enumerate(data):
            split = _rule_split(rule, int(r[rule["column"]]),
                                f"{SPLIT_FILE}: {table['file']} row {i + 2}")
            rows.append(make(r, split))
    fp8 = spec.get("not_modelled_until", {}).get("amp_fp8")
    for row in rows:
        if row.precision == "amp_fp8" and fp8 and not row.not_modelled:
            row.not_modelled = f"amp_fp8: not modelled until {fp8}"
    ids = [r.row_id for r in rows]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise ConfigError(f"repeated row id(s) {', '.join(dup)}", source=str(root / SPLIT_FILE))
    return rows


__all__ = ["GPU_TYPES", "SPLIT_FILE", "TableRow", "llm_foundry_scenario", "load_rows"]

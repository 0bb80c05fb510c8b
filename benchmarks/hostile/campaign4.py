#!/usr/bin/env python3
"""The fourth hostile-input campaign (issue 42, round four): >= 500 inputs over the surfaces
added in the fourth session and not yet attacked.

    python benchmarks/hostile/campaign4.py write /tmp/c4             # ~560 case folders
    python benchmarks/hostile/campaign4.py run /tmp/c4 TREE TAG      # TREE's clustersim
    python benchmarks/hostile/campaign4.py table /tmp/c4 before after
    python benchmarks/hostile/campaign4.py csv /tmp/c4 before after > campaign4_results.csv
    python benchmarks/hostile/campaign4.py bad /tmp/c4 after         # the cases left

Families: ``timeline`` (every ``run --timeline-format`` value, with and without ``--out``,
on every kind of strategy), ``fp8`` (``training.fp8_recipe`` with precisions, strategies and
GPUs), ``transpose`` (``strategy.disable_parameter_transpose_cache``), ``fleet`` (a mix's
``power_budget_kw``, ``placement``, ``--against``, heterogeneous jobs), ``topology`` (B300 /
GB300 topologies and ``--set cluster.topology=`` growing a single server, ``topology`` and
``collective --nodes``), ``finetune`` (LoRA rank / alpha / targets, QLoRA on the MLPerf
scenarios), ``reliability-energy`` (power cap, energy options the command does not have),
``energy-columns`` (``compare`` / ``plan`` energy options with every output format),
``validate`` (subcommands with odd arguments; only ones that refuse or end fast), ``ds-config``
(DeepSpeed counts written as floats), and ``writes`` / ``writes-kill`` (the new output files:
kineto traces, fleet.csv, power.png, through symbolic links and killed mid-write).

The cases, the runner and the outcome classes are the third campaign's (``campaign3.py``):
one child per case forked from a process that imported TREE's ``simulator``, 4 GiB of address
space, a hang past 20 s of CPU; ``expect`` says ``refuse`` (exit 0 is a silent wrong
success), ``ok`` (must run) or ``either``. Seed 4: ``write`` gives the same cases every time.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import campaign3 as c3  # noqa: E402 - the third campaign's cases, runner and counting
import readers_campaign as rc  # noqa: E402

R = random.Random(4)
rc.R = c3.R = R
REPO = c3.REPO
_add = c3._add
BOUND = c3.BOUND


class Cases(c3.Cases):
    """The third campaign's case folders; a file's name may name a folder too."""

    def add(self, family: str, args: list[str], files: dict | None = None,
            expect: str = "either") -> None:
        nested = {k: v for k, v in (files or {}).items() if "/" in k}
        super().add(family, args, {k: v for k, v in (files or {}).items() if k not in nested},
                    expect)
        d = self.root / f"{family}-{self.n:04d}"
        for name, data in nested.items():
            (d / name).parent.mkdir(parents=True, exist_ok=True)
            (d / name).write_bytes(data if isinstance(data, bytes) else data.encode())


# ---------------------------------------------------------------------------- timeline
TIMELINE_SCENARIOS = ["quickstart", "resnet50-ddp-1gpu", "resnet50-tf-mirrored-8gpu",
                      "bert-large-horovod-8gpu", "mixtral-8x7b-ep8", "llama2-70b-lora-8gpu",
                      "llama3-8b-fsdp-mi300x", "resnet50-tf-ps-4node"]


def write_timeline(c: Cases) -> None:
    good = ("perfetto", "kineto")
    bad = ("Kineto", "chrome", "json", "", "kineto,perfetto", "hta", "KINETO", "pt.trace")
    for scen in TIMELINE_SCENARIOS:
        for fmt in good:
            _add(c, "timeline", ["run", scen, "-q", "--out", "out", "--timeline-format", fmt],
                 None, "ok")
        for fmt in R.sample(bad, 3):
            _add(c, "timeline", ["run", scen, "-q", "--out", "out", "--timeline-format", fmt],
                 None, "refuse")
        # without --out there is no timeline to write: refused, not silently dropped
        _add(c, "timeline", ["run", scen, "-q", "--timeline-format", "kineto"], None,
             "refuse")
        _add(c, "timeline", ["run", scen, "-q", "--format", "json", "--out", "out",
                             "--timeline-format", "kineto"], None, "ok")
    for fmt in good:                                      # commands without a timeline
        for cmd in (["compare", "quickstart", "-q", "--strategies", "ddp", "--out", "out"],
                    ["plan", "quickstart", "-q", "--replay", "1", *BOUND, "--out", "out"],
                    ["reliability", "-q", "--trials", "2", "--workers", "1", "--out", "out"],
                    ["trace", "quickstart", "-o", "t.json"]):
            _add(c, "timeline", [*cmd, "--timeline-format", fmt], None, "refuse")
    for sets in (["simulation.iterations=3"], ["training.grad_accum=4"],
                 ["cluster.topology=dgx-h100", "training.precision=fp8"],
                 ["strategy.host_dispatch=compiled"], ["simulation.fabric=flow"]):
        args = [a for s in sets for a in ("--set", s)]
        _add(c, "timeline", ["run", "quickstart", "-q", *args, "--out", "out",
                             "--timeline-format", "kineto"], None, "either")


# --------------------------------------------------------------------------------- fp8
FP8_SCENARIOS = ["quickstart", "llama3-70b-fsdp-tp8-256gpu", "mixtral-8x7b-ep8",
                 "llama3-8b-fsdp-mi300x", "resnet50-ddp-1gpu", "llama2-70b-lora-8gpu",
                 "gpt3-175b-megatron-tp8-pp16-selene", "bert-large-horovod-8gpu"]
FP8_TOPOS = ["dgx-a100", "dgx-h100", "dgx-b200", "dgx-b300", "gb300-nvl72", "mi300x-8gpu",
             "mi355x-8gpu", None]


def write_fp8(c: Cases) -> None:
    recipes = ["tensorwise", "delayed", "current", "mxfp8", "MXFP8", "nope", "''", "null",
               "1", "[delayed]", "rowwise"]
    precisions = ["fp8", "bf16", "fp16", "fp32", "fp4", None]
    n = 0
    while n < 110:
        scen, topo = R.choice(FP8_SCENARIOS), R.choice(FP8_TOPOS)
        recipe, prec = R.choice(recipes), R.choice(precisions)
        sets = [f"training.fp8_recipe={recipe}"]
        if prec:
            sets.append(f"training.precision={prec}")
        if topo:
            sets.append(f"cluster.topology={topo}")
        args = ["run", scen, "-q"] + [a for s in sets for a in ("--set", s)]
        # rowwise: a recipe since 2f9422b (a bad spelling when this was written); null:
        # the framework's default since 9751b5e (campaign4_results.csv records
        # the outcomes of its time)
        bad = recipe not in ("tensorwise", "delayed", "current", "mxfp8", "null", "rowwise")
        _add(c, "fp8", args, None, "refuse" if bad else "either")
        n += 1
    for cmd in (["plan", "quickstart", "-q", "--replay", "1", *BOUND],
                ["compare", "quickstart", "-q", "--strategies", "fsdp-full,ddp"],
                ["capacity", "quickstart", "-q", "--strategies", "ddp"]):
        for recipe in ("mxfp8", "current", "nope"):
            _add(c, "fp8", [*cmd, "--set", "cluster.topology=dgx-h100", "--set",
                            "training.precision=fp8", "--set", f"training.fp8_recipe={recipe}"],
                 None, "refuse" if recipe == "nope" else "either")


# ---------------------------------------------------------------------------- transpose
def write_transpose(c: Cases) -> None:
    values = [("true", "either"), ("false", "either"), ("yes", "either"), ("1", "refuse"),
              ("'true'", "refuse"), ("null", "refuse"), ("2", "refuse"), ("[true]", "refuse"),
              ("nope", "refuse")]
    for scen in ("gpt3-175b-megatron-tp8-pp16-selene", "llama3-70b-fsdp-tp8-256gpu",
                 "quickstart", "mixtral-8x7b-ep8", "resnet50-ddp-1gpu"):
        for v, expect in values:
            megatron = scen in ("gpt3-175b-megatron-tp8-pp16-selene",
                                "llama3-70b-fsdp-tp8-256gpu", "mixtral-8x7b-ep8")
            if not megatron:
                expect = "refuse"                      # a Megatron-Core setting only
            _add(c, "transpose", ["run", scen, "-q", "--set",
                                  f"strategy.disable_parameter_transpose_cache={v}"], None,
                 expect)
    for prec in ("fp8", "bf16"):
        _add(c, "transpose", ["run", "llama3-70b-fsdp-tp8-256gpu", "-q", "--set",
                              f"training.precision={prec}", "--set",
                              "strategy.disable_parameter_transpose_cache=true"], None, "ok")


# -------------------------------------------------------------------------------- fleet
MIX = """name: m
cluster: {{topology: {topo}, nodes: {nodes}}}
scheduler: easy
placement: {place}
{budget}jobs:
  - {{name: a, arrival: 0 s, scenario: {scen_a}, gpus: {gpus_a}, steps: 20}}
  - {{name: b, arrival: 10 s, scenario: {scen_b}, gpus: 8, steps: 20}}
"""
MIX_OK = dict(topo="dgx-a100-superpod", nodes=4, place="topology", budget="",
              scen_a="resnet50-ddp-8gpu", gpus_a=8, scen_b="resnet50-ddp-8gpu")


def write_fleet(c: Cases) -> None:
    budgets = [("50", "either"), ("0.001", "either"), ("1e300", "either"), ("0", "refuse"),
               ("-5", "refuse"), ("nan", "refuse"), ("inf", "refuse"), ("'50'", "refuse"),
               ("50 kW", "refuse"), ("[50]", "refuse"), ("true", "refuse"), ("null", "either")]
    for v, expect in budgets:
        text = MIX.format(**dict(MIX_OK, budget=f"power_budget_kw: {v}\n"))
        _add(c, "fleet", ["cluster", "m.yaml", "-q"], {"m.yaml": text}, expect)
        _add(c, "fleet", ["cluster", "m.yaml", "-q", "--set", f"power_budget_kw={v}"],
             {"m.yaml": MIX.format(**MIX_OK)}, expect)
        _add(c, "fleet", ["cluster", "m.yaml", "-q", "--against", f"power_budget_kw={v}"],
             {"m.yaml": MIX.format(**MIX_OK)}, expect)
    for place in ("packed", "spread", "topology", "random", "Packed", "''", "[spread]", "1"):
        expect = "either" if place in ("packed", "spread", "topology") else "refuse"
        _add(c, "fleet", ["cluster", "m.yaml", "-q", "--set", f"placement={place}"],
             {"m.yaml": MIX.format(**MIX_OK)}, expect)
        _add(c, "fleet", ["cluster", "m.yaml", "-q", "--against", f"placement={place}"],
             {"m.yaml": MIX.format(**MIX_OK)}, expect)
    against = ["scheduler=fifo", "seed=3", "cluster.nodes=8", "cluster.nodes=0",
               "cluster.topology=dgx-h100-superpod", "cluster.topology=mi300x-8gpu",
               "jobs.0.gpus=16", "jobs.5.gpus=8", "limits.max_work=1", "name=other", "nope=1"]
    for a in against:
        ok = a in ("scheduler=fifo", "seed=3", "cluster.nodes=8", "jobs.0.gpus=16",
                   "cluster.topology=dgx-h100-superpod", "name=other")
        _add(c, "fleet", ["cluster", "m.yaml", "-q", "--against", a, "--against",
                          "placement=spread"], {"m.yaml": MIX.format(**MIX_OK)},
             "either" if ok else "refuse")
    hetero = [("quickstart", "resnet50-ddp-8gpu", 8), ("llama3-8b-fsdp-mi300x",
                                                       "resnet50-ddp-8gpu", 8),
              ("mixtral-8x7b-ep8", "quickstart", 8), ("resnet50-tf-mirrored-8gpu",
                                                      "quickstart", 8),
              ("llama2-70b-lora-8gpu", "quickstart", 8), ("resnet50-ddp-1gpu", "quickstart", 1),
              ("llama3-70b-fsdp-tp8-256gpu", "quickstart", 16),
              ("gpt3-175b-megatron-tp8-pp16-selene", "quickstart", 32)]
    for topo, nodes in (("dgx-a100-superpod", 4), ("dgx-h100-superpod", 4),
                        ("dgx-b300-superpod", 4), ("gb300-nvl72", 1), ("dgx-b300", 4)):
        for scen_a, scen_b, gpus in hetero:
            text = MIX.format(**dict(MIX_OK, topo=topo, nodes=nodes, scen_a=scen_a,
                                     scen_b=scen_b, gpus_a=gpus))
            _add(c, "fleet", ["cluster", "m.yaml", "-q"], {"m.yaml": text}, "either")
    for n in ("llm-oversubscribed", "acme-seren-day"):
        _add(c, "fleet", ["cluster", n, "-q", "--set", "power_budget_kw=100", "--against",
                          "placement=spread"], None, "either")


# ----------------------------------------------------------------------------- topology
NEW_TOPOS = ["dgx-b200", "dgx-b300", "dgx-b300-superpod", "gb300-nvl72", "dgx-b200-superpod",
             "dgx-h100", "dgx-a100", "hgx-h200", "mi355x-8gpu"]


def write_topology(c: Cases) -> None:
    for topo in NEW_TOPOS:
        for scen in ("quickstart", "llama2-7b-fsdp-128gpu", "llama3-70b-fsdp-tp8-256gpu",
                     "llama3-405b-tp8-pp8-fsdp-512gpu"):
            mi = topo.startswith("mi")
            _add(c, "topology", ["run", scen, "-q", "--set", f"cluster.topology={topo}"], None,
                 "refuse" if mi and scen != "quickstart" else "either")
        for nodes in ("1", "2", "3", "100", "0", "-1", "1e3", "100000"):
            ok = nodes in ("1", "2", "3", "100")
            _add(c, "topology", ["topology", topo, "--nodes", nodes], None,
                 "either" if ok else "refuse")
        for nodes in ("2", "0", "1000000"):
            _add(c, "topology", ["collective", "all_reduce", "--topology", topo, "--nodes",
                                 nodes, "-b", "1M", "-e", "1M"], None,
                 "either" if nodes == "2" else "refuse")
    for topo in ("dgx-b300", "dgx-b200", "gb300-nvl72"):
        for gpus in ("8", "9", "16", "72", "144", "1e4", "0", "1000000"):
            ok = gpus in ("8", "16", "72", "144") or topo == "gb300-nvl72" and gpus == "9"
            # (9 of an NVL72 rack's 72 GPUs is a subset, as 4 of a DGX's 8 is)
            _add(c, "topology", ["run", "quickstart", "-q", "--set", f"cluster.topology={topo}",
                                 "--set", f"cluster.gpus={gpus}"], None,
                 "either" if ok else "refuse")
        for nodes in ("2", "33", "0", "1e6", "x"):
            _add(c, "topology", ["run", "quickstart", "-q", "--set", f"cluster.topology={topo}",
                                 "--set", f"cluster.nodes={nodes}"], None,
                 "either" if nodes in ("2", "33") else "refuse")
    for key, v in (("topology.params.nodes", "4"), ("topology.multi_node", "nope"),
                   ("topology.params.node.gpu", "B300"), ("topology.params.node.gpu", "nope")):
        _add(c, "topology", ["run", "quickstart", "-q", "--set", "cluster.topology=dgx-b300",
                             "--set", f"cluster.{key}={v}"], None, "either")
    text = "name: x\ngenerator: dgx_a100_node\nmulti_node: {mn}\nparams: {{gpu: B300}}\n"
    for mn in ("nope", "dgx-a100", "dgx-b300-superpod", "''", "[1]", "../../etc/passwd"):
        _add(c, "topology", ["run", "quickstart", "-q", "--set", "cluster.topology=x.yaml",
                             "--set", "cluster.gpus=16"], {"x.yaml": text.format(mn=mn)},
             "either" if mn == "dgx-b300-superpod" else "refuse")


# ----------------------------------------------------------------------------- finetune
def write_finetune(c: Cases) -> None:
    values = [("{mode: lora, rank: 1000000000}", "refuse"),
              ("{mode: lora, rank: 8193}", "refuse"), ("{mode: lora, rank: 8192}", "either"),
              ("{mode: lora, rank: 65536}", "refuse"), ("{mode: lora, rank: 2}", "ok"),
              ("{mode: lora, alpha: 0}", "either"), ("{mode: lora, alpha: 1e300}", "either"),
              ("{mode: lora, alpha: inf}", "refuse"), ("{mode: lora, alpha: '16'}", "refuse"),
              ("{mode: lora, target_modules: [qkv_proj]}", "either"),
              ("{mode: lora, target_modules: [q_proj, nope]}", "refuse"),
              ("{mode: lora, target_modules: ''}", "refuse"),
              ("{mode: lora, target_modules: [null]}", "refuse"),
              ("{mode: qlora, rank: 16}", "either"), ("{mode: qlora, rank: 0}", "refuse"),
              ("{mode: qlora, base_precision: nf4}", "either"),
              ("{mode: qlora, base_precision: bf16}", "either"),    # the default, written
              ("{mode: lora, rank: 16, alpha: 32, dropout: 0.1}", "ok"),
              ("{mode: lora, rank: 16, freeze_layers: 2}", "refuse")]
    for scen in ("llama2-70b-lora-8gpu", "llama2-70b-lora-mi300x"):
        for v, expect in values:
            _add(c, "finetune", ["run", scen, "-q", "--set", f"training.finetune={v}"], None,
                 expect)
    sub = [("training.finetune.rank=1000000000", "refuse"), ("training.finetune.rank=4", "ok"),
           ("training.finetune.alpha=nan", "refuse"), ("training.finetune.mode=full", "either"),
           ("training.finetune.mode=qlora", "either"),
           ("training.finetune.target_modules=[o_proj]", "either"),
           ("training.finetune=null", "either"), ("training.finetune.nope=1", "refuse")]
    for scen in ("llama2-70b-lora-8gpu", "llama2-70b-lora-mi300x"):
        for s, expect in sub:
            _add(c, "finetune", ["run", scen, "-q", "--set", s], None, expect)
        for cmd in (["plan", scen, "-q", "--replay", "1", *BOUND],
                    ["compare", scen, "-q", "--strategies", "fsdp-full,ddp"],
                    ["reliability", scen, "-q", "--trials", "2", "--workers", "1"]):
            _add(c, "finetune", cmd, None, "either")


# --------------------------------------------------------------------- reliability energy
def write_reliability_energy(c: Cases) -> None:
    rel = ["reliability", "-q", "--trials", "2", "--workers", "1"]
    for cap in ("600", "500", "100", "0", "nan", "1e300", "x"):
        _add(c, "reliability-energy", [*rel, "--set", "cluster.topology=dgx-h100", "--set",
                                       f"cluster.power_cap_w={cap}"], None,
             "either" if cap in ("600", "500") else "refuse")
    for opt in ("--electricity-price", "--carbon-intensity", "--pue"):
        _add(c, "reliability-energy", [*rel, opt, "0.1"], None, "refuse")
    for key in ("energy.electricity_price", "reliability.energy", "site.pue",
                "reliability.electricity_price"):
        _add(c, "reliability-energy", [*rel, "--set", f"{key}=0.1"], None, "refuse")
    for scen in ("reliability-1024gpu", "llama3-8b-fsdp-mi300x", "resnet50-ddp-1gpu"):
        _add(c, "reliability-energy", ["reliability", scen, "-q", "--trials", "2",
                                       "--workers", "1", "--format", "json"], None, "either")
        _add(c, "reliability-energy", ["reliability", scen, "-q", "--trials", "2",
                                       "--workers", "1", "--set", "cluster.topology=dgx-b300",
                                       "--set", "cluster.power_cap_w=900"], None, "either")


# ------------------------------------------------------------------------ energy columns
def write_energy_columns(c: Cases) -> None:
    values = ["0.1", "0", "-0.1", "nan", "1e300", "1e400", "0x10", "1_000", "inf"]
    for fmt in ("table", "csv", "json"):
        for opt in ("--electricity-price", "--carbon-intensity", "--pue"):
            for v in R.sample(values, 4):
                try:
                    f = float(v)
                    good = f == f and abs(f) != float("inf") and f >= (1 if opt == "--pue"
                                                                         else 0)
                except ValueError:
                    good = False
                if v in ("1e400", "0x10"):      # 1_000: Python's (and click's) float
                    good = False
                _add(c, "energy-columns", ["compare", "resnet50-ddp-1gpu", "-q", "--strategies",
                                           "ddp", "--format", fmt, opt, v], None,
                     "either" if good else "refuse")
    for opt in ("--electricity-price", "--carbon-intensity", "--pue"):
        _add(c, "energy-columns", ["plan", "quickstart", "-q", "--replay", "1", *BOUND, opt,
                                   "0.1"], None, "refuse")
    for fmt in ("table", "csv", "json"):
        for topo in ("dgx-a100", "dgx-b300", "mi300x-8gpu", "hgx-a100-pcie"):
            _add(c, "energy-columns", ["plan", "quickstart", "-q", "--replay", "1", *BOUND,
                                       "--format", fmt, "--set", f"cluster.topology={topo}"],
                 None, "either")
            _add(c, "energy-columns", ["compare", "quickstart", "-q", "--strategies", "ddp",
                                       "--format", fmt, "--set", f"cluster.topology={topo}"],
                 None, "either")


# ----------------------------------------------------------------------------- validate
def write_validate(c: Cases) -> None:
    cases = [
        (["validate", "nope"], "refuse"), (["validate", ""], "refuse"),
        (["validate", "traces", "--root", "missing"], "refuse"),
        (["validate", "traces", "--root", "f.txt"], "refuse"),
        (["validate", "traces", "--root", "."], "refuse"),
        (["validate", "traces", "--root", "/dev/null"], "refuse"),
        (["validate", "traces", "--out", "f.txt"], "refuse"),
        (["validate", "energy", "--root", "missing"], "refuse"),
        (["validate", "energy", "--root", "."], "refuse"),
        (["validate", "energy", "--root", "/proc/self"], "refuse"),
        (["validate", "energy"], "either"),
        (["validate", "energy", "--root", "bad"], "refuse"),
        (["validate", "parallel", "--workers", "0"], "refuse"),
        (["validate", "parallel", "--workers", "-1"], "refuse"),
        (["validate", "parallel", "--workers", "x"], "refuse"),
        (["validate", "parallel", "--max-gpus", "0"], "refuse"),
        (["validate", "parallel", "--max-gpus", "1e9"], "refuse"),
        (["validate", "parallel", "--out", "f.txt"], "refuse"),
        (["validate", "parallel", "--out", "/dev/null"], "refuse"),
        (["validate", "collectives", "--split", "nope"], "refuse"),
        (["validate", "collectives", "--fidelity", "packet"], "refuse"),
        (["validate", "collectives", "--calibration", "missing.yaml"], "refuse"),
        (["validate", "collectives", "--calibration", "f.txt"], "refuse"),
        (["validate", "collectives", "--calibration", "bad/cases.yaml"], "refuse"),
        (["validate", "collectives", "--write-calibration", "w.yaml"], "refuse"),
        (["validate", "collectives", "--root", "missing"], "refuse"),
        (["validate", "collectives", "--root", "bad"], "refuse"),
        (["validate", "collectives", "--root", "."], "refuse"),
        (["validate", "training", "--compute", "missing.yaml"], "refuse"),
        (["validate", "training", "--compute", "f.txt"], "refuse"),
        (["validate", "training", "--max-evals", "0"], "refuse"),
        (["validate", "training", "--write-fitted", "w.yaml"], "refuse"),
        (["validate", "training", "--root", "bad"], "refuse"),
        (["validate", "training", "--root", "."], "refuse"),
        (["validate", "training", "--split", "nope"], "refuse"),
        (["validate", "captured", "--out", "f.txt"], "refuse"),
        (["validate", "gpu", "--out", "f.txt"], "refuse"),
        (["validate", "gpu", "--out", "/proc/version"], "refuse"),
        (["validate", "all", "--nope"], "refuse"),
        (["validate", "energy", "extra"], "refuse"),
    ]
    files = {"f.txt": "USER DATA\n", "bad/cases.yaml": "cases: [1, 2\n",
             "bad/setup.yaml": "- x\n", "bad/measurements.csv": "a,b\n1\n"}
    for args, expect in cases:
        _add(c, "validate", args, files, expect)
    for gz in (b"", b"\x1f\x8b\x08\x00garbage", b"{}", b"[1, 2]"):
        _add(c, "validate", ["validate", "traces", "--root", "t"],
             {"t/a100/nccl_data.json.gz": gz, "f.txt": "x"}, "refuse")


# ----------------------------------------------------------------------------- ds config
def write_ds_config(c: Cases) -> None:
    ds = json.loads((REPO / "scenarios/configs/ds_zero3.json").read_text())
    for key in ("gradient_accumulation_steps", "train_micro_batch_size_per_gpu",
                "train_batch_size"):
        for value in (2.0, 4.0, 2.5, True, "2", None, [2], 1e300):
            doc = dict(ds)
            doc[key] = value
            if key == "train_batch_size":          # keep the three consistent where whole
                doc.pop("gradient_accumulation_steps", None)
            # DeepSpeed reads these counts untyped: a whole float is the count (docs/inputs.md)
            whole = value is None or (isinstance(value, float) and value in (2.0, 4.0))
            _add(c, "ds-config", ["run", "llama2-7b-fsdp-128gpu", "-q", "--config", "ds.json"],
                 {"ds.json": json.dumps(doc)}, "either" if whole else "refuse")


# ------------------------------------------------------------------------------- writes
WRITERS4 = [
    ["run", "quickstart", "-q", "--out", "out", "--timeline-format", "kineto"],
    ["run", "resnet50-ddp-1gpu", "-q", "--out", "out", "--timeline-format", "kineto"],
    ["cluster", "m.yaml", "-q", "--out", "out"],
    ["cluster", "m.yaml", "-q", "--out", "out", "--set", "power_budget_kw=1"],
]


# --out at a user's file, a link to one, a foreign folder, a link to one: each refused
OUT_SETUPS = [
    ({"files": {"out": "USER DATA\n"}, "guard": ["out"]}, "refuse"),
    ({"files": {"victim/f": "USER DATA\n"}, "links": {"out": "victim/f"},
      "guard": ["victim/f"]}, "refuse"),
    ({"files": {"out/notes.txt": "USER DATA\n"}, "guard": ["out/notes.txt"]}, "refuse"),
    ({"files": {"victim/notes.txt": "USER DATA\n"}, "links": {"out": "victim"},
      "guard": ["victim/notes.txt"]}, "refuse")]


def write_writes(c: Cases) -> None:
    st = {"m.yaml": MIX.format(**MIX_OK)}
    for cmd in WRITERS4:
        for victims in ("all", "one", "dangling"):
            _add(c, "writes", cmd, st, "either",
                 {"first_run": True, "link_outputs": victims, "guard": ["victim/*"]})
        for setup, expect in OUT_SETUPS:
            _add(c, "writes", cmd, st, expect, setup)
    # a folder under out/ that a later file is written into, replaced by a link
    _add(c, "writes", WRITERS4[0], st, "either",
         {"first_run": True, "dirs": ["victim"],
          "files": {"victim/rank-0.pt.trace.json": "USER DATA\n"},
          "relink": {"out/kineto": "../victim"}, "guard": ["victim/rank-0.pt.trace.json"]})
    add_kills(c, WRITERS4, st, 20, 1.5)


def add_kills(c: Cases, writers: list[list[str]], files: dict, n: int, latest: float) -> None:
    """``n`` runs of a writer drawn from ``writers``, each killed 0.05 .. ``latest`` s after
    it starts, after a first whole run: every output left must be whole."""
    for _ in range(n):
        cmd = R.choice(writers)
        _add(c, "writes-kill", cmd, files, "either",
             {"first_run": True, "kill_after": round(R.uniform(0.05, latest), 3),
              "whole": True})


def write_cases(root: Path, writers) -> None:
    """Every writer's case folders under the new folder ``root``."""
    root.mkdir(parents=True, exist_ok=False)
    c = Cases(root)
    for writer in writers:
        writer(c)
    print(f"wrote {c.n} cases under {root}")


def write_all(root: Path) -> None:
    write_cases(root, (write_timeline, write_fp8, write_transpose, write_fleet, write_topology,
                       write_finetune, write_reliability_energy, write_energy_columns,
                       write_validate, write_ds_config, write_writes))


def _prepare(case: Path, setup: dict) -> dict[str, str]:
    """The third campaign's preparation, then ``relink``: folders of the first run replaced
    by links to a user's folder (a later run must not write through them), and every
    ``*.json`` the first run left anywhere under ``out/`` guarded whole against kills."""
    guarded = _prepare3(case, setup)
    for name, target in setup.get("relink", {}).items():
        p = case / name
        if p.is_dir() and not p.is_symlink():
            import shutil
            shutil.rmtree(p)
        p.symlink_to(target)
    if setup.get("whole") and (case / "out").is_dir():
        for p in sorted((case / "out").rglob("*.json")):
            if p.is_file() and not p.is_symlink():
                guarded[str(p.relative_to(case))] = "whole"
    for pattern in setup.get("guard", []):
        for p in sorted(case.glob(pattern)):
            guarded.setdefault(str(p.relative_to(case)), c3._digest(p))
    return guarded


_prepare3 = c3._prepare
c3._prepare = _prepare
COMMANDS = dict(c3.COMMANDS, write=lambda root, rest: write_all(root))

if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    COMMANDS[sys.argv[1]](Path(sys.argv[2]), sys.argv[3:])

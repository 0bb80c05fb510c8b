#!/usr/bin/env python3
"""The fifth hostile-input campaign (issue 42, round five): >= 1,000 inputs over the surfaces
added in the fifth session and not yet attacked.

    python benchmarks/hostile/campaign5.py write /tmp/c5             # ~1,050 case folders
    python benchmarks/hostile/campaign5.py run /tmp/c5 TREE TAG      # TREE's clustersim
    python benchmarks/hostile/campaign5.py table /tmp/c5 before after
    python benchmarks/hostile/campaign5.py csv /tmp/c5 before after > campaign5_results.csv
    python benchmarks/hostile/campaign5.py bad /tmp/c5 after         # the cases left

Families: ``evaluation`` (``training.evaluation``'s every_steps, samples, first_step and
global_batch, whole and key by key, on every kind of strategy and through the other
commands), ``fleet-failures`` (a mix's GPU / NIC / link / spine rates and repairs and its
scheduled failures), ``fp8-attention`` (``training.fp8_attention`` with precisions, recipes,
attention kernels, strategies and GPUs), ``cross-entropy``
(``strategy.cross_entropy_loss_fusion`` / ``cross_entropy_fusion_impl``), ``lockstep``
(torchtitan job TOMLs with ``Interleaved1F1B`` and their batch magnitudes), ``power-cap``
(``cluster.power_cap_w`` against each GPU's board limit, through every command),
``aws-p5`` (``collective`` on aws-p5: ops, sizes, step factors, nodes, NCCL options),
``blackwell-nodes`` (B300 / GB300 topologies with ``cluster.nodes``), ``validate``
(subcommands' arguments; an energy ``--root`` whose ``evaluation_checks`` are damaged), and
``writes`` / ``writes-kill`` (what the new features write: a run's summary with its
evaluation, a failing mix's outputs, ``validate traces --out``, a ``reliability`` report
with its evaluations, through symbolic links and killed mid-write).

The cases, the runner and the outcome classes are the third campaign's (``campaign3.py``,
with the fourth's nested files and relinks): one child per case forked from a process that
imported TREE's ``simulator``, 4 GiB of address space, a hang past 20 s of CPU; ``expect``
says ``refuse`` (exit 0 is a silent wrong success), ``ok`` (must run) or ``either``. Seed 5:
``write`` gives the same cases every time.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import campaign3 as c3  # noqa: E402 - the third campaign's runner and counting
import campaign4 as c4  # noqa: E402 - its nested case files and relinking preparation
import readers_campaign as rc  # noqa: E402

R = random.Random(5)
rc.R = c3.R = c4.R = R
REPO = c3.REPO
_add = c3._add
BOUND = c3.BOUND
Cases = c4.Cases


def _sets(*pairs: str) -> list[str]:
    return [a for s in pairs for a in ("--set", s)]


# --------------------------------------------------------------------------- evaluation
EVAL_SCENARIOS = ["quickstart", "resnet50-ddp-1gpu", "llama2-70b-lora-8gpu",
                  "mixtral-8x7b-ep8", "bert-large-horovod-8gpu", "llama3-8b-fsdp-mi300x",
                  "resnet50-tf-mirrored-8gpu", "llama3-70b-fsdp-tp8-256gpu"]
# (value, good): good None means "may refuse" (depends on the job's data-parallel ranks)
EVAL_FIELDS = {
    "every_steps": [("1", True), ("48", True), ("16777216", True), ("0", False),
                    ("-1", False), ("1.5", False), ("'8'", False), ("true", False),
                    ("1e300", False), ("16777217", False), ("null", False), ("[4]", False)],
    "samples": [("1", True), ("173", True), ("100000", True), ("0", False), ("-5", False),
                ("2.5", False), ("nan", False), ("1e18", False), ("'173'", False),
                ("{}", False)],
    "first_step": [("1", True), ("192", True), ("1000000", True), ("0", False),
                   ("-192", False), ("1.0", False), ("inf", False), ("x", False),
                   ("null", True)],
    "global_batch": [("8", None), ("1", None), ("7", None), ("4096", None), ("0", False),
                     ("-8", False), ("0.5", False), ("1e400", False), ("false", False)],
}


def _evaluation(required: bool = True) -> tuple[str, bool | None]:
    parts, good = [], True
    for key, values in EVAL_FIELDS.items():
        if key in ("every_steps", "samples") and required or R.random() < 0.5:
            v, g = R.choice(values)
            parts.append(f"{key}: {v}")
            good = False if g is False or good is False else (None if g is None else good)
    return "{" + ", ".join(parts) + "}", good


def write_evaluation(c: Cases) -> None:
    n = 0
    while n < 130:
        scen = R.choice(EVAL_SCENARIOS)
        value, good = _evaluation(required=R.random() < 0.9)
        if "every_steps" not in value or "samples" not in value:
            good = False
        _add(c, "evaluation", ["run", scen, "-q", *_sets(f"training.evaluation={value}")],
             None, "refuse" if good is False else "either")
        n += 1
    for v, expect in (("null", "either"), ("{}", "refuse"), ("5", "refuse"), ("[]", "refuse"),
                      ("''", "refuse"), ("{every_steps: 4, samples: 8, nope: 1}", "refuse"),
                      ("{every_step: 4, samples: 8}", "refuse"), ("true", "refuse")):
        _add(c, "evaluation", ["run", "quickstart", "-q", *_sets(f"training.evaluation={v}")],
             None, expect)
    for s, expect in (("training.evaluation.every_steps=5", "refuse"),
                      ("training.evaluation.samples=5", "refuse"),
                      ("training.evaluation.nope=5", "refuse")):
        _add(c, "evaluation", ["run", "quickstart", "-q", *_sets(s)], None, expect)
    good = "training.evaluation={every_steps: 4, samples: 64}"
    for scen in EVAL_SCENARIOS:                                  # every output format
        for fmt in ("table", "json"):
            _add(c, "evaluation", ["run", scen, "-q", "--format", fmt, *_sets(good)], None,
                 "either")
        _add(c, "evaluation", ["run", scen, "-q", *_sets(good, "simulation.iterations=3")],
             None, "either")
    for cmd in (["reliability", "-q", "--trials", "2", "--workers", "1"],
                ["reliability", "llama2-70b-lora-8gpu", "-q", "--trials", "2", "--workers",
                 "1", "--format", "json"],
                ["compare", "quickstart", "-q", "--strategies", "fsdp-full,ddp"],
                ["plan", "quickstart", "-q", "--replay", "1", *BOUND],
                ["capacity", "quickstart", "-q", "--strategies", "ddp"]):
        for v, expect in ((good, "either"),
                          ("training.evaluation={every_steps: 0, samples: 64}", "refuse"),
                          ("training.evaluation={every_steps: 4}", "refuse"),
                          ("training.evaluation={every_steps: 4, samples: 64, "
                           "global_batch: -1}", "refuse")):
            _add(c, "evaluation", [*cmd, *_sets(v)], None, expect)
    # a mix job's set: the fleet answers per training step (docs/energy.md)
    for v, expect in (("{every_steps: 4, samples: 64}", "either"),
                      ("{every_steps: -4, samples: 64}", "refuse"),
                      ("{samples: 64}", "refuse")):
        text = MIX_FAIL.format(failures="", set=f", set: {{training.evaluation: {v}}}")
        _add(c, "evaluation", ["cluster", "m.yaml", "-q"], {"m.yaml": text}, expect)


# ------------------------------------------------------------------------ fleet failures
MIX_FAIL = """name: m
cluster: {{topology: dgx-a100-superpod, nodes: 4}}
scheduler: easy
placement: topology
jobs:
  - {{name: a, arrival: 0 s, scenario: resnet50-ddp-8gpu, gpus: 8, steps: 20,
      checkpoint: {{interval: 5 s, save: 1 s, restore: 2 s}}{set}}}
  - {{name: b, arrival: 5 s, scenario: resnet50-ddp-8gpu, gpus: 16, steps: 20}}
{failures}"""
RATES = {  # class -> [(rate, good)]; a rate per component or per node-/gpu-time
    "gpu": [("'0.303 per 1000 gpu-days'", True), ("'100 per 1 gpu-days'", True),
            ("'1 per 1000 node-days'", True), ("'0 per day'", True),
            ("'1 per day'", False), ("'-1 per 1000 gpu-days'", False),
            ("'nan per 1000 gpu-days'", False), ("'1 per 0 gpu-days'", False),
            ("'1e300 per 1 gpu-days'", False), ("'inf per 1 gpu-days'", False),
            ("'1 per 1000 switch-days'", False), ("0.3", False), ("'x'", False),
            ("[1]", False), ("'3 per week'", False), ("'1 per 1000 gpu-fortnights'", False)],
    "nic": [("'0.1 per 1000 nic-days'", None), ("'1 per 1000 node-days'", True),
            ("'1 per 1 gpu-days'", True), ("'-3 per 1000 node-days'", False),
            ("'1e30 per 1 node-days'", False), ("''", False), ("null", None)],
    "link": [("'0.316 per 1000 node-days'", True), ("'5 per 1 node-days'", True),
             ("'1 per 1000 link-days'", None), ("'1 per 1000 gpu-days'", True),
             ("'1 per 1e-300 node-days'", False), ("'1 per day'", False), ("1e9", False)],
    "spine_switch": [("'1 per 1000 switch-days'", True), ("'10 per 1 switch-days'", True),
                     ("'1 per 1000 node-days'", True), ("'1 per day'", False),
                     ("'-1 per 1 switch-days'", False), ("'1e200 per 1 switch-days'", False)],
    "node": [("'2.9 per 1000 node-days'", True), ("'50 per 1 node-days'", True),
             ("'1 per 1000 gpu-days'", None), ("'nope'", False)],
    "leaf_switch": [("'1 per 1000 switch-days'", True), ("'20 per 1 switch-days'", True),
                    ("'0 per 1 switch-days'", True), ("'-0.5 per 1 switch-days'", False)],
}
REPAIRS = [("24 h", True), ("1 s", True), ("0 s", None), ("1e9 h", None), ("-1 h", False),
           ("nan h", False), ("4", False), ("'1 fortnight'", False), ("inf s", False),
           ("[4 h]", False), ("null", None)]
SCHEDULE = [
    ("{at: 1 s, gpu: n0.gpu2}", True), ("{at: 2 s, nic: n1.nic0}", True),
    ("{at: 2 s, link: [leaf.r0.g0, spine.3]}", None), ("{at: 3 s, switch: spine.2}", True),
    ("{at: 3 s, switch: leaf.r0.g1}", True), ("{at: 1 s, node: 2}", True),
    ("{at: 1 s, gpu: n9.gpu2}", False), ("{at: 1 s, gpu: n0.gpu99}", False),
    ("{at: 1 s, gpu: n0}", False), ("{at: 1 s, gpu: 3}", False),
    ("{at: 1 s, nic: n0.nic99}", False), ("{at: 1 s, nic: n0.gpu0}", False),
    ("{at: 1 s, link: [leaf.r0.g0]}", False), ("{at: 1 s, link: [n0.gpu0, spine.3]}", False),
    ("{at: 1 s, link: [leaf.r0.g0, spine.3, spine.2]}", False),
    ("{at: 1 s, link: [spine.0, spine.1]}", False), ("{at: 1 s, link: leaf.r0.g0}", False),
    ("{at: 1 s, switch: spine.99}", False), ("{at: 1 s, switch: n0.gpu0}", False),
    ("{at: -1 s, gpu: n0.gpu0}", False), ("{at: nan s, gpu: n0.gpu0}", False),
    ("{at: 1e30 h, gpu: n0.gpu0}", None), ("{at: 1 s}", False),
    ("{at: 1 s, gpu: n0.gpu0, nic: n0.nic0}", False), ("{gpu: n0.gpu0}", False),
    ("{at: 1 s, gpu: n0.gpu0, nope: 1}", False), ("{at: 1 s, node: 99}", False),
    ("{at: 1 s, node: -1}", False), ("{at: 1 s, gpu: ''}", False), ("5", False),
]


def write_fleet_failures(c: Cases) -> None:
    n = 0
    while n < 150:
        lines, good = ["failures:"], True
        for cls in R.sample(sorted(RATES), R.randint(1, 3)):
            v, g = R.choice(RATES[cls])
            lines.append(f"  {cls}: {v}")
            good = False if g is False or good is False else (None if g is None else good)
            if R.random() < 0.5:
                rkey = {"node": "repair", "leaf_switch": "leaf_repair",
                        "spine_switch": "spine_repair"}.get(cls, f"{cls}_repair")
                v, g = R.choice(REPAIRS)
                lines.append(f"  {rkey}: {v}")
                good = False if g is False or good is False else (None if g is None else good)
        if R.random() < 0.4:
            entries = R.sample(SCHEDULE, R.randint(1, 3))
            lines.append("  schedule: [" + ", ".join(e for e, _ in entries) + "]")
            for _, g in entries:
                good = False if g is False or good is False else (None if g is None else good)
        text = MIX_FAIL.format(failures="\n".join(lines) + "\n", set="")
        _add(c, "fleet-failures", ["cluster", "m.yaml", "-q"], {"m.yaml": text},
             "refuse" if good is False else "either")
        n += 1
    for entry, good in SCHEDULE:                               # each schedule entry alone
        text = MIX_FAIL.format(failures=f"failures:\n  schedule: [{entry}]\n", set="")
        _add(c, "fleet-failures", ["cluster", "m.yaml", "-q"], {"m.yaml": text},
             "refuse" if good is False else "either")
    base = MIX_FAIL.format(failures="failures:\n  gpu: '1 per 1 gpu-days'\n", set="")
    for s, expect in (("failures.gpu=1 per 1 gpu-days", "either"),
                      ("failures.gpu=-1 per 1 gpu-days", "refuse"),
                      ("failures.nic_repair=2 h", "either"),
                      ("failures.spine_repair=-2 h", "refuse"),
                      ("failures.gpus=1 per 1 gpu-days", "refuse"),
                      ("failures.schedule=[{at: 1 s, gpu: n0.gpu1}]", "either"),
                      ("failures.schedule=[{at: 1 s, gpu: n7.gpu1}]", "refuse"),
                      ("failures=null", "either"), ("failures=3", "refuse"),
                      ("cluster.nodes=1", "refuse"), ("cluster.nodes=2", "either")):
        _add(c, "fleet-failures", ["cluster", "m.yaml", "-q", "--set", s], {"m.yaml": base},
             expect)
        _add(c, "fleet-failures", ["cluster", "m.yaml", "-q", "--against", s],
             {"m.yaml": base}, expect)
    # the same failures on other fabrics: names their own
    for topo, nodes, entry, good in (
            ("dgx-h100-superpod", 4, "{at: 1 s, gpu: n0.gpu3}", True),
            ("dgx-b300-superpod", 4, "{at: 1 s, nic: n0.nic0}", True),
            ("aws-p5", 4, "{at: 1 s, switch: spine.0}", None),
            ("gb300-nvl72", 1, "{at: 1 s, gpu: n0.gpu70}", None),
            ("gb300-nvl72", 1, "{at: 1 s, gpu: n0.gpu72}", False),
            ("dgx-b300", 2, "{at: 1 s, switch: spine.0}", None),
            ("dgx-a100-superpod", 4, "{at: 1 s, switch: leaf.r9.g9}", False)):
        text = MIX_FAIL.format(failures=f"failures:\n  gpu: '1 per 1 gpu-days'\n"
                                        f"  schedule: [{entry}]\n", set="")
        text = text.replace("dgx-a100-superpod, nodes: 4", f"{topo}, nodes: {nodes}")
        _add(c, "fleet-failures", ["cluster", "m.yaml", "-q"], {"m.yaml": text},
             "refuse" if good is False else "either")
    for name in ("acme-seren-day", "llm-oversubscribed"):        # shipped mixes, new rates
        _add(c, "fleet-failures", ["cluster", name, "-q", "--set",
                                   "failures.gpu=1e6 per 1000 gpu-days"], None, "either")


# ------------------------------------------------------------------------ fp8 attention
FP8A_SCENARIOS = ["quickstart", "llama3-70b-fsdp-tp8-256gpu", "mixtral-8x7b-ep8",
                  "llama2-70b-lora-8gpu", "llama3-8b-fsdp-mi300x", "resnet50-ddp-1gpu",
                  "bert-large-horovod-8gpu"]
FP8A_TOPOS = ["dgx-a100", "dgx-h100", "dgx-b200", "dgx-b300", "gb300-nvl72", "mi300x-8gpu",
              "hgx-h200", None]


def write_fp8_attention(c: Cases) -> None:
    values = [("true", True), ("false", True), ("yes", True), ("1", False), ("'true'", False),
              ("null", False), ("[true]", False), ("2", False), ("on", True)]
    recipes = ["delayed", "current", "mxfp8", "tensorwise", None]
    precisions = ["fp8", "bf16", "fp16", None]
    attentions = ["sdpa", "flash2", "flash3", "eager", None]
    n = 0
    while n < 140:
        scen, topo = R.choice(FP8A_SCENARIOS), R.choice(FP8A_TOPOS)
        v, well_typed = R.choice(values)
        recipe, prec, att = R.choice(recipes), R.choice(precisions), R.choice(attentions)
        sets = [f"training.fp8_attention={v}"]
        for key, val in (("training.fp8_recipe", recipe), ("training.precision", prec),
                         ("training.attention", att), ("cluster.topology", topo)):
            if val:
                sets.append(f"{key}={val}")
        on = v in ("true", "yes", "on")
        if scen == "llama2-70b-lora-8gpu":      # FP8 (delayed) on H100 as shipped
            prec, recipe, topo = prec or "fp8", recipe or "delayed", topo or "dgx-h100"
        bad = not well_typed or on and (prec != "fp8" or recipe in ("tensorwise", None)
                                        or att in ("eager", "flash2", "flash3")
                                        or topo in ("dgx-a100", "mi300x-8gpu", None))
        _add(c, "fp8-attention", ["run", scen, "-q", *_sets(*sets)], None,
             "refuse" if bad else "either")
        n += 1
    on = ("cluster.topology=dgx-h100", "training.precision=fp8",
          "training.fp8_recipe=delayed", "training.fp8_attention=true")
    for cmd in (["plan", "quickstart", "-q", "--replay", "1", *BOUND],
                ["compare", "quickstart", "-q", "--strategies", "fsdp-full,ddp"],
                ["capacity", "quickstart", "-q", "--strategies", "ddp"],
                ["reliability", "quickstart", "-q", "--trials", "2", "--workers", "1"]):
        _add(c, "fp8-attention", [*cmd, *_sets(*on)], None, "either")
        _add(c, "fp8-attention", [*cmd, *_sets(*on[:3], "training.fp8_attention=3")], None,
             "refuse")
        _add(c, "fp8-attention", [*cmd, *_sets("training.fp8_attention=true")], None, "refuse")
    # Megatron's own spelling is not read (the note): refused as unknown, not dropped
    for scen in ("mixtral-8x7b-ep8", "llama3-70b-fsdp-tp8-256gpu"):
        _add(c, "fp8-attention", ["run", scen, "-q", *_sets(
            "strategy.fp8_dot_product_attention=true")], None, "refuse")


# ------------------------------------------------------------------------ cross entropy
def write_cross_entropy(c: Cases) -> None:
    fusion = [("true", True), ("false", True), ("no", True), ("'false'", False),
              ("0", False), ("null", False), ("[]", False)]
    impl = [("native", True), ("te", True), ("TE", False), ("triton", False), ("''", False),
            ("null", False), ("1", False)]
    # (gpt3-175b-megatron-tp8-pp16-selene, a 16-stage pipeline, takes ~60 s of wall time a
    # run on the shared machine: the combinations below only)
    megatron = ("llama3-70b-fsdp-tp8-256gpu", "mixtral-8x7b-ep8")
    for scen in (*megatron, "quickstart", "resnet50-ddp-1gpu", "llama3-8b-fsdp-mi300x"):
        for v, ok in fusion:
            _add(c, "cross-entropy", ["run", scen, "-q", *_sets(
                f"strategy.cross_entropy_loss_fusion={v}")], None,
                "either" if ok and scen in megatron else "refuse")
        for v, ok in impl:
            _add(c, "cross-entropy", ["run", scen, "-q", *_sets(
                f"strategy.cross_entropy_fusion_impl={v}")], None,
                "either" if ok and scen in megatron else "refuse")
    for scen in (*megatron, "gpt3-175b-megatron-tp8-pp16-selene"):
        for a, b in (("false", "native"), ("false", "te"), ("true", "native")):
            _add(c, "cross-entropy", ["run", scen, "-q", *_sets(
                f"strategy.cross_entropy_loss_fusion={a}",
                f"strategy.cross_entropy_fusion_impl={b}")], None, "either")
    for cmd in (["plan", "mixtral-8x7b-ep8", "-q", "--replay", "1", *BOUND],
                ["compare", "llama3-70b-fsdp-tp8-256gpu", "-q", "--strategies", "fsdp-full"]):
        _add(c, "cross-entropy", [*cmd, *_sets("strategy.cross_entropy_loss_fusion=false")],
             None, "either")
    # Megatron-LM's args-file spelling (not read: see docs) and a mistyped key
    args = (REPO / "scenarios/configs/mixtral_8x7b_ep8.args").read_text()
    for extra, expect in (("--cross-entropy-loss-fusion", "either"),
                          ("--cross-entropy-fusion-impl te", "either"),
                          ("--cross-entropy-fusion-impl nope", "either")):
        _add(c, "cross-entropy", ["run", "mixtral-8x7b-ep8", "-q", "--config", "a.args"],
             {"a.args": args + "\n" + extra + "\n"}, expect)
    _add(c, "cross-entropy", ["run", "mixtral-8x7b-ep8", "-q", *_sets(
        "strategy.cross_entropy_fusion=true")], None, "refuse")


# ------------------------------------------------------------------------------ lockstep
TOML = """[training]
local_batch_size = {local}
seq_len = {seq}
{gbs}
[parallelism]
data_parallel_shard_degree = {dp}
tensor_parallel_degree = {tp}
pipeline_parallel_degree = {pp}
pipeline_parallel_schedule = "{sched}"
{extra}
"""


def write_lockstep(c: Cases) -> None:
    n = 0
    scheds = ["Interleaved1F1B"] * 4 + ["ZBVZeroBubble", "1F1B", "GPipe",
                                        "interleaved1f1b", "Interleaved1f1b", ""]
    while n < 70:
        pp = R.choice([2, 4, 8, 3, 16, 0, -1, 80, 160])
        tp = R.choice([8, 4])
        dp = R.choice([-1, -1, 2, 3])
        sched = R.choice(scheds)
        local = R.choice([1, 8, 16, 0, 10 ** 6, "1.5"])
        gbs = R.choice(["", "global_batch_size = 64", "global_batch_size = 16777216",
                        "global_batch_size = 100000000", "global_batch_size = 7",
                        "global_batch_size = -1"])
        extra = R.choice(["", "pipeline_parallel_layers_per_stage = 5",
                          "pipeline_parallel_layers_per_stage = 0",
                          "pipeline_parallel_layers_per_stage = 81",
                          "pipeline_parallel_microbatch_size = 1",
                          "pipeline_parallel_microbatch_size = 3",
                          "pipeline_parallel_microbatch_size = 0"])
        text = TOML.format(local=local, seq=R.choice([8192, 2048, 0]), gbs=gbs, dp=dp, tp=tp,
                           pp=pp, sched=sched, extra=extra)
        bad = (sched not in ("Interleaved1F1B", "ZBVZeroBubble", "1F1B", "GPipe")
               or pp < 1 or local in (0, "1.5") or "= 0" in extra or "-1\n" in gbs + "\n"
               or "seq_len = 0" in text)
        _add(c, "lockstep", ["run", "llama2-70b-fsdp-128gpu", "-q", "--config", "job.toml"],
             {"job.toml": text}, "refuse" if bad else "either")
        n += 1


# ----------------------------------------------------------------------------- power cap
CAP_TOPOS = {"dgx-a100": 400, "dgx-h100": 700, "hgx-h200": 700, "dgx-b200": 1000,
             "dgx-b300": 1100, "gb300-nvl72": 1400, "mi300x-8gpu": 750, "mi355x-8gpu": 1400}


def write_power_cap(c: Cases) -> None:
    for topo in CAP_TOPOS:
        for v, expect in (("100", "either"), ("300", "either"), ("650", "either"),
                          ("1000", "either"), ("5000", "either"), ("0", "refuse"),
                          ("-1", "refuse"), ("1", "either"), ("nan", "refuse"),
                          ("inf", "refuse"), ("'500'", "refuse"), ("500 W", "refuse")):
            _add(c, "power-cap", ["run", "quickstart", "-q", *_sets(
                f"cluster.topology={topo}", f"cluster.power_cap_w={v}")], None, expect)
    for cmd in (["compare", "quickstart", "-q", "--strategies", "ddp"],
                ["plan", "quickstart", "-q", "--replay", "1", *BOUND],
                ["reliability", "-q", "--trials", "2", "--workers", "1"],
                ["capacity", "quickstart", "-q", "--strategies", "ddp"]):
        for topo, v, expect in (("mi300x-8gpu", "750", "either"), ("mi300x-8gpu", "2000",
                                                                     "either"),
                                ("dgx-h100", "0.5", "either"), ("dgx-h100", "-5", "refuse")):
            _add(c, "power-cap", [*cmd, *_sets(f"cluster.topology={topo}",
                                               f"cluster.power_cap_w={v}")], None, expect)
    text = MIX_FAIL.format(failures="", set=", set: {cluster.power_cap_w: 300}")
    _add(c, "power-cap", ["cluster", "m.yaml", "-q"], {"m.yaml": text}, "refuse")
    text = MIX_FAIL.format(failures="", set="").replace("nodes: 4}", "nodes: 4, "
                                                                       "power_cap_w: 300}")
    _add(c, "power-cap", ["cluster", "m.yaml", "-q"], {"m.yaml": text}, "either")


# -------------------------------------------------------------------------------- aws-p5
def write_aws_p5(c: Cases) -> None:
    ops = ["all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast",
           "send_recv", "allreduce_perf"]
    nodes = [("2", True), ("4", True), ("32", True), ("3", True), ("33", True), ("1", True),
             ("0", False), ("-2", False), ("1e3", False), ("x", False), ("1000000", False)]
    sizes = [(["-b", "32M", "-e", "32M"], True), (["-b", "8", "-e", "8G"], True),
             (["-b", "0", "-e", "1M"], None), (["-b", "7", "-e", "7"], None),
             (["-b", "1M", "-e", "512K"], False), (["-b", "1P", "-e", "1P"], None),
             (["-b", "1M", "-e", "1M", "-f", "1"], None),
             (["-b", "8", "-e", "8G", "-f", "1.000001"], None),
             (["-b", "8", "-e", "8G", "-f", "0.5"], False),
             (["-b", "8", "-e", "8G", "-f", "nan"], False), (["-b", "-1M"], False),
             (["-b", "1X"], False), (["-e", "1e400"], False)]
    extras = [([], True), (["--algo", "ring"], True), (["--algo", "nvls"], None),
              (["--proto", "LL128"], True), (["--nccl-version", "2.28"], True),
              (["--nccl-version", "2.7"], None), (["--nccl-version", "9.9"], None),
              (["--nccl-algo", "^tree"], True), (["--fidelity", "analytical"], True),
              (["--max-channels", "0"], False), (["--collnet"], None),
              (["--ranks", "0-7"], True), (["--ranks", "0,8"], None),
              (["--ranks", "0-999"], False)]
    n = 0
    while n < 110:
        op = R.choice(ops)
        nd, g1 = R.choice(nodes)
        sz, g2 = R.choice(sizes)
        ex, g3 = R.choice(extras)
        gs = (g1, g2, g3)
        _add(c, "aws-p5", ["collective", op, "--topology", "aws-p5", "--nodes", nd, *sz, *ex],
             None, "refuse" if False in gs else "either")
        n += 1
    for nd in ("2", "8", "32"):
        _add(c, "aws-p5", ["run", "quickstart", "-q", *_sets("cluster.topology=aws-p5",
                                                              f"cluster.nodes={nd}")],
             None, "either")
        _add(c, "aws-p5", ["run", "llama3-70b-fsdp-tp8-256gpu", "-q", *_sets(
            "cluster.topology=aws-p5", f"cluster.nodes={nd}")], None, "either")


# ----------------------------------------------------------------------- blackwell nodes
def write_blackwell_nodes(c: Cases) -> None:
    for topo in ("dgx-b300-superpod", "gb300-nvl72", "dgx-b300", "dgx-b200-superpod"):
        for scen in ("quickstart", "llama2-7b-fsdp-128gpu", "llama3-70b-fsdp-tp8-256gpu",
                     "mixtral-8x7b-ep8"):
            for nodes, expect in (("1", "either"), ("2", "either"), ("4", "either"),
                                  ("0", "refuse"), ("-2", "refuse"), ("2.5", "refuse"),
                                  ("1e9", "refuse"), ("100000000", "refuse")):
                if R.random() < 0.45 and expect == "either":
                    continue
                _add(c, "blackwell-nodes", ["run", scen, "-q", *_sets(
                    f"cluster.topology={topo}", f"cluster.nodes={nodes}")], None, expect)
        for gpus, expect in (("8", "either"), ("7", "either"), ("1000000", "refuse")):
            _add(c, "blackwell-nodes", ["run", "quickstart", "-q", *_sets(
                f"cluster.topology={topo}", "cluster.nodes=2", f"cluster.gpus={gpus}")], None,
                expect)
        _add(c, "blackwell-nodes", ["topology", topo, "--nodes", "3"], None, "either")
        _add(c, "blackwell-nodes", ["collective", "all_reduce", "--topology", topo,
                                    "--nodes", "2", "-b", "1M", "-e", "1M"], None, "either")


# ------------------------------------------------------------------------------ validate
def write_validate(c: Cases) -> None:
    cases = [
        (["validate", "energy", "--root", "missing", "--out", "o"], "refuse"),
        (["validate", "energy", "--out", "f.txt"], "refuse"),
        (["validate", "traces", "--out", "f.txt"], "refuse"),
        (["validate", "traces", "--out", "o", "--root", "f.txt"], "refuse"),
        (["validate", "traces", "-q", "--out", "o"], "either"),
        (["validate", "traces", "--nope"], "refuse"),
        (["validate", "collectives", "--split", "validation", "--fidelity", "nope"], "refuse"),
        (["validate", "parallel", "--max-gpus", "-8"], "refuse"),
        (["validate", "parallel", "--workers", "1e3"], "refuse"),
        (["validate", "training", "--max-evals", "-1"], "refuse"),
        (["validate", "gpu", "--root", "x"], "refuse"),
        (["validate", "all", "--out", "f.txt"], "refuse"),
        (["validate", "--out", "o"], "refuse"),
    ]
    setup = (REPO / "validation/energy/setup.yaml").read_text()
    files = {name.name: name.read_bytes() for name in (REPO / "validation/energy").iterdir()
             if name.suffix in (".csv", ".yaml")}
    base = {f"e/{k}": v for k, v in files.items()}
    base["f.txt"] = "USER DATA\n"
    for args, expect in cases:
        _add(c, "validate", args, base if "e" in args else {"f.txt": "USER DATA\n"}, expect)
    good = ('"training.evaluation={every_steps: 48, samples: 173, first_step: 192, '
            'dense_mask_workers: 1}"')
    bad_checks = [
        good.replace("every_steps: 48", "every_steps: 0"),
        good.replace("samples: 173", "samples: -1"),
        good.replace("first_step: 192", "first_step: x"),
        good.replace("every_steps: 48, ", ""),
        good.replace("dense_mask_workers: 1", "dense_mask_workers: 0"),
        '"training.evaluation=5"', '"training.nope=1"', '"cluster.nodes=0"', "nope=1", "3",
    ]
    old = f"    - {good}\n  eos_n8"
    for check in bad_checks:
        text = setup.replace(old, f"    - {check}\n  eos_n8")
        assert text != setup
        _add(c, "validate", ["validate", "energy", "--root", "e", "--out", "o"],
             {**base, "e/setup.yaml": text}, "refuse")
    for entry in ("  eos_n8_ngc24.09_nemo: power_sistem\n", "  nope_system: power_system\n",
                  "  eos_n8_ngc24.09_nemo: []\n", "  eos_n8_ngc24.09_nemo: [1, 2]\n",
                  "  eos_n8_ngc24.09_nemo: null\n"):
        text = setup.replace("  eos_n8_ngc24.09_nemo: power_system      # the sets above\n",
                             entry)
        assert text != setup
        _add(c, "validate", ["validate", "energy", "--root", "e", "--out", "o"],
             {**base, "e/setup.yaml": text}, "either" if "[]" in entry else "refuse")
    text = setup.replace("evaluation_checks:", "evaluation_checks: 5\nnope:")
    _add(c, "validate", ["validate", "energy", "--root", "e", "--out", "o"],
         {**base, "e/setup.yaml": text}, "refuse")


# -------------------------------------------------------------------------------- writes
WRITERS5 = [
    ["run", "quickstart", "-q", "--out", "out", "--set",
     "training.evaluation={every_steps: 4, samples: 64}"],
    ["cluster", "m.yaml", "-q", "--out", "out"],
    ["validate", "traces", "-q", "--out", "out"],
    ["reliability", "llama2-70b-lora-8gpu", "-q", "--trials", "2", "--workers", "1", "--out",
     "out", "--set", "training.evaluation={every_steps: 48, samples: 173}"],
]


def write_writes(c: Cases) -> None:
    st = {"m.yaml": MIX_FAIL.format(
        failures="failures:\n  gpu: '100 per 1 gpu-days'\n  link: '10 per 1 node-days'\n"
                 "  schedule: [{at: 1 s, switch: spine.2}]\nlimits: {horizon: 1 d}\n",
        set="")}            # (a day: under limits.max_failures, so the mix runs and writes)
    for cmd in WRITERS5:
        for victims in ("all", "one", "dangling"):
            _add(c, "writes", cmd, st, "either",
                 {"first_run": True, "link_outputs": victims, "guard": ["victim/*"]})
        dangling = ({"links": {"out": "nowhere"}}, "refuse")
        for setup, expect in (*c4.OUT_SETUPS[:2], dangling, *c4.OUT_SETUPS[2:]):
            _add(c, "writes", cmd, st, expect, setup)
    c4.add_kills(c, WRITERS5, st, 16, 2.0)


def write_all(root: Path) -> None:
    c4.write_cases(root, (write_evaluation, write_fleet_failures, write_fp8_attention,
                          write_cross_entropy, write_lockstep, write_power_cap, write_aws_p5,
                          write_blackwell_nodes, write_validate, write_writes))


COMMANDS = dict(c4.COMMANDS, write=lambda root, rest: write_all(root))

if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    COMMANDS[sys.argv[1]](Path(sys.argv[2]), sys.argv[3:])

#!/usr/bin/env python3
"""The third hostile-input campaign (issue 42, round two): >= 1,000 inputs over the surfaces
added since the readers campaign, and writes that must never change a file the user owns.

    python benchmarks/hostile/campaign3.py write /tmp/c3             # ~1,100 case folders
    python benchmarks/hostile/campaign3.py run /tmp/c3 TREE TAG      # TREE's clustersim
    python benchmarks/hostile/campaign3.py table /tmp/c3 before after
    python benchmarks/hostile/campaign3.py csv /tmp/c3 before after > campaign3_results.csv
    python benchmarks/hostile/campaign3.py bad /tmp/c3 after         # the cases left

Families: Chakra import (bit flips, bad types, world sizes from file names, mismatched
ranks), pipelines (grad_accum / global batch magnitudes, floats as counts, uneven splits),
plan (--max-* extremes, huge node counts), reliability magnitudes, studies (plot paths,
missing folders), writes (symlinked outputs, --out at a file or a link, a kill mid-write),
cluster job mixes, energy options (--pue, --electricity-price, --carbon-intensity),
cluster.power_cap_w, training.finetune, AMD hardware and strategies, host_dispatch, and
plan/capacity options. Every input is drawn by a fixed seed (3), so ``write`` gives the same
cases every time. A case is a folder with ``cmd`` (arguments, one a line), ``expect``
(``refuse``: exit 0 is a silent wrong success; ``ok``: must run; ``either``), its files, and
optionally ``setup.json`` (symbolic links and a first run made before the case runs, the
files they point to that must not change: ``guard``; a ``kill_after`` in seconds for a kill
mid-write, after which every guarded output must be whole). The runner is the readers
campaign's (a child forked from one process that imported TREE's ``simulator``, 4 GiB of
address space, one case at a time); a hang is 20 s of CPU time or 300 s of wall time (the
two cores are shared: at a load of 12 a run of 12 s of CPU took 60 s). Every ``plan`` case
carries ``--max-work 20000`` (about 20 s by plan's own estimate) unless it tests that
option, so a search must end or be refused at once. A user file changed through a link, or
an output left cut by a kill, is its own bad outcome. About 40 minutes per tree here.
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import random
import resource
import shutil
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import readers_campaign as rc  # noqa: E402 - the readers campaign's runner and mutations

R = random.Random(3)
rc.R = R                       # the shared mutation helpers draw from this campaign's seed
REPO = Path(__file__).resolve().parents[2]
INF, NAN = float("inf"), float("nan")
Cases = rc.Cases


def _add(c: Cases, family: str, args: list[str], files: dict | None = None,
         expect: str = "either", setup: dict | None = None) -> None:
    c.add(family, args, files, expect)
    if setup:
        d = c.root / f"{family}-{c.n:04d}"
        (d / "setup.json").write_text(json.dumps(setup, indent=1) + "\n")


# ------------------------------------------------------------------------------ chakra
def write_chakra(c: Cases, work: Path) -> None:
    from simulator.importers.chakra import decode, encode
    ours, plain = rc._chakra_base(work)
    imp = ["import", "chakra", "r.0.et", "r.1.et", "-o", "o.json"]
    for _ in range(80):                                    # bit flips, 1..16 bits
        base = R.choice([ours, plain])
        r = R.randrange(2)
        files = {f"r.{i}.et": rc._flip(d, R.randint(1, 16)) if i == r else d
                 for i, d in enumerate(base)}
        _add(c, "chakra-flip", imp, files)
    n = 0
    while n < 60:                                          # one field of a wrong type / range
        files = {}
        r = R.randrange(2)
        for i, d in enumerate(plain):
            meta, nodes = decode(d, "x")
            if i == r and rc._mutate_node(nodes, R.choice([4, 7])) == "nothing":
                break
            files[f"r.{i}.et"] = encode([meta, *nodes])
        if len(files) == 2:
            _add(c, "chakra-type", imp, files, "refuse")
            n += 1
    for rank in (2, 7, 1023, 65_537, 10 ** 6, 10 ** 9, 2 ** 31, 2 ** 63, 10 ** 30):
        base = R.choice([ours, plain])                     # a world from the file names
        names = ["w.0.et", f"w.{rank}.et"]
        _add(c, "chakra-world", ["import", "chakra", *names, "-o", "o.json"],
             {names[0]: base[0], names[1]: base[1]}, "refuse" if base is plain else "either")
    for name in ("w.-1.et", "w.x.et", "w.1e9.et", "w..et", "w.0x10.et", "w.01.et"):
        _add(c, "chakra-world", ["import", "chakra", "w.0.et", name, "-o", "o.json"],
             {"w.0.et": plain[0], name: plain[1]})
    for _ in range(40):                                    # ranks that do not match
        m0, n0 = decode(plain[0], "x")
        m1, n1 = decode(plain[1], "x")
        colls = [n for n in n1 if n.type == 7]
        victim = R.choice(colls)
        how = R.choice(["size", "type", "drop"])
        if how == "drop":
            n1.remove(victim)
            for node in n1:
                for field in (node.ctrl_deps, node.data_deps):
                    if victim.id in field:
                        field.remove(victim.id)
        elif how == "type":
            types = [a for a in victim.attr if a.name == "comm_type"]
            old = types[0].int64_val if types else 0
            rc._set_attr(victim, "comm_type", "int64", (old + R.randint(1, 8)) % 10)
        else:
            sizes = [a for a in victim.attr if a.name == "comm_size"]
            old = sizes[0].int64_val if sizes else 1
            rc._set_attr(victim, "comm_size", "int64", old * R.choice([2, 3, 1000]) + 1)
        _add(c, "chakra-ranks", imp, {"r.0.et": encode([m0, *n0]),
                                      "r.1.et": encode([m1, *n1])},
             "either" if how == "size" else "refuse")


# --------------------------------------------------------------------------- pipelines
PIPE_SCENARIOS = ["mixtral-8x7b-ep8", "gpt3-175b-megatron-tp8-pp16-selene",
                  "llama3-405b-tp8-pp8-fsdp-512gpu"]


def write_pipelines(c: Cases) -> None:
    counts = ["1000000", "16777216", "16777217", "1e18", "1.5", "2.0", "0", "-4",
              "99999999999999999999", "1e300", "true", "'8'"]
    for scen in PIPE_SCENARIOS:
        for value in counts:
            whole = value.isdigit() and 0 < int(value) <= 16_777_216
            _add(c, "pipeline", ["run", scen, "-q", "--set", f"training.grad_accum={value}"],
                 None, "either" if whole else "refuse")
        for value in ("1000000", "1e21", "2.5", "0", "-8", "1099511627777", "7", "1000003"):
            _add(c, "pipeline", ["run", scen, "-q", "--set",
                                 f"training.global_batch={value}"], None,
                 "either" if value in ("1000000", "7", "1000003") else "refuse")
    for layers_pp in ("3", "5", "7", "31", "33", "100"):   # uneven stage splits
        _add(c, "pipeline", ["run", "gpt3-175b-megatron-tp8-pp16-selene", "-q", "--set",
                             f"strategy.pipeline_model_parallel_size={layers_pp}"])
    for vp in ("0", "-1", "7", "97", "1.5"):
        _add(c, "pipeline", ["run", "gpt3-175b-megatron-tp8-pp16-selene", "-q", "--set",
                             f"strategy.num_layers_per_virtual_pipeline_stage={vp}"], None,
             "refuse" if vp in ("0", "-1", "1.5") else "either")
    ds = json.loads((REPO / "scenarios/configs/ds_zero3.json").read_text())
    for key, value in (("gradient_accumulation_steps", 1e18), ("gradient_accumulation_steps",
                                                               2.0),
                       ("gradient_accumulation_steps", 10 ** 9), ("train_batch_size", 1e21),
                       ("train_batch_size", 7.5), ("train_batch_size", 2 ** 41),
                       ("train_micro_batch_size_per_gpu", 0.5),
                       ("train_micro_batch_size_per_gpu", 2 ** 30)):
        doc = dict(ds)
        doc[key] = value
        _add(c, "pipeline", ["run", "llama2-7b-fsdp-128gpu", "-q", "--config", "ds.json"],
             {"ds.json": json.dumps(doc)},      # JSON has one number type: 2.0 is 2
             "either" if value in (10 ** 9, 2.0) else "refuse")
    for batch in ("1e21", "1e9", "12.5", "2^40", "1099511627776", "1099511627777", "nan",
                  "-inf", "0x10"):
        _add(c, "pipeline", ["plan", "mixtral-8x7b-ep8", "-q", "--global-batch", batch,
                             "--replay", "1", *BOUND], None,
             "either" if batch in ("1e9", "1099511627776", "1e21") else "refuse")


# -------------------------------------------------------------------------------- plan
BOUND = ["--max-work", "20000"]     # ~20 s by plan's own estimate: past it, refused at once


def write_plan(c: Cases) -> None:
    """Every search is bounded to the campaign's 20 s by ``--max-work`` (but where the
    case is that option): it must end or be refused at once; a hang means the work
    estimate is low."""
    opts = {"--max-tp": ["0", "1", "64", "65", "-1", "1e3", "x"],
            "--max-pp": ["0", "128", "129", "2.5"],
            "--max-cp": ["0", "32", "33"],
            "--max-micro-batch": ["0", "1024", "1025", "99999999999999999999"],
            "--replay": ["-1", "0", "100", "101"],
            "--max-work": ["0", "-5", "1", "1e300", "inf", "nan", "x", "1e9"],
            "--price-per-gpu-hour": ["-1", "0", "nan", "inf", "1e300", "x"]}
    bad_ok = {"1", "64", "128", "32", "1024", "0", "100", "1e300", "1e9"}
    for key, values in opts.items():
        for value in values:
            expect = "either" if value in bad_ok else "refuse"
            if key in ("--max-tp", "--max-pp", "--max-cp", "--max-micro-batch") and \
                    value == "0":
                expect = "refuse"
            if key == "--price-per-gpu-hour" and value in ("0", "1e300"):
                expect = "either"
            if key == "--max-work" and value in ("0",):
                expect = "refuse"
            tail = [] if key == "--replay" else ["--replay", "1"]
            tail += [] if key == "--max-work" else BOUND
            _add(c, "plan", ["plan", "quickstart", "-q", key, value, *tail], None, expect)
    for nodes in ("1024", "4096", "16384", "65536", "1000000", "1e6", "0", "-3"):
        for scen in ("llama2-7b-fsdp-128gpu", "gpt3-175b-megatron-tp8-pp16-selene"):
            _add(c, "plan", ["plan", scen, "-q", "--set", f"cluster.nodes={nodes}",
                             "--replay", "1", *BOUND], None,
                 "refuse" if nodes in ("1e6", "0", "-3", "1000000") else "either")
    for inst in ("nope", "", "p5.48xlarge"):
        _add(c, "plan", ["plan", "quickstart", "-q", "--instance", inst, "--replay", "1",
                         *BOUND], None, "either" if inst == "p5.48xlarge" else "refuse")
    for fmt in ("csv", "json", "xml"):
        _add(c, "plan", ["plan", "quickstart", "-q", "--format", fmt, "--replay", "1", *BOUND],
             None,
             "refuse" if fmt == "xml" else "ok")


# ------------------------------------------------------------------------- reliability
def write_reliability(c: Cases) -> None:
    rel = ["reliability", "-q", "--workers", "1", "--trials", "2"]
    values = {"reliability.failures.gpu.rate": ["1e300 per 1000 gpu-days", "-1 per day",
                                               "nan per day", "inf per day", "1e400 per day",
                                               "3 per", "per day", "1 per 0 days",
                                               "1 per 1e-300 days", "5"],
              "reliability.failures.node.repair": ["1e9 h", "1e300 h", "-1 h", "0 h", "nan h",
                                                   "1e-300 s", "x"],
              "reliability.job.duration": ["1e30 d", "1e-30 s", "0 d", "-2 d", "1e400 d"],
              "reliability.checkpoint.interval": ["1 ns", "1e-300 s", "1e30 d", "0 s",
                                                  "-1 min"],
              "reliability.checkpoint.save": ["1e30 s", "-1 s", "nan s"],
              "reliability.restart.spare_nodes": ["-1", "1e9", "1.5", "999999999999999"],
              "reliability.search.points": ["0", "1e6", "-1", "2.5"],
              "reliability.search.trials": ["0", "1e12", "-3"]}
    fine = {"0 h", "1e300 per 1000 gpu-days", "1e9 h", "1e300 h", "1e30 d", "1e30 s", "1e9",
            "999999999999999", "1e6", "1e12", "1e30 d", "1e-300 s", "1 per 1e-300 days"}
    for key, vals in values.items():
        for v in vals:
            expect = "either" if v in fine else "refuse"
            if key in ("reliability.failures.node.repair", "reliability.checkpoint.interval") \
                    and v == "1e-300 s" or key == "reliability.search.points" and v == "0":
                expect = "either"              # 0 points: the search off (documented)
            _add(c, "reliability", [*rel, "--set", f"{key}={v}"], None, expect)
    for trials in ("1000000", "1000001", "0", "-1", "1e3", "x"):
        _add(c, "reliability", ["reliability", "-q", "--workers", "1", "--trials", trials],
             None, "either" if trials == "1000000" else "refuse")
    for workers in ("0", "-1", "100000", "x"):
        _add(c, "reliability", ["reliability", "-q", "--trials", "2", "--workers", workers],
             None, "either" if workers == "100000" else "refuse")


# ------------------------------------------------------------------------------ studies
STUDY = ("name: s\ncommand: run\nbase: {{scenario: resnet50-ddp-1gpu}}\n"
         "axes:\n  grid: {{simulation.seed: [0, 1]}}\n{extra}")


def write_studies(c: Cases) -> None:
    files = ["../../../../tmp/clustersim-c3-escape", "/tmp/clustersim-c3-abs", "..", ".",
             "", "a/b", "missing/x", "x/", "link/x", "../out2/x", "a\\b", "x" * 300,
             "ok_plot", "nul\x00", "parts/x", "~/x"]
    for f in files:
        extra = ("plots:\n  - {kind: line, x: simulation.seed, y: iteration_time_s, file: "
                 + json.dumps(f) + "}\n")
        setup = None
        if f.startswith("link"):
            setup = {"dirs": ["victim"], "links": {"out/link": "../victim"},
                     "files": {"out/.clustersim-run": "x\n"}}
        _add(c, "study", ["study", "st.yaml", "--out", "out", "-q"],
             {"st.yaml": STUDY.format(extra=extra)}, "ok" if f == "ok_plot" else "refuse",
             setup)
    for out in ("missing/deeper/out", "st.yaml", "/proc/version", "", "/dev/null"):
        _add(c, "study", ["study", "st.yaml", "--out", out, "-q"],
             {"st.yaml": STUDY.format(extra="")}, "either" if out.startswith("missing")
             else "refuse")
    for path in ("missing.yaml", "missing/st.yaml", ".", "/dev/zero"):
        _add(c, "study", ["study", path, "--out", "out", "-q"], None, "refuse")
    for kind in ("line", "heatmap", "pie", "", 3):
        for y in ("iteration_time_s", "nope", ""):
            extra = (f"plots:\n  - {{kind: {json.dumps(kind)}, x: simulation.seed, "
                     f"y: {json.dumps(y)}, file: p}}\n")
            ok = kind in ("line", "heatmap") and y == "iteration_time_s"
            _add(c, "study", ["study", "st.yaml", "--out", "out", "-q"],
                 {"st.yaml": STUDY.format(extra=extra)}, "either" if ok else "refuse")
    for axis in ("{simulation.seed: []}", "{simulation.seed: 5}", "{nope.key: [1, 2]}",
                 "{cluster.gpus: [1, 1000000]}", "{training.micro_batch: [1, 0]}",
                 "{training.micro_batch: [1.5]}", "[]", "{}"):
        text = ("name: s\ncommand: run\nbase: {scenario: resnet50-ddp-1gpu}\n"
                f"axes:\n  grid: {axis}\n")
        _add(c, "study", ["study", "st.yaml", "--out", "out", "-q"], {"st.yaml": text},
             "refuse")
    _add(c, "study", ["study", "st.yaml", "--out", "out", "-q", "--fresh"],
         {"st.yaml": STUDY.format(extra="")}, "either",
         {"dirs": ["victim"], "links": {"out/parts": "../victim"},
          "files": {"out/.clustersim-run": "x\n", "victim/0000.json": "USER DATA\n"},
          "guard": ["victim/0000.json"]})


# ------------------------------------------------------------------------------- writes
WRITERS = [
    ["run", "resnet50-ddp-1gpu", "-q", "--out", "out"],
    ["reliability", "-q", "--workers", "1", "--trials", "2", "--out", "out"],
    ["compare", "resnet50-ddp-1gpu", "-q", "--strategies", "ddp", "--out", "out"],
    ["plan", "quickstart", "-q", "--replay", "1", *BOUND, "--out", "out"],
    ["study", "st.yaml", "-q", "--out", "out"],
]
FILE_WRITERS = [
    ["trace", "resnet50-ddp-1gpu", "-o", "good.json", "--overwrite"],
    ["import", "pytorch", "k.json", "-o", "good.json", "--overwrite"],
]
KINETO = json.dumps({"traceEvents": [
    {"ph": "X", "cat": "kernel", "name": "k", "ts": 0, "dur": 5, "pid": 0, "tid": 7}]})


def write_writes(c: Cases) -> None:
    st = {"st.yaml": STUDY.format(extra="")}
    for cmd in WRITERS:                                    # outputs replaced by symlinks
        for victims in ("all", "one", "dangling"):
            _add(c, "writes", cmd, st, "either",
                 {"first_run": True, "link_outputs": victims, "guard": ["victim/*"]})
    for cmd in WRITERS:                                    # --out at a file / links
        for what, setup, expect in (
                ("file", {"files": {"out": "USER DATA\n"}, "guard": ["out"]}, "refuse"),
                ("link to a file", {"files": {"victim/f": "USER DATA\n"},
                                    "links": {"out": "victim/f"}, "guard": ["victim/f"]},
                 "refuse"),
                ("dangling link", {"links": {"out": "nowhere"}}, "refuse"),
                ("foreign folder", {"files": {"out/notes.txt": "USER DATA\n"},
                                    "guard": ["out/notes.txt"]}, "refuse"),
                ("link to a foreign folder", {"files": {"victim/notes.txt": "USER DATA\n"},
                                              "links": {"out": "victim"},
                                              "guard": ["victim/notes.txt"]}, "refuse")):
            _add(c, "writes", cmd, st, expect, setup)
    for cmd in FILE_WRITERS:
        files = {"k.json": KINETO}
        for what, setup, expect in (
                ("link to a user file", {"files": {"victim/f": "USER DATA\n"},
                                         "links": {"good.json": "victim/f"},
                                         "guard": ["victim/f"]}, "either"),
                ("a folder", {"dirs": ["good.json"]}, "refuse"),
                ("dangling", {"links": {"good.json": "victim/none"}}, "either")):
            _add(c, "writes", cmd, files, expect, setup)
        no_over = [a for a in cmd if a != "--overwrite"]
        _add(c, "writes", no_over, files, "refuse",
             {"files": {"good.json": "USER DATA\n"}, "guard": ["good.json"]})
        _add(c, "writes", no_over, files, "refuse",
             {"files": {"victim/f": "USER DATA\n"}, "links": {"good.json": "victim/f"},
              "guard": ["victim/f"]})
    for i in range(30):                                    # killed mid-write
        cmd = R.choice(FILE_WRITERS[:1] * 3 + FILE_WRITERS[1:] + WRITERS[:1] + WRITERS[3:4])
        delay = round(R.uniform(0.02, 1.5), 3)
        _add(c, "writes-kill", cmd, {"k.json": KINETO, **st}, "either",
             {"first_run": True, "kill_after": delay, "whole": True})


# ------------------------------------------------------------------------------ cluster
MIX = """name: m
cluster: {{topology: dgx-a100-superpod, nodes: 4}}
scheduler: {sched}
placement: {place}
seed: {seed}
jobs:
  - {{name: a, arrival: {arr_a}, scenario: {scen_a}, gpus: {gpus_a}, steps: {steps_a}}}
  - {{name: b, arrival: 10 s, scenario: resnet50-ddp-8gpu, gpus: 8, steps: 20{extra_b}}}
{tail}"""
MIX_OK = dict(sched="easy", place="topology", seed=0, arr_a="0 s", scen_a="resnet50-ddp-8gpu",
              gpus_a=8, steps_a=20, extra_b="", tail="")
MIX_BAD = {
    "sched": ["fifo", "priority", "lottery", "''", "3", "[easy]"],
    "place": ["packed", "spread", "random", "null"],
    "seed": ["-1", "1.5", str(2 ** 64), "x", "1e3"],
    "arr_a": ["-5 s", "1e300 s", "nan s", "inf s", "5", "x", "1e9 d", "-0 s"],
    "scen_a": ["nope", "''", "/dev/zero", "../../../etc/passwd", "missing.yaml",
               "quickstart", "mixtral-8x7b-ep8", "llama3-8b-fsdp-mi300x"],
    "gpus_a": ["0", "-8", "12", "64", "1000000", "1e9", "8.0", "true", "'8'", "33"],
    "steps_a": ["0", "-1", "1e9", "1000000000000", "1000000000001", "1.5", "x"],
    "extra_b": [", priority: 5000", ", priority: -1001", ", priority: 1.5",
                ", checkpoint: {interval: 0 s, save: 1 s, restore: 1 s}",
                ", checkpoint: {interval: 1 ns, save: 1 h, restore: 1 s}",
                ", duration: 2 h", ", set: {training.micro_batch: 0}",
                ", set: {nope: 1}", ", set: {cluster.gpus: 16}", ", name: a", ", bogus: 1",
                ", set: {training.grad_accum: 1000000000}"],
    "tail": ["failures: {node: '1e300 per 1000 node-days', repair: 1 h}",
             "failures: {node: '1 per day', repair: 1e300 h}",
             "failures: {node: '-1 per day'}",
             "failures: {schedule: [{at: 1 s, node: 99}]}",
             "failures: {schedule: [{at: 1 s, switch: nope}]}",
             "failures: {schedule: [{at: -1 s, node: 0}]}",
             "limits: {max_work: 0}", "limits: {max_work: 1e300}", "limits: {max_work: nan}",
             "limits: {horizon: 0 s}", "limits: {horizon: 1e300 d}", "limits: {max_work: 10}",
             "generate: {trace: acme, cluster: Seren, jobs: 5}"],
}
OK_VALUES = {"fifo", "priority", "packed", "spread", "1e9 d", "-0 s", "quickstart",
             "llama3-8b-fsdp-mi300x", "64", "1e9", "1000000000000", ", priority: -1001"[:0],
             ", duration: 2 h", "1e300 s", "limits: {max_work: 1e300}",
             "limits: {horizon: 1e300 d}", "failures: {node: '1 per day', repair: 1e300 h}",
             "failures: {node: '1e300 per 1000 node-days', repair: 1 h}",
             "limits: {max_work: 10}", "mixtral-8x7b-ep8"}


def write_cluster(c: Cases) -> None:
    for key, values in MIX_BAD.items():
        for v in values:
            fields = dict(MIX_OK, **{key: v})
            ok = v in OK_VALUES or (key == "arr_a" and v in ("1e9 d",))
            if key == "steps_a" and v == "1e9":
                ok = False                                 # 1e9 is a float, steps a count
            _add(c, "cluster", ["cluster", "m.yaml", "-q"], {"m.yaml": MIX.format(**fields)},
                 "either" if ok else "refuse")
    sets = ["scheduler=lottery", "placement=packed", "cluster.nodes=0", "cluster.nodes=1e9",
            "cluster.nodes=100000", "seed=-1", "jobs=[]", "jobs=5", "limits.max_work=-1",
            "generate.jobs=1000000000", "name=", "nope=1", "cluster.topology=nope",
            "cluster.topology=mi300x-8gpu", "cluster.gpus=16", "failures.repair=-1 h",
            "jobs.0.gpus=1000000", "=", "scheduler"]
    for s in sets:
        ok = s in ("placement=packed",)
        _add(c, "cluster", ["cluster", "m.yaml", "-q", "--set", s],
             {"m.yaml": MIX.format(**MIX_OK)}, "either" if ok else "refuse")
        _add(c, "cluster", ["cluster", "m.yaml", "-q", "--against", s],
             {"m.yaml": MIX.format(**MIX_OK)}, "either" if ok else "refuse")
    gen = ("name: g\ncluster: {{topology: dgx-a100-superpod, nodes: 4}}\n"
           "generate: {{trace: acme, cluster: {cl}, jobs: {jobs}, load: {load}, "
           "scenarios: {scen}{more}}}\n")
    gens = [dict(cl="Seren", jobs="1000000000", load="0.8", scen="{quickstart: 1}", more=""),
            dict(cl="Seren", jobs="100001", load="0.8", scen="{quickstart: 1}", more=""),
            dict(cl="Nope", jobs="5", load="0.8", scen="{quickstart: 1}", more=""),
            dict(cl="Seren", jobs="5", load="-1", scen="{quickstart: 1}", more=""),
            dict(cl="Seren", jobs="5", load="nan", scen="{quickstart: 1}", more=""),
            dict(cl="Seren", jobs="5", load="1e300", scen="{quickstart: 1}", more=""),
            dict(cl="Seren", jobs="5", load="0.8", scen="{}", more=""),
            dict(cl="Seren", jobs="5", load="0.8", scen="{nope: 1}", more=""),
            dict(cl="Seren", jobs="5", load="0.8", scen="{quickstart: 0}", more=""),
            dict(cl="Seren", jobs="5", load="0.8", scen="{quickstart: 1}",
                 more=", min_gpus: 1000"),
            dict(cl="Seren", jobs="5", load="0.8", scen="{quickstart: 1}",
                 more=", max_gpus: 0"),
            dict(cl="Seren", jobs="5", load="0.8", scen="{quickstart: 1}",
                 more=", min_gpus: 16, max_gpus: 8"),
            dict(cl="Seren", jobs="5", load="0.8", scen="{quickstart: 1}",
                 more=", high_priority: 2"),
            dict(cl="Seren", jobs="5", load="0.8", scen="{llama2-7b-fsdp-128gpu: 1}",
                 more=""),
            dict(cl="Seren", jobs="5", load="0.8", scen="{quickstart: 1}", more=""),
            dict(cl="Kalos", jobs="3", load="0.5", scen="{quickstart: 1}", more="")]
    for g in gens:
        ok = g["cl"] in ("Seren", "Kalos") and g["jobs"] in ("5", "3") and \
            g["load"] in ("0.8", "0.5") and g["scen"] == "{quickstart: 1}" and \
            g["more"] in ("", ", min_gpus: 16, max_gpus: 8"[:0])
        _add(c, "cluster", ["cluster", "g.yaml", "-q"], {"g.yaml": gen.format(**g)},
             "either" if ok or "llama2" in g["scen"] else "refuse")
    for name in ("nope", "missing.yaml", "/dev/zero", ".", "m.yaml"):
        _add(c, "cluster", ["cluster", name, "-q"], {"m.yaml": "jobs: [1, 2\n"}, "refuse")


# ------------------------------------------------------------------------------ energy
def write_energy(c: Cases) -> None:
    values = ["-1", "0", "nan", "inf", "-inf", "1e300", "x", "''", "1e-300", "0.5", "1",
              "1.58", "3", "1e400", "NaN"]
    for opt in ("--pue", "--electricity-price", "--carbon-intensity"):
        for v in values:
            low = 1.0 if opt == "--pue" else 0.0
            try:
                f = float(v)
                good = f == f and abs(f) != INF and f >= low and v != "1e400"
            except ValueError:
                good = False
            for scen in ("resnet50-ddp-1gpu", "llama3-8b-fsdp-mi300x"):
                _add(c, "energy", ["compare", scen, "-q", "--strategies", "ddp", opt, v],
                     None, "either" if good else "refuse")
    for opt in ("--pue", "--electricity-price", "--carbon-intensity"):
        for cmd in (["run", "resnet50-ddp-1gpu", "-q"], ["plan", "quickstart", "-q", *BOUND]):
            _add(c, "energy", [*cmd, opt, "2"], None, "refuse")   # compare's options only
    for v in ("1.5", "1e300", "-1", "nan"):
        _add(c, "energy", ["compare", "resnet50-ddp-1gpu", "-q", "--strategies", "ddp",
                           "--pue", v, "--pue", "2"], None, "either")


# ------------------------------------------------------------------------ power_cap_w
def write_power_cap(c: Cases) -> None:
    caps = ["500", "600", "700", "499", "701", "0", "-1", "1e300", "nan", "x", "550.5",
            "true", "'600'", "[600]"]
    for topo in ("dgx-h100", "dgx-a100", "mi300x-8gpu"):
        for cap in caps:
            ok = topo == "dgx-h100" and cap in ("500", "600", "700", "550.5")
            _add(c, "power-cap", ["run", "quickstart", "-q", "--set",
                                  f"cluster.topology={topo}", "--set",
                                  f"cluster.power_cap_w={cap}"], None,
                 "either" if ok else "refuse")
    for cmd in (["plan", "quickstart", "-q", "--replay", "1", *BOUND],
                ["compare", "quickstart", "-q", "--strategies", "ddp"],
                ["capacity", "quickstart", "-q"]):
        for cap in ("600", "100", "nan"):
            _add(c, "power-cap", [*cmd, "--set", "cluster.topology=dgx-h100", "--set",
                                  f"cluster.power_cap_w={cap}"], None,
                 "either" if cap == "600" else "refuse")


# ----------------------------------------------------------------------------- finetune
def write_finetune(c: Cases) -> None:
    fine = [("{mode: lora, rank: 0}", "refuse"), ("{mode: lora, rank: -1}", "refuse"),
            ("{mode: lora, rank: 1000000000}", "either"),   # answered: out of memory
            ("{mode: lora, rank: 1.5}", "refuse"),
            ("{mode: lora, rank: 4096}", "either"), ("{mode: lora, rank: 16}", "ok"),
            ("{mode: lora, rank: 1e300}", "refuse"), ("{mode: lora, rank: '16'}", "refuse"),
            ("{mode: lora, target_modules: [nope]}", "refuse"),
            ("{mode: lora, target_modules: []}", "refuse"),
            ("{mode: lora, target_modules: all-linear}", "either"),
            ("{mode: lora, target_modules: [q_proj, q_proj]}", "either"),
            ("{mode: lora, target_modules: 5}", "refuse"),
            ("{mode: lora, alpha: nan}", "refuse"), ("{mode: lora, alpha: -1}", "either"),
            ("{mode: lora, dropout: 1.5}", "refuse"), ("{mode: lora, dropout: -0.1}", "refuse"),
            ("{mode: qlora}", "either"), ("{mode: qlora, base_precision: fp8}", "refuse"),
            ("{mode: full, rank: 16}", "refuse"), ("{mode: full, freeze_layers: -1}", "refuse"),
            ("{mode: full, freeze_layers: 1000000}", "refuse"),
            ("{mode: full, freeze_layers: 2.5}", "refuse"), ("{mode: nope}", "refuse"),
            ("{mode: lora, base_precision: int3}", "refuse"), ("{}", "either"),
            ("5", "refuse"), ("null", "either"), ("{mode: lora, nope: 1}", "refuse"),
            ("{mode: full, freeze_embedding: yes_please}", "refuse")]
    for scen in ("quickstart", "llama3-8b-fsdp-mi300x", "llama2-70b-lora-8gpu"):
        for value, expect in fine:
            if scen == "llama2-70b-lora-8gpu" and value.startswith("{mode: qlora"):
                expect = "either"
            _add(c, "finetune", ["run", scen, "-q", "--set", f"training.finetune={value}"],
                 None, expect)
    others = [("resnet50-ddp-1gpu", "refuse"), ("mixtral-8x7b-ep8", "refuse"),
              ("resnet50-tf-mirrored-8gpu", "refuse"), ("bert-large-horovod-8gpu", "either"),
              ("gpt3-175b-megatron-tp8-pp16-selene", "either")]
    for scen, expect in others:
        for value in ("{mode: lora, rank: 8}", "{mode: qlora}"):
            _add(c, "finetune", ["run", scen, "-q", "--set", f"training.finetune={value}"],
                 None, expect)
    for value in ("{mode: lora}", "{mode: qlora}", "{mode: full, freeze_layers: 4}"):
        _add(c, "finetune", ["plan", "quickstart", "-q", "--set", f"training.finetune={value}",
                             *BOUND], None, "refuse")
        _add(c, "finetune", ["capacity", "quickstart", "-q", "--set",
                             f"training.finetune={value}", "--strategies", "ddp"])
    spell = [("strategy.peft=lora", "refuse"), ("strategy.lora_config={r: 0}", "refuse"),
             ("strategy.lora_config={r: 8, target_modules: [zz]}", "refuse"),
             ("strategy.load_in_4bit=true", "refuse"),
             ("strategy.lora_config={r: 8, lora_alpha: inf}", "refuse")]
    for s, expect in spell:
        _add(c, "finetune", ["run", "quickstart", "-q", "--set", s], None, expect)


# ---------------------------------------------------------------------------------- amd
def write_amd(c: Cases) -> None:
    strategies = ["fsdp", "ddp", "megatron", "deepspeed", "torchtitan", "tf_mirrored",
                  "horovod", "nope"]
    for topo in ("mi300x-8gpu", "mi325x-8gpu", "mi355x-8gpu", "mi300x-roce-cluster"):
        for s in strategies:
            _add(c, "amd", ["run", "llama3-8b-fsdp-mi300x", "-q", "--set",
                            f"cluster.topology={topo}", "--set", f"strategy.name={s}"], None,
                 "refuse" if s in ("nope", "tf_mirrored") else "either")
    for key, value, expect in (
            ("cluster.gpus", "9", "refuse"), ("cluster.gpus", "0", "refuse"),
            ("cluster.gpus", "16", "refuse"), ("cluster.nodes", "2", "refuse"),
            ("cluster.gpu", "H100-SXM", "refuse"), ("cluster.gpu", "MI999X", "refuse"),
            ("cluster.gpu", "MI355X", "either"), ("training.precision", "fp4", "either"),
            ("training.precision", "fp8", "either"), ("training.precision", "int1", "refuse"),
            ("simulation.nccl_version", "2.18", "refuse")):
        _add(c, "amd", ["run", "llama3-8b-fsdp-mi300x", "-q", "--set", f"{key}={value}"],
             None, expect)
    for topo in ("mi300x-roce-cluster",):
        for nodes in ("0", "-1", "2", "1e9", "100000"):
            _add(c, "amd", ["topology", topo, "--nodes", nodes], None,
                 "either" if nodes in ("2",) else "refuse")
    for op in ("all_reduce", "nope"):
        for f in ("2", "1", "nan"):
            _add(c, "amd", ["collective", op, "--topology", "mi300x-8gpu", "-b", "8", "-e",
                            "1M", "-f", f], None,
                 "either" if op == "all_reduce" and f == "2" else "refuse")
    _add(c, "amd", ["collective", "all_reduce", "--topology", "mi300x-8gpu", "-b", "8", "-e",
                    "1M", "--nccl-version", "2.18"], None, "refuse")
    _add(c, "amd", ["run", "quickstart", "-q", "--set", "cluster.topology=dgx-a100", "--set",
                    "cluster.gpu=MI300X"], None, "refuse")


# -------------------------------------------------------------------------- host_dispatch
def write_host_dispatch(c: Cases) -> None:
    values = [("eager", "ok"), ("compiled", "ok"), ("none", "ok"), ("Eager", "refuse"),
              ("''", "refuse"), ("1", "refuse"), ("null", "either"), ("[eager]", "refuse"),
              ("cuda_graphs", "refuse"), ("true", "refuse")]
    for scen in ("quickstart", "resnet50-ddp-1gpu", "resnet50-tf-mirrored-8gpu",
                 "mixtral-8x7b-ep8"):
        for v, expect in values:
            if scen == "resnet50-tf-mirrored-8gpu" and expect == "ok":
                expect = "either"                      # a TensorFlow strategy may refuse it
            _add(c, "host-dispatch", ["run", scen, "-q", "--set",
                                      f"strategy.host_dispatch={v}"], None, expect)


# --------------------------------------------------------------------- capacity options
def write_capacity(c: Cases) -> None:
    for fam in ("llama", "gpt", "nope", ""):
        _add(c, "capacity", ["capacity", "quickstart", "-q", "--family", fam], None,
             "either" if fam in ("llama", "gpt") else "refuse")
    for strat in ("ddp", "fsdp:FULL_SHARD", "fsdp:NOPE", "nope", "", ",", "ddp,ddp",
                  "fsdp:SHARD_GRAD_OP,ddp", "megatron", "fsdp:"):
        _add(c, "capacity", ["capacity", "quickstart", "-q", "--strategies", strat], None,
             "either" if strat in ("ddp", "fsdp:FULL_SHARD", "fsdp:SHARD_GRAD_OP,ddp",
                                   "ddp,ddp", "megatron", "fsdp:") else "refuse")
    for s in ("cluster.gpus=0", "cluster.gpus=1000000", "training.seq_len=1e9",
              "training.micro_batch=0", "cluster.topology=mi300x-8gpu", "model=nope",
              "cluster.nodes=16384"):
        _add(c, "capacity", ["capacity", "quickstart", "-q", "--set", s], None,
             "either" if s in ("cluster.topology=mi300x-8gpu",) else "refuse")


def write_all(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=False)
    c = Cases(root)
    write_chakra(c, root / "_work")
    for writer in (write_pipelines, write_plan, write_reliability, write_studies,
                   write_writes, write_cluster, write_energy, write_power_cap,
                   write_finetune, write_amd, write_host_dispatch, write_capacity):
        writer(c)
    print(f"wrote {c.n} cases under {root}")


# ------------------------------------------------------------------------------ running
def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "absent"


CPU_S, WALL_S = 20, 300    # a hang: 20 s of CPU (the machine is shared: wall time is not
                           # the case's), or 300 s of wall time (a read blocked forever)


def _fork_run(case: Path, timeout: float, kill_after: float | None = None) -> str:
    t0 = time.time()
    pid = os.fork()
    if pid == 0:
        resource.setrlimit(resource.RLIMIT_CPU, (CPU_S, CPU_S))
        rc._child(case)
    limit = kill_after if kill_after is not None else timeout
    while time.time() - t0 < limit:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return str(os.waitstatus_to_exitcode(status))
        time.sleep(0.005)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return "killed" if kill_after is not None else "hang"


def _prepare(case: Path, setup: dict) -> dict[str, str]:
    """Build the case's files, links and first run; the digests of the guarded files."""
    for name in ("out", "good.json", "victim", "o.json"):
        p = case / name
        if p.is_symlink() or p.is_file():
            p.unlink()
        elif p.is_dir():
            shutil.rmtree(p)
    for d in setup.get("dirs", []):
        (case / d).mkdir(parents=True, exist_ok=True)
    for name, text in setup.get("files", {}).items():
        (case / name).parent.mkdir(parents=True, exist_ok=True)
        (case / name).write_text(text)
    if setup.get("first_run"):
        _fork_run(case, WALL_S)
    if setup.get("link_outputs"):
        (case / "victim").mkdir(exist_ok=True)
        outs = sorted(p for p in (case / "out").rglob("*") if p.is_file()
                      and not p.name.startswith(".")) if (case / "out").is_dir() else []
        if setup["link_outputs"] == "one":
            outs = outs[:1]
        for i, p in enumerate(outs):
            target = case / "victim" / f"{i:03d}"
            if setup["link_outputs"] != "dangling":
                target.write_text("USER DATA\n")
            p.unlink()
            p.symlink_to(os.path.relpath(target, p.parent))
    for name, target in setup.get("links", {}).items():
        (case / name).parent.mkdir(parents=True, exist_ok=True)
        (case / name).symlink_to(target)
    guarded = {}
    for pattern in setup.get("guard", []):
        for p in sorted(case.glob(pattern)):
            guarded[str(p.relative_to(case))] = _digest(p)
    if setup.get("whole"):                     # outputs of the first run: old or whole new
        for p in [case / "good.json", *sorted((case / "out").glob("*.json"))]:
            if p.is_file():
                guarded[str(p.relative_to(case))] = "whole"
    return guarded


def _guard_broken(case: Path, guarded: dict[str, str]) -> str:
    for name, digest in guarded.items():
        p = case / name
        if digest == "whole":
            try:
                json.loads(p.read_text())
            except (OSError, ValueError):
                return f"{name} is not whole"
        elif _digest(p) != digest:
            return f"{name} changed"
    return ""


def run_all(root: Path, tree: Path, tag: str) -> None:
    cases = rc.import_tree(tree, root)
    start = time.time()
    for case in cases:
        setup_file = case / "setup.json"
        setup = json.loads(setup_file.read_text()) if setup_file.exists() else {}
        guarded = _prepare(case, setup)
        t0 = time.time()
        code = _fork_run(case, WALL_S, setup.get("kill_after"))
        if code in (str(-signal.SIGXCPU), str(-signal.SIGKILL)) and code != "killed":
            code = "hang"
        broken = _guard_broken(case, guarded)
        (case / f"rc.{tag}").write_text(f"{code} {time.time() - t0:.2f}\n")
        (case / f"guard.{tag}").write_text(broken + "\n")
        for name in ("stderr", "stdout"):
            if (case / name).exists():
                (case / name).rename(case / f"{name}.{tag}")
    print(f"ran {len(cases)} cases with {tree} in {time.time() - start:.0f} s")


# ------------------------------------------------------------------------------ counting
CLASSES = ("clean refusal", "ok run", "killed, files whole", "traceback", "MemoryError",
           "hang", "multi-line", "overlong line", "silent success", "failed run",
           "user file changed")
BAD = CLASSES[3:]


def outcome(case: Path, tag: str) -> str:
    guard = case / f"guard.{tag}"
    if guard.exists() and guard.read_text().strip():
        return "user file changed"
    code = (case / f"rc.{tag}").read_text().split()[0]
    if code == "killed":
        return "killed, files whole"
    got = rc.outcome(case, tag)
    expect = (case / "expect").read_text().strip()
    if got == "clean refusal" and expect == "ok":
        return "failed run"
    return got


def _counts(root: Path, tag: str):
    counts = collections.defaultdict(collections.Counter)
    for d in sorted(d for d in root.iterdir() if (d / "cmd").exists()):
        if (d / f"rc.{tag}").exists():
            counts[d.name.rsplit("-", 1)[0]][outcome(d, tag)] += 1
    return counts


def table(root: Path, tags: list[str]) -> None:
    per = {tag: _counts(root, tag) for tag in tags}
    fams = sorted({f for c in per.values() for f in c})
    first, last = per[tags[0]], per[tags[-1]]
    print(f"| family | inputs | clean after (refusals + runs) | bad {tags[0]} (of inputs "
          f"run) | bad {tags[-1]} |")
    print("|---|---|---|---|---|")
    tot = collections.Counter()
    for f in fams + ["all"]:
        if f == "all":
            n, clean, b0, n0, b1 = (tot[k] for k in ("n", "clean", "b0", "n0", "b1"))
        else:
            n = sum(last[f].values())
            clean = n - sum(last[f][k] for k in BAD)
            b0, n0 = sum(first[f][k] for k in BAD), sum(first[f].values())
            b1 = sum(last[f][k] for k in BAD)
            tot.update(n=n, clean=clean, b0=b0, n0=n0, b1=b1)
        print(f"| {f} | {n} | {clean} | {b0} ({n0}) | {b1} |")
    for tag in tags:
        allc = collections.Counter()
        for c in per[tag].values():
            allc.update(c)
        print(f"{tag}: " + ", ".join(f"{k} {allc[k]}" for k in CLASSES if allc[k]))


def csv_rows(root: Path, tags: list[str]) -> None:
    print("case,family,expect," + ",".join(tags) + ",command")
    for d in sorted(d for d in root.iterdir() if (d / "cmd").exists()):
        args = " ".join((d / "cmd").read_text().split())
        outs = [outcome(d, t) if (d / f"rc.{t}").exists() else "" for t in tags]
        print(f"{d.name},{d.name.rsplit('-', 1)[0]},{(d / 'expect').read_text().strip()},"
              + ",".join(outs) + "," + json.dumps(args[:120]))


def bad_cases(root: Path, tag: str) -> None:
    for d in sorted(d for d in root.iterdir() if (d / "cmd").exists()):
        if (d / f"rc.{tag}").exists():
            o = outcome(d, tag)
            if o in BAD:
                err = (d / f"stderr.{tag}").read_text(errors="replace").strip().splitlines() \
                    if (d / f"stderr.{tag}").exists() else []
                extra = (d / f"guard.{tag}").read_text().strip()
                print(f"{d.name:22} {o:15} {' '.join((d / 'cmd').read_text().split())[:90]} "
                      f"| {extra or (err[-1][:160] if err else '')}")


COMMANDS = {"write": lambda root, rest: write_all(root),
            "run": lambda root, rest: run_all(root, Path(rest[0]), rest[1]),
            "table": table, "csv": csv_rows, "bad": lambda root, rest: bad_cases(root, rest[0])}

if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    COMMANDS[sys.argv[1]](Path(sys.argv[2]), sys.argv[3:])

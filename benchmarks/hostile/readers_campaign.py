#!/usr/bin/env python3
"""The hostile-input campaign of issue 42 over the file readers: Chakra files, framework
configs (--config), scenario --set values and the smaller refusals.

    python benchmarks/hostile/readers_campaign.py write /tmp/rc          # ~520 case folders
    python benchmarks/hostile/readers_campaign.py run /tmp/rc TREE TAG   # TREE's clustersim
    python benchmarks/hostile/readers_campaign.py table /tmp/rc before after

``write`` builds every input from files ``clustersim trace --format chakra`` and the shipped
configs and scenarios give, mutated by a fixed seed (42): the same cases every time. A case
is a folder with ``cmd`` (the arguments, one a line), ``expect`` (``refuse``: the input is
invalid, exit 0 is a silent success; ``either``) and its files. ``run`` runs each case in a
child forked from one process that imported TREE's ``simulator`` (no start-up per case),
under a 4 GiB address-space cap and a 20 s timeout, serially. ``table`` counts the outcomes
by family: one-line refusal, ok run, traceback, MemoryError, hang, multi-line or overlong
(> 1,000 characters) refusal, silent success. Takes ~5 minutes per tree on two cores.
"""

from __future__ import annotations

import collections
import copy
import json
import math
import os
import random
import resource
import signal
import sys
import time
import tomllib
from pathlib import Path

R = random.Random(42)
REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S, MEMORY_BYTES = 20, 4 << 30
INF, NAN = float("inf"), float("nan")


# ------------------------------------------------------------------------------ writing
class Cases:
    def __init__(self, root: Path):
        self.root, self.n = root, 0

    def add(self, family: str, args: list[str], files: dict | None = None,
            expect: str = "either") -> None:
        self.n += 1
        d = self.root / f"{family}-{self.n:04d}"
        d.mkdir(parents=True)
        for name, data in (files or {}).items():
            (d / name).write_bytes(data if isinstance(data, bytes) else data.encode())
        (d / "cmd").write_text("\n".join(args) + "\n")
        (d / "expect").write_text(expect + "\n")


def _cli(*args: str) -> None:
    from simulator.cli import main
    try:
        main(list(args))
    except SystemExit as exc:
        assert not exc.code, (args, exc.code)


def _chakra_base(work: Path) -> tuple[list[bytes], list[bytes]]:
    """(clustersim's own 2-rank files, the same stripped to the standard fields)."""
    from simulator.importers.chakra import standard_only
    _cli("trace", "resnet50-ddp-8gpu", "--set", "cluster.gpus=2", "-o", str(work / "r"),
         "--format", "chakra", "--overwrite")
    ours = [(work / f"r.{r}.et").read_bytes() for r in range(2)]
    return ours, [standard_only(d) for d in ours]


def _set_attr(node, name: str, kind: str, value) -> None:
    for a in node.attr:
        if a.name == name:
            node.attr.remove(a)
            break
    setattr(node.attr.add(name=name), f"{kind}_val", value)


NODE_VALUES = {          # attribute -> hostile (kind, value), every one invalid
    "comm_size": [("int64", -1), ("int64", 2 ** 62), ("double", 1e300), ("double", NAN),
                  ("string", "8"), ("bool", True), ("double", -0.5)],
    "comm_type": [("int64", 10), ("int64", 999), ("int64", -1), ("string", "x")],
    "num_ops": [("int64", -5), ("double", INF), ("double", 1e300), ("string", "x")],
    "tensor_size": [("int64", -1), ("double", 1e300), ("string", "y")],
    "pg_name": [("int64", 3)],
    "is_cpu_op": [("int64", 2)],
}


def _mutate_node(nodes, kind: int) -> str:
    """One invalid change to a node of type ``kind`` (or any); returns what it did."""
    from simulator.importers.chakra_pb import NODE_TYPES
    pick = [n for n in nodes if n.type == kind] or nodes
    n = R.choice(pick)
    what = R.choice(["type", "attr", "attr", "attr", "dup", "cycle", "self", "duration"])
    if what == "type":
        n.type = R.choice([11, 12, 99, 1000, 2 ** 31 - 1])
    elif what == "attr":
        names = [k for k in NODE_VALUES if k in {a.name for a in n.attr}
                 and (k != "is_cpu_op" or n.type == 4)] or ["comm_size"]   # fields read
        name = R.choice(names)
        _set_attr(n, name, *R.choice(NODE_VALUES[name]))
    elif what == "dup":
        other = R.choice(nodes)
        n.id = other.id if other is not n else n.id + 10 ** 6
        if other is n:
            return "nothing"
    elif what == "cycle":
        first = nodes[0]
        first.data_deps.append(nodes[-1].id)
    elif what == "self":
        n.data_deps.append(n.id)
    else:
        n.duration_micros = R.choice([2 ** 63, 10 ** 16])
    return f"{what} {NODE_TYPES[n.type] if n.type < len(NODE_TYPES) else n.type}"


def _flip(data: bytes, k: int) -> bytes:
    b = bytearray(data)
    for _ in range(k):
        b[R.randrange(len(b))] ^= 1 << R.randrange(8)
    return bytes(b)


def write_chakra(c: Cases, work: Path) -> None:
    from simulator.importers.chakra import TRACE_ATTR, RANK_ATTR, decode, encode
    ours, plain = _chakra_base(work)
    imp = ["import", "chakra", "r.0.et", "r.1.et", "-o", "o.json"]
    for _ in range(30):                                    # bit flips: anything may happen
        base = R.choice([ours, plain])
        r = R.randrange(2)
        files = {f"r.{i}.et": _flip(d, R.randint(1, 4)) if i == r else d
                 for i, d in enumerate(base)}
        c.add("chakra-bytes", imp, files)
    for _ in range(15):                                    # cut short
        base = R.choice([ours, plain])
        files = {"r.0.et": base[0][:R.randrange(len(base[0]))], "r.1.et": base[1]}
        c.add("chakra-bytes", imp, files)
    for _ in range(110):                                   # one invalid node field
        files = {}
        r = R.randrange(2)
        for i, d in enumerate(plain):
            meta, nodes = decode(d, "x")
            if i == r:
                if _mutate_node(nodes, R.choice([4, 7])) == "nothing":
                    continue
            files[f"r.{i}.et"] = encode([meta, *nodes])
        if len(files) == 2:
            c.add("chakra-fields", imp, files, "refuse")
    for _ in range(20):                                    # ranks that do not match
        m0, n0 = decode(plain[0], "x")
        m1, n1 = decode(plain[1], "x")
        colls = [n for n in n1 if n.type == 7]
        victim = R.choice(colls)
        if R.random() < 0.5:
            n1.remove(victim)
            for n in n1:                                   # keep the deps well formed
                for field in (n.ctrl_deps, n.data_deps):
                    if victim.id in field:
                        field.remove(victim.id)
        else:
            types = [a for a in victim.attr if a.name == "comm_type"]
            old = types[0].int64_val if types else 0
            _set_attr(victim, "comm_type", "int64", (old + R.randint(1, 8)) % 10)
        c.add("chakra-match", imp, {"r.0.et": encode([m0, *n0]), "r.1.et": encode([m1, *n1])},
              "refuse")
    meta_changes = [("world_size", 0), ("world_size", -1), ("world_size", 10 ** 9),
                    ("world_size", 2 ** 20 + 1), ("world_size", "8"), ("world_size", 1.5),
                    ("world_size", None), ("world_size", 3), ("class.ranks", []),
                    ("class.ranks", [0, 0]), ("class.ranks", [5]), ("class.ranks", "x"),
                    ("class.ranks", [10 ** 9]), ("class.id", 7), ("class", None),
                    ("meta", None), ("communicators", [1]), ("communicators", {"x": [[0, 9]]})]
    for key, value in meta_changes:                        # clustersim's own metadata
        for r in range(2):
            files = {}
            for i, d in enumerate(ours):
                meta, nodes = decode(d, "x")
                if i == r:
                    for a in meta.attr:
                        if a.name == TRACE_ATTR:
                            whole = json.loads(a.string_val)
                            node = whole["class"] if key.startswith("class.") else whole
                            node[key.split(".")[-1]] = value
                            a.string_val = json.dumps(whole)
                files[f"r.{i}.et"] = encode([meta, *nodes])
            c.add("chakra-meta", imp, files, "refuse")
    for value in (5, -1, 10 ** 9, 0):                      # the rank attribute
        meta, nodes = decode(ours[1], "x")
        _set_attr(meta, RANK_ATTR, "int64", value)
        c.add("chakra-meta", imp, {"r.0.et": ours[0], "r.1.et": encode([meta, *nodes])},
              "refuse")
    for cut in (10, 40, 200):                              # damaged JSON in the metadata / an op
        meta, nodes = decode(ours[0], "x")
        for a in meta.attr:
            if a.name == TRACE_ATTR:
                a.string_val = a.string_val[:cut]
        c.add("chakra-meta", imp, {"r.0.et": encode([meta, *nodes]), "r.1.et": ours[1]},
              "refuse")
        meta, nodes = decode(ours[0], "x")
        n = nodes[R.randrange(len(nodes))]
        for a in n.attr:
            if a.name == "clustersim.op":
                a.string_val = a.string_val[:cut // 4]
        c.add("chakra-meta", imp, {"r.0.et": encode([meta, *nodes]), "r.1.et": ours[1]},
              "refuse")
    for base in (ours, plain):                             # the file list itself
        c.add("chakra-files", ["import", "chakra", "r.0.et", "r.0.et", "-o", "o.json"],
              {"r.0.et": base[0]}, "refuse")
        c.add("chakra-files", ["import", "chakra", "x.0.et", "x.1000000000.et", "-o",
                               "o.json"], {"x.0.et": base[0], "x.1000000000.et": base[1]},
              "refuse" if base is plain else "either")    # ours: the rank is in the file
        c.add("chakra-files", ["import", "chakra", "r.1.et", "-o", "o.json"],
              {"r.1.et": base[1]}, "refuse" if base is plain else "either")
        c.add("chakra-files", imp, {"r.0.et": base[0], "r.1.et": b""}, "refuse")
        meta, _ = decode(base[1], "x")
        c.add("chakra-files", imp, {"r.0.et": base[0], "r.1.et": encode([meta])},
              "refuse" if base is plain else "either")    # ours: rank 1 runs rank 0's ops
        c.add("chakra-files", ["import", "chakra", "r.0.et", "r.1.et", "r.2.et", "-o",
                               "o.json"], {"r.0.et": base[0], "r.1.et": base[1],
                                           "r.2.et": base[0]}, "either")
    m0, _ = decode(ours[0], "x")                           # two different traces
    meta, nodes = decode(ours[1], "x")
    for a in meta.attr:
        if a.name == TRACE_ATTR:
            whole = json.loads(a.string_val)
            whole["meta"]["model"] = "other"
            a.string_val = json.dumps(whole)
    c.add("chakra-files", imp, {"r.0.et": ours[0], "r.1.et": encode([meta, *nodes])},
          "refuse")


# ------------------------------------------------------------------------------ configs
HOSTILE = [0, -1, 2 ** 31, 10 ** 12, -10 ** 12, True, False, 1.5, 1e308, "", "x", "8",
           [], [1, 2], {}, {"a": 1}, "auto"]
READ = {"ds.json": ("zero_optimization.stage", "zero_optimization.overlap_comm",
                   "zero_optimization.reduce_bucket_size", "train_micro_batch_size_per_gpu",
                   "gradient_accumulation_steps", "train_batch_size", "bf16.enabled"),
        "tt.toml": ("parallelism.", "training.local_batch_size", "training.seq_len",
                    "activation_checkpoint.", "model.flavor")}     # keys the readers use
BATCH_KEYS = {"train_batch_size", "gradient_accumulation_steps", "--global-batch-size",
              "global_batch_size", "local_batch_size"}    # magnitudes: the work bound's part


def _leaves(doc, prefix=()):
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _leaves(v, prefix + (k,))
    else:
        yield prefix


def _toml(doc: dict) -> str:
    def value(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v) if math.isfinite(v) else ("inf" if v > 0 else "nan")
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return "{" + ", ".join(f"{k} = {value(x)}" for k, x in v.items()) + "}"
    top = [f"{k} = {value(v)}" for k, v in doc.items() if not isinstance(v, dict)]
    tables = [f"[{k}]\n" + "\n".join(f"{kk} = {value(vv)}" for kk, vv in v.items())
              for k, v in doc.items() if isinstance(v, dict)]
    return "\n".join(top) + "\n\n" + "\n\n".join(tables) + "\n"


def _hostile_for(key: str, old):
    pool = [v for v in HOSTILE if not (key in BATCH_KEYS and isinstance(v, int)
                                       and not isinstance(v, bool) and abs(v) > 10 ** 6)]
    v = copy.deepcopy(R.choice(pool))
    wrong_type = (isinstance(old, bool) != isinstance(v, bool)
                  or isinstance(old, (int, float)) and not isinstance(v, (int, float))
                  or isinstance(old, str) and not isinstance(v, str))
    return v, wrong_type and v != "auto"


ARGS_READ = ("--tensor-model-parallel-size", "--pipeline-model-parallel-size",
             "--num-layers-per-virtual-pipeline-stage", "--expert-model-parallel-size",
             "--seq-length", "--micro-batch-size")


def write_configs(c: Cases) -> None:
    cfg = REPO / "scenarios/configs"
    ds = json.loads((cfg / "ds_zero3.json").read_text())
    tt = tomllib.loads((cfg / "llama3_70b.toml").read_text())
    targets = [("ds.json", ds, json.dumps, "llama2-7b-fsdp-128gpu"),
               ("tt.toml", tt, _toml, "llama3-70b-fsdp-tp8-256gpu")]
    for name, base, dump, scenario in targets:
        for _ in range(45):
            doc = copy.deepcopy(base)
            path = R.choice(list(_leaves(doc)))
            node = doc
            for k in path[:-1]:
                node = node[k]
            kind = R.choice(["replace"] * 4 + ["delete", "add"])
            expect = "either"
            if kind == "delete":
                del node[path[-1]]
            elif kind == "add":
                node["zz_" + str(R.randrange(100))] = R.choice(HOSTILE[:12])
            else:
                node[path[-1]], bad = _hostile_for(path[-1], node[path[-1]])
                key = ".".join(path)
                if bad and (key in READ[name] or key.startswith(
                        tuple(k for k in READ[name] if k.endswith(".")))):
                    expect = "refuse"
            if name.endswith(".toml") and any(v is None for v in _values(doc)):
                continue
            c.add(f"config-{name.split('.')[1]}", ["run", scenario, "--config", name, "-q"],
                  {name: dump(doc)}, expect)
    args = (cfg / "mixtral_8x7b_ep8.args").read_text()
    lines = args.splitlines()
    for _ in range(35):
        text = list(lines)
        i = R.randrange(5, len(text))
        words = text[i].split()
        kind = R.choice(["value", "value", "drop", "twice", "junk"])
        expect = "either"
        if kind == "value" and len(words) >= 2 and words[1] != "\\":
            words[1] = R.choice(["-1", "0", "x", "1.5", "''", "inf", "9" * 30])
            flag = words[0]
            expect = "refuse" if flag in ARGS_READ else "either"
            text[i] = "    " + " ".join(words)
        elif kind == "drop":
            del text[i]
        elif kind == "twice":
            text.insert(i, text[i])
        else:
            text.insert(i, R.choice(["\\", "--zz-unknown 3 \\", "'unclosed \\", "-- \\"]))
        c.add("config-args", ["run", "mixtral-8x7b-ep8", "--config", "m.args", "-q"],
              {"m.args": "\n".join(text) + "\n"}, expect)
    misread = [("ds.args", json.dumps(ds)), ("m.json", args), ("e.json", "{}"),
               ("s.args", "\\\n\\\n\\\n"), ("e.args", ""), ("t.json", (cfg / "llama3_70b.toml")
                                                             .read_text()),
               ("n.json", '{"steps_per_print": 10}'), ("a.json", '{"train_batch_size": "auto"}'),
               ("p.json", '{"pipeline": {"stages": 33}}'),
               ("q.json", '{"tensor_parallel": {"autotp_size": 3}}'),
               ("d.toml", "[parallelism]\ntensor_parallel_degree = 3\n")]
    for name, text in misread:
        c.add("config-misread", ["run", "quickstart", "--config", name, "-q"], {name: text},
              "refuse")


def _values(doc):
    if isinstance(doc, dict):
        for v in doc.values():
            yield from _values(v)
    elif isinstance(doc, list):
        for v in doc:
            yield from _values(v)
    else:
        yield doc


# ---------------------------------------------------------------------- scenario / --set
SET_KEYS = {"resnet50-ddp-1gpu": ["simulation.seed", "training.micro_batch", "cluster.gpus",
                                  "simulation.overlap_slowdown", "training.grad_accum"],
            "quickstart": ["training.seq_len", "simulation.seed", "cluster.nodes"],
            "resnet50-tf-mirrored-8gpu": ["strategy.num_packs"]}
SET_VALUES = [("-1", "refuse"), ("!!int 1e3", "refuse"), ("!!float x", "refuse"),
              ("!!timestamp 2020-13-45", "refuse"), ("!!binary AAAA", "refuse"),
              ("!!set {a: null}", "refuse"), ("1" + "0" * 56, "refuse"),
              (str(2 ** 65), "refuse"), ("[" + ",".join(["12345"] * 1000) + "]", "refuse"),
              (".inf", "refuse"), ("1e56", "refuse"), ("{a: 1}", "refuse"),
              ("0", "either"), ("2", "either"), ("!!str 3", "refuse"), ("-0", "either")]


def write_sets(c: Cases) -> None:
    for scenario, keys in SET_KEYS.items():
        for key in keys:
            for value, expect in SET_VALUES:
                if key == "training.grad_accum" and value in ("1" + "0" * 56, str(2 ** 65)):
                    expect = "either"           # a magnitude: the work bound's part (issue 42)
                elif value == "0" and key in ("simulation.seed", "simulation.overlap_slowdown",
                                            "strategy.num_packs"):
                    expect = "either"
                elif value in ("0", "-0") and key != "simulation.seed":
                    expect = "refuse" if key not in ("simulation.overlap_slowdown",
                                                     "strategy.num_packs") else "either"
                if key == "simulation.overlap_slowdown" and value in ("2", "0", "-0"):
                    expect = "either"
                if key == "cluster.nodes" and value == "2":
                    expect = "refuse"           # quickstart's dgx-a100 takes no node count
                c.add("set", ["run", scenario, "--set", f"{key}={value}", "-q"], None, expect)
    qs = (REPO / "scenarios/quickstart.yaml").read_text()
    for value in ("1" + "0" * 56, "1e56", "!!int 1e3", str(2 ** 64)):
        c.add("scenario-file", ["run", "s.yaml", "-q"],
              {"s.yaml": qs.replace("seq_len: 4096", f"seq_len: {value}")}, "refuse")


# ---------------------------------------------------------------------- the smaller ones
def write_smaller(c: Cases) -> None:
    from simulator.importers.xplane import XSPACE
    for batch in ("0", "-1"):
        c.add("smaller", ["plan", "quickstart", "--global-batch", batch, "-q"], None, "refuse")
    events = [[{"ph": "X", "cat": "kernel"}],
              [{"ph": "X", "cat": "kernel", "name": "k", "ts": 0, "dur": 1e20, "pid": 0,
                "tid": 7}],
              [{"ph": "X", "cat": "kernel", "name": "k", "ts": 0, "dur": -5, "pid": 0,
                "tid": 7}], []]
    for ev in events:
        c.add("smaller", ["import", "pytorch", "k.json", "-o", "o.json"],
              {"k.json": json.dumps({"traceEvents": ev})}, "refuse")
    c.add("smaller", ["import", "pytorch", "k.json", "-o", "o.json"],
          {"k.json": '{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 0, '
                     '"dur": Infinity, "pid": 0, "tid": 7}]}'}, "refuse")
    for duration, offset in ((53 * 86_400 * 10 ** 12, 0), (-5, 0), (10, -10 ** 15),
                             (2 ** 62, 2 ** 62)):
        space = XSPACE()
        plane = space.planes.add(id=1, name="/host:CPU")
        plane.event_metadata[1].name = "train_step"
        line = plane.lines.add(id=1, name="main", timestamp_ns=1)
        line.events.add(metadata_id=1, offset_ps=offset, duration_ps=duration)
        c.add("smaller", ["import", "tensorflow", "w.xplane.pb", "-o", "o.json"],
              {"w.xplane.pb": space.SerializeToString()}, "refuse")
    qs = (REPO / "scenarios/quickstart.yaml").read_text()
    model = "\n".join("model: /dev/zero" if ln.startswith("model:") else ln
                      for ln in qs.splitlines())
    c.add("smaller", ["run", "s.yaml", "-q"], {"s.yaml": model}, "refuse")
    for values in ("[16, 1000000]", "[16, 32]"):
        c.add("smaller", ["study", "st.yaml", "--out", "out", "-q"],
              {"st.yaml": "name: n\ncommand: run\nbase: {scenario: llama2-7b-fsdp-128gpu}\n"
                          f"axes:\n  grid: {{topology.params.nodes: {values}}}\n"}, "refuse")
    c.add("smaller", ["reliability", "quickstart", "-q", "--set",
                      "reliability.checkpoint.interval=1 ns"], None, "refuse")


def write_work(c: Cases) -> None:
    """The work bounds of issue 42: plan, reliability and study magnitudes inside their
    documented ranges (and past a float), each to be refused at once or answered within
    the timeout; none may hang."""
    big = ["--set", "cluster.nodes=16384"]
    plan = ["plan", "llama2-7b-fsdp-128gpu", "-q"]
    tops = {"--max-tp": "64", "--max-pp": "128", "--max-cp": "32",
            "--max-micro-batch": "1024", "--replay": "100"}
    c.add("work-plan", [*plan, *big, *[a for kv in tops.items() for a in kv]])
    for key, value in tops.items():                       # one option at its top
        c.add("work-plan", [*plan, *big, key, value])
    c.add("work-plan", [*plan, *big])                      # the defaults on 16,384 servers
    for power in (9, 12, 15, 18, 21, 30):
        c.add("work-plan", ["plan", "quickstart", "-q", "--global-batch", str(10 ** power)])
    c.add("work-plan", ["plan", "quickstart", "-q", "--global-batch", "1e21"], None, "refuse")
    rel = ["reliability", "-q", "--workers", "1"]
    for rate in ("1e3", "1e6", "1e30", "1e300", "1e400"):
        c.add("work-reliability", [*rel, "--trials", "2", "--set",
                                   f"reliability.failures.gpu.rate={rate} per 1000 gpu-days"])
    for days in ("1e4", "1e9", "1e30", "1e400"):
        c.add("work-reliability", [*rel, "--trials", "2", "--set",
                                   f"reliability.job.duration={days} d"])
    for power in (9, 15, 30, 400):
        c.add("work-reliability", [*rel, "--trials", "2", "--set",
                                   f"reliability.job={{iterations: {10 ** power}}}"])
    for hours in ("1e9", "1e300"):
        c.add("work-reliability", [*rel, "--trials", "2", "--set",
                                   f"reliability.failures.node.repair={hours} h",
                                   "--set", "reliability.restart.spare_nodes=0"])
    c.add("work-reliability", [*rel, "--trials", "1000000"])
    c.add("work-reliability", [*rel, "--trials", "100000", "--set",
                               "reliability.search.points=60"])
    c.add("work-reliability", [*rel, "--trials", "2", "--set",
                               "reliability.search.trials=1000000000000"])
    grid = {"training.seq_len": [256 * (i + 1) for i in range(100)],
            "simulation.seed": list(range(1000))}
    study = ("name: w\ncommand: {cmd}\nbase: {{scenario: {base}}}\n{options}"
             "axes:\n  grid: {grid}\n")
    for cmd, base, options, g in (
            ("run", "quickstart", "", grid),
            ("run", "llama2-7b-fsdp-128gpu", "",
             {"cluster.nodes": [16384], "simulation.seed": list(range(1000))}),
            ("reliability", "reliability-1024gpu", "options: {trials: 100000, search: true}\n",
             {"simulation.seed": [0, 1]}),
            ("compare", "quickstart", "options: {scaling: true, capacity: true}\n",
             {"simulation.seed": list(range(500))})):
        c.add("work-study", ["study", "st.yaml", "--out", "out", "-q"],
              {"st.yaml": study.format(cmd=cmd, base=base, options=options,
                                       grid=json.dumps(g))})


def write_all(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=False)
    c = Cases(root)
    write_chakra(c, root / "_work")
    write_configs(c)
    write_sets(c)
    write_smaller(c)
    write_work(c)
    print(f"wrote {c.n} cases under {root}")


# ------------------------------------------------------------------------------ running
def _child(case: Path) -> None:
    from simulator.cli import main
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    os.chdir(case)
    out = os.open("stdout", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    err = os.open("stderr", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(out, 1)
    os.dup2(err, 2)
    args = (case / "cmd").read_text().splitlines()
    code = 0
    try:
        main(args)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except MemoryError:
        code = 71
    except BaseException:                                 # noqa: BLE001 - the finding
        import traceback
        traceback.print_exc()
        code = 70
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def import_tree(tree: Path, root: Path) -> list[Path]:
    """Import ``tree``'s ``simulator`` once, before the forks; the case folders of ``root``."""
    sys.path.insert(0, str(tree))
    import simulator.cli  # noqa: F401
    assert str(Path(simulator.cli.__file__).resolve()).startswith(str(tree.resolve()))
    return sorted(d for d in root.iterdir() if (d / "cmd").exists())


def run_all(root: Path, tree: Path, tag: str) -> None:
    cases = import_tree(tree, root)
    start = time.time()
    for case in cases:
        for name in ("o.json", "out"):
            p = case / name
            if p.is_file():
                p.unlink()
            elif p.is_dir():
                import shutil
                shutil.rmtree(p)
        t0 = time.time()
        pid = os.fork()
        if pid == 0:
            _child(case)
        rc = None
        while time.time() - t0 < TIMEOUT_S:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                rc = os.waitstatus_to_exitcode(status)
                break
            time.sleep(0.01)
        if rc is None:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            rc = "hang"
        (case / f"rc.{tag}").write_text(f"{rc} {time.time() - t0:.2f}\n")
        for name in ("stderr", "stdout"):
            if (case / name).exists():
                (case / name).rename(case / f"{name}.{tag}")
    print(f"ran {len(cases)} cases with {tree} in {time.time() - start:.0f} s")


# ------------------------------------------------------------------------------ counting
CLASSES = ("clean refusal", "ok run", "traceback", "MemoryError", "hang", "multi-line",
           "overlong line", "silent success")


def outcome(case: Path, tag: str) -> str:
    rc = (case / f"rc.{tag}").read_text().split()[0]
    err = (case / f"stderr.{tag}").read_text(errors="replace") \
        if (case / f"stderr.{tag}").exists() else ""
    expect = (case / "expect").read_text().strip()
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("#")]
    if rc == "hang" or rc in ("-9", "137"):
        return "hang"
    if rc == "71" or "MemoryError" in err:
        return "MemoryError"
    if rc == "70" or "Traceback" in err:
        return "traceback"
    if rc == "2":
        errors = [ln for ln in lines if ln.startswith("clustersim: error:")]
        if len(errors) != 1 or len(lines) - len(errors) > 0 and lines[-1] != errors[0]:
            return "multi-line"
        return "overlong line" if len(errors[0]) > 1000 else "clean refusal"
    if rc == "0":
        return "silent success" if expect == "refuse" else "ok run"
    return f"rc={rc}"


def table(root: Path, tags: list[str]) -> None:
    cases = sorted(d for d in root.iterdir() if (d / "cmd").exists())
    fams = sorted({d.name.rsplit("-", 1)[0] for d in cases})
    for tag in tags:
        counts = collections.defaultdict(collections.Counter)
        for d in cases:
            if (d / f"rc.{tag}").exists():
                counts[d.name.rsplit("-", 1)[0]][outcome(d, tag)] += 1
        bad = ("traceback", "MemoryError", "hang", "multi-line", "overlong line",
               "silent success")
        print(f"\n{tag}: | family | cases | " + " | ".join(CLASSES) + " | bad |")
        print("|---" * (len(CLASSES) + 3) + "|")
        total = collections.Counter()
        for f in fams:
            row = counts[f]
            total.update(row)
            n = sum(row.values())
            print(f"| {f} | {n} | " + " | ".join(str(row[k]) for k in CLASSES)
                  + f" | {sum(row[k] for k in bad)} |")
        print(f"| all | {sum(total.values())} | " + " | ".join(str(total[k]) for k in CLASSES)
              + f" | {sum(total[k] for k in bad)} |")
        others = {k for k in total if k not in CLASSES}
        if others:
            print("other outcomes:", dict((k, total[k]) for k in others))


def bad_cases(root: Path, tag: str) -> None:
    for d in sorted(d for d in root.iterdir() if (d / "cmd").exists()):
        if (d / f"rc.{tag}").exists():
            o = outcome(d, tag)
            if o not in ("clean refusal", "ok run"):
                err = (d / f"stderr.{tag}").read_text(errors="replace").strip().splitlines()
                print(f"{d.name:24} {o:15} {' '.join((d / 'cmd').read_text().split())[:70]} "
                      f"| {err[-1][:150] if err else ''}")


if __name__ == "__main__":
    cmd, root = sys.argv[1], Path(sys.argv[2])
    if cmd == "write":
        sys.path.insert(0, str(REPO))
        write_all(root)
    elif cmd == "write-work":                 # the work-bound family alone
        root.mkdir(parents=True, exist_ok=False)
        write_work(Cases(root))
    elif cmd == "run":
        run_all(root, Path(sys.argv[3]), sys.argv[4])
    elif cmd == "table":
        table(root, sys.argv[3:])
    elif cmd == "bad":
        bad_cases(root, sys.argv[3])

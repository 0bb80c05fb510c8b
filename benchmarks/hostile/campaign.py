#!/usr/bin/env python3
"""Write ~1000 fuzz cases (folders with cmd, expect, files) under ROOT from REPO's shipped files.
expect: refuse (the input is invalid; exit 0 is a silent acceptance) or either."""
import copy, gzip, json, math, os, pathlib, random, sys, zlib
import yaml
ROOT = pathlib.Path(sys.argv[1]); REPO = pathlib.Path(sys.argv[2])
ROOT.mkdir(parents=True, exist_ok=True)
R = random.Random(19)
N = {"case": 0}

def case(kind, args, files=None, expect="either"):
    N["case"] += 1
    d = ROOT / f"{kind}-{N['case']:04d}"
    d.mkdir()
    for fname, data in (files or {}).items():
        p = d / fname
        if callable(data): data(p)
        else: p.write_bytes(data if isinstance(data, bytes) else data.encode())
    (d / "cmd").write_text("\n".join(args) + "\n")
    (d / "expect").write_text(expect + "\n")

INF, NAN = float("inf"), float("nan")
HOSTILE = [0, -1, 1, 2**31, 10**12, 10**30, -10**12, True, False, None, INF, -INF, NAN, 1e308,
           -0.0, 1e-300, "", "x", "1e999 s", "inf Gb/s", "-5 GB/s", "nan us", "0 us", "1e400 GB/s",
           [], [1, 2], {}, {"a": 1}, [[[[1]]]], "A" * 5000]
def nonfinite(v): return isinstance(v, float) and not math.isfinite(v)

def paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items(): yield from paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node): yield from paths(v, prefix + (i,))
def get(doc, p):
    for k in p: doc = doc[k]
    return doc
def mutate(doc):
    """One mutation; returns (doc, must_refuse)."""
    doc = copy.deepcopy(doc)
    ps = [p for p in paths(doc) if p]
    leaves = [p for p in ps if not isinstance(get(doc, p), (dict, list))]
    p = R.choice(leaves if leaves and R.random() < 0.8 else ps)
    parent = get(doc, p[:-1])
    old = parent[p[-1]]
    kind = R.choice(["replace"] * 6 + ["delete", "unknown"])
    if kind == "delete":
        del parent[p[-1]]
        return doc, False
    if kind == "unknown" and isinstance(parent, dict):
        parent["zz_unknown"] = copy.deepcopy(R.choice(HOSTILE))
        return doc, not (p[:-1] and p[-2] in ("links", "stragglers", "params", "strategy")) and False
    v = copy.deepcopy(R.choice(HOSTILE))
    parent[p[-1]] = v
    refuse = nonfinite(v) or (isinstance(v, bool) and isinstance(old, int) and not isinstance(old, bool)) \
        or (isinstance(old, int) and not isinstance(old, bool) and isinstance(v, int) and not isinstance(v, bool) and v < 0
            and p[-1] in ("micro_batch", "seq_len", "grad_accum", "nodes", "gpus", "nics", "nodes_per_leaf", "spines", "bucket_cap_mb"))
    return doc, refuse
def dump(doc): return yaml.safe_dump(doc, sort_keys=False)

SCENARIOS = ["quickstart", "resnet50-ddp-8gpu", "resnet50-ddp-1gpu", "bert-large-ddp-8gpu", "resnet50-horovod-8gpu",
             "resnet50-tf-mirrored-8gpu", "maskrcnn-tf-mirrored-8gpu", "resnet50-tf-ps-4node", "resnet50-tf-central-8gpu"]
TOPOS = ["dgx-a100", "dgx-a100-superpod", "a100-roce-leaf-spine", "aws-p4d", "hgx-a100-pcie", "hgx-h200"]
sdocs = {s: yaml.safe_load((REPO / f"scenarios/{s}.yaml").read_text()) for s in SCENARIOS}
tdocs = {t: yaml.safe_load((REPO / f"topologies/{t}.yaml").read_text()) for t in TOPOS}

# A. mutated scenarios (300), 1-2 mutations
for i in range(300):
    s = R.choice(SCENARIOS); doc, refuse = mutate(sdocs[s])
    if R.random() < 0.3:
        doc, r2 = mutate(doc); refuse = refuse or r2
    case("scn", ["run", "s.yaml"], {"s.yaml": dump(doc)}, "refuse" if refuse else "either")
# B. mutated topologies (200)
for i in range(200):
    t = R.choice(TOPOS); doc, refuse = mutate(tdocs[t])
    case("topo", ["topology", "t.yaml"], {"t.yaml": dump(doc)}, "refuse" if refuse else "either")
# C. hostile --set values (150)
KEYS = ["training.micro_batch", "training.grad_accum", "training.seq_len", "cluster.nodes", "cluster.gpus",
        "simulation.overlap_slowdown", "simulation.stragglers", "cluster.links", "simulation.seed",
        "strategy.bucket_cap_mb", "strategy.sharding", "training.precision", "cluster.topology", "model",
        "simulation.fidelity", "strategy", "training", "cluster.ecmp", "reliability"]
VALUES = [("true", "refuse"), (".inf", "refuse"), (".nan", "refuse"), ("-1", "either"), ("1e400", "either"),
          ("[1]", "either"), ("{a: 1}", "either"), ("{3: .nan}", "refuse"), ("{3: .inf}", "refuse"),
          ("{99999999: 2.0}", "refuse"), ("{0: 0}", "refuse"), ("{nvlink3: {bw: .inf}}", "refuse"),
          ("{nvlink3: {latency: -1 us}}", "either"), ("&a [*a]", "refuse"), ("[" * 100 + "]" * 100, "refuse"),
          ("? [a]\n: 1", "refuse"), ("0", "either"), ("", "either"), ("~", "either"), ("1.0e+300", "either"),
          ("{0: 1.0e+300}", "refuse"), ("{-1: 2.0}", "refuse"), ("{nvlink3: {bw: 1e999 GB/s}}", "refuse")]
for i in range(150):
    key = R.choice(KEYS); val, exp = R.choice(VALUES)
    if exp == "refuse" and val in ("true",) and key not in ("training.micro_batch", "training.grad_accum", "training.seq_len", "cluster.nodes", "cluster.gpus", "simulation.seed"):
        exp = "either"
    if exp == "refuse" and val.startswith("{") and "nvlink3" in val and key != "cluster.links":
        exp = "either"
    if val.startswith("{") and "nvlink3" not in val and key != "simulation.stragglers" and "nan" not in val and "inf" not in val:
        exp = "either"
    case("set", ["run", R.choice(SCENARIOS[:5]), "--set", f"{key}={val}"], expect=exp)
# D. damaged bytes (100)
for i in range(100):
    src = R.choice([REPO / f"scenarios/{R.choice(SCENARIOS)}.yaml", REPO / f"topologies/{R.choice(TOPOS)}.yaml"])
    data = bytearray(src.read_bytes())
    if R.random() < 0.4:
        data = data[: R.randrange(len(data))]
    else:
        for _ in range(R.randint(1, 6)):
            data[R.randrange(len(data))] = R.randrange(256)
    cmd = "run" if "scenarios" in str(src) else "topology"
    case("bytes", [cmd, "f.yaml"], {"f.yaml": bytes(data)})
# E. traces: mutated captured Kineto (150), TF xplane damaged (30), TF json from kineto (5)
TR = sorted((REPO / "validation/traces/captured").glob("torch-*/rank0.pt.trace.json.gz"))
kdocs = [json.loads(gzip.decompress(p.read_bytes())) for p in TR[:3]]
READ = {"ts": "num", "dur": "num", "name": "str", "cat": "str", "ph": "str", "args": "map", "tid": "id", "pid": "id"}
for i in range(150):
    doc = copy.deepcopy(R.choice(kdocs)); refuse = False
    where = R.random()
    if where < 0.15:
        key = R.choice(["distributedInfo", "deviceProperties", "rank", "world_size", "pg_config"])
        v = copy.deepcopy(R.choice(HOSTILE[:14] + [[], "x", {"a": 1}]))
        if key in ("rank", "world_size", "pg_config"):
            doc["distributedInfo"][key] = v
            refuse = (key == "rank" and (not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < doc["distributedInfo"]["world_size"]) and v is not None) \
                or (key == "world_size" and (not isinstance(v, int) or isinstance(v, bool) or v < 1) and v is not None)
        else:
            doc[key] = v
    else:
        evs = [e for e in doc["traceEvents"] if e.get("cat") in ("cpu_op", "user_annotation")]
        e = R.choice(evs)
        key = R.choice(list(READ))
        v = copy.deepcopy(R.choice([x for x in HOSTILE if not nonfinite(x)]))
        e[key] = v
        t = READ[key]
        bad = v is not None and ((t == "num" and (isinstance(v, bool) or not isinstance(v, (int, float))))
              or (t == "str" and not isinstance(v, (str, int, float)) or isinstance(v, bool) and t == "str")
              or (t == "map" and not isinstance(v, dict))
              or (t == "id" and key == "tid" and (isinstance(v, (list, dict, bool)))))
        refuse = bad and key != "pid" and key not in ("ph", "cat") and e.get("ph") == "X"
    case("trace", ["import", "pytorch", "t.json", "-o", "o.json"], {"t.json": json.dumps(doc)}, "refuse" if refuse else "either")
XP = sorted((REPO / "validation/traces/captured").glob("tf-*/worker0.xplane.pb.gz"))
for i in range(30):
    raw = bytearray(gzip.decompress(R.choice(XP).read_bytes()))
    if R.random() < 0.4: raw = raw[: R.randrange(len(raw))]
    else:
        for _ in range(R.randint(1, 10)): raw[R.randrange(len(raw))] = R.randrange(256)
    case("xplane", ["import", "tensorflow", "t.xplane.pb", "-o", "o.json"], {"t.xplane.pb": bytes(raw)})
for p in TR[:3]:
    case("cross", ["import", "tensorflow", "t.json.gz", "-o", "o.json"], {"t.json.gz": p.read_bytes()}, "refuse")
for p in XP[:3]:
    case("cross", ["import", "pytorch", "t.xplane.pb.gz", "-o", "o.json"], {"t.xplane.pb.gz": p.read_bytes()}, "refuse")
# F. bombs and special cases (timed for the note)
def gz_stream(path, parts):
    with open(path, "wb") as raw:
        c = zlib.compressobj(1, zlib.DEFLATED, 31)
        for p in parts: raw.write(c.compress(p))
        raw.write(c.flush())
for gib in (1, 4):
    case("bomb", ["import", "pytorch", "t.json.gz", "-o", "o.json"], {"t.json.gz": lambda p, g=gib: gz_stream(p, [b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "', *(b"a" * (1 << 24) for _ in range(64 * g)), b'"}]}'])}, "refuse")
    case("bomb", ["import", "pytorch", "t.json.gz", "-o", "o.json"], {"t.json.gz": lambda p, g=gib: gz_stream(p, [b'{"junk": "', *(b"b" * (1 << 24) for _ in range(64 * g)), b'", "traceEvents": []}'])}, "refuse")
case("bomb", ["import", "tensorflow", "t.xplane.pb.gz", "-o", "o.json"], {"t.xplane.pb.gz": lambda p: gz_stream(p, (b"\0" * (1 << 24) for _ in range(640)))}, "refuse")
case("bomb", ["import", "pytorch", "t.json.gz", "-o", "o.json"], {"t.json.gz": lambda p: gz_stream(p, [b'{"traceEvents": [', *((b'{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":1,"dur":1},' * 100_000) for _ in range(100)), b'{"ph":"i"}]}'])}, "refuse")
case("bomb", ["import", "pytorch", "t.json.gz", "-o", "o.json"], {"t.json.gz": lambda p: gz_stream(p, [b'{"traceEvents": [', *((b'[' * 1000 + b']' * 1000 + b',') for _ in range(10000)), b'1]}'])}, "refuse")
for d in (100, 10_000, 100_000, 1_000_000):
    case("bomb", ["import", "pytorch", "t.json", "-o", "o.json"], {"t.json": '{"traceEvents": [{"ph": "X", "args": ' + "[" * d + "]" * d + "}]}"}, "refuse")
    case("bomb", ["run", "s.yaml"], {"s.yaml": (REPO / "scenarios/quickstart.yaml").read_text() + "x: " + "[" * d + "]" * d + "\n"}, "refuse")
    case("bomb", ["replay", "t.json"], {"t.json": "[" * d + "]" * d}, "refuse")
for levels in (5, 7, 9, 12):
    lol = "lol:\n  a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(f"  b{i}: &b{i} [" + ", ".join([f"*{'a' if i == 0 else f'b{i-1}'}"] * 9) + "]\n" for i in range(levels))
    q = (REPO / "scenarios/quickstart.yaml").read_text().replace('description: "Llama-2-7B, FSDP FULL_SHARD, bf16, flash attention, one DGX A100 80GB"\n', "")
    case("bomb", ["run", "s.yaml"], {"s.yaml": q + lol + f"description: *b{levels-1}\n"}, "refuse")
    case("bomb", ["topology", "t.yaml"], {"t.yaml": "name: x\ngenerator: dgx_a100_node\n" + lol.replace("lol:", "description:") }, "refuse")
for n in (1_000_000, 6_000_000):
    case("bomb", ["run", "s.yaml"], {"s.yaml": (REPO / "scenarios/quickstart.yaml").read_text() + "junk: [" + ",".join(["12345678"] * n) + "]\n"}, "refuse")
case("bomb", ["topology", "t.yaml"], {"t.yaml": "name: x\ngenerator: rail_optimized\nparams:\n  nodes: 1000000\n  node: {type: dgx_a100, gpu: A100-SXM4-80GB, nics: 8, nic: ib-hdr}\n"}, "refuse")
case("bomb", ["collective", "all_reduce", "--topology", "dgx-a100-superpod", "--nodes", "100000000"], expect="refuse")
for f in ("inf", "nan", "-inf", "1", "0", "1e-300", "1.0000000001"):
    case("special", ["collective", "all_reduce", "-f", f], expect="refuse")
for path in ("/dev/zero", "/dev/null", "/proc/self/mem", "/"):
    case("special", ["run", path], expect="refuse")
    case("special", ["import", "pytorch", path, "-o", "o.json"], expect="refuse")
    case("special", ["topology", path], expect="refuse")
    case("special", ["replay", path], expect="refuse")
case("special", ["import", "pytorch", "f", "-o", "o.json"], {"f": lambda p: os.mkfifo(p)}, "refuse")
case("special", ["run", "f.yaml"], {"f.yaml": lambda p: os.mkfifo(p)}, "refuse")
case("special", ["topology", "f.yaml"], {"f.yaml": lambda p: os.mkfifo(p)}, "refuse")
case("special", ["replay", "f.json"], {"f.json": lambda p: os.mkfifo(p)}, "refuse")
for s in SCENARIOS:
    case("ok", ["run", s])
print(N["case"])

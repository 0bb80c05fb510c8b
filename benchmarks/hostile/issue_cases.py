#!/usr/bin/env python3
"""Write the issue-19 examples as case folders under ROOT (cmd: args one per line; expect)."""
import gzip, json, os, pathlib, sys, zlib
ROOT = pathlib.Path(sys.argv[1]); REPO = pathlib.Path(sys.argv[2])
ROOT.mkdir(parents=True, exist_ok=True)
QS = (REPO / "scenarios/quickstart.yaml").read_text()

def case(name, args, files=None, expect="refuse"):
    d = ROOT / name
    d.mkdir(exist_ok=True)
    for fname, data in (files or {}).items():
        p = d / fname
        if callable(data):
            data(p)
        else:
            p.write_bytes(data if isinstance(data, bytes) else data.encode())
    (d / "cmd").write_text("\n".join(args) + "\n")
    (d / "expect").write_text(expect + "\n")

def scn(extra, name="s.yaml"):
    return {name: QS + extra}

# ---- encoding and YAML structure
case("enc-binary", ["run", "s.yaml"], {"s.yaml": bytes(range(256)) * 40})
case("enc-utf16", ["run", "s.yaml"], {"s.yaml": QS.encode("utf-16")})
case("enc-bad-byte", ["run", "s.yaml"], {"s.yaml": QS.replace("Llama-2-7B", "Llama\xff").encode("latin-1")})
case("yaml-list-key", ["run", "s.yaml"], scn("? [a, b]\n: 1\n"))
case("yaml-map-key-strategy", ["run", "s.yaml"], {"s.yaml": QS.replace("strategy: {name: fsdp,", "strategy: {? {a: 1} : x, name: fsdp,")})
case("yaml-deep-lists", ["run", "s.yaml"], {"s.yaml": QS.replace('description: "', 'description: ' + "[" * 20000 + "]" * 20000 + '\n#"')})
laughs = "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(f"{chr(98+i)}: &{chr(98+i)} [" + ",".join([f"*{chr(97+i)}"] * 9) + "]\n" for i in range(8))
case("yaml-billion-laughs", ["run", "s.yaml"], {"s.yaml": QS.replace('description: "Llama-2-7B, FSDP FULL_SHARD, bf16, flash attention, one DGX A100 80GB"\n', "") + "lol:\n" + "".join("  " + l + "\n" for l in laughs.splitlines()) + "description: *i\n"})
case("yaml-huge-unknown-list", ["run", "s.yaml"], {"s.yaml": QS + "junk: [" + ",".join(["12345678"] * 6_000_000) + "]\n"})
# ---- numbers
case("num-link-bw-inf", ["run", "quickstart", "--set", "cluster.links={nvlink3: {bw: .inf}}"])
case("num-link-bw-inf-str", ["run", "quickstart", "--set", "cluster.links={nvlink3: {bw: inf GB/s}}"])
case("num-link-lat-nan", ["run", "quickstart", "--set", "cluster.links={nvlink3: {latency: .nan}}"])
case("num-straggler-nan", ["run", "quickstart", "--set", "simulation.stragglers={3: .nan}"])
case("num-straggler-inf", ["run", "quickstart", "--set", "simulation.stragglers={3: .inf}"])
case("num-overlap-inf", ["run", "s.yaml"], {"s.yaml": QS.replace("overlap_slowdown: 0.0", "overlap_slowdown: .inf")})
case("num-overlap-nan", ["run", "quickstart", "--set", "simulation.overlap_slowdown=.nan"])
case("num-collective-f-inf", ["collective", "all_reduce", "-f", "inf"])
case("num-collective-f-nan", ["collective", "all_reduce", "-f", "nan"])
case("num-micro-batch-true", ["run", "quickstart", "--set", "training.micro_batch=true"])
case("num-straggler-far-rank", ["run", "resnet50-tf-multiworker-32gpu", "--set", "simulation.stragglers={1000000000000: 1.5}"])
case("num-bytes-per-pack-0-fsdp", ["run", "quickstart", "--set", "strategy.bytes_per_pack=0"])
case("num-bytes-per-pack-neg", ["run", "resnet50-tf-multiworker-32gpu", "--set", "strategy.bytes_per_pack=-1"])
case("num-grad-accum-1e6", ["run", "quickstart", "--set", "training.grad_accum=1000000"], expect="either")
# ---- topologies
case("topo-no-node", ["topology", "t.yaml"], {"t.yaml": "name: x\ngenerator: rail_optimized\nparams: {nodes: 4, nodes_per_leaf: 20}\n"})
case("topo-million-nodes", ["topology", "t.yaml"], {"t.yaml": "name: x\ngenerator: rail_optimized\nparams:\n  nodes: 1000000\n  node: {type: dgx_a100, gpu: A100-SXM4-80GB, nics: 8, nic: ib-hdr}\n"})
case("topo-param-bomb-nics", ["topology", "t.yaml"], {"t.yaml": "name: x\ngenerator: dgx_a100_node\nparams: {gpu: A100-SXM4-80GB, nics: 100000000, nic: ib-hdr}\n"})
case("topo-param-nodes-per-leaf-bomb", ["topology", "t.yaml"], {"t.yaml": "name: x\ngenerator: rail_optimized\nparams:\n  nodes: 16384\n  nodes_per_leaf: 1\n  node: {type: dgx_a100, gpu: A100-SXM4-80GB, nics: 8, nic: ib-hdr}\n"})
# ---- profiler traces
TR = REPO / "validation/traces/captured/torch-ddp-2r-1gbit"
real0 = json.loads(gzip.decompress((TR / "rank0.pt.trace.json.gz").read_bytes()))

def gz_stream(path, parts):
    with open(path, "wb") as raw:
        c = zlib.compressobj(1, zlib.DEFLATED, 31)
        for p in parts:
            raw.write(c.compress(p))
        raw.write(c.flush())

def zeros(n, chunk=1 << 24):
    for _ in range(n // chunk):
        yield b"\0" * chunk

def bigname(p):
    gz_stream(p, [b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "'] + ["a" * (1 << 24)] and
              [b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "', *(b"a" * (1 << 24) for _ in range(64)), b'", "ts": 1, "dur": 1}]}'])
#case("tr-gzbomb-1g-name", ["import", "pytorch", "t.json.gz", "-o", "o.json"], {"t.json.gz": bigname})
def bigskip(p):
    gz_stream(p, [b'{"junk": "', *(b"b" * (1 << 24) for _ in range(256)), b'", "traceEvents": []}'])
#case("tr-gzbomb-4g-skipped-key", ["import", "pytorch", "t.json.gz", "-o", "o.json"], {"t.json.gz": bigskip})
def xzeros(p):
    gz_stream(p, zeros(10 << 30))
#case("tr-gzbomb-10g-xplane", ["import", "tensorflow", "t.xplane.pb.gz", "-o", "o.json"], {"t.xplane.pb.gz": xzeros})
def tiny(p):
    ev = b'{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":1,"dur":1},'
    gz_stream(p, [b'{"traceEvents": [', *(ev * 100_000 for _ in range(100)), b'{"ph":"i"}]}'])
#case("tr-10m-events", ["import", "pytorch", "t.json.gz", "-o", "o.json"], {"t.json.gz": tiny})
case("tr-deep-json", ["import", "pytorch", "t.json", "-o", "o.json"], {"t.json": '{"traceEvents": [{"ph": "X", "args": ' + "[" * 100_000 + "]" * 100_000 + "}]}"})

def mutated(fn):
    doc = json.loads(json.dumps(real0))
    fn(doc)
    return json.dumps(doc)
def ev_field(key, value, cat="cpu_op"):
    def f(doc):
        for e in doc["traceEvents"]:
            if e.get("cat") == cat:
                e[key] = value
    return f
for name, fn in {
    "args-list": ev_field("args", [1, 2]), "args-str": ev_field("args", "x"),
    "pid-list": ev_field("pid", [1]), "tid-map": ev_field("tid", {"a": 1}),
    "ts-str": ev_field("ts", "abc"), "dur-nan": ev_field("dur", float("nan")), "name-num": ev_field("name", 5),
    "distinfo-str": lambda d: d.__setitem__("distributedInfo", "x"),
    "rank-x": lambda d: d["distributedInfo"].__setitem__("rank", "x"),
    "world-neg": lambda d: d["distributedInfo"].__setitem__("world_size", -1),
    "rank-7-of-2": lambda d: d["distributedInfo"].__setitem__("rank", 7),
    "pgconfig-str": lambda d: d["distributedInfo"].__setitem__("pg_config", "x"),
    "devprops-str": lambda d: d.__setitem__("deviceProperties", "x"),
}.items():
    case(f"tr-{name}", ["import", "pytorch", "t.json", "-o", "o.json"], {"t.json": mutated(fn)})
case("tr-tf-reads-kineto", ["import", "tensorflow", "t.json.gz", "-o", "o.json"], {"t.json.gz": (TR / "rank0.pt.trace.json.gz").read_bytes()})
XP = REPO / "validation/traces/captured/tf-mwms-2r-1gbit/worker0.xplane.pb.gz"
case("tr-pt-reads-xplane", ["import", "pytorch", "t.xplane.pb.gz", "-o", "o.json"], {"t.xplane.pb.gz": XP.read_bytes()})
case("tr-fifo", ["import", "pytorch", "fifo.json", "-o", "o.json"], {"fifo.json": lambda p: os.mkfifo(p)})
case("tr-dev-zero", ["import", "pytorch", "/dev/zero", "-o", "o.json"])
case("yaml-dev-zero", ["run", "/dev/zero"])
case("yaml-fifo", ["run", "f.yaml"], {"f.yaml": lambda p: os.mkfifo(p)})
case("ok-quickstart", ["run", "quickstart"], expect="either")

"""`run --out DIR --timeline-format kineto` (issue 47): the simulated step as PyTorch
profiler (Kineto) traces, one file per rank, in the shape HolisticTraceAnalysis reads
(header distributedInfo, ph X events of category kernel / gpu_memcpy launched by
cuda_runtime calls of the same correlation, stream and device in args, NCCL kernel names).
The schema is checked here field by field; HTA itself loads the files where it is installed
(the test extra)."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest

from simulator.engine import OpRecord
from simulator.metrics.kineto_export import write_kineto
from simulator.metrics.summary import union_length
from test_cli import run_main


@pytest.fixture(scope="module")
def kineto_run(tmp_path_factory):
    """The quickstart's step written both ways: (its JSON metrics, the kineto folder)."""
    out = tmp_path_factory.mktemp("k") / "out"
    from simulator.cli import main
    with pytest.raises(SystemExit) as done:
        main(["run", "--out", str(out), "--timeline-format", "kineto", "-q", "--format",
              "json"])
    assert done.value.code in (None, 0)
    return json.loads((out / "summary.json").read_text())["metrics"], out / "kineto"


def test_one_file_per_rank_with_its_distributed_info(kineto_run):
    metrics, folder = kineto_run
    files = sorted(folder.glob("rank-*.pt.trace.json"))
    assert len(files) == metrics["world_size"] == 8
    assert not (folder.parent / "timeline.json").exists()
    ranks = []
    for f in files:
        d = json.loads(f.read_text())
        assert list(d)[-1] == "traceEvents"       # the header first, as Kineto writes it
        assert d["distributedInfo"]["world_size"] == 8 and d["schemaVersion"] == 1
        assert d["deviceProperties"][0]["name"] == "A100-SXM4-80GB"
        ranks.append(d["distributedInfo"]["rank"])
    assert sorted(ranks) == list(range(8))


def test_events_have_the_fields_hta_reads(kineto_run):
    metrics, folder = kineto_run
    d = json.loads((folder / "rank-3.pt.trace.json").read_text())
    events = [e for e in d["traceEvents"] if e["ph"] == "X"]
    cats = {e["cat"] for e in events}
    assert {"kernel", "cuda_runtime", "user_annotation"} <= cats
    assert cats <= {"kernel", "gpu_memcpy", "cuda_runtime", "user_annotation", "cpu_op"}
    gpu = [e for e in events if e["cat"] in ("kernel", "gpu_memcpy")]
    launches = {e["args"]["correlation"]: e for e in events if e["cat"] == "cuda_runtime"}
    assert len(launches) == len(gpu)
    for e in gpu:
        a = e["args"]
        assert a["device"] == 3 == e["pid"] and a["stream"] == e["tid"] >= 7
        assert launches[a["correlation"]]["ts"] <= e["ts"] and e["dur"] >= 0
    comm = [e for e in gpu if "communicator" in e["args"]]
    assert comm and all(re.match(r"^nccl.*Kernel", e["name"]) for e in comm)
    assert not any(re.match(r"^nccl.*Kernel", e["name"]) for e in gpu if e not in comm)
    step = next(e for e in events if e["name"] == "ProfilerStep#1")
    assert step["dur"] == pytest.approx(metrics["iteration_time_s"] * 1e6, abs=1e-3)
    # the GPU's busy time is run's compute_s plus the communication under no compute
    busy = union_length([(e["ts"], e["ts"] + e["dur"]) for e in gpu])
    assert busy == pytest.approx((metrics["compute_s"] + metrics["exposed_comm_s"]) * 1e6,
                                 rel=1e-6)


def test_past_64_ranks_a_file_per_rank_class(tmp_path):
    recs = [OpRecord(c, 0, "gemm", "compute", "compute", "", "", 0.0, 0.0, 1.0)
            for c in ("s0", "s1")]
    tl = SimpleNamespace(records=recs, iteration_time_s=1.0)
    files = write_kineto(tmp_path, tl, {"s0": tuple(range(64)), "s1": tuple(range(64, 128))},
                         "H100-SXM")
    assert [f.name for f in files] == ["rank-0.pt.trace.json", "rank-64.pt.trace.json"]
    d = json.loads(files[1].read_text())
    assert d["distributedInfo"] == {"backend": "nccl", "rank": 64, "world_size": 128}
    assert {e["pid"] for e in d["traceEvents"] if e.get("cat") == "kernel"} == {0}


def test_a_timeline_format_without_out_is_refused(capsys):
    code, _, err = run_main(capsys, "run", "--timeline-format", "kineto")
    assert code == 2 and "--timeline-format: applies to the files of --out DIR" in err


def test_holistic_trace_analysis_opens_it(kineto_run):
    ta = pytest.importorskip(
        "hta.trace_analysis",
        reason="HolisticTraceAnalysis is not installed (pip install -e '.[test]' installs it)")
    metrics, folder = kineto_run
    analysis = ta.TraceAnalysis(trace_dir=str(folder))
    assert sorted(analysis.t.traces) == list(range(8))
    breakdown = analysis.get_temporal_breakdown(visualize=False)
    # HTA's compute time (its kernels, to the microsecond) is run's gpu_utilization
    assert breakdown["compute_time_pctg"].tolist() == pytest.approx(
        [100 * metrics["gpu_utilization"]] * 8, abs=0.1)


def test_collectives_are_named_as_nccl_names_its_kernels(kineto_run):
    """Real PyTorch/NCCL traces name a collective's kernel ncclDevKernel_<Func>, then for a
    reduction _<RedOp>_<type>, then _<ALGO>_<PROTO> (NCCL 2.19+'s generate.py); the
    quickstart (FSDP, bf16, ring, Simple) reads so, and the profiler importer reads the
    collective, algorithm and protocol back from the names."""
    from simulator.importers.comms import nccl_kernel
    _, folder = kineto_run
    d = json.loads((folder / "rank-0.pt.trace.json").read_text())
    names = {e["name"] for e in d["traceEvents"] if "communicator" in e.get("args", {})}
    assert names == {"ncclDevKernel_AllGather_RING_SIMPLE",
                     "ncclDevKernel_ReduceScatter_Sum_bf16_RING_SIMPLE"}
    assert nccl_kernel("ncclDevKernel_ReduceScatter_Sum_bf16_RING_SIMPLE") == \
        ("reduce_scatter", {"algorithm": "ring", "protocol": "Simple"})


@pytest.mark.parametrize("collective, algo, proto, kind, dtype, want", [
    ("all_reduce", "tree", "LL128", "collective", "f16",
     "ncclDevKernel_AllReduce_Sum_f16_TREE_LL128"),
    ("all_reduce", "nvls_tree", "Simple", "collective", "bf16",
     "ncclDevKernel_AllReduce_Sum_bf16_NVLS_TREE_SIMPLE"),
    ("all_gather", "pat", "Simple", "collective", "bf16", "ncclDevKernel_AllGather_PAT_SIMPLE"),
    ("broadcast", "ring", "LL", "collective", "f32", "ncclDevKernel_Broadcast_RING_LL"),
    ("all_to_all", "direct", "Simple", "collective", "bf16", "ncclDevKernel_SendRecv"),
    ("", "", "", "send", "bf16", "ncclDevKernel_SendRecv")])
def test_nccl_kernel_name_from_the_record(collective, algo, proto, kind, dtype, want):
    from simulator.metrics.kineto_export import kernel_name, nccl_dtype
    r = OpRecord("c", 0, "x.block.3", "comm", kind, "", "", 0.0, 0.0, 1.0, 64, algo, proto,
                 collective=collective)
    assert kernel_name(r, dtype) == want
    assert [nccl_dtype(p) for p in ("bf16", "fp16", "fp32", "tf32", "fp8")] == \
        ["bf16", "f16", "f32", "f32", "bf16"]

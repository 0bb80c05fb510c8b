"""Numbers docs/ pages quote from the tool that no marked block (tests/test_quoted_numbers.py)
covers, rerun and compared, or derived here from the data, the formulas and the generated
validation files they come from (issue 47's audit, "every number in docs produced by a test").

Runs: compare.md (Example 2, its fabric table and folk claims; the one-node paragraph: six
compare runs, ~10 s each), capacity.md and commands.md's capacity paragraph (four capacity
runs), commands.md (one run; the link-latency study's 16 points, shared with studies.md),
tensorflow-strategies.md (nine ResNet-50 runs, < 1 s each), parallelism.md (four MoE runs),
reliability.md and amd.md (refusals, collective-model calls: no trial or step runs).
No runs: variability.md (quadrature), accuracy.md, compute.md and parallelism.md's validation
figures against ``simulator/data/validated.csv`` (in step with the validation results:
tests/test_envelope.py) and the committed reports the validation commands write
(``validation/*/report*.md``, ``fsdp_tables.csv``, ``results.csv``); those reports are the
last full validation run's, which the suite does not repeat (40 minutes)."""

from __future__ import annotations

import csv
import math
import re
import statistics
from pathlib import Path

import pytest
import yaml

from test_cli import run_main

REPO = Path(__file__).resolve().parents[1]
COMPARE = (REPO / "docs" / "compare.md").read_text()
EXAMPLE2 = ["compare", "llama2-7b-fsdp-128gpu", "--set", "model=gpt3-1.3b", "--set",
            "training.seq_len=2048", "--tokens", "300B", "--strategies",
            "fsdp-full,fsdp-grad-op,fsdp-no-shard,fsdp-hybrid,fsdp-hybrid-zero2,ddp,"
            "tf-mirrored,tf-multiworker,tf-ps,tf-central,horovod", "-q"]
FABRICS = {"superpod HDR": [],
           "p4d EFA": ["--set", "cluster.topology=aws-p4d"],
           "p4d EFA, bf16 gradients": ["--set", "cluster.topology=aws-p4d", "--set",
                                       "strategy.reduce_dtype=bf16"],
           "HDR at 25 Gb/s": ["--set", "cluster.links={ib-hdr: {bw: 25 Gb/s}}"]}


def _compare(capsys, *extra: str) -> str:
    code, out, err = run_main(capsys, *EXAMPLE2, *extra)
    assert code == 0, err
    return out.replace(f"{REPO}/", "")          # a shipped scenario named from the checkout


def _cells(out: str) -> dict[str, str]:
    """strategy -> the fabric table's cell: 'iter s (exposed s): comm-wait %, waste'."""
    time_rows, cost_rows = {}, {}
    for line in out.splitlines():
        cols = line.split()
        if len(cols) >= 13 and cols[3] in ("fits", "OOM"):
            time_rows.setdefault(cols[0], cols)
        elif len(cols) == 12 and cols[0] in time_rows and cols[0] not in cost_rows:
            cost_rows[cols[0]] = cols
    cells = {}
    for name, t in time_rows.items():
        c = cost_rows[name]
        waste = "cheapest" if c[-1] == "cheapest" else f"waste {c[-1]} %"
        cells[name] = f"{t[4]} ({t[9]}): {c[4]} %, {waste}"
        cells[name + " 2x"] = t[11]
    return cells


def test_compare_example2_and_its_fabric_table(capsys):
    block = COMPARE.split("## Example 2", 1)[1].split("```", 2)[1]
    quoted = [line for line in block.splitlines() if line.strip()]
    out = _compare(capsys)
    missing = [line for line in quoted if line not in out]
    assert not missing, f"docs/compare.md, Example 2: not printed: {missing[:3]}"

    section = COMPARE.split("| strategy | superpod HDR |", 1)[1].split("\n\n", 1)[0]
    rows = [[c.strip() for c in line.strip("|").split("|")]
            for line in section.splitlines()[2:]]
    cells = {name: _cells(out if name == "superpod HDR" else
                          _compare(capsys, "--no-capacity", *extra))
             for name, extra in FABRICS.items()}
    for row in rows:
        name, *quoted_cells = row
        for fabric, cell in zip(FABRICS, quoted_cells):
            if name.startswith("2x eff"):
                assert cell == f"{cells[fabric]['ddp 2x']} / {cells[fabric]['fsdp-full 2x']}"
            else:
                assert cell == cells[fabric][name], (name, fabric)

    # the folk claims' arithmetic on those cells
    def step(fabric: str, name: str) -> float:
        return float(cells[fabric][name].split()[0])
    claim = COMPARE.split("FULL_SHARD's step is ", 1)[1]
    shorter = [int(x) for x in re.findall(r"(\d+)% shorter", claim[:200])]
    assert shorter == [round(100 * (1 - step(f, "fsdp-full") / step(f, "ddp")))
                       for f in ("superpod HDR", "p4d EFA")]


def _table(out: str) -> dict[str, list[str]]:
    """strategy -> its first row (the time and memory table) and ``name$`` its cost row."""
    rows: dict[str, list[str]] = {}
    for line in out.splitlines():
        cols = line.split()
        if len(cols) >= 13 and cols[3] in ("fits", "OOM"):
            rows.setdefault(cols[0], cols)
        elif cols and cols[0] in rows and cols[0] + "$" not in rows and "fits" not in cols:
            rows[cols[0] + "$"] = cols
    return rows


def _num(cell: str) -> float:
    return float(cell.replace(",", ""))


def test_compare_one_node_paragraph(capsys):
    """docs/compare.md's paragraph on ResNet-50 and BERT-large on one node."""
    text = " ".join(COMPARE.split("One node (", 1)[1].split("## The folk claims")[0].split())
    code, out, err = run_main(capsys, "compare", "resnet50-ddp-8gpu", "--epochs", "90",
                              "--dataset-samples", "1.281167M", "-q")
    assert code == 0, err
    r = _table(out)
    same = [s for s in r if "$" not in s and s not in ("tf-ps", "tf-central")]
    it = [_num(r[s][4]) for s in same]
    rate = [_num(r[s][5]) for s in same]
    usd = [_num(r[s + "$"][-2]) for s in same]
    for quoted in (f"{min(it):.3f}-{max(it):.3f} s per iteration",
                   f"{min(rate):,.0f}-{max(rate):,.0f} images/s",
                   f"{min(usd):.0f}-{max(usd):.0f} USD for 90 epochs",
                   f"CentralStorageStrategy {_num(r['tf-central'][5]):,.0f} images/s "
                   f"({r['tf-central$'][-1]} % waste)",
                   f"ParameterServer {_num(r['tf-ps'][5]):,.0f} images/s "
                   f"({r['tf-ps$'][-1]} % waste",
                   f"{r['tf-ps'][4]} s for 8,192 images"):
        assert quoted in text, quoted
    code, out, err = run_main(capsys, "compare", "bert-large-ddp-8gpu", "-q")
    assert code == 0, err
    r = _table(out)
    same = [s for s in r if "$" not in s and s != "tf-central"]
    it = [_num(r[s][4]) for s in same]
    mid = (min(it) + max(it)) / 2
    assert (max(it) - min(it)) / mid < 0.002
    for quoted in (f"within 0.2 % of {mid:.2f} s ({min(it):.3f}-{max(it):.3f} s)",
                   f"CentralStorage ({_num(r['tf-central'][4]):.2f} s, "
                   f"{r['tf-central$'][-1]} % waste)",
                   f"sends {_num(r['fsdp-full'][7]):.1f} GB per GPU per step against DDP's "
                   f"{r['ddp'][7]} GB", f"only {r['fsdp-full'][9]} s of it is exposed"):
        assert quoted in text, quoted


# ------------------------------------------------------------------- docs/capacity.md
CAPACITY = (REPO / "docs" / "capacity.md").read_text()
COLUMNS = {"DDP": "ddp", "FSDP FULL_SHARD": "fsdp:FULL_SHARD",
           "FSDP SHARD_GRAD_OP": "fsdp:SHARD_GRAD_OP"}


def _capacity(capsys, *sets: str) -> dict[str, list[str]]:
    """strategy -> its row: largest fit, params, peak GiB, iter s, tok/s/GPU, first no-fit,
    params, the OOM place (one cell) and its peak GiB."""
    args = [a for s in ("training.micro_batch=1", *sets) for a in ("--set", s)]
    code, out, err = run_main(capsys, "capacity", "quickstart", *args, "-q")
    assert code == 0, err
    rows = {}
    for line in out.splitlines():
        cols = line.split()
        if cols and cols[0] in COLUMNS.values():
            rows[cols[0]] = cols[1:8] + [" ".join(cols[8:-1]), cols[-1]]
    return rows


def test_capacity_folk_claim_table_and_throughput(capsys):
    """docs/capacity.md's table (largest fit, its peak, the first no-fit and where it runs
    out, per sequence length and checkpointing) and the throughput of the largest fits."""
    section = CAPACITY.split("| seq_len, act. ckpt |", 1)[1].split("\n\n", 1)[0]
    header = ["DDP", "FSDP FULL_SHARD", "FSDP SHARD_GRAD_OP"]
    runs = {}
    for line in section.splitlines()[2:]:
        setting, *cells = [c.strip() for c in line.strip("|").split("|")]
        seq, ckpt = setting.split(", ")
        runs[setting] = rows = _capacity(
            capsys, f"training.seq_len={seq}",
            f"strategy.activation_checkpointing={'true' if ckpt == 'on' else 'false'}")
        for name, cell in zip(header, cells):
            fit, params, peak, _, _, _, nofit_params, oom_at, oom_peak = rows[COLUMNS[name]]
            assert f"{float(params[:-1]):.1f}B" in cell and f"({peak} GiB)" in cell, \
                (setting, name, cell, rows[COLUMNS[name]])
            if "OOMs" in cell:
                assert f"{float(nofit_params[:-1]):.1f}B OOMs" in cell, (setting, name)
                assert (f"at {oom_peak}" in cell) == (" at " in cell), (setting, name)
                assert ("optimizer step" in cell) == ("optimizer" in oom_at), (setting, name)
    text = " ".join(CAPACITY.split("Throughput of the largest fits", 1)[1]
                    .split("**Verdict.**")[0].split())
    ddp = runs["4096, off"]["ddp"]
    full = runs["4096, off"]["fsdp:FULL_SHARD"]
    ckpt = runs["4096, on"]["fsdp:FULL_SHARD"]
    for quoted in (f"DDP 4.0B runs {ddp[3]} s/iteration, {ddp[4]} tokens/s/GPU",
                   f"FULL_SHARD 20.1B runs {full[3]} s, {full[4]} tokens/s/GPU",
                   f"FULL_SHARD 33.7B runs {ckpt[3]} s, {ckpt[4]} tokens/s/GPU"):
        assert quoted in text, quoted
    offload = _capacity(capsys, "strategy.activation_checkpointing=true",
                        "strategy.activation_offload=true")
    text = " ".join(CAPACITY.split("Offloading the checkpointed block inputs", 1)[1]
                    .split("Throughput of the largest fits")[0].split())
    assert [offload[s][1] for s in COLUMNS.values()] == ["4.02B", "33.74B", "20.07B"]
    assert (f"FULL_SHARD 33.7B runs {offload['fsdp:FULL_SHARD'][3]} s per iteration against "
            f"{ckpt[3]} s without offload") in text
    # docs/commands.md's capacity paragraph quotes the same three largest fits
    commands = " ".join((REPO / "docs" / "commands.md").read_text().split())
    assert (f"DDP fits {float(ddp[1][:-1]):.1f}B (16 bytes per parameter" in commands and
            f"FSDP FULL_SHARD {float(full[1][:-1]):.1f}B without activation checkpointing, "
            f"{float(ckpt[1][:-1]):.1f}B with it" in commands)


# ---------------------------------------------------------------- docs/reliability.md
RELIABILITY = " ".join((REPO / "docs" / "reliability.md").read_text().split())


def test_reliability_event_count_and_refusal(capsys):
    """The --max-events paragraph: the shipped study's event count at its default trials
    (what a refusal at --max-events 1 prints) and the refusal it quotes, word for word."""
    code, _, err = run_main(capsys, "reliability", "reliability-1024gpu", "--max-events", "1",
                            "-q")
    assert code == 2
    count = re.search(r"about ([\d,]+) trial events", err).group(1)
    assert f"at its default 200 trials is about {count} events" in RELIABILITY
    code, _, err = run_main(capsys, "reliability", "reliability-1024gpu", "--trials",
                            "1000000", "-q")
    assert code == 2
    quoted = " ".join(RELIABILITY.split("(`clustersim reliability --trials 1000000`): ```", 1)[1]
                      .split("```", 1)[0].split())
    assert quoted == " ".join(err.split())


def test_reliability_validation_figures_are_the_reports():
    """The validation section quotes validation/reliability/report.md (full runs; the gates
    are tests/test_reliability_validation.py's): each figure, rounded as quoted, is there."""
    report = " ".join((REPO / "validation" / "reliability" / "report.md").read_text().split())

    def cell(pattern: str) -> float:
        return float(re.search(pattern, report).group(1))
    ettr = {(u0, iv): cell(rf"\| {u0} min \| {iv} min \| ([\d.]+) \+-")
            for u0, iv in ((5, 60), (5, 5), (10, 5), (20, 5))}
    mttf = cell(r"\| 16,384 \| [\d.]+ h \| \| ([\d.]+) h \| pass")
    node_mttf = cell(r"predicts an MTTF of ([\d.]+) h")
    per_day = cell(r"another ([\d.]+) interrupts per day")
    per_node_days = cell(r"\(([\d.]+) per 1,000 node-days\)")
    interrupts = re.search(r"\| interrupt \| (\d+) \+- (\d+) \|", report).groups()
    rerouted = cell(r"\| auto \| (\d+) \+-")
    node_rate = cell(r"\| RSC-1 node rate \| (\d+) \|")
    section = RELIABILITY.split("## Validation", 1)[1]
    for quoted in (f"ETTR {ettr[5, 60]:.2f} at a 60-min interval",
                   f"and {ettr[5, 5]:.2f} at 5 min",
                   f"the 5-min case gives {ettr[10, 5]:.2f} and {ettr[20, 5]:.2f}",
                   f"simulated {mttf:.2f} h", f"MTTF of {node_mttf:.1f} h",
                   f"another ~{per_day:.1f} interrupts",
                   f"({per_node_days:.0f} per 1,000 node-days)",
                   "the simulated {} +- {} (links".format(*interrupts),
                   f"with reroutes {rerouted:.0f}", f"would predict {node_rate:.0f}"):
        assert quoted in section, quoted
    # MTTF 1/(N r_f): 6.5 per 1,000 node-days, 8 GPUs a server
    for gpus in (16384, 131072):
        assert f"{24 / (gpus / 8 * 6.5 / 1000):.2f} h at {gpus:,}" in section


# ------------------------------------------------------------------ docs/commands.md
COMMANDS = " ".join((REPO / "docs" / "commands.md").read_text().split())


def _summary(out: str) -> dict[str, str]:
    """``run``'s summary: field -> its value's first word."""
    rows = [line.split() for line in out.splitlines() if not line.startswith("#")]
    return {cols[0]: cols[1] for cols in rows if len(cols) >= 2}


def test_commands_memory_wait_example(capsys):
    """The memory_wait_s paragraph: GPT-3 175B on 128 p4d GPUs, its waits, step, compute and
    exposed communication as ``run`` prints them (one run, < 1 s)."""
    code, out, err = run_main(capsys, "run", "gpt3-175b-fsdp-p4d-128gpu", "-q")
    assert code == 0, err
    r = {k: float(v) for k, v in _summary(out).items()
         if k in ("memory_wait_s", "iteration_time_s", "compute_s", "exposed_comm_s")}
    assert (f"shows {r['memory_wait_s']:.1f} s of waits in an {r['iteration_time_s']:.1f} s "
            f"step that computes {r['compute_s']:.1f} s" in COMMANDS)
    assert f"in exposed_comm_s ({r['exposed_comm_s']:.1f} s: the delayed" in COMMANDS


@pytest.fixture(scope="module")
def link_latency_study() -> dict[tuple[str, int], dict]:
    """(ib-hdr latency, nodes) -> the result of that point of the shipped link-latency
    study (16 points, evaluated once: ~6 s)."""
    from simulator.study import load_study
    from simulator.study.commands import evaluate
    out = {}
    for point in load_study("link-latency").points:
        (result,) = evaluate(point)
        out[point["params"]["cluster.links.ib-hdr.latency"],
            point["params"]["cluster.nodes"]] = result
    return out


def test_commands_link_latency_example(link_latency_study):
    """20 us per HDR hop on 128 DGX: the two points of the link-latency study, and the
    difference by the formula of docs/collective-model.md (tree all_reduce: 2 log2(128)
    levels x 4 ib-hdr hops x (20 - 0.3 catalog) us)."""
    low = link_latency_study["0.3 us", 128]["iteration_time_s"]
    high = link_latency_study["20 us", 128]["iteration_time_s"]
    extra = 2 * 7 * 4 * 19.7e-6
    assert high - low == pytest.approx(extra, rel=1e-6)
    assert (f"2 x 7 x 4 x 19.7 us = {extra * 1e3:.2f} ms to a ResNet-50 DDP step "
            f"({low * 1e3:.2f} to {high * 1e3:.2f} ms" in COMMANDS)


def test_studies_link_latency_table(link_latency_study):
    """docs/studies.md's table (every point's iteration time, ms), the 128-node 20 us
    difference, and the 8-byte all_reduce at 16 and 128 nodes (the collective model)."""
    from simulator.collectives.model import CollectiveModel
    from simulator.constants import load_constants
    from simulator.topology.build import load_cluster
    page = (REPO / "docs" / "studies.md").read_text()
    lat = ["0.3 us", "1 us", "5 us", "20 us"]
    for i, latency in enumerate(lat):
        cells = " | ".join(f"{link_latency_study[latency, n]['iteration_time_s'] * 1e3:.3f}"
                           for n in (16, 32, 64, 128))
        label = "0.3 us (catalog)" if i == 0 else latency
        assert f"| {label} | {cells} |" in page, latency
    low = link_latency_study["0.3 us", 128]["iteration_time_s"]
    text = " ".join(page.split())
    assert f"2 x 7 x 4 x 19.7 us = 1.103 ms ({100 * 1.1032e-3 / low:+.1f}%)" in text
    k = load_constants()
    for nodes in (16, 128):
        times = []
        for latency in lat:
            links = None if latency == "0.3 us" else {"ib-hdr": {"latency": latency}}
            m = CollectiveModel(load_cluster("dgx-a100-superpod", nodes=nodes, links=links,
                                             constants=k), k)
            times.append(m.plan("all_reduce", 8, list(range(8 * nodes))).predicted_s * 1e6)
        assert (f"{times[0]:.1f} us{' (catalog)' if nodes == 128 else ''} to {times[1]:.1f}, "
                f"{times[2]:.1f} and {times[3]:.1f} us at {nodes} nodes" in text), nodes


# ------------------------------------------------------- docs/variability.md, commands.md
def test_variability_expected_slowdowns():
    """E[exp(sigma M_N)] - 1 with the shipped sigma, by quadrature of M_N's inverse CDF, as
    docs/variability.md (one decimal) and docs/commands.md (~whole percent) quote it; and
    seed 0's draw for the 8 GPUs of one server."""
    from simulator.engine.variability import (draw_max, group_key, max_of_normals,
                                              shipped_sigmas)
    sigma, k = shipped_sigmas()["compute"], 20000

    def slowdown(n: int) -> float:
        return 100 * (sum(math.exp(sigma * max_of_normals((i + 0.5) / k, n))
                          for i in range(k)) / k - 1)
    s = {n: slowdown(n) for n in (8, 128, 16384, 65536)}
    page = " ".join((REPO / "docs" / "variability.md").read_text().split())
    assert (f"{s[8]:.1f}% at 8 GPUs, {s[128]:.1f}% at 128, {s[16384]:.1f}% at 16,384, "
            f"{s[65536]:.1f}% at 65,536" in page)
    assert (f"~{s[8]:.0f}% at 8 GPUs, ~{s[128]:.0f}% at 128 and ~{s[16384]:.0f}% at 16,384"
            in COMMANDS)
    m8 = draw_max(0, group_key(tuple(range(8))), 8)
    assert (f"draw `M_8` = {m8:.2f}, a {100 * (math.exp(sigma * m8) - 1):.1f}% slowdown, near "
            f"the {s[8]:.1f}% expected" in page)


# ------------------------------------------------------------------- docs/accuracy.md
ACCURACY = (REPO / "docs" / "accuracy.md").read_text()
ACCURACY_TEXT = " ".join(ACCURACY.split())
TRAINING_GROUPS = {       # (split, the table's GPU or group cell) -> case prefixes
    ("validation", "H100"): ["training/llmfoundry/h100_amp_bf16/"],
    ("validation", "A100"): ["training/llmfoundry/a100_bf16/", "training/torchtitan/a100/"],
    ("calibration", "H100 bf16"): ["training/llmfoundry/h100_amp_bf16/"],
    ("calibration", "H100 FP8"): ["training/llmfoundry/h100_amp_fp8/"],
    ("calibration", "A100"): ["training/llmfoundry/a100_amp_bf16/"],
    ("validation", "H100-500W"): ["training/torchtitan/h100-"],
    ("validation", "H200"): ["training/torchtitan/h200-"],
    ("calibration", "H100-500W"): ["training/torchtitan/h100-"],
}


def _ground() -> dict[str, tuple[str, float]]:
    """case -> (split, throughput error) of simulator/data/validated.csv."""
    with open(REPO / "simulator" / "data" / "validated.csv") as f:
        return {r["case"]: (r["split"], float(r["error"])) for r in csv.DictReader(f)}


def _report_rows(path: Path) -> dict[str, list[str]]:
    """A generated report's Markdown table rows: first cell -> the cells."""
    rows = {}
    for line in path.read_text().splitlines():
        if line.startswith("| ") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows.setdefault(cells[0], cells)
    return rows


def _table_pair(case: str, *variants: str) -> tuple[list[dict], list[float], list[float]]:
    """Rows of validation/training/report/fsdp_tables.csv (``case`` formatted with each
    variant), their simulated and their measured tokens/s per GPU."""
    with open(REPO / "validation" / "training" / "report" / "fsdp_tables.csv") as f:
        table = {r["case"]: r for r in csv.DictReader(f)}
    rows = [table[case.format(v)] for v in variants]
    return rows, [float(r["simulated"]) for r in rows], [float(r["measured"]) for r in rows]


def test_accuracy_training_tables_are_the_ground():
    """The FSDP and torchtitan tables: rows simulated, median |error|, rows within the row
    gate and the worst row's error, per group, from validated.csv (in step with the
    validation results: tests/test_envelope.py)."""
    ground = _ground()
    checked = 0
    for head, gate in (("| split | GPU | rows (simulated) |", 0.15),
                       ("| split | torchtitan group | rows (simulated) |", 0.20)):
        for line in ACCURACY.split(head, 1)[1].split("\n\n", 1)[0].splitlines()[2:]:
            split, group, rows, median, within, worst = \
                [c.strip().strip("*") for c in line.strip().strip("|").split("|")]
            errors = [e for case, (s, e) in ground.items() if s == split
                      and any(case.startswith(p) for p in TRAINING_GROUPS[split, group])]
            errors.sort(key=abs)
            n = len(errors)
            mid = (abs(errors[(n - 1) // 2]) + abs(errors[n // 2])) / 2
            assert rows.endswith(f"({n})"), (split, group)
            assert median == f"{100 * mid:.1f}%", (split, group)
            assert within == str(sum(abs(e) <= gate + 1e-12 for e in errors)), (split, group)
            assert worst.endswith(f" {100 * errors[-1]:+.1f}%"), (split, group)
            checked += 1
    assert checked == len(TRAINING_GROUPS)
    a100 = [e for case, (_, e) in ground.items() if case.startswith("training/torchtitan/a100/")]
    assert f"{100 * min(a100):.1f}..{100 * max(a100):+.1f}%" in ACCURACY_TEXT
    foundry70 = sorted(e for case, (_, e) in ground.items()
                       if case.startswith("training/llmfoundry/a100_bf16/70b"))
    assert f"RoCE nodes {100 * foundry70[0]:+.1f}% and {100 * foundry70[1]:+.1f}%" in ACCURACY_TEXT
    tt = {c.split("/")[-1]: e for c, (_, e) in ground.items()
          if c.startswith("training/torchtitan/h100-")}
    assert (f"128 GPUs: compiled {100 * tt['llama-3-8b_fsdp128_compile_mb2_s8192']:+.1f}%, eager "
            f"{100 * tt['llama-3-8b_fsdp128_mb2_s8192']:+.1f}%" in ACCURACY_TEXT)
    inter = [e for c, e in tt.items() if "interleaved1f1b" in c]
    twin = [e for c, e in tt.items() if "pp8async-1f1b_compile_f8tensorwise_mb32" in c]
    assert f"{100 * inter[0]:+.1f}%, like its 1F1B twin ({100 * twin[0]:+.1f}%)" in ACCURACY_TEXT


def test_accuracy_training_reports_and_constants():
    """The DLE, FSDP-blog and TensorFlow figures against validation/training/report/report.md,
    the weak-scaling count against fsdp_tables.md, the fitted constants against
    training_fit.yaml, H100's first number against before.md."""
    report = _report_rows(REPO / "validation" / "training" / "report" / "report.md")
    err = {case: cells[5] for case, cells in report.items() if len(cells) > 6}
    for quoted in (f"ResNet-50 TF32 on 8 GPUs {err['resnet50_8gpu_tf32']} (scaling "
                   f"{err['resnet50_8gpu_tf32_scaling']})",
                   f"GPT-3 175B FSDP {err['gpt3_175b_fsdp_128gpu']}",
                   f"ResNet-50 AMP on 8 GPUs ({err['resnet50_8gpu_amp']}, scaling "
                   f"{err['resnet50_8gpu_amp_scaling']}",
                   f"GPT 1T ({err['gpt_1t_fsdp_128gpu']};",
                   "Horovod ResNet-50 is {} ({} vs {} img/s)".format(
                       err["hvd_tf2_resnet50_synthetic_8gpu_tf32"],
                       *report["hvd_tf2_resnet50_synthetic_8gpu_tf32"][4:2:-1]),
                   f"seq 128 (TF32 {err['tf2_bert_large_seq128_1gpu_tf32']}, AMP "
                   f"{err['tf2_bert_large_seq128_1gpu_amp']}) and seq 512 (TF32 "
                   f"{err['tf2_bert_large_seq512_1gpu_tf32']}, AMP "
                   f"{err['tf2_bert_large_seq512_1gpu_amp']})",
                   f"seq 128 AMP ({err['tf2_bert_large_seq128_8gpu_amp']}) and seq 512 (TF32 "
                   f"{err['tf2_bert_large_seq512_8gpu_tf32']}, AMP "
                   f"{err['tf2_bert_large_seq512_8gpu_amp']})",
                   f"TF32 on 8 GPUs is {err['tf2_bert_large_seq128_8gpu_tf32']}",
                   f"({err['tf2_bert_large_seq128_8gpu_tf32_scaling']}, "
                   f"{err['tf2_bert_large_seq512_8gpu_amp_scaling']})",
                   "({} TF32 to {} AMP at batch 2)".format(
                       report["tf2_maskrcnn_b2_8gpu_tf32_scaling"][3],
                       report["tf2_maskrcnn_b2_8gpu_amp_scaling"][3]),
                   "({:.1f} ms of communication exposed in a {:.0f} ms step".format(
                       1e3 * float(report["tf2_maskrcnn_b2_8gpu_tf32"][10]),
                       1e3 * float(report["tf2_maskrcnn_b2_8gpu_tf32"][8]))):
        assert quoted in ACCURACY_TEXT, quoted
    bert = [float(err[c].rstrip("%")) for c in err
            if c.startswith("bert_large") and not c.endswith("scaling")
            and report[c][1] == "validation"]
    assert f"1 and 8 GPUs: {min(bert):+.1f}% to {max(bert):+.1f}%" in ACCURACY_TEXT
    scaling = [abs(float(err[c].split()[0])) for c in err
               if c.startswith("bert_large") and c.endswith("scaling")]
    assert max(scaling) <= 1.5
    tf = [c for c in err if c.startswith(("hvd_", "tf2_"))]
    ok = sum(report[c][6] == "ok" for c in tf)
    assert f"holds {len(tf)} published TensorFlow runs" in ACCURACY_TEXT
    assert f"**Only {ok} are within the gates.**" in ACCURACY_TEXT

    fsdp = (REPO / "validation" / "training" / "report" / "fsdp_tables.md").read_text()
    weak = [float(line.split("|")[5].split()[0]) for line in
            fsdp.split("## Scaling efficiency", 1)[1].split("\n## ", 1)[0].splitlines()
            if line.startswith("| ") and line.endswith(" pt |")]
    assert (f"{sum(abs(w) <= 3 for w in weak)} of {len(weak)} within 3 points"
            in ACCURACY_TEXT)
    fit = yaml.safe_load((REPO / "simulator" / "data" / "training_fit.yaml").read_text())

    def factors(family: str) -> tuple[float, ...]:
        t = fit["families"][family]["time_factor"]
        return (t["matmul"]["value"], t["attention"]["value"], t["memory_bound"]["value"],
                fit["families"][family]["kernel_overhead_us"]["value"])
    h, a = factors("H100"), factors("A100")
    assert (f"H100 matmul x{h[0]:g}, attention x{h[1]:g}, memory-bound x{h[2]:g}, "
            f"+{h[3]:g} us per kernel; A100 x{a[0]:g} / x{a[1]:g} / x{a[2]:g} / "
            f"+{a[3]:g} us" in ACCURACY_TEXT)
    first = next(line for line in (REPO / "validation" / "training" / "before.md").read_text()
                 .splitlines() if line.startswith("| validation | H100 |"))
    assert first.split("|")[7].strip() == "48.8%" and "H100 was at 48.8%" in ACCURACY_TEXT


def test_accuracy_parallel_figures_are_the_report():
    """The Megatron section: the report's summary line verbatim and the Selene figures."""
    path = REPO / "validation" / "parallel" / "report.md"
    summary = next(line for line in path.read_text().splitlines()
                   if line.startswith("**Summary:**"))
    assert f"> {summary}" in ACCURACY.splitlines()
    rows = _report_rows(path)
    it = {k.split("/")[2] + "/" + k.split("/")[3]: v[4] for k, v in rows.items()
          if k.startswith("parallel/selene/") and k.endswith("/iteration") and v[4] != "-"}
    assert (f"22B full recompute {it['22b/full']}, 22B sequence parallel + selective recompute "
            f"{it['22b/seqsel']}, 175B (TP 8 x PP 8, interleaved) full {it['175b/full']}, "
            f"175B SP + selective {it['175b/seqsel']}" in ACCURACY_TEXT)
    assert f"median |error| {rows['parallel/selene/iteration-median'][4]} (gate" in ACCURACY_TEXT
    notes = " ".join(v[6] for k, v in rows.items() if k.endswith("/fits"))
    replayed = [float(x) for x in re.findall(r"replayed peak ([\d.]+) GiB", notes)]
    analytical = [float(x) for x in re.findall(r"analytical peak ([\d.]+) GiB", notes)]
    assert (f"(replayed peaks {min(replayed):.1f}-{max(replayed):.1f} GiB, analytical "
            f"{min(analytical):.1f}-{max(analytical):.1f} GiB)" in ACCURACY_TEXT)


@pytest.mark.parametrize("section,report,known", [
    ("## Real profiler traces", "traces/report.md", ()),
    ("## Real GPU runs on an H200", "gpu/report.md", ("80", "28", "4", "2.11", "13", "50,257")),
    ("## Real CPU runs, captured here", "traces/captured.md", ("2.13.0", "2.21.0"))])
def test_accuracy_report_sections_quote_their_reports(section, report, known):
    """Each number of these accuracy.md sections is one its generated report prints (the
    validation's last run; the sections say so), or one of ``known`` (versions, model
    constants, data): a section cannot drift from its report unseen."""
    text = ACCURACY.split(section, 1)[1].split("\n## ", 1)[0]
    printed = (REPO / "validation" / report).read_text()
    numbers = {n.strip(".,") for n in re.findall(r"(?:(?<![\w.%])[+-])?\d[\d,.]*%?", text)}
    assert not {n for n in numbers if n not in printed and n not in known}


def test_accuracy_h200_figures():
    rows = {k: v for k, v in _report_rows(REPO / "validation" / "gpu" / "report.md").items()
            if len(v) >= 5}
    replay = [abs(float(v[3].rstrip("%"))) for k, v in rows.items() if k.endswith("/replay")]
    assert f"within {min(replay):.1f}-{max(replay):.1f}% (9/9, gate 10%)" in ACCURACY_TEXT
    importers = " ".join((REPO / "docs" / "importers.md").read_text().split())
    assert ("imports nine single-step CUDA profiles" in importers and len(replay) == 9 and
            f"each within {min(replay):.1f}-{max(replay):.1f}% of the recorded step" in importers)
    assert len(replay) == 9 and max(replay) <= 10
    generated = [v for k, v in rows.items() if k.endswith("/generated")]
    misses = sum(v[4].startswith("known miss") for v in generated)
    assert f"{misses} of {len(generated)} generated cases are recorded known misses" \
        in ACCURACY_TEXT
    err = {k: v[3] for k, v in rows.items()}
    g = "gpu/{}/generated".format
    for quoted in (f"AMP channels-last {err[g('resnet50_b256_amp_nhwc')]}, AMP NCHW "
                   f"{err[g('resnet50_b256_amp_nchw')]}",
                   f"TF32 channels-last {err[g('resnet50_b256_tf32_nhwc')]}, TF32 NCHW "
                   f"{err[g('resnet50_b256_tf32_nchw')]} (calibration)",
                   f"block {err[g('llama-2-7b-4l_bf16_sdpa_compiled')]}, GPT-2 medium "
                   f"{err[g('gpt2-medium_bf16_sdpa_pad64_compiled')]} and BERT-large "
                   f"{err[g('bert-large_fp16_sdpa_pad64_compiled')]} under `torch.compile`",
                   f"foreach AdamW {err['gpu/optimizer/adam-foreach']}, foreach SGD "
                   f"{err['gpu/optimizer/sgd-foreach']}, fused SGD {err['gpu/optimizer/sgd-fused']}"
                   f", fused AdamW {err['gpu/optimizer/adam-fused']}"):
        assert quoted in ACCURACY_TEXT, quoted


# ------------------------------------------------------------------------ docs/amd.md
AMD = " ".join((REPO / "docs" / "amd.md").read_text().split())


def test_amd_rccl_bands_and_small_sizes():
    """The rccl-tests section: the one-platform band table, the two-platform figures, the
    one-shot's and ring LL's small-message times (rccl.simulate: what results.md holds)."""
    from simulator.collectives.model import CollectiveModel
    from simulator.collectives.run import run_collective
    from simulator.constants import load_constants
    from simulator.topology.build import load_cluster
    from simulator.validation.collectives import rccl
    rows = rccl.simulate()
    one = [r for r in rows if r.nodes == 1]
    assert f"One platform (8 GPUs, {len(one)} rows)" in AMD
    for label, low, high in rccl.BANDS:
        e = [100 * r.error for r in rccl.band(one, low, high)]
        med = statistics.median(abs(x) for x in e)
        assert (f"| {label} | {len(e)} | {med:.1f}% | {min(e):+.1f}% to {max(e):+.1f}% |"
                .replace("| +", "| ") in AMD.replace("| +", "| ")), label
    two = [r for r in rows if r.nodes == 2]
    big = [abs(r.error) for r in rccl.band(two, 64 << 20, float("inf"))]
    small = [-100 * r.error for r in rccl.band(two, 0, 64 << 20)]
    assert (f"Two platforms (2 x 8 MI300X, 8 x 400G RoCE rails, {len(two)} rows): 64 MiB and "
            f"more median |error| {100 * statistics.median(big):.1f}%" in AMD)
    assert f"smaller sizes {min(small):.0f}-{max(small):.0f}% fast" in AMD
    k = load_constants()
    m = CollectiveModel(load_cluster("mi300x-8gpu", constants=k), k)
    smallest = min(r.size_bytes for r in rows if r.table == "rccl_issue_1562_azure_mi300x")
    shot = run_collective(m, "all_reduce", smallest, list(range(8)), "one_shot", "Simple").time_s
    ring = run_collective(m, "all_reduce", smallest, list(range(8)), "ring", "LL").time_s
    assert f"the one-shot costs {shot * 1e6:.1f} us" in AMD
    assert f"RCCL's ring with LL ({(ring - k.launch_overhead_s) * 1e6:.1f} us + launch)" in AMD


def test_amd_lora_rows():
    """The MLPerf v5.0 LoRA paragraph: the two 8-GPU AMD rows and the worst row, as the
    committed results hold them (tests/test_validation_finetune.py re-simulates them)."""
    with open(REPO / "validation" / "finetune" / "results.csv") as f:
        r = {row["system"]: row for row in csv.DictReader(f)}
    mi300, mi325 = r["MI300X_EPYC_9575F_pytorch"], r["MI325X_EPYC_9575F_pytorch"]
    assert (f"the 8x MI300X row simulates {float(mi300['simulated_s']):.2f} s, MI325X "
            f"{float(mi325['simulated_s']):.2f} s, against {float(mi300['measured_s']):.2f} and "
            f"{float(mi325['measured_s']):.2f} s measured" in AMD)
    amd = [row for row in r.values() if row["vendor"] == "AMD" and row["error"]]
    worst = max(amd, key=lambda row: abs(float(row["error"])))
    assert worst["system"] == "MI300X-LLMBoost-GPUBoost-4node"
    assert (f"4-node CP4 run ({float(worst['simulated_s']):.2f} s against "
            f"{float(worst['measured_s']):.2f} s)" in AMD)


# ---------------------------------------------------------- docs/tensorflow-strategies.md
TF_PAGE = (REPO / "docs" / "tensorflow-strategies.md").read_text()
TF_ROWS = {      # the ResNet-50 table's rows: the strategy of `run resnet50-tf-mirrored-8gpu`
    "ddp": "{name: ddp, param_dtype: fp32}",
    "tf_mirrored (NcclAllReduce, 1 pack)": "{name: tf_mirrored, optimizer: sgd}",
    "tf_mirrored HierarchicalCopyAllReduce":
        "{name: tf_mirrored, cross_device_ops: HierarchicalCopyAllReduce, optimizer: sgd}",
    "tf_mirrored ReductionToOneDevice":
        "{name: tf_mirrored, cross_device_ops: ReductionToOneDevice, optimizer: sgd}",
    "tf_multiworker (AUTO = RING)": "{name: tf_multiworker, optimizer: sgd}",
    "horovod (64 MB, 5 ms)": "{name: horovod, optimizer: sgd}",
    "tf_central_storage": "{name: tf_central_storage, optimizer: sgd}",
    "tf_ps, 1 PS colocated": "{name: tf_ps, num_ps: 1, ps_placement: colocated, optimizer: sgd}",
    "tf_ps, 2 PS, 2 shards per variable": "{name: tf_ps, num_ps: 2, ps_placement: colocated, "
                                          "optimizer: sgd, partitioner: {kind: fixed, "
                                          "num_shards: 2}}",
}


def _tf_row(capsys, strategy: str) -> str:
    """A table row: step (8 x 256 images over img/s), img/s, comm (exposed) per iteration."""
    code, out, err = run_main(capsys, "run", "resnet50-tf-mirrored-8gpu", "--set",
                              f"strategy={strategy}", "-q")
    assert code == 0, err
    r = _summary(out)
    rate = float(r["samples_per_s"].replace(",", ""))
    return (f"{8 * 256 / rate * 1e3:.1f} ms | {rate:,.0f} | {float(r['comm_s']) * 1e3:.1f} ms "
            f"({float(r['exposed_comm_s']) * 1e3:.1f})")


def test_tensorflow_resnet_table(capsys):
    """docs/tensorflow-strategies.md's ResNet-50 example, row by row (nine runs, < 1 s each)."""
    section = TF_PAGE.split("| strategy | step | img/s | comm (exposed) |", 1)[1]
    rows = [line for line in section.split("\n\n", 1)[0].splitlines()[2:]]
    assert [r.split("|")[1].strip() for r in rows] == list(TF_ROWS)
    steps = {}
    for line, (name, strategy) in zip(rows, TF_ROWS.items()):
        cells = _tf_row(capsys, strategy)
        assert line == f"| {name} | {cells} |", name
        steps[name] = float(cells.split()[0])
    # central storage's CPU sum and update: the step's difference from DDP's, and the ratio
    extra = steps["tf_central_storage"] - steps["ddp"]
    assert abs(extra - 125) < 2.5 and "that CPU work (about 125 ms)" in " ".join(TF_PAGE.split())
    assert f"the step {steps['tf_central_storage'] / steps['ddp']:.1f}x DDP's" in \
        " ".join(TF_PAGE.split())
    text = " ".join(TF_PAGE.split())
    assert all(f"`{strategy}`" in text for strategy in TF_ROWS.values())


# -------------------------------------------------------------------- docs/compute.md
COMPUTE = " ".join((REPO / "docs" / "compute.md").read_text().split())


def test_compute_figures():
    """compute.md's current figures: the FP8 rows and torchtitan A100 rows (validated.csv),
    the compiled H200 blocks (validation/gpu/report.md), torchtitan's compile gain on 8 H100
    (fsdp_tables.csv: simulated tokens/s, errors; the step difference at 16,384 tokens per
    GPU and step), the fitted constants table (training_fit.yaml) and SimuMax's runs at the
    measured B200 rate (validation/parallel/report.md's summary)."""
    ground = _ground()
    fp8 = sorted(e for c, (_, e) in ground.items()
                 if c.startswith("training/llmfoundry/h100_amp_fp8/"))
    med = statistics.median(abs(e) for e in fp8)
    assert (f"median |error| {100 * med:.1f}%, all {len(fp8)} within 15% ({100 * fp8[0]:+.1f}% "
            f"to {100 * fp8[-1]:+.1f}%" in COMPUTE) and max(map(abs, fp8)) <= 0.15
    a100 = [e for c, (_, e) in ground.items() if c.startswith("training/torchtitan/a100/")]
    assert f"reference code runs {100 * min(a100):.1f}..{100 * max(a100):+.1f}%" in COMPUTE
    gpu = {(cells[0], cells[1]): cells for cells in
           (line.strip().strip("|").split("|") for line in
            (REPO / "validation" / "gpu" / "report.md").read_text().splitlines()
            if line.startswith("| "))}
    gpu = {(k[0].strip(), k[1].strip()): [c.strip() for c in v] for k, v in gpu.items()}
    err = {k[0]: v[3] for k, v in gpu.items() if k[0].endswith("/generated")}
    llama, gpt2 = "llama-2-7b-4l_bf16_sdpa_compiled", "gpt2-medium_bf16_sdpa_pad64_compiled"
    assert (f"the Llama-2-7B block is {err['gpu/' + llama + '/generated']} and GPT-2 medium "
            f"{err['gpu/' + gpt2 + '/generated']}" in COMPUTE)
    elem = [gpu[name, "elementwise"][2:4] for name in (llama, gpt2)]
    assert (f"(their elementwise kernels {elem[0][0]} ms recorded against {elem[0][1]} simulated, "
            f"{elem[1][0]} against {elem[1][1]};" in COMPUTE)
    (eager, compiled), sim, meas = _table_pair("torchtitan/h100-2412/llama-3-8b_fsdp8{}_mb2_s8192",
                                               "", "_compile")
    assert (f"simulated {sim[0]:,.0f} ({100 * float(eager['error']):+.1f}%) and {sim[1]:,.0f} "
            f"({100 * float(compiled['error']):+.1f}%), {100 * (sim[1] / sim[0] - 1):+.1f}%"
            in COMPUTE)
    assert abs(float(compiled["error"])) <= 0.04 and "The compiled row is within 4%" in COMPUTE
    tokens = 2 * 8192
    assert (f"its step is {tokens / sim[0] - tokens / sim[1]:.2f} s longer than the compiled one "
            f"where the measured difference, stack overhead included, is "
            f"{tokens / meas[0] - tokens / meas[1]:.2f} s" in COMPUTE)
    fit = yaml.safe_load((REPO / "simulator" / "data" / "training_fit.yaml").read_text())
    for family, label in (("A100", "A100"), ("H100", "H100 (flash2 curve)")):
        t = fit["families"][family]["time_factor"]
        rms = re.search(r"rms relative error ([\d.]+ -> [\d.]+)", t["matmul"]["source"]).group(1)
        assert (f"| {label} | x{t['matmul']['value']:g} | x{t['attention']['value']:g} | "
                f"x{t['memory_bound']['value']:g} | "
                f"+{fit['families'][family]['kernel_overhead_us']['value']:g} us | {rms} |"
                in COMPUTE), family
    summary = next(line for line in (REPO / "validation" / "parallel" / "report.md").read_text()
                   .splitlines() if line.startswith("**Summary:**"))
    med, big = re.search(r"SimuMax; step time\): calibration \d+ rows, median \|error\| "
                         r"([\d.]+)%, largest ([\d.]+)%", summary).groups()
    assert f"fast, median {med}%, largest {big}%" in COMPUTE


# ---------------------------------------------------------------- docs/parallelism.md
PARALLELISM = " ".join((REPO / "docs" / "parallelism.md").read_text().split())
QWEN_EP = "{{name: megatron, tensor_model_parallel_size: 2, sequence_parallel: true, " \
          "expert_model_parallel_size: {}, expert_tensor_parallel_size: {}, " \
          "use_distributed_optimizer: true}}"


def _run(capsys, *args: str) -> dict[str, float]:
    code, out, err = run_main(capsys, "run", *args, "-q")
    assert code == 0, err
    return {k: float(v.replace(",", "")) for k, v in _summary(out).items()
            if k in ("iteration_time_s", "peak_memory_gib")}


def test_parallelism_expert_layouts(capsys):
    """The expert-parallel examples: mixtral-8x7b-ep8 as shipped, and the Qwen3-30B-A3B
    command of the page at EP16 x ETP2, EP32 x ETP1 and EP8 x ETP1 (four runs, ~1 s each)."""
    r = _run(capsys, "mixtral-8x7b-ep8")
    assert (f"the step takes {r['iteration_time_s']:.3f} s and the peak is "
            f"{r['peak_memory_gib']:.1f} GiB (`clustersim run mixtral-8x7b-ep8`)" in PARALLELISM)
    command = PARALLELISM.split("clustersim run mixtral-8x7b-ep8 --set model=qwen3-30b-a3b", 1)[1]
    assert command.startswith(" --set cluster.nodes=4 --set 'strategy=" + QWEN_EP.format(32, 1))
    base = ["mixtral-8x7b-ep8", "--set", "model=qwen3-30b-a3b", "--set", "cluster.nodes=4",
            "--set", "training.grad_accum=4"]
    for label, ep, etp in (("EP16 with the experts split as TP (`etp` 2)", 16, 2),
                           ("EP32 x ETP1", 32, 1), ("EP8 x ETP1 (one server)", 8, 1)):
        r = _run(capsys, *base, "--set", "strategy=" + QWEN_EP.format(ep, etp))
        assert (f"{label} {r['iteration_time_s']:.3f} s and {r['peak_memory_gib']:.1f} GiB"
                in PARALLELISM), label


def test_parallelism_figures_from_the_validation():
    """The Selene paragraph (validation/parallel/report.md) and the 405B interleaved row
    (fsdp_tables.csv)."""
    rows = _report_rows(REPO / "validation" / "parallel" / "report.md")
    memory = [float(v[4].rstrip("%")) for k, v in rows.items()
              if k.startswith("parallel/selene/") and "/fig" in k and v[4].endswith("%")
              and "/fig7/none/" not in k]               # Figure 7's reference mode: 1 by definition
    assert max(map(abs, memory)) <= 2.0
    assert f"the memory model, {len(memory)} of {len(memory)} rows within 2%" in PARALLELISM
    assert f"memory {len(memory)}/{len(memory)} within 10%" in (
        REPO / "validation" / "parallel" / "report.md").read_text()
    it = {k.split("/")[2] + "/" + k.split("/")[3]: v[4] for k, v in rows.items()
          if k.startswith("parallel/selene/") and k.endswith("/iteration") and v[4] != "-"}
    assert (f"median |error| {rows['parallel/selene/iteration-median'][4]} (22B full "
            f"{it['22b/full']}, 22B SP + selective {it['22b/seqsel']}, 175B full "
            f"{it['175b/full']}, 175B SP + selective {it['175b/seqsel']})" in PARALLELISM)
    (inter, plain), sim, meas = _table_pair(
        "torchtitan/h100-2412/llama-3-405b_fsdp8_tp8_pp8async-{}_compile_f8tensorwise_mb32_s8192",
        "interleaved1f1b", "1f1b")
    assert (f"the row simulates {sim[0]:.1f} tokens/s/GPU against {meas[0]:.0f} measured "
            f"({100 * float(inter['error']):+.1f}%, as its 1F1B twin: {sim[1]:.1f} against "
            f"{meas[1]:.0f}), a gain over 1F1B of {sim[0] / sim[1]:.2f}x, measured "
            f"{meas[0] / meas[1]:.2f}x" in PARALLELISM)

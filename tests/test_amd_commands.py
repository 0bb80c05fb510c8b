"""The AMD scenario end to end: run, compare, capacity, plan and collective on
llama3-8b-fsdp-mi300x / mi300x-8gpu (8x MI300X on an Infinity Fabric mesh, RCCL); run and
compare on llama2-70b-lora-mi300x (AMD's MLPerf v5.0 LoRA recipe)."""

import csv
import json

from simulator.validation.finetune import ROOT as FINETUNE
from test_cli import run_main, table_rows

SCN = "llama3-8b-fsdp-mi300x"


def test_run_prints_the_step_and_says_it_is_outside_validated_ground(capsys):
    code, out, _ = run_main(capsys, "run", SCN, "--format", "json", "-q")
    assert code == 0
    d = json.loads(out)
    assert d["world_size"] == 8 and not d["oom"] and d["iteration_time_s"] > 0
    acc = d["accuracy"]
    # the validated AMD cases are MLPerf's LoRA runs (Megatron): none speaks for an FSDP
    # pre-training step, and no NVIDIA case is quoted
    assert acc["nearest"] is None and acc["error_band"] is None
    assert acc["validation_median_abs_error"] is None
    assert "no validated FSDP case" in acc["differs"]
    # 8 GPUs x 192 GiB: Llama-3-8B under FULL_SHARD fits with room
    assert d["peak_memory_gib"] < 192


def test_run_table_never_quotes_an_nvidia_error(capsys):
    code, out, _ = run_main(capsys, "run", SCN, "-q")
    accuracy = [line for line in out.splitlines() if line.startswith("# accuracy")]
    assert code == 0 and accuracy
    assert not any("%" in line or "H100" in line or "A100" in line for line in accuracy)


def _compare_fits(capsys, scenario: str, strategies: tuple[str, ...]) -> str:
    """``compare`` on the scenario: every strategy's row says it fits; the output."""
    code, out, _ = run_main(capsys, "compare", scenario, "--strategies", ",".join(strategies),
                            "-q")
    assert code == 0
    rows: dict = {}
    for r in table_rows(out):        # the comparison table first (the energy table follows)
        if r[0] in strategies:
            rows.setdefault(r[0], r)
    assert set(rows) == set(strategies) and all(r[3] == "fits" for r in rows.values())
    return out


def test_compare_runs_each_strategy_on_the_mesh(capsys):
    out = _compare_fits(capsys, SCN, ("fsdp-full", "ddp"))
    assert "no kernels are fitted on cdna3 GPUs" in out
    assert "no validated FSDP case" in out and "no validated DDP case" in out
    assert not any("%" in line for line in out.splitlines() if "accuracy" in line)


def test_capacity_uses_the_192_gib(capsys):
    code, out, _ = run_main(capsys, "capacity", SCN, "--strategies", "fsdp-full", "-q")
    assert code == 0
    assert "8 x MI300X (mi300x-8gpu, 192 GiB each)" in out
    assert "no validated FSDP case" in out


def test_plan_replays_plans_on_the_mesh(capsys):
    code, out, _ = run_main(capsys, "plan", SCN, "--replay", "1", "--max-tp", "2",
                            "--max-pp", "1", "--max-cp", "1", "-q")
    assert code == 0
    assert "llama-3-8b on 8 x MI300X" in out
    assert any(r[0] == "1" for r in table_rows(out))


def test_collective_all_reduce_curve_on_the_mesh(capsys):
    code, out, _ = run_main(capsys, "collective", "all_reduce", "--topology", "mi300x-8gpu",
                            "-b", "8", "-e", "8G", "-f", "1024", "--fidelity", "analytical")
    assert code == 0
    rows = table_rows(out)
    algos = {int(r[0]): r[-2] for r in rows}
    assert algos[8] == "one_shot" and algos[8 << 30] == "ring"
    busbw = float(rows[-1][5])       # 6 rings x 64 GB/s x 0.75 = 288 GB/s at 8 GiB
    assert 280 < busbw < 288
    assert "8 x MI300X" in out


def test_collective_refuses_an_nccl_release_on_rccl(capsys):
    code, _, err = run_main(capsys, "collective", "all_reduce", "--topology", "mi300x-8gpu",
                            "--nccl-version", "2.19")
    assert code == 2 and "runs RCCL" in err and len(err.strip().splitlines()) == 1


def test_topology_summary_names_the_mesh_links(capsys):
    code, out, _ = run_main(capsys, "topology", "mi300x-8gpu")
    assert code == 0 and "NVSwitch fabrics: 0" in out
    row = next(line.split() for line in out.splitlines() if "infinity-fabric-3" in line)
    assert row[:3] == ["infinity-fabric-3", "infinity_fabric", "28"]


LORA = "llama2-70b-lora-mi300x"


def test_the_lora_scenario_costs_what_its_validation_row_costs(capsys):
    """llama2-70b-lora-mi300x is AMD's MLPerf v5.0 recipe: its step (rank-to-rank
    variability as `run` answers, the validation's setting too) is the simulated step of
    the validation row MI300X_EPYC_9575F_pytorch (one path, one price), 8 x MI300X holding
    Llama 2 70B's FP8 base whole on each GPU."""
    code, out, _ = run_main(capsys, "run", LORA, "--format", "json", "-q")
    assert code == 0
    d = json.loads(out)
    with open(FINETUNE / "results.csv", newline="") as f:
        row = next(r for r in csv.DictReader(f) if r["system"] == "MI300X_EPYC_9575F_pytorch")
    assert abs(d["iteration_time_s"] - float(row["simulated_s"])) < 1e-4
    assert abs(d["peak_memory_gib"] - float(row["peak_memory_gib"])) < 0.06 and not d["oom"]


def test_compare_keeps_the_lora_under_fsdp(capsys):
    _compare_fits(capsys, LORA, ("fsdp-full", "megatron"))

"""A Megatron-Bridge table row whose printed parallel columns disagree with the preset its
release shipped runs as the preset ran it (``cases.yaml`` ``bridge_recipes`` ``layout``),
and says so: 26.02.01's Qwen3-30B-A3B H100 row prints 26.02's PP2 x VP12 x EP8, while the
release's preset (Megatron-Bridge v0.3.1) is EP16 without pipeline stages, the layout of
26.04's rows, which measured within 2% of it."""

from __future__ import annotations

from simulator.validation.parallel import cases, nemo


def _qwen_rows(release: str) -> list[dict]:
    spec = cases.load()
    return [r for r in nemo.table_rows(cases.default_root(), spec, "bridge")
            if r["model"] == "Qwen3_30B_a3B" and str(r["release"]).startswith(release + " ")]


def test_the_patch_release_row_runs_its_presets_layout():
    spec = cases.load()
    (row,) = _qwen_rows("26.02.01")
    assert [str(row[c]) for c in ("PP", "VP", "EP")] == ["2", "12", "8"]   # as printed
    ran, note = nemo.preset_layout(spec, row)
    assert (ran["PP"], ran["VP"], ran["EP"]) == ("1", "1", "16")
    assert "preset" in note and "PP2 x VP12 x EP8" in note
    # 1,024 sequences a step over 16 data-parallel ranks of 1: 64 micro-batches (the
    # printed layout's 8 ranks a stage: 128)
    assert nemo.micro_batches(ran) == 1024 // 16
    assert nemo.micro_batches(row) == 1024 // 8
    scn = nemo.scenario_of(ran, cases.default_root(), spec, "x", "bridge")
    assert scn["strategy"]["pipeline_model_parallel_size"] == 1
    assert scn["strategy"]["expert_model_parallel_size"] == 16
    assert "virtual_pipeline_model_parallel_size" not in scn["strategy"]


def test_other_rows_keep_their_printed_layout():
    spec = cases.load()
    for release in ("26.02", "26.04", "25.11"):
        for row in _qwen_rows(release):
            assert nemo.preset_layout(spec, row) == (row, "")

"""Megatron-Core's EP all-to-all overlap (``overlap_moe_expert_parallel_comm``, the combined
1F1B schedule, simulator/strategies/parallel/a2a_overlap.py): the passes it merges, the
node order of a combined MoE layer pair, and replays where the overlap hides exactly the
all-to-all time and where it cannot."""

from __future__ import annotations

import dataclasses

import pytest

from replay_helpers import plan_setup
from simulator.errors import ConfigError
from simulator.models import load_model
from simulator.engine.replay import replay
from simulator.strategies import World
from simulator.strategies.frameworks.megatron import MegatronConfig
from simulator.strategies.parallel import ParallelPlan
from simulator.strategies.parallel.a2a_overlap import Combined, combined_actions
from simulator.strategies.parallel.generate import build_parallel
from simulator.strategies.parallel.schedules import Action, schedule

MIXTRAL = dataclasses.replace(load_model("mixtral-8x7b"), layers=2)
WAITED = ("moe_dispatch.", "moe_dispatch_probs.", "moe_combine.", "moe_combine.bwd.",
          "moe_dispatch.bwd.", "moe_dispatch_probs.bwd.")


def test_without_pipeline_stages_each_forward_goes_with_the_previous_backward():
    # combined_1f1b_schedule_for_no_pipelining: F0, F1+B0, F2+B1, B2
    rows = combined_actions(schedule("1f1b", 1, 3)[0], pp=1)
    assert rows == [Action("F", 0), Combined(Action("F", 1), Action("B", 0)),
                    Combined(Action("F", 2), Action("B", 1)), Action("B", 2)]


def test_interleaved_steady_state_pairs_are_merged():
    row = schedule("interleaved_1f1b", 2, 4, 2)[0]
    merged = combined_actions(row, pp=2)
    # every pass is issued exactly once, in the same order
    flat = [x for a in merged for x in ((a.f, a.b) if a.kind == "FB" else (a,))]
    assert flat == row
    assert any(a.kind == "FB" for a in merged)
    assert all(a.f.kind == "F" and a.b.kind == "B" for a in merged if a.kind == "FB")


def _trace(overlap: bool, m: int = 3, graphs: str = "none"):
    plan = ParallelPlan(pp=1, dp_shard=8, ep=8, dp_mode="zero1", moe_a2a_overlap=overlap)
    cfg = MegatronConfig(micro_batch=1, grad_accum=m, use_distributed_optimizer=True,
                         cuda_graph_impl=graphs)
    return build_parallel(MIXTRAL, plan, cfg, World(8, 8), seq_len=1024)


def test_a_combined_layer_pair_issues_megatrons_node_order():
    cls = _trace(True).classes[0]
    ep = [op.name.rsplit(".moe_", 1)[0] for op in cls.ops if op.stream == "ep"
          and op.attrs["micro_step"] in (1, 0) and op.collective == "all_to_all"]
    # F0 alone (its dispatch, probabilities and combine for each of 2 blocks), then the
    # combined F1 + B0 pass: layer pair (block.0 forward, block.1 backward) on the EP
    # stream as combine_bwd | dispatch_fwd -> dispatch_bwd | combine_fwd
    pair = ep[6:12]
    assert pair == ["moe_combine.bwd", "moe_dispatch", "moe_dispatch_probs",
                    "moe_dispatch.bwd", "moe_dispatch_probs.bwd", "moe_combine"]


class Fixed:
    """Every kernel takes ``seconds``."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def op_time_s(self, op_class, flops, bytes_accessed, precision, shape=None, launch="",
                  transa=False):
        return self.seconds


def _replay(overlap: bool, kernel_s: float, m: int = 3, graphs: str = "none"):
    setup = plan_setup(_trace(overlap, m, graphs), nodes=1, topology="dgx-h100-superpod")
    return replay(setup.trace, setup.collectives, Fixed(kernel_s), setup.job)


def _waited_s(timeline) -> list[float]:
    return [r.end_s - r.start_s for r in timeline.records
            if r.stream == "ep" and r.name.startswith(WAITED)]


def test_overlap_hides_exactly_the_all_to_alls_of_the_combined_passes():
    # Each kernel 1 ms, far longer than an all-to-all of 1024 x 2 x 4096 x 2 B = 16 MiB
    # over NVLink. Without the overlap every waited all-to-all (dispatch, its
    # probabilities, combine; and their three gradients) is exposed: m L of each set,
    # m = 3 micro-batches, L = 2 blocks. With it, F0 and B2 run alone (their L sets
    # exposed) and the (m - 1) L layer pairs of F1+B0 and F2+B1 run each all-to-all
    # under the other micro-batch's node, so the step is shorter by (m - 1) L a, a the
    # waited all-to-all seconds of one layer forward and backward.
    m, layers = 3, 2
    plain, over = _replay(False, 1e-3, m), _replay(True, 1e-3, m)
    waited = _waited_s(plain)
    assert len(waited) == m * layers * 6
    a = sum(waited) / (m * layers)
    assert a > 0
    assert plain.iteration_time_s - over.iteration_time_s == pytest.approx(
        (m - 1) * layers * a, rel=1e-6)


def test_without_compute_to_hide_under_the_overlap_changes_nothing():
    # Kernels of no time, launched from CUDA graphs (no CPU time per kernel either): the
    # all-to-alls run one after another on the EP stream in both schedules, and the step
    # is their sum either way.
    plain, over = _replay(False, 0.0, graphs="local"), _replay(True, 0.0, graphs="local")
    assert over.iteration_time_s == pytest.approx(plain.iteration_time_s, rel=1e-9)


def test_settings_megatron_refuses_are_refused_naming_the_field():
    field = "strategy.overlap_moe_expert_parallel_comm"
    for bad in ({}, {"expert_model_parallel_size": 8, "pipeline_model_parallel_size": 2},
                {"expert_model_parallel_size": 8, "recompute_granularity": "full"}):
        with pytest.raises(ConfigError, match="overlap_moe_expert_parallel_comm"):
            MegatronConfig(overlap_moe_expert_parallel_comm=True, **bad)
    assert field.endswith("comm")


def test_the_host_still_waits_for_the_token_counts_before_launching_the_dispatch():
    # Megatron-Core's dropless dispatcher copies the tokens per expert to the host in the
    # combined schedule too: the forward experts node's CPU dispatch (a delay on the host
    # stream) waits for that micro-batch's all-gather of the counts (tests/
    # test_moe_host_sync.py), issued in the block's pre-dispatch node, once per MoE block
    # and combined forward: (m - 1) L of them, m = 3, L = 2, besides F0's L in whole blocks
    cls = _trace(True).classes[0]
    ops = {op.id: op for op in cls.ops}
    waits = [op for op in cls.ops if op.stream == "host" and op.attrs.get("dispatches") ==
             "forward" and any(ops[d].name.startswith("moe_token_counts.") for d in op.deps)]
    assert len(waits) == 3 * 2
    # each on its own micro-batch's and block's all-gather
    assert all((ops[d].attrs["micro_step"], ops[d].layer) == (op.attrs["micro_step"], op.layer)
               for op in waits for d in op.deps)
    assert sorted(op.attrs["micro_step"] for op in waits) == [0, 0, 1, 1, 2, 2]


def test_validation_rows_run_the_overlap_where_their_release_preset_set_it():
    # Megatron-Bridge's presets (cases.yaml bridge_recipes): moe_a2a_overlap=True for
    # Qwen3-30B H100 at v0.2.x (25.11) and v0.3.0 (26.02), not from v0.3.1 (26.02.01, EP16);
    # for Qwen3-235B B300 at v0.3.0 only; for GB200's MXFP8 Qwen3-30B from v0.5.0 (26.06),
    # not before
    from simulator.validation.parallel import cases, nemo
    spec, root = cases.load(), cases.default_root()
    expect = {("bridge", "Qwen3_30B_a3B", "H100", "25.11"): True,
              ("bridge", "Qwen3_30B_a3B", "H100", "26.02"): True,
              ("bridge", "Qwen3_30B_a3B", "H100", "26.02.01"): False,
              ("blackwell", "Qwen3_235B_a22B", "B300", "26.02"): True,
              ("blackwell", "Qwen3_235B_a22B", "B300", "26.02.01"): False,
              ("blackwell", "Qwen3_30B_a3B", "GB200", "26.04"): False,
              ("blackwell", "Qwen3_30B_a3B", "GB200", "26.06"): True}
    seen = {}
    for kind in ("bridge", "blackwell"):
        for row in nemo.table_rows(root, spec, kind):
            key = (kind, row["model"], nemo.gpu_of(row), nemo.release_of(row))
            if key in expect:
                ran, _ = nemo.preset_layout(spec, row)
                scn = nemo.scenario_of(ran, root, spec, "x", kind)
                seen[key] = scn["strategy"].get("overlap_moe_expert_parallel_comm", False)
    assert seen == expect

"""The evaluation's DataLoader (`training.evaluation.dense_mask_workers`, simulator/loader.py):
each sample collated with a dense causal mask by a rank's workers, and the evaluation a
two-stage pipeline of that loader and the forward steps (docs/energy.md)."""

import pytest

from simulator.errors import ConfigError
from simulator.evaluation import evaluation_pass
from simulator.loader import dense_mask_sample_s, dense_mask_table, fed_pass_s, loader_batch_s
from simulator.scenario import load_scenario


def test_the_data_file_holds_the_measured_sample():
    """loader.yaml: 8,192 tokens; the mask 37.8 + 58.4 + 29.1 + 15.3 = 140.6 ms, the rest
    180.6 - 140.6 = 40.0 ms."""
    seq, part = dense_mask_table()
    assert seq == 8192
    assert part["mask"] == pytest.approx((37.8 + 58.4 + 29.1 + 15.3) * 1e-3)
    assert part["other"] == pytest.approx((180.6 - 140.6) * 1e-3)


def test_a_samples_collate_scales_its_mask_with_seq_squared_written_out():
    """8,192 tokens: 140.6 + 40.0 = 180.6 ms; 4,096: 140.6 / 4 + 40.0 / 2 = 55.15 ms;
    16,384: 140.6 x 4 + 40.0 x 2 = 642.4 ms."""
    assert dense_mask_sample_s(8192) == pytest.approx(0.1806)
    assert dense_mask_sample_s(4096) == pytest.approx(0.1406 / 4 + 0.040 / 2)
    assert dense_mask_sample_s(16384) == pytest.approx(0.1406 * 4 + 0.040 * 2)


def test_a_ranks_batch_is_its_samples_over_its_workers_written_out():
    """4 samples of 8,192 tokens on 1 worker: 4 x 180.6 = 722.4 ms; on 2: 361.2 ms."""
    assert loader_batch_s(4, 8192, 1) == pytest.approx(4 * 0.1806)
    assert loader_batch_s(4, 8192, 2) == pytest.approx(4 * 0.1806 / 2)


def test_a_fed_pass_is_a_two_stage_pipeline_written_out():
    """22 steps of 0.2 s: a loader of 0.15 s a batch adds its first batch (22 x 0.2 + 0.15
    = 4.55 s); one of 0.4 s sets the pace (22 x 0.4 + 0.2 = 9.0 s); none: 22 x 0.2."""
    assert fed_pass_s(22, 0.2, 0.15) == pytest.approx(22 * 0.2 + 0.15)
    assert fed_pass_s(22, 0.2, 0.4) == pytest.approx(22 * 0.4 + 0.2)
    assert fed_pass_s(22, 0.2, 0.0) == pytest.approx(22 * 0.2)


LORA = ["strategy.cuda_graph_impl=transformer_engine", "simulation.variability=none"]
EVAL = "training.evaluation={every_steps: 48, samples: 173, first_step: 192%s}"


@pytest.fixture(scope="module")
def lora_evals():
    return [evaluation_pass(load_scenario("llama2-70b-lora-8gpu", LORA + [EVAL % extra]),
                            "llama2-70b-lora-8gpu")
            for extra in ("", ", dense_mask_workers: 1", ", dense_mask_workers: 4")]


def test_the_lora_evaluation_fed_by_its_loader_written_out(lora_evals):
    """One DGX H100, TP4 x DP2, batches of 8: 8 / 2 = 4 samples a rank, 4 x 180.6 ms =
    0.7224 s on one worker, under the forward step (22 batches of it: 22 x step + 0.7224 s);
    four workers: 0.1806 s. The forward step is the same with or without the loader, and
    the wait is idle GPU time: the evaluation's energy grows by the wait at the job's idle
    power, so its average node power falls."""
    from simulator.energy.model import idle_facility_w
    from simulator.energy.timeline import _job, default_site
    none, one, four = lora_evals
    assert one.batch_s == none.batch_s == four.batch_s
    assert (none.loader_s, one.loader_s) == (0.0, pytest.approx(4 * 0.1806))
    assert four.loader_s == pytest.approx(0.1806)
    assert one.time_s == pytest.approx(22 * one.batch_s + 4 * 0.1806)
    assert four.time_s == pytest.approx(22 * four.batch_s + 0.1806)
    assert one.batch_s > one.loader_s
    # the wait (0.7224 s) at every GPU idle, hosts, NICs and switches on
    scn = load_scenario("llama2-70b-lora-8gpu", LORA + [EVAL % ""])
    from simulator.evaluation import eval_scenario, forward_only
    from simulator.pipeline import build_setup, run_setup, with_trace
    res = run_setup(with_trace(build_setup(eval_scenario(scn), "x"), forward_only))
    power, machine, gpus = _job(res, None)
    idle_w = idle_facility_w(len(gpus), power, machine, default_site())
    assert one.kwh == pytest.approx(none.kwh + 4 * 0.1806 * idle_w / 3.6e6)
    assert one.avg_node_w < none.avg_node_w


def test_the_loader_is_printed_beside_the_pass(lora_evals):
    from simulator.evaluation import eval_rows
    rows = dict(eval_rows(lora_evals[1], 3.7))
    assert "loader 0.7224 s a batch" in rows["eval_pass_s"]
    assert "loader" not in dict(eval_rows(lora_evals[0], 3.7))["eval_pass_s"]


@pytest.mark.parametrize("value", ["0", "-1", "1.5", "true"])
def test_a_bad_worker_count_is_refused_naming_the_field(value):
    with pytest.raises(ConfigError) as err:
        load_scenario("llama2-70b-lora-8gpu",
                      [EVAL.replace("%s", f", dense_mask_workers: {value}")])
    assert err.value.field == "training.evaluation.dense_mask_workers"

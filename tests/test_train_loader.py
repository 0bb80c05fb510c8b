"""The training steps' DataLoader (`training.dense_mask_workers`, simulator/loader.py,
`simulator.pipeline.fed_by_loader`): the same collate and the same two-stage pipeline as the
evaluation's loader (one path, one price); hidden under a step that outlasts it, the step's
own time where it does not, the wait at every GPU's idle power (docs/energy.md)."""

import json

import pytest

from simulator.energy.power import load_power
from simulator.energy.timeline import energy_of
from simulator.errors import ConfigError
from simulator.evaluation import evaluation_pass
from simulator.loader import loader_batch_s
from simulator.pipeline import build_setup, run_setup
from simulator.scenario import load_scenario
from test_cli import run_main

H100 = ["cluster.topology=dgx-h100"]
# a small model whose step is shorter than its loader: 8 samples of 2,048 tokens a rank
SMALL = H100 + ["model=mpt-125m", "training.seq_len=2048", "training.micro_batch=8"]
LOADER = ["training.dense_mask_workers=1"]


def _run(sets):
    return run_setup(build_setup(load_scenario("quickstart", sets), "quickstart"))


@pytest.fixture(scope="module")
def hidden():
    return _run(H100), _run(H100 + LOADER)


@pytest.fixture(scope="module")
def bound():
    return _run(SMALL), _run(SMALL + LOADER)


def test_a_loader_under_the_step_is_hidden_written_out(hidden):
    """Llama-2-7B FSDP on one DGX H100: micro-batch 2, no accumulation, so 2 samples of
    4,096 tokens a rank: 2 x (140.6 / 4 + 40.0 / 2) ms = 110.3 ms, under the 0.81 s step:
    the step, its metrics and its energy are those without the loader."""
    plain, fed = hidden
    assert fed.loader_s == pytest.approx(2 * (0.1406 / 4 + 0.040 / 2))
    assert fed.loader_s == pytest.approx(loader_batch_s(2, 4096, 1))
    assert fed.loader_wait_s == 0.0
    assert fed.metrics == plain.metrics
    assert energy_of(fed) == energy_of(plain)


def test_a_loader_over_the_step_sets_its_pace_written_out(bound):
    """MPT-125M, 8 samples of 2,048 tokens a rank: the loader takes 8 x (140.6 / 16 + 40.0
    / 4) ms = 150.3 ms, longer than the step: the step is the loader's, the same work over
    it (tokens/s x step / loader), the difference a wait (metrics wait_s), every GPU idle
    through it: GPU energy + 8 GPUs x 80 W (power.yaml's H100 idle) x the wait; the host
    and NICs on for the longer step (x loader / step)."""
    plain, fed = bound
    step, loader = plain.metrics.iteration_time_s, 8 * (0.1406 / 16 + 0.040 / 4)
    assert loader > step
    assert fed.loader_s == pytest.approx(loader)
    assert fed.metrics.iteration_time_s == pytest.approx(loader)
    assert fed.loader_wait_s == pytest.approx(loader - step)
    assert fed.metrics.tokens_per_s == pytest.approx(plain.metrics.tokens_per_s * step / loader)
    assert fed.metrics.mfu == pytest.approx(plain.metrics.mfu * step / loader)
    assert fed.metrics.wait_s == pytest.approx(plain.metrics.wait_s + loader - step)
    assert fed.metrics.compute_s == plain.metrics.compute_s
    e0, e1 = energy_of(plain), energy_of(fed)
    idle_w = load_power().gpu("H100-SXM").idle_w
    assert e1.gpu_j == pytest.approx(e0.gpu_j + 8 * idle_w * (loader - step))
    assert e1.host_j == pytest.approx(e0.host_j * loader / step)
    assert e1.avg_gpu_w < e0.avg_gpu_w


def test_the_training_and_the_evaluation_loader_are_one_price():
    """The same scenario's evaluation (batches of the training's global batch, one worker)
    and its training steps (one worker) cost the same loader a batch: 2 samples a rank."""
    scn = load_scenario("quickstart", H100 + LOADER + [
        "training.evaluation={every_steps: 10, samples: 64, dense_mask_workers: 1}"])
    ev = evaluation_pass(scn, "quickstart")
    fed = run_setup(build_setup(scn, "quickstart"))
    assert ev.loader_s == fed.loader_s == pytest.approx(loader_batch_s(2, 4096, 1))


def test_run_says_whether_the_loader_is_hidden(capsys, bound):
    code, out, err = run_main(capsys, "run", "quickstart", "--set", "cluster.topology=dgx-h100",
                              "--set", "training.dense_mask_workers=1")
    assert code == 0, err
    assert "train_loader_s        0.1103 s a step (hidden under the 0.8115 s step)" in out
    sets = [a for s in SMALL + LOADER for a in ("--set", s)]
    code, out, err = run_main(capsys, "run", "quickstart", *sets, "--format", "json")
    assert code == 0, err
    d = json.loads(out)
    assert d["train_loader"]["loader_s"] == pytest.approx(bound[1].loader_s)
    assert d["train_loader"]["wait_s"] == pytest.approx(bound[1].loader_wait_s)
    assert d["iteration_time_s"] == pytest.approx(bound[1].loader_s)
    code, out, err = run_main(capsys, "run", "quickstart", *sets)
    assert code == 0 and "train_loader_s        0.1503 s a step (the GPUs wait 0.05826 s a step for it" in out
    code, out, err = run_main(capsys, "run", "quickstart", "--set", "cluster.topology=dgx-h100")
    assert code == 0 and "train_loader_s" not in out


@pytest.mark.parametrize("value", [0, -1, 1025, "one"])
def test_a_bad_worker_count_is_refused_naming_the_field(value):
    with pytest.raises(ConfigError) as err:
        load_scenario("quickstart", [f"training.dense_mask_workers={value}"])
    assert err.value.field == "training.dense_mask_workers"


def test_a_shared_cluster_refuses_a_jobs_loader(tmp_path):
    """Jobs sharing a cluster are co-simulated by replaying their traces: a training loader
    there would be priced alone and dropped under contention, so it is refused in one line
    naming the job's field."""
    import yaml

    from simulator.fleet.build import build_fleet
    from simulator.fleet.mix import load_mix
    path = tmp_path / "mix.yaml"
    path.write_text(yaml.safe_dump({
        "name": "m", "cluster": {"topology": "dgx-a100-superpod", "nodes": 4},
        "jobs": [{"arrival": "0 s", "scenario": "quickstart", "gpus": 8, "steps": 10,
                  "set": {"training.dense_mask_workers": 1}}]}))
    with pytest.raises(ConfigError, match="without their training data loader") as info:
        build_fleet(*load_mix(path))
    assert info.value.field == "jobs[0].training.dense_mask_workers"

"""Rank-to-rank variability in a step's energy (simulator/energy/timeline.py): a class's
kernels run at the pace of its slowest rank (simulator/engine/variability.py) and the
other ranks wait for it, so a GPU draws kernel power for the typical rank's kernel time and
idle power for the rest; the replay's stretched kernel seconds are not all kernel power."""

from __future__ import annotations

import copy

import pytest

from simulator.energy.power import load_power
from simulator.energy.timeline import class_phases, energy_of, variability_stretch
from simulator.engine.records import MachineRecord, OpRecord, Timeline
from simulator.pipeline import build_setup, run_setup
from simulator.scenario import scenario_from_dict


def _record(op_id, kind, start, end, op_class=""):
    return OpRecord("a", op_id, f"op{op_id}", "s", kind, "", "", start, start, end,
                    op_class=op_class)


def test_the_stretch_of_a_class_is_idle_time():
    """GEMM 0-2 s, elementwise 2-3 s, collective 3-4 s, step 5 s, the GEMMs stretched by
    1.25 and the other kernels by 1.5: GEMM 2 / 1.25 = 1.6 s, memory-bound 1 / 1.5 s,
    communication 1 s, idle 1 + (2 - 1.6) + (1 - 1 / 1.5) s; the total is the step."""
    recs = [_record(0, "compute", 0.0, 2.0, "matmul"),
            _record(1, "compute", 2.0, 3.0, "elementwise"),
            _record(2, "collective", 3.0, 4.0)]
    tl = Timeline(recs, {}, {}, {}, 5.0, MachineRecord(0, [], None, None))
    plain = class_phases(tl)["a"]
    assert (plain.gemm_s, plain.memory_s, plain.comm_s, plain.idle_s) == (2.0, 1.0, 1.0, 1.0)
    ph = class_phases(tl, {"a": (1.25, 1.5)})["a"]
    assert ph.gemm_s == pytest.approx(1.6)
    assert ph.memory_s == pytest.approx(1.0 / 1.5)
    assert ph.comm_s == 1.0
    assert ph.idle_s == pytest.approx(1.0 + (2.0 - 1.6) + (1.0 - 1.0 / 1.5))
    assert ph.total_s == pytest.approx(5.0)


BASE = {"name": "energy-var", "model": "llama-2-7b", "cluster": {"topology": "dgx-h100"},
        "training": {"seq_len": 2048, "micro_batch": 1, "global_batch": 8},
        "strategy": {"name": "ddp"}}


def _run(variability):
    data = copy.deepcopy(BASE)
    data["simulation"] = {"variability": variability}
    res = run_setup(build_setup(scenario_from_dict(data), extrapolate_steps=False))
    return res, class_phases(res.timeline,
                             variability_stretch(res.setup.trace, res.setup.job))


def test_a_varied_step_draws_kernel_power_for_the_typical_ranks_kernel_time():
    """8 GPUs of one DDP class: with variability the step is longer, and the GEMM and
    memory-bound seconds a GPU is charged are the ideal machine's (its kernels alone, the
    stretch moved to idle), so the energy grows by idle power over the longer step only."""
    ideal, ideal_ph = _run("none")
    varied, varied_ph = _run({"compute": 0.05})
    stretch = variability_stretch(varied.setup.trace, varied.setup.job)
    (cls, (f_gemm, f_other)), = stretch.items()
    assert f_gemm == f_other > 1.0            # one draw for the class's compute ops
    assert varied.metrics.iteration_time_s > ideal.metrics.iteration_time_s
    assert varied_ph[cls].gemm_s == pytest.approx(ideal_ph[cls].gemm_s, rel=1e-3)
    assert varied_ph[cls].memory_s == pytest.approx(ideal_ph[cls].memory_s, rel=1e-2)
    e_ideal, e_varied = energy_of(ideal), energy_of(varied)
    extra_s = varied.metrics.iteration_time_s - ideal.metrics.iteration_time_s
    gpus, idle_w = 8, load_power().gpu("H100-SXM").idle_w        # dgx-h100's GPU
    # the extra GPU energy is idle power over the extra seconds, never kernel power
    assert e_varied.gpu_j - e_ideal.gpu_j == pytest.approx(gpus * extra_s * idle_w, rel=1e-3)
    assert variability_stretch(ideal.setup.trace, ideal.setup.job) is None

"""One price for a kernel launch: every PyTorch strategy pays the host's dispatch of the
kernels it emits (simulator/strategies/host.py), the same CPU seconds for the same layer,
and TensorFlow's graphs pay none (issue 40: before, only the FSDP spellings paid it)."""

from __future__ import annotations

import pytest

from simulator.errors import ConfigError
from simulator.pipeline import build_setup, run_setup
from simulator.scenario import scenario_from_dict
from simulator.strategies.host import dispatch_table

STRATEGIES = {
    "fsdp": {"name": "fsdp"},
    "fsdp2": {"name": "fsdp", "mesh": [1, 8]},
    "ddp": {"name": "ddp"},
    "deepspeed": {"name": "deepspeed", "zero_optimization": {"stage": 1}},
    "megatron": {"name": "megatron", "tensor_model_parallel_size": 1},
    "torchtitan": {"name": "torchtitan", "parallelism": {"tensor_parallel_degree": 2}},
}


def _setup(strategy: dict, model: str = "mpt-125m", seq_len: int = 128,
           micro_batch: int = 1):
    scn = scenario_from_dict({
        "name": "host", "model": model,
        "training": {"micro_batch": micro_batch, "seq_len": seq_len},
        "cluster": {"topology": "dgx-h100", "gpus": 8},
        "strategy": strategy}, "host")
    return build_setup(scn, "host")


COPIES = ("all_gather_copy_out.", "reduce_scatter_copy_in.")


def _host_ops(setup) -> dict:
    """{(layer, phase): CPU seconds} of rank 0's first micro-step (a layer's kernels and
    the FSDP2 copies launched for it, each launch its own host op)."""
    out: dict = {}
    for op in setup.trace.classes[0].ops:
        if op.stream == "host" and op.attrs.get("micro_step", 0) == 0:
            key = (op.layer, op.attrs["dispatches"])
            out[key] = out.get(key, 0.0) + op.duration_s
    return out


def _kernels(setup, layer: str, phase: str) -> int:
    """The kernels launched for the layer in ``phase``: its own on the compute stream and
    FSDP2's copies (the copy-out its pre-forward/pre-backward hook launches on the compute
    stream, the chunk_cat its post-backward hook launches on the reduce-scatter's), each
    launched eagerly like any other kernel, in both generators."""
    return sum(1 for op in setup.trace.classes[0].ops
               if op.kind == "compute" and op.layer == layer and op.phase == phase
               and op.attrs.get("micro_step", 0) == 0
               and (op.stream == "compute" or op.name.startswith(COPIES)))


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_every_pytorch_strategy_pays_each_launch_at_the_same_price(name):
    setup = _setup(STRATEGIES[name])
    host = _host_ops(setup)
    assert host, f"{name}: no host dispatch"
    table = dispatch_table()["eager"]
    for (layer, phase), seconds in host.items():
        # kernels x the measured seconds per kernel of that phase: the same price per launch
        # in every strategy (a tensor-parallel layer emits its own kernels, each a launch)
        assert seconds == pytest.approx(_kernels(setup, layer, phase) * table[phase])


def test_the_same_layer_costs_the_same_cpu_time_under_fsdp_megatron_deepspeed():
    # one GPU's kernels of the same block are the same under these data-parallel spellings
    # (DDP's autocast adds its casts, each a launch of its own: the test above prices them)
    prices = {name: _host_ops(_setup(STRATEGIES[name]))
              for name in ("fsdp", "megatron", "deepspeed")}
    blocks = {k for k in prices["fsdp"] if "block" in k[0]}
    assert blocks
    for name, host in prices.items():
        for key in blocks:
            assert host[key] == pytest.approx(prices["fsdp"][key]), (name, key)


def test_host_dispatch_none_removes_the_host_ops_for_every_pytorch_strategy():
    for strategy in STRATEGIES.values():
        assert not _host_ops(_setup({**strategy, "host_dispatch": "none"}))


def test_tensorflow_graphs_pay_no_dispatch_and_refuse_eager():
    assert not _host_ops(_setup({"name": "tf_mirrored"}))
    assert not _host_ops(_setup({"name": "horovod"}))
    with pytest.raises(ConfigError, match="strategy.host_dispatch"):
        _setup({"name": "tf_mirrored", "host_dispatch": "eager"})


def test_a_short_kernel_megatron_step_waits_for_the_host():
    # mpt-125m on one 128-token sequence: the GPU runs the kernels faster than the CPU
    # launches them, under Megatron as under FSDP
    eager = run_setup(_setup(STRATEGIES["megatron"])).metrics
    none = run_setup(_setup({**STRATEGIES["megatron"], "host_dispatch": "none"})).metrics
    assert eager.iteration_time_s > 1.2 * none.iteration_time_s
    # a 1.3B model on 8 x 2048 tokens: the long kernels hide it
    big = [run_setup(_setup({**STRATEGIES["megatron"], "host_dispatch": h}, "mpt-1b", 2048,
                            8)).metrics.iteration_time_s for h in ("eager", "none")]
    assert big[0] == pytest.approx(big[1], rel=1e-3)

"""Megatron's ``cuda_graph_scope: [mamba]`` (simulator/models/mamba.py in_graph_scope): a
hybrid's Mamba layers replay from CUDA graphs, its other layers stay eager; scopes that
graph part of a layer are refused in one line."""

import copy

import pytest

from simulator.compute.launch import GRAPH
from simulator.errors import ConfigError
from simulator.models.costs import layer_costs
from simulator.models.mamba import check_graph_scope, in_graph_scope, is_mamba_layer
from simulator.models.spec import parse_model
from simulator.pipeline import build_setup
from simulator.scenario import scenario_from_dict
from test_mamba import NANO, hybrid_file

HYBRID = {"name": "hy", "model": NANO,
          "training": {"micro_batch": 1, "seq_len": 1024, "grad_accum": 2,
                       "precision": "bf16"},
          "cluster": {"topology": "dgx-h100"},
          "strategy": {"name": "megatron", "expert_model_parallel_size": 8}}


def _setup(**strategy):
    data = copy.deepcopy(HYBRID)
    data["strategy"].update(strategy)
    return build_setup(scenario_from_dict(data))


def _launches(setup) -> dict[str, set[str]]:
    """The launch kinds of the first rank class's compute kernels: Mamba's, the others'."""
    out = {"mamba": set(), "other": set()}
    for op in setup.trace.classes[0].ops:
        if op.kind == "compute" and op.layer.startswith("block."):
            out["mamba" if op.name.startswith("mamba_") else "other"].add(
                op.attrs.get("launch", ""))
    return out


def test_scope_picks_the_mamba_layers():
    model = parse_model(hybrid_file(), "tiny.yaml")          # pattern M*ME
    blocks = [layer for layer in layer_costs(model, 1, 128, "bf16")
              if layer.name.startswith("block.")]
    assert [is_mamba_layer(layer) for layer in blocks] == [True, False, True, False]
    assert [in_graph_scope(layer, ["mamba"]) for layer in blocks] == [True, False, True, False]
    assert all(in_graph_scope(layer, []) for layer in blocks)   # no scope: every layer


def test_mamba_scope_graphs_the_mamba_layers_only():
    eager = _launches(_setup())
    whole = _launches(_setup(cuda_graph_impl="transformer_engine"))
    scoped = _launches(_setup(cuda_graph_impl="transformer_engine", cuda_graph_scope=["mamba"]))
    assert eager == {"mamba": {""}, "other": {""}}
    assert whole == {"mamba": {GRAPH}, "other": {GRAPH}}
    assert scoped == {"mamba": {GRAPH}, "other": {""}}


def test_graphed_mamba_kernel_drops_the_launch_gap():
    plain = _setup()
    scoped = _setup(cuda_graph_impl="local", cuda_graph_scope=["mamba"])
    ops = {s: next(op for op in setup.trace.classes[0].ops if op.name == "mamba_conv1d")
           for s, setup in (("plain", plain), ("scoped", scoped))}
    compute = plain.compute
    t = {s: compute.op_time_s(op.op_class, op.flops, op.bytes_accessed, "bf16",
                              launch=op.attrs.get("launch", "")) for s, op in ops.items()}
    # the same kernel, less the GPU's per-kernel launch gap (compute.yaml, 4 us)
    assert t["plain"] - t["scoped"] == pytest.approx(compute.calibration.kernel_launch_s)


@pytest.mark.parametrize("scope, graphs, words", [
    (["attn"], True, "'attn' is not modelled"),
    (["mamba", "moe_router"], True, "'moe_router' is not modelled"),
    (["mamba"], False, "needs cuda_graph_impl"),
])
def test_scope_refusals(scope, graphs, words):
    with pytest.raises(ConfigError, match=words) as exc:
        check_graph_scope(scope, graphs)
    assert exc.value.field == "strategy.cuda_graph_scope"


def test_scope_refused_in_one_line(capsys, tmp_path):
    from test_cli import run_main
    from test_parallel_errors import scenario
    path = scenario(tmp_path, NANO, 8, {"expert_model_parallel_size": 8,
                                         "cuda_graph_impl": "local",
                                         "cuda_graph_scope": ["attn"]})
    code, _, err = run_main(capsys, "run", path, "-q")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert path in lines[0] and "strategy.cuda_graph_scope:" in lines[0]


@pytest.mark.parametrize("case, graphed", [
    ("parallel/bridge/gb200/26.06/nemotron-3-super-64gpu-mxfp8-gbs512", True),
    ("parallel/bridge/gb300/26.08/nemotron-3-nano-8gpu-mxfp8-gbs512", True),
    ("parallel/bridge/b200/26.04.01/nemotron-3-super-64gpu-nvfp4-gbs512", True),
    # B200's Super MXFP8 preset sets cuda_graph_impl none
    ("parallel/bridge/b200/26.04.01/nemotron-3-super-64gpu-mxfp8-gbs512", False),
])
def test_nemotron_rows_run_their_presets_mamba_graphs(case, graphed):
    from simulator.validation.parallel import nemo
    from simulator.validation.parallel.cases import default_root, load
    root = default_root()
    spec = load(root)
    row = next(r for r in nemo.table_rows(root, spec, "blackwell")
               if nemo.case_id("blackwell", r) == case)
    strategy = nemo.scenario_of(row, root, spec, case, "blackwell")["strategy"]
    got = (strategy.get("cuda_graph_impl"), strategy.get("cuda_graph_scope"))
    assert got == (("transformer_engine", ["mamba"]) if graphed else (None, None))

"""Megatron's gradient-accumulation fusion (issues 40/41): each weight-gradient GEMM reads
and writes the ``main_grad`` buffer itself (Transformer Engine's fuse_wgrad_accumulation,
beta 1 on every micro-batch), so its output traffic is the buffer's bytes twice, not the
step's dtype once (:func:`simulator.models.ops.accumulated_wgrad`). Megatron-LM runs it
unless ``--no-gradient-accumulation-fusion``; FSDP2 and PyTorch DDP keep no main_grad.
Checked against measured kernels in tests/test_moe_kernels.py (SimuMax's B200 grouped
weight gradients, into fp32 and into bf16 main_grad)."""

from __future__ import annotations

import pytest

from simulator.errors import ConfigError
from simulator.models import layer_costs, load_model
from simulator.models.fp8 import fp8_layer
from simulator.models.ops import MainGrad, OpCost, accumulated_wgrad
from simulator.strategies import World
from simulator.strategies.frameworks.files import read_config
from simulator.strategies.frameworks.megatron import MegatronConfig
from simulator.strategies.parallel import ParallelPlan
from simulator.strategies.parallel.generate import build_parallel

GPT = load_model("gpt3-1.3b")
MIXTRAL = load_model("mixtral-8x7b")


def test_a_weight_gradient_reads_and_writes_the_buffer():
    """A dense block: each ``*.wgrad`` GEMM's bytes grow by its output (k x n of the
    weight) x (2 x 4 - 2): fp32 main_grad read and written where the bf16 gradient was
    written once; every other op is untouched."""
    block = layer_costs(GPT, 1, 512, "bf16")[1]
    fused = accumulated_wgrad(block, MainGrad(bytes=4, fused=True), 2)
    assert [op.name for op in fused.backward] == [op.name for op in block.backward]
    wgrads = 0
    for before, after in zip(block.backward, fused.backward):
        if before.name.endswith(".wgrad"):
            wgrads += 1
            h = GPT.hidden
            out = {"qkv_proj.wgrad": h * 3 * h, "attn_out.wgrad": h * h,
                   "mlp_up.wgrad": h * GPT.ffn_hidden, "mlp_down.wgrad": GPT.ffn_hidden * h}
            assert before.m * before.n == out[before.name]
            assert after.bytes_accessed == before.bytes_accessed + out[before.name] * (8 - 2)
        else:
            assert after == before
    assert wgrads == 4


def test_an_expert_weight_gradient_counts_every_expert_and_fp8_writes_bf16():
    """A grouped GEMM (the experts): groups x k x n outputs. An FP8 GEMM's output is bf16
    (2 bytes) whatever the step's dtype; a bf16 main_grad is 2 x 2 bytes."""
    block = fp8_layer(layer_costs(MIXTRAL, 1, 512, "bf16")[1], "delayed")
    down = next(op for op in block.backward if op.name == "moe_expert_down.wgrad")
    assert down.precision == "fp8" and down.groups == 8
    assert (down.m, down.n) == (MIXTRAL.ffn_hidden, MIXTRAL.hidden)
    fused = accumulated_wgrad(block, MainGrad(bytes=2, fused=True), 2)
    after = next(op for op in fused.backward if op.name == "moe_expert_down.wgrad")
    assert after.bytes_accessed == down.bytes_accessed + 8 * down.m * down.n * (4 - 2)
    fp32_step = accumulated_wgrad(block, MainGrad(bytes=4, fused=True), 4)        # an FP8 GEMM still writes 2 bytes
    after = next(op for op in fp32_step.backward if op.name == "moe_expert_down.wgrad")
    assert after.bytes_accessed == down.bytes_accessed + 8 * down.m * down.n * (8 - 2)


def test_every_catalog_weight_gradient_has_the_shape_the_rule_reads():
    """The rule reads the output from the op's m x n: no weight gradient of a catalog
    transformer may leave it unknown (it would be priced without the buffer)."""
    from simulator.models import model_names
    for name in model_names():
        model = load_model(name)
        if not model.is_transformer:
            continue
        for layer in layer_costs(model, 1, 256, "bf16"):
            for op in layer.backward:
                if op.name.endswith(".wgrad"):
                    assert op.op_class == "matmul" and op.m and op.n, (name, op.name)


def test_megatron_runs_it_unless_told_or_unable():
    assert MegatronConfig().main_grad() == MainGrad(bytes=4, fused=True)   # fp32 main_grad
    assert MegatronConfig(grad_reduce_in_bf16=True).main_grad() == MainGrad(bytes=2, fused=True)
    assert MegatronConfig(gradient_accumulation_fusion=False).main_grad() == \
        MainGrad(bytes=4, fused=False)
    assert MegatronConfig(use_torch_fsdp2=True).main_grad() is None
    assert MegatronConfig(DDP_impl="torch").main_grad() is None
    for other in ({"use_torch_fsdp2": True}, {"DDP_impl": "torch"}):
        with pytest.raises(ConfigError) as info:
            MegatronConfig(gradient_accumulation_fusion=True, **other)
        assert info.value.field == "strategy.gradient_accumulation_fusion"
        assert "\n" not in str(info.value)


def test_without_the_fusion_a_kernel_of_its_own_adds_the_gradient_in():
    """Megatron's DDP hook, ``param.main_grad.add_(param.grad)``: after each weight-gradient
    GEMM (which writes its bf16 output as before) an elementwise kernel reads that output
    (2 bytes) and the fp32 buffer (4) and writes the buffer (4), one FLOP an element."""
    block = layer_costs(GPT, 1, 512, "bf16")[1]
    unfused = accumulated_wgrad(block, MainGrad(bytes=4, fused=False), 2)
    names = [op.name for op in unfused.backward]
    for op in block.backward:
        if op.name.endswith(".wgrad"):
            i = names.index(op.name)
            gemm, add = unfused.backward[i], unfused.backward[i + 1]
            assert gemm == op
            elements = op.m * op.n
            assert add == OpCost(f"{op.name}.accumulate", "elementwise", float(elements),
                                 float(elements * (2 + 4 + 4)))
    assert len(names) == len(block.backward) + 4


def test_other_frameworks_write_their_own_gradient():
    from simulator.strategies.frameworks.torchtitan import TorchtitanConfig
    assert TorchtitanConfig().main_grad() is None


def test_the_argument_file_turns_it_off(tmp_path):
    path = tmp_path / "run.args"
    path.write_text("--tensor-model-parallel-size 2 --no-gradient-accumulation-fusion\n")
    pieces = read_config(path)
    assert pieces.strategy["gradient_accumulation_fusion"] is False
    assert "--no-gradient-accumulation-fusion" in pieces.used
    path.write_text("--tensor-model-parallel-size 2\n")
    assert "gradient_accumulation_fusion" not in read_config(path).strategy   # on


def _wgrad_bytes(fusion: bool | None, plan: ParallelPlan) -> tuple[float, float]:
    """The weight-gradient GEMMs' bytes of a Megatron trace, and their outputs (m x n)."""
    cfg = MegatronConfig(micro_batch=1, grad_accum=2, gradient_accumulation_fusion=fusion)
    trace = build_parallel(GPT, plan, cfg, World(plan.size, 4), seq_len=512)
    ops = [op for cls in trace.classes for op in cls.ops
           if op.kind == "compute" and op.name.endswith(".wgrad")]
    return (sum(op.bytes_accessed for op in ops),
            sum(op.attrs["m"] * op.attrs["n"] for op in ops))


def test_a_megatron_trace_prices_the_buffer_on_every_micro_batch():
    """TP2 x PP2: every rank's weight-gradient GEMMs, both micro-batches, carry (8 - 2)
    bytes more per output element with the fusion on than with it off (where the add
    kernels carry the buffer instead)."""
    plan = ParallelPlan(pp=2, tp=2, dp_mode="ddp", sequence_parallel=True)
    on, outputs = _wgrad_bytes(None, plan)
    off, same_outputs = _wgrad_bytes(False, plan)
    assert outputs == same_outputs and outputs > 0
    assert on - off == pytest.approx(6 * outputs)


def test_the_pure_data_parallel_path_prices_it_too():
    """Megatron's DDP without model parallelism is replayed by the data-parallel
    generators (translate.full_layers): the same rule there."""
    from simulator.strategies.frameworks.translate import full_layers
    plain = full_layers(None, MegatronConfig(micro_batch=1, DDP_impl="torch"), GPT, 512, True,
                        False)
    for fusion in (True, False):
        cfg = MegatronConfig(micro_batch=1, gradient_accumulation_fusion=fusion)
        layers = full_layers(None, cfg, GPT, 512, True, False)
        assert layers == [accumulated_wgrad(layer, MainGrad(bytes=4, fused=fusion), 2)
                          for layer in plain]
        assert layers != plain

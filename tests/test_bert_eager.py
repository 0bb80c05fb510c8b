"""``training.elementwise: eager`` on a BERT: Hugging Face's BertLayer op by op
(simulator/models/eager.py, bert_eager_block): separate Q, K and V Linears, each casting its
fp32 input under autocast and summing its input gradient in fp32, and every biased Linear's
bias gradient as a reduction kernel. Bytes against the formulas, written out."""

from __future__ import annotations

import pytest

from simulator.errors import ConfigError
from simulator.models import load_model
from simulator.models.costs import layer_costs
from simulator.pipeline import build_setup
from simulator.scenario import scenario_from_dict

B, S = 8, 128
BERT = load_model("bert-large")
T, H, F = B * S, BERT.hidden, BERT.ffn_hidden


def _block(precision: str, autocast: bool, elementwise: str = "eager", compile=False):
    return layer_costs(BERT, B, S, precision, True, autocast=autocast, compile=compile,
                       elementwise=elementwise)[1]


def _added(eager, fused) -> dict[str, object]:
    names = {o.name for o in (*fused.forward, *fused.backward)}
    return {o.name: o for o in (*eager.forward, *eager.backward) if o.name not in names}


def test_autocast_casts_and_fp32_gradient_sums_of_separate_q_k_v():
    e, k = 2, 4                                   # fp16 kernels, fp32 residual stream
    fused, eager = _block("fp16", True, "fused"), _block("fp16", True)
    added = _added(eager, fused)
    for x in "kv":                                # K's and V's own casts of the fp32 input
        assert added[f"qkv_proj.cast_{x}"].bytes_accessed == (k + e) * T * H
        assert added[f"qkv_proj.cast_{x}"].saved_bytes == e * T * H
        assert added[f"qkv_proj.cast_{x}.bwd"].bytes_accessed == (e + k) * T * H
    for i in range(2):                            # three input gradients summed in fp32
        assert added[f"qkv_proj.grad_add{i}"].bytes_accessed == 3 * k * T * H
    assert eager.activation_bytes - fused.activation_bytes == 2 * e * T * H
    # every op of the fused block is still there, unchanged, but the QKV GEMM, which runs
    # as the three Linears' GEMMs (tests/test_separate_projections.py)
    kept = [o for o in fused.forward if o.name != "qkv_proj"]
    assert [o for o in eager.forward if o.name in {x.name for x in kept}] == kept
    assert [o.name for o in eager.forward if o.op_class == "matmul"][:3] == \
        ["qkv_proj.q", "qkv_proj.k", "qkv_proj.v"]


def test_a_bias_gradient_is_a_reduction_per_linear():
    e = 2
    added = _added(_block("fp16", True), _block("fp16", True, "fused"))
    widths = {"qkv_proj.bias_grad0": H, "qkv_proj.bias_grad1": H, "qkv_proj.bias_grad2": H,
              "attn_out.bias_grad": H, "mlp_up.bias_grad": F, "mlp_down.bias_grad": H}
    for name, w in widths.items():
        op = added[name]
        assert op.op_class == "norm"
        assert op.bytes_accessed == e * T * w + 4 * w and op.flops == T * w
    assert len([n for n in added if "bias_grad" in n]) == 6


def test_without_autocast_no_casts_and_the_sums_at_the_kernels_width():
    fused, eager = _block("bf16", False, "fused"), _block("bf16", False)
    added = _added(eager, fused)
    assert not [n for n in added if ".cast_" in n]
    assert added["qkv_proj.grad_add0"].bytes_accessed == 3 * 2 * T * H
    assert eager.activation_bytes == fused.activation_bytes


def test_compiled_bert_sums_only_the_q_k_v_gradients():
    fused = {o.name: o for o in _block("fp16", True, "fused", compile=True).backward}
    eager = {o.name: o for o in _block("fp16", True, compile=True).backward}
    grow = {n: eager[n].bytes_accessed - fused[n].bytes_accessed for n in fused if n in eager}
    norm1 = next(n for n in grow if "norm1.bwd" in n)
    assert grow[norm1] == 2 * 2 * T * H            # two extra projections' gradients
    assert all(v == 0 for n, v in grow.items() if n != norm1)    # no gate/up in a GELU MLP


@pytest.mark.parametrize("elementwise, strategy, says", [
    ("eager_fused_norm", {"name": "ddp"}, "a BERT takes eager"),
    ("eager", {"name": "tf_mirrored"}, "runs Keras"),
])
def test_what_a_bert_cannot_run_is_refused_in_one_line(elementwise, strategy, says):
    data = {"name": "x", "model": "bert-large", "cluster": {"topology": "dgx-a100"},
            "training": {"micro_batch": 8, "seq_len": 128, "precision": "fp16",
                         "elementwise": elementwise}, "strategy": strategy}
    with pytest.raises(ConfigError, match=says) as err:
        build_setup(scenario_from_dict(data))
    assert err.value.field == "training.elementwise"

"""Sliding-window attention (simulator/models/window.py) and GPT-OSS 120B: the window's
pairs, a windowed block's FLOPs and its time on the flash curve, the alternating pattern,
the expert-parallel block keeping its attention, the parameter count, and the refusals."""

from __future__ import annotations

from dataclasses import replace

import pytest
import yaml

from simulator.cli import main
from simulator.compute.model import ComputeModel
from simulator.errors import ConfigError
from simulator.hardware import gpu_spec
from simulator.models import layer_costs, load_model, lookup_params, params_total
from simulator.models.moe import inactive_params
from simulator.models.ops import SOFTMAX_BWD_FLOPS, SOFTMAX_FLOPS
from simulator.models.window import (causal_pairs, is_windowed_layer, keep_attention,
                                     window_pairs)
from simulator.strategies.parallel.moe import ep_block_cost, ep_loads

S = 4096                # Megatron-Bridge's GPT-OSS runs' sequence length
W = 128                 # GPT-OSS's window (config.json sliding_window)
# sum over the 4096 queries of min(i + 1, 128): the first 128 see 1..128 keys, the other
# 3968 see 128 each
PAIRS = 128 * 129 // 2 + (4096 - 128) * 128
assert PAIRS == 8_256 + 507_904 == 516_160


def _core(layer, name="attn_core"):
    return next(op for op in (*layer.forward, *layer.backward) if op.name == name)


def test_window_pairs_are_the_sum_of_min_i_plus_1_and_w():
    assert window_pairs(S, W) == PAIRS == sum(min(i + 1, W) for i in range(S))
    assert causal_pairs(S) == 4096 * 4097 // 2 == 8_390_656
    # a window at least the sequence is full causal attention
    assert window_pairs(100, 128) == causal_pairs(100) == 5_050
    assert window_pairs(7, 3) == 1 + 2 + 3 + 3 + 3 + 3 + 3 == 18


def test_gpt_oss_parameter_count_against_the_model_card():
    m = load_model("gpt-oss-120b")
    h, q, kv, f, v, n, layers = 2880, 64 * 64, 8 * 64, 2880, 201_088, 128, 36
    attention = h * (q + 2 * kv) + (q + 2 * kv) + q * h + h    # QKV and output, with biases
    assert attention == 14_750_720 + 11_799_360 == 26_550_080
    expert = 3 * h * f                                           # SwiGLU gate, up, down
    assert expert == 24_883_200
    block = attention + 2 * h + h * n + n * expert               # + 2 RMSNorms, router
    assert block == 26_550_080 + 5_760 + 368_640 + 3_185_049_600 == 3_211_974_080
    tables = 2 * v * h + h                                       # embedding, head, final norm
    assert params_total(m) == layers * block + tables == 116_789_336_640
    # the model card's 116.83B adds the experts' and router's biases (39.8M) and the sinks
    assert params_total(m) == pytest.approx(116.83e9, rel=5e-4)
    # active: the 124 experts a token skips in each block left out; 5.13B by the card's
    # convention, which counts the unembedding but not the embedding
    assert inactive_params(m) == layers * (n - 4) * expert == 111_078_604_800
    active = params_total(m) - inactive_params(m) - lookup_params(m)
    assert active == 116_789_336_640 - 111_078_604_800 - v * h == 5_131_598_400
    assert active == pytest.approx(5.13e9, rel=1e-3)


def test_alternating_pattern_windows_the_even_blocks():
    m = load_model("gpt-oss-120b")
    assert (m.sliding_window, m.attention_pattern) == (W, "alternating")
    windowed = [i for i in range(m.layers) if is_windowed_layer(m, i)]
    assert windowed == list(range(0, 36, 2)) and len(windowed) == 18
    every = replace(m, attention_pattern="sliding")
    assert all(is_windowed_layer(every, i) for i in range(m.layers))
    assert not any(is_windowed_layer(replace(m, sliding_window=0), i) for i in range(36))


def test_windowed_attention_flops_keys_and_bytes():
    m = load_model("gpt-oss-120b")
    layers = layer_costs(m, 1, S, "bf16")
    win, full = layers[1], layers[2]                 # block.0 windowed, block.1 full
    q, heads = 64 * 64, 64
    # forward: QK^T and AV over the unmasked pairs, 2 x 2 x head_dim x heads FLOPs a pair,
    # and the softmax's 5 per score; backward: 5 matmuls' worth and both softmax passes
    assert _core(win).flops == pytest.approx(PAIRS * (4 * q + SOFTMAX_FLOPS * heads))
    assert _core(full).flops == pytest.approx(causal_pairs(S) * (4 * q + SOFTMAX_FLOPS * heads))
    assert _core(win, "attn_core.bwd").flops == pytest.approx(
        PAIRS * (10 * q + (SOFTMAX_FLOPS + SOFTMAX_BWD_FLOPS) * heads))
    # keys per query: 516,160 / 4096 = 126.0 windowed, (4096 + 1) / 2 = 2048.5 -> 2048 full
    assert (_core(win).n, _core(full).n) == (126, 2048)
    assert (_core(win).m, _core(win).k) == (_core(full).m, _core(full).k) == (64 * S, 64)
    # the same Q, K, V, O read and written
    assert _core(win).bytes_accessed == _core(full).bytes_accessed
    # everything else in the block is the full block's
    rest = [op for op in win.forward if op.op_class != "attention"]
    assert rest == [op for op in full.forward if op.op_class != "attention"]


def test_windowed_kernel_is_timed_on_the_flash_curve_at_its_keys():
    m = load_model("gpt-oss-120b")
    layers = layer_costs(m, 1, S, "bf16")
    win, full = _core(layers[1]), _core(layers[2])
    model = ComputeModel(gpu_spec("B200"), strategy="megatron")
    # one price: the windowed kernel costs what any attention kernel of its FLOPs, bytes
    # and 126 keys per query costs
    alone = model.op_time_s("attention", PAIRS / causal_pairs(S) * full.flops,
                            full.bytes_accessed, "bf16", shape=(64 * S, 126, 64))
    assert model.op_time_s("attention", win.flops, win.bytes_accessed, "bf16",
                           shape=win.shape) == pytest.approx(alone)
    t_win = model.op_time_s("attention", win.flops, win.bytes_accessed, "bf16", shape=win.shape)
    t_full = model.op_time_s("attention", full.flops, full.bytes_accessed, "bf16",
                             shape=full.shape)
    # 6.2% of the pairs: faster than the full layer, but lower on the curve (126 keys),
    # so each pair costs more than in the full kernel
    assert t_win < t_full
    launch = model.kernel_launch_s
    assert (t_win - launch) / PAIRS > (t_full - launch) / causal_pairs(S)


def test_an_expert_parallel_block_keeps_its_windowed_attention():
    m = replace(load_model("gpt-oss-120b"), layers=2)
    layers = layer_costs(m, 1, S, "bf16")
    loads = ep_loads(m, S, 8)
    ep = ep_block_cost(m, 1, S, 2, True, loads, 8)       # the attention of a full block
    assert _core(ep).n == 2048
    for layer in layers[1:3]:
        kept = keep_attention(replace(ep, name=layer.name), layer)
        assert _core(kept) == _core(layer) and _core(kept, "attn_core.bwd") == _core(
            layer, "attn_core.bwd")
        assert [op.name for op in kept.forward] == [op.name for op in ep.forward]
    assert _core(keep_attention(ep, layers[1])).n == 126


USER = dict(name="tiny-swa", family="llama", layers=2, hidden=64, heads=4, vocab=100,
            max_seq_len=256)


def _write(tmp_path, data):
    path = tmp_path / "model.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("change, field", [
    ({"attention_pattern": "alternating"}, "attention_pattern"),      # no window
    ({"sliding_window": 0}, "sliding_window"),
    ({"sliding_window": 16, "attention_pattern": "every_third"}, "attention_pattern"),
    ({"sliding_window": 16, "family": "bert"}, "sliding_window"),    # not causal
])
def test_bad_window_keys_are_refused_naming_file_and_field(tmp_path, change, field):
    path = _write(tmp_path, {**USER, **change})
    with pytest.raises(ConfigError) as err:
        load_model(str(path))
    assert err.value.source == str(path) and err.value.field == field


def test_a_user_model_with_a_window_loads_and_defaults_to_every_block(tmp_path):
    spec = load_model(str(_write(tmp_path, {**USER, "sliding_window": 16})))
    assert (spec.sliding_window, spec.attention_pattern) == (16, "sliding")
    blocks = layer_costs(spec, 1, 256, "bf16")[1:3]
    # 16 x 17 / 2 + 240 x 16 = 3,976 pairs of 256 queries: 15.5 -> 16 keys each
    assert window_pairs(256, 16) == 136 + 3_840 == 3_976
    assert [_core(b).n for b in blocks] == [16, 16]


def test_window_under_context_parallelism_is_refused():
    with pytest.raises(ConfigError) as err:
        layer_costs(load_model("gpt-oss-120b"), 1, S, "bf16", cp=2)
    assert err.value.field == "strategy.context_parallel_size"
    assert "sliding-window" in str(err.value)


def test_cli_refuses_a_bad_pattern_in_one_line(tmp_path, capsys):
    path = _write(tmp_path, {**USER, "attention_pattern": "alternating"})
    with pytest.raises(SystemExit) as exc:
        main(["run", "quickstart", "--set", f"model={path}", "-q"])
    out, err = capsys.readouterr()
    assert exc.value.code == 2 and out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and "attention_pattern" in lines[0]
    assert "Traceback" not in err


def _bridge_rows():
    """GPT OSS 120B rows of the Megatron-Bridge tables: (release, seq_len, tokens/s, TFLOP/s)."""
    import pandas as pd
    from simulator.validation.parallel import cases
    root = cases.default_root()
    rows = []
    for name, release in (("megatron_bridge_blackwell.csv", "release"),
                          ("megatron_bridge_h100.csv", "release")):
        df = pd.read_csv(root / name, dtype=str)
        model = "model_as_printed" if "model_as_printed" in df else "model"
        for r in df[df[model] == "GPT OSS 120B"].to_dict("records"):
            rows.append((str(r[release]).split()[0], int(r["seq_len"]),
                         float(r["tokens_per_s_per_gpu"]), float(r["tflops_per_gpu"])))
    return rows


def test_model_flops_per_token_against_megatron_bridge_tables():
    # Megatron-Bridge@067f987d training/utils/flop_utils.py, per token: 6 x (the blocks'
    # projections, the routed experts' gated MLPs, the logits) + 6 x the attention core,
    # q s on a full block and 2 q c on a windowed one, c = w - w (w - 1) / (2 s) the
    # window's mean keys per query; no router term
    proj = 2880 * (4096 + 2 * 512) + 4096 * 2880
    linear = 6 * (36 * proj + 36 * 4 * 3 * 2880 * 2880 + 2880 * 201_088)
    assert linear == 30_706_974_720
    c = 128 - 128 * 127 / (2 * 4096)
    assert c == PAIRS / S == 126.015625
    core = 6 * (18 * 4096 * 4096 + 18 * 4096 * 2 * c)
    bridge = linear + core
    assert bridge == pytest.approx(32.6304e9, rel=1e-5)
    # the simulator's GEMMs are the same linear terms plus the router's 6 x 36 x 2880 x 128
    m = load_model("gpt-oss-120b")
    gemm = sum(op.flops for layer in layer_costs(m, 1, S, "bf16")
               for op in (*layer.forward, *layer.backward) if op.op_class == "matmul")
    assert gemm / S == pytest.approx(linear + 6 * 36 * 2880 * 128, rel=1e-12)
    # the tables' TFLOP/s over tokens/s: the 26.06+ rows count this formula; the earlier
    # ones (through 26.04.01) two-matrix experts and full causal attention on all 36 blocks
    old = 6 * (36 * proj + 36 * 4 * 2 * 2880 * 2880 + 2880 * 201_088)
    rows = _bridge_rows()
    assert len(rows) == 31
    off = []
    for release, s, tokens, tflops in rows:
        per_token = tflops * 1e12 / tokens
        expected = bridge if release >= "26.06" else old + 6 * 36 * 4096 * s
        # the tables print whole TFLOP/s: up to half a unit of rounding, and 0.3% more
        if abs(per_token / expected - 1) > 0.5 / tflops + 3e-3:
            off.append((release, tokens, tflops))
    # one row's two columns disagree: B300 26.02.01 prints 412 TFLOP/s, where its 15,031
    # tokens/s give 15,031 x 27.16e9 = 408.3
    assert off == [("26.02.01", 15031.0, 412.0)]


def test_gpt_oss_rows_run_their_release_presets_and_the_others_say_why_not():
    # cases.yaml: grad_reduce_in_fp32 false in every preset; GB200's BF16 V2 preset sets
    # moe_a2a_overlap from v0.4.0 (26.04), not at v0.3.x (26.02); the MXFP8 presets of
    # GB200 and GB300 from v0.5.0 (26.06) full-iteration graphs with the overlap, B300's not
    from simulator.validation.parallel import cases, nemo
    spec, root = cases.load(), cases.default_root()
    expect = {("GB200", "BF16", "26.02"): (False, "none"),
              ("GB200", "BF16", "26.04"): (True, "none"),
              ("GB200", "BF16", "26.04.01"): (True, "none"),
              ("GB300", "BF16", "26.04"): (False, "none"),
              ("GB200", "MXFP8", "26.06"): (True, "local"),
              ("GB300", "MXFP8", "26.08"): (True, "local"),
              ("B300", "MXFP8", "26.06"): (False, "none")}
    seen = {}
    for row in nemo.table_rows(root, spec, "blackwell"):
        key = (nemo.gpu_of(row), row["precision"], nemo.release_of(row))
        if row["model"] == "GPT OSS 120B" and key in expect:
            scn = nemo.scenario_of(row, root, spec, "x", "blackwell")
            assert scn["model"] == "gpt-oss-120b" and scn["strategy"]["grad_reduce_in_bf16"]
            seen[key] = (scn["strategy"].get("overlap_moe_expert_parallel_comm", False),
                         scn["strategy"].get("cuda_graph_impl", "none"))
    assert seen == expect

    def refuse(scenario, case):
        raise ConfigError("not run in this test")

    notes = {r["model"]: r["note"] for r in nemo.nemo_rows(root, spec, refuse, ("blackwell",))
             if r["model"] in ("DeepSeekV4 Flash", "Nemotron_3_5_Lightning", "GPT OSS 120B")}
    assert "Hyper-Connections" in notes["DeepSeekV4 Flash"]
    assert "no sourced config" in notes["Nemotron_3_5_Lightning"]
    assert notes["GPT OSS 120B"] == "not simulated: not run in this test"


def test_eager_attention_computes_the_whole_square_window_or_not():
    # without the fused kernel the scores are a full s x s matrix, masked: a windowed block's
    # unfused attention costs the full block's
    m = replace(load_model("gpt-oss-120b"), layers=2)
    win, full = layer_costs(m, 1, 512, "bf16", flash_attention=False)[1:3]
    assert not any(op.op_class == "attention" for op in win.forward)
    scores = next(op for op in win.forward if op.name == "attn_scores")
    assert scores.flops == 2 * 512 * 512 * 4096                 # 2 s^2 x heads x head_dim
    assert [op.flops for op in win.forward] == [op.flops for op in full.forward]

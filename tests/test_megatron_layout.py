"""Megatron's pipeline splits in every spelling: ``pipeline_model_parallel_layout`` (Megatron-
Core's custom layout string) read against hand-unrolled strings and its refusals, each one line
naming the field; the uneven first/last stage arguments; the argument file's spellings; and
one path, one price: a layout that spells a split gives the trace and the iteration time of
that split spelled any other way."""

from __future__ import annotations

import copy

import pytest

from simulator.errors import ConfigError
from simulator.models import load_model
from simulator.pipeline import build_setup, run_setup
from simulator.scenario import scenario_from_dict
from simulator.strategies import parse_strategy
from simulator.strategies.frameworks.files import read_config
from simulator.strategies.frameworks.megatron_layout import layout_blocks, parse_layout

FIELD = "strategy.pipeline_model_parallel_layout"
DEEPSEEK_V3 = "Et*3|(tt|)*29,m|L"          # Megatron-Core's example: 61 layers + 1 MTP


def megatron(**keys):
    return parse_strategy({"name": "megatron", **keys})


# --------------------------------------------------------------------------- the grammar
@pytest.mark.parametrize("text, stages", [
    # commas are cosmetic; (...)*N unrolls first, then x*N
    (DEEPSEEK_V3, ["Ettt"] + ["tt"] * 29 + ["m", "L"]),
    ("Et*2|(tt|)*29,t|L", ["Ett"] + ["tt"] * 29 + ["t", "L"]),
    ("Ett|(tt|tt|)*2,ttL", ["Ett", "tt", "tt", "tt", "tt", "ttL"]),
    ("(t|)*2,Et", ["t", "t", "Et"]),           # Megatron's "(ab|)*2" example: a trailing |
    ("(|tt)*2,tL", ["", "tt", "tttL"]),        # and "(|ab)*2": a leading one
    ("E,t,t|t*2,L", ["Ett", "ttL"]),
    ("t*12", ["t" * 12]),
])
def test_the_layout_reads_as_megatron_unrolls_it(text, stages):
    assert parse_layout(text) == stages


def test_deepseek_v3s_layout_is_32_stages_and_its_mtp_layer_is_refused():
    stages = parse_layout(DEEPSEEK_V3)
    assert len(stages) == 32 and "".join(stages).count("t") == 61
    with pytest.raises(ConfigError, match=r"multi-token-prediction layers \(m\)") as e:
        layout_blocks(DEEPSEEK_V3, 8)
    assert e.value.field == FIELD


def test_deepseek_v3s_split_without_mtp_on_pp8_is_four_virtual_stages():
    # model stage k on pipeline rank k mod 8, chunk k div 8 (Megatron's 1-D to 2-D layout)
    vp, blocks = layout_blocks("Et*2|(tt|)*29,t|L", 8)
    assert vp == 32 // 8 == 4
    assert blocks == (2,) + (2,) * 29 + (1, 0) and sum(blocks) == 61
    cfg = megatron(pipeline_model_parallel_size=8, tensor_model_parallel_size=8,
                   expert_model_parallel_size=4, sequence_parallel=True,
                   pipeline_model_parallel_layout="Et*2|(tt|)*29,t|L")
    plan = cfg.plan(256)
    assert (plan.vp, plan.schedule) == (4, "interleaved_1f1b")
    assert plan.model_stage_blocks(61) == list(blocks)
    # rank 0 holds stages 0, 8, 16, 24: 2 + 2 + 2 + 2; rank 7 holds 7, 15, 23, 31: 2+2+2+0
    assert plan.stage_layers(61) == [8, 8, 8, 8, 8, 8, 7, 6]
    plan.check(load_model("deepseek-v3-like"), 256, seq_len=4096, names=cfg.plan_fields())


@pytest.mark.parametrize("text, pp, reason", [
    ("Ett|tx|tL", 3, r"unknown symbol\(s\) 'x'"),
    ("Ett|((tt|)*2)*2,tL", 2, r"without nesting"),
    ("Ett|ttL", 4, "2 stages do not divide over pipeline_model_parallel_size 4"),
    ("tt|ttL", 2, r"the embedding \(E\) must appear exactly once.*found 0"),
    ("Ett|EttL", 2, r"the embedding \(E\) must appear exactly once.*found 2"),
    ("Ett|tt", 2, r"the loss \(L\) must appear exactly once.*found 0"),
    ("tEt|ttL", 2, r"must open the first stage"),
    ("Ett|tLt", 2, r"close the last one"),
    ("|Ett|tt|ttL", 4, r"must open the first stage"),
    ("Ett||ttL", 3, r"model stage 1 \(of 3\) holds no layer"),
    ("Et*99999999|L", 2, r"unrolls to more than 100,000 symbols"),
    ("E" + "t|" * 6000 + "L", 1, r"characters; at most 10,000"),
])
def test_a_layout_megatron_or_the_simulator_cannot_run_is_one_line_naming_it(text, pp, reason):
    with pytest.raises(ConfigError, match=reason) as e:
        layout_blocks(text, pp)
    assert e.value.field == FIELD and "\n" not in str(e.value)


@pytest.mark.parametrize("extra, reason", [
    ({"decoder_first_pipeline_num_layers": 4}, "cannot be set with decoder_first"),
    ({"account_for_loss_in_pipeline_split": True}, "cannot be set with account_for_loss"),
    ({"virtual_pipeline_model_parallel_size": 2},
     "makes 1 virtual stages per pipeline rank, virtual_pipeline_model_parallel_size says 2"),
])
def test_a_layout_beside_another_split_is_refused_as_megatron_core_refuses_it(extra, reason):
    with pytest.raises(ConfigError, match=reason) as e:
        megatron(pipeline_model_parallel_size=4,
                 pipeline_model_parallel_layout="Et*6|t*6|t*6|t*6L", **extra)
    assert e.value.field == FIELD
    # the virtual size the layout gives may also be written out
    assert megatron(pipeline_model_parallel_size=2, virtual_pipeline_model_parallel_size=2,
                    pipeline_model_parallel_layout="Et*6|t*6|t*6|t*6L").plan(8).vp == 2


def test_a_layout_with_other_than_the_models_layers_is_refused_by_the_plan():
    cfg = megatron(pipeline_model_parallel_size=4,
                   pipeline_model_parallel_layout="Et*6|t*6|t*6|t*5L")
    with pytest.raises(ConfigError, match=r"\(23 in all\) are not 24 layers") as e:
        cfg.plan(8).check(load_model("gpt3-1.3b"), 8, seq_len=512, names=cfg.plan_fields())
    assert e.value.field == FIELD


# --------------------------------------------------------------------- one path, one price
BASE = {"name": "layouts", "model": "gpt3-1.3b", "cluster": {"topology": "dgx-a100"},
        "simulation": {"variability": "none"},
        "training": {"seq_len": 512, "micro_batch": 1, "grad_accum": 8}}


def _run(**strategy):
    data = copy.deepcopy(BASE)
    data["strategy"] = {"name": "megatron", "tensor_model_parallel_size": 2, **strategy}
    setup = build_setup(scenario_from_dict(data), extrapolate_steps=False)
    return setup.trace, run_setup(setup).metrics


def _same(a, b):
    (trace_a, metrics_a), (trace_b, metrics_b) = a, b
    assert trace_a.classes == trace_b.classes
    assert trace_a.communicators == trace_b.communicators
    assert metrics_a == metrics_b          # iteration time and all, to the last bit


def test_a_layout_spelling_the_even_split_costs_what_no_layout_costs():
    _same(_run(pipeline_model_parallel_size=4),
          _run(pipeline_model_parallel_size=4,
               pipeline_model_parallel_layout="Et*6|t*6|t*6|t*6L"))
    # interleaved: 24 blocks over 4 ranks x 2 chunks, the model stages in Megatron's order
    _same(_run(pipeline_model_parallel_size=4, virtual_pipeline_model_parallel_size=2),
          _run(pipeline_model_parallel_size=4,
               pipeline_model_parallel_layout="E(t*3|)*7,t*3L"))


def test_first_and_last_stage_layers_cost_what_the_same_layout_costs():
    uneven = _run(pipeline_model_parallel_size=4, decoder_first_pipeline_num_layers=4,
                  decoder_last_pipeline_num_layers=4)
    _same(uneven, _run(pipeline_model_parallel_size=4,
                       pipeline_model_parallel_layout="Et*4|t*8|t*8|t*4L"))
    assert uneven[1] != _run(pipeline_model_parallel_size=4)[1]       # it is another split
    # with 2 chunks a rank: the first and last rank's 4 blocks split 2 + 2, the middle
    # ranks' 8 split 4 + 4 (Megatron's get_num_layers_to_build)
    _same(_run(pipeline_model_parallel_size=4, virtual_pipeline_model_parallel_size=2,
               decoder_first_pipeline_num_layers=4, decoder_last_pipeline_num_layers=4),
          _run(pipeline_model_parallel_size=4,
               pipeline_model_parallel_layout="Et*2|t*4|t*4|t*2|t*2|t*4|t*4|t*2L"))


def test_the_embedding_and_loss_counted_as_layers_cost_what_the_same_layout_costs():
    # 24 + 2 = 26 over 2 stages: 13 a stage, less the embedding on the first and the loss on
    # the last (Megatron's account_for_embedding/loss_in_pipeline_split)
    _same(_run(pipeline_model_parallel_size=2, account_for_embedding_in_pipeline_split=True,
               account_for_loss_in_pipeline_split=True),
          _run(pipeline_model_parallel_size=2,
               pipeline_model_parallel_layout="Et*12|t*12L"))


# ------------------------------------------------------------------- the argument file
def _args(tmp_path, text):
    path = tmp_path / "pp.args"
    path.write_text(text)
    return read_config(path)


def test_the_argument_file_spells_every_split(tmp_path):
    p = _args(tmp_path, "--pipeline-model-parallel-size 8 "
                        "--pipeline-model-parallel-layout 'Et*2|(tt|)*29,t|L'")
    assert p.strategy["pipeline_model_parallel_layout"] == "Et*2|(tt|)*29,t|L"
    assert parse_strategy(p.strategy).plan(64).vp == 4
    p = _args(tmp_path, "--pipeline-model-parallel-size 4 --decoder-first-pipeline-num-layers 3 "
                        "--decoder-last-pipeline-num-layers 5 "
                        "--num-virtual-stages-per-pipeline-rank 2")
    assert {k: p.strategy[k] for k in ("decoder_first_pipeline_num_layers",
                                       "decoder_last_pipeline_num_layers",
                                       "virtual_pipeline_model_parallel_size")} == {
        "decoder_first_pipeline_num_layers": 3, "decoder_last_pipeline_num_layers": 5,
        "virtual_pipeline_model_parallel_size": 2}
    p = _args(tmp_path, "--pipeline-model-parallel-size 4 "
                        "--num-virtual-stages-per-pipeline-rank 1")
    assert "virtual_pipeline_model_parallel_size" not in p.strategy      # 1: not interleaved


@pytest.mark.parametrize("text, field, reason", [
    ("--pipeline-model-parallel-size 4 --num-layers 24 --hidden-size 2048 "
     "--num-attention-heads 16 --num-layers-per-virtual-pipeline-stage 3 "
     "--pipeline-model-parallel-layout 'Et*6|t*6|t*6|t*6L'",
     "--pipeline-model-parallel-layout", "no more than one of"),
    ("--pipeline-model-parallel-size 4 --num-virtual-stages-per-pipeline-rank 2 "
     "--pipeline-model-parallel-layout 'Et*6|t*6|t*6|t*6L'",
     "--pipeline-model-parallel-layout", "no more than one of"),
    ("--pipeline-model-parallel-size 4 --num-layers 24 --hidden-size 2048 "
     "--num-attention-heads 16 --num-layers-per-virtual-pipeline-stage 3 "
     "--decoder-first-pipeline-num-layers 4",
     "--num-layers-per-virtual-pipeline-stage", "give --num-virtual-stages-per-pipeline-rank"),
])
def test_the_argument_files_split_rules_are_megatrons(tmp_path, text, field, reason):
    with pytest.raises(ConfigError, match=reason) as e:
        _args(tmp_path, text)
    assert e.value.field == field and e.value.source.endswith("pp.args")


def test_a_bad_layout_in_an_argument_file_is_named_as_the_file_spells_it(tmp_path):
    from simulator.cli.configfile import scenario_with_config
    pieces = _args(tmp_path, "--pipeline-model-parallel-size 3 "
                             "--pipeline-model-parallel-layout 'Et*3|t*3m|L'")
    with pytest.raises(ConfigError, match="multi-token-prediction") as e:
        scenario_with_config("quickstart", pieces, [])
    assert e.value.field == "--pipeline-model-parallel-layout"
    assert e.value.source.endswith("pp.args")

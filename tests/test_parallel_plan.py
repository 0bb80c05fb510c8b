"""The parallel plan: rank numbering, groups, and every check the plan makes on a model."""

from __future__ import annotations

import pytest

from simulator.errors import ConfigError
from simulator.models import load_model
from simulator.strategies.parallel import ParallelPlan


def test_tp_is_innermost_and_pp_outermost_by_default():
    p = ParallelPlan(pp=2, dp_shard=2, tp=4)
    assert p.size == 16
    assert p.groups("tp")[0] == (0, 1, 2, 3)
    assert p.groups("pp")[0] == (0, 8)
    assert p.groups("dp_shard")[0] == (0, 4)
    assert p.coords(13) == {"pp": 1, "dp_replicate": 0, "dp_shard": 1, "cp": 0, "tp": 1}
    assert all(p.rank(**p.coords(r)) == r for r in range(p.size))
    assert p.stage_ranks(1) == tuple(range(8, 16))


def test_groups_partition_the_mesh():
    p = ParallelPlan(pp=2, dp_replicate=2, dp_shard=2, cp=2, tp=2)
    for dim in ("pp", "dp_replicate", "dp_shard", "cp", "tp", "dp", "dp_cp"):
        groups = p.groups(dim)
        assert sorted(r for g in groups for r in g) == list(range(p.size))
    assert len(p.groups("dp")[0]) == 4 and len(p.groups("dp_cp")[0]) == 8


def test_order_changes_the_numbering():
    p = ParallelPlan(dp_shard=2, tp=4, order=("pp", "dp_replicate", "cp", "tp", "dp_shard"))
    assert p.groups("dp_shard")[0] == (0, 1)
    assert p.groups("tp")[0] == (0, 2, 4, 6)


def test_ep_groups_are_carved_from_the_data_parallel_ranks():
    p = ParallelPlan(dp_shard=8, tp=2, ep=4)
    assert p.groups("ep")[0] == (0, 2, 4, 6)
    assert len(p.groups("ep")) == 4


def test_uneven_stage_layers():
    p = ParallelPlan(pp=4, first_stage_layers=3, last_stage_layers=3)
    assert p.model_stage_blocks(32) == [3, 13, 13, 3]
    assert ParallelPlan(pp=4).model_stage_blocks(32) == [8] * 4
    # interleaved: rank 0's 4 blocks over its 2 chunks (model stages 0 and 4)
    p = ParallelPlan(pp=4, vp=2, schedule="interleaved_1f1b", first_stage_layers=4,
                     last_stage_layers=4)
    assert p.model_stage_blocks(32) == [2, 6, 6, 2, 2, 6, 6, 2]


def test_embedding_and_loss_counted_as_layers():
    # Llama 3 405B: 126 blocks + embedding + loss = 128 = 8 stages x 2 chunks x 8
    p = ParallelPlan(pp=8, vp=2, schedule="interleaved_1f1b", embedding_in_split=True,
                     loss_in_split=True)
    blocks = p.model_stage_blocks(126)
    assert blocks[0] == 7 and blocks[-1] == 7 and set(blocks[1:-1]) == {8}
    assert sum(blocks) == 126


LLAMA = load_model("llama-2-70b")     # 64 heads, 8 KV heads, 80 layers


@pytest.mark.parametrize("plan, world, seq, field, words", [
    (ParallelPlan(tp=16), 16, 4096, "strategy.tp", "8 kv_heads"),
    (ParallelPlan(tp=3, dp_shard=1), 3, 4096, "strategy.tp", "64 heads"),
    (ParallelPlan(pp=96), 96, 4096, "strategy.pp", "exceeds"),
    (ParallelPlan(pp=4, tp=8), 64, 4096, "strategy.size", "32 ranks"),
    (ParallelPlan(pp=3), 3, 4096, "strategy.pp", "evenly"),
    (ParallelPlan(pp=4, vp=3, schedule="interleaved_1f1b"), 4, 4096, "strategy.vp",
     "pp x vp"),
    (ParallelPlan(cp=4), 4, 4100, "strategy.cp", "divisible by 8"),
    (ParallelPlan(dp_shard=8, ep=8), 8, 4096, "strategy.ep", "no experts"),
])
def test_bad_plans_name_the_field(plan, world, seq, field, words):
    with pytest.raises(ConfigError) as exc:
        plan.check(LLAMA, world, seq_len=seq)
    assert exc.value.field == field and words in exc.value.reason


def test_field_names_follow_the_framework_spelling():
    with pytest.raises(ConfigError) as exc:
        ParallelPlan(tp=16).check(LLAMA, 16, seq_len=4096,
                                  names={"tp": "strategy.tensor_model_parallel_size"})
    assert exc.value.field == "strategy.tensor_model_parallel_size"


def test_bad_values_are_config_errors():
    with pytest.raises(ConfigError, match="plan.schedule"):
        ParallelPlan(schedule="pipedream")
    with pytest.raises(ConfigError, match="plan.tp"):
        ParallelPlan(tp=0)
    with pytest.raises(ConfigError, match="plan.order"):
        ParallelPlan(order=("tp", "pp"))


def test_blocks_per_pipeline_rank():
    p = ParallelPlan(pp=4, vp=2, schedule="interleaved_1f1b")
    assert p.stage_layers(32) == [8] * 4

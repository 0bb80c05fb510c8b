"""Checkpoint costs ask the resolved FSDP shard plan, not the raw ``sharding`` setting."""

import pytest

from simulator.reliability.costs import Bandwidths, checkpoint_costs, gathers_full_state
from simulator.strategies import World, parse_strategy

WORLD = World(8, 8)


@pytest.mark.parametrize("strategy", [
    {"name": "fsdp", "sharding": "NO_SHARD"},
    {"name": "fsdp", "mesh": [8, 1]},
])
def test_replicated_fsdp_needs_no_full_state_gather(strategy):
    """NO_SHARD and FSDP2 ``mesh: [8, 1]`` resolve to the same plan (shard 1, replicate 8):
    every rank holds the whole model, so a full state dict is written from one rank's copy
    with no all-gather (before the fix, mesh [8, 1] said a gather was needed)."""
    assert not gathers_full_state(parse_strategy(strategy), WORLD)


@pytest.mark.parametrize("strategy", [
    {"name": "fsdp", "sharding": "FULL_SHARD"},
    {"name": "fsdp", "sharding": "HYBRID_SHARD", "shard_group_size": 4},
    {"name": "fsdp", "mesh": [2, 4]},
    {"name": "fsdp", "mesh": [8]},
])
def test_sharded_fsdp_gathers_the_full_state(strategy):
    """Each copy is spread over 4 or 8 ranks: the full state dict must be gathered."""
    assert gathers_full_state(parse_strategy(strategy), WORLD)


def test_one_rank_and_ddp_never_gather():
    assert not gathers_full_state(parse_strategy({"name": "fsdp"}), World(1, 1))
    assert not gathers_full_state(parse_strategy({"name": "ddp"}), WORLD)


def test_the_gather_costs_size_over_the_gpu_network_share():
    bw = Bandwidths(shared_write=100e9, shared_read=100e9, per_node=10e9, nvme_write=5e9,
                    nvme_read=5e9, host_copy=20e9, nic_gpu=25e9, nic_node=200e9)
    common = dict(mode="sync", state_dict="full", target="shared_fs", replicas=1,
                  overhead_s=0.0, persist_overhead_s=0.0, load="full", keras=False)
    S = 100e9
    gathered = checkpoint_costs(S, 8, 1, bw, gather=True, **common)
    replicated = checkpoint_costs(S, 8, 1, bw, gather=False, **common)
    # gather S / nic_gpu = 100e9 / 25e9 = 4 s, on the blocking path of a sync save
    assert gathered.block_s - replicated.block_s == pytest.approx(S / 25e9)

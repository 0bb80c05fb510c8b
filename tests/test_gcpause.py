"""The collector pause around bulk building: off inside, back as it was outside."""

import gc
from pathlib import Path

import pytest

from simulator.gcpause import gc_paused
from simulator.topology.loader import load_topology


def test_pause_restores_the_collector_as_it_was():
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()         # the inner pause leaves the outer one paused
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()         # off before, off after
    finally:
        gc.enable()


def test_pause_ends_on_an_error_too():
    with pytest.raises(RuntimeError):
        with gc_paused():
            raise RuntimeError("boom")
    assert gc.isenabled()


def test_building_a_topology_leaves_the_collector_on():
    load_topology(Path(__file__).resolve().parents[1] / "topologies" / "dgx-a100-superpod.yaml",
                  nodes=2)
    assert gc.isenabled()


def test_what_the_pause_built_is_filed_with_the_old_objects_and_nothing_stays_frozen():
    # Left in the youngest generation, a block's millions of objects would all be walked by
    # the first young collection after it; leaving the pause files them in the oldest.
    with gc_paused():
        built = [[i] for i in range(1000)]
        assert any(o is built for o in gc.get_objects(generation=0))
    assert not any(o is built for o in gc.get_objects(generation=0))
    assert any(o is built for o in gc.get_objects(generation=2))
    assert gc.get_freeze_count() == 0     # still collectable: nothing left in the permanent one

"""The flow fabric's connected sets (simulator.network.active): settling and dropping."""

import numpy as np

from simulator.network.active import _COLUMNS, FlowSet
from simulator.network.fabric import Flow
from simulator.network.solve import flow_key


def _flow(size: float) -> Flow:
    return Flow(size, np.array([0, 1]), np.ones(2))


def _set(sizes, rates, now=0.0) -> FlowSet:
    s = FlowSet(1)
    for k, size in enumerate(sizes):
        f = _flow(size)
        s.add(f, flow_key(f), f"done{k}", (k,), now)
    s.apply(rates, now)
    return s


def test_one_flow_settles_when_its_end_has_come():
    s = _set([10.0], [2.0])                       # ends at 10 / 2 = 5 s
    assert s.settle(4.999) == ([], [])
    finished, gone = s.settle(5.0)
    assert gone == [0] and [(seq, done) for seq, _, done in finished] == [((0,), "done0")]


def test_several_flows_settle_in_order_of_position():
    s = _set([10.0, 1.0, 4.0], [1.0, 1.0, 1.0])   # ends at 10, 1 and 4 s
    assert s.settle(0.5) == ([], [])
    finished, gone = s.settle(4.0)
    assert gone == [1, 2] and [done for _, _, done in finished] == ["done1", "done2"]


def test_dropping_every_flow_empties_every_column_with_new_lists():
    s = _set([10.0, 1.0], [1.0, 1.0])
    before = {name: getattr(s, name) for name in _COLUMNS}
    s.drop([0, 1])
    assert len(s) == 0
    for name in _COLUMNS:
        assert getattr(s, name) == [] and getattr(s, name) is not before[name], name


def test_dropping_some_flows_keeps_the_rest_in_order():
    s = _set([10.0, 1.0, 4.0], [1.0, 2.0, 4.0])
    s.drop([1])
    assert s.dones == ["done0", "done2"] and s.rate == [1.0, 4.0] and s.end == [10.0, 1.0]
    assert all(len(getattr(s, name)) == 2 for name in _COLUMNS)


def test_a_set_of_one_is_what_a_new_set_and_one_add_make():
    f = Flow(7, np.array([3, 4]), np.ones(2))      # an int size: made a float either way
    made = FlowSet.alone(9, f, flow_key(f), "done", (4,), 2.5)
    added = FlowSet(9)
    added.add(f, flow_key(f), "done", (4,), 2.5)
    for name in (*_COLUMNS, "id", "segments", "owned", "generation"):
        assert getattr(made, name) == getattr(added, name), name
        assert type(getattr(made, name)) is type(getattr(added, name))
    assert made.left == [7.0] and type(made.left[0]) is float
    made.add(f, flow_key(f), "second", (5,), 3.0)       # its lists are its own, growable
    assert len(made) == 2 and len(added) == 1


def test_absorbing_sets_at_once_is_absorbing_them_one_by_one():
    """One sort of every flow gives the order that merging the sets in turn gave (each
    merge sorted the two by arrival); segments and slots are taken in the sets' order."""
    rng = np.random.default_rng(5)
    arrivals = rng.permutation(40).tolist()
    sets = []
    for k in range(6):
        s = FlowSet(k)
        for seq in sorted(arrivals[k::6]):
            f = _flow(float(seq + 1))
            s.add(f, flow_key(f), f"done{seq}", (seq,), 0.0)
        s.segments = [(f"solution{k}", 0.0)]
        s.owned = {k, 10 + k}
        sets.append(s)
    one_by_one = {name: list(getattr(sets[0], name)) for name in _COLUMNS}
    segments, owned = list(sets[0].segments), set(sets[0].owned)
    for other in sets[1:]:
        order = sorted(range(len(one_by_one["seqs"]) + len(other)),
                       key=(one_by_one["seqs"] + other.seqs).__getitem__)
        for name in _COLUMNS:
            both = one_by_one[name] + getattr(other, name)
            one_by_one[name] = [both[i] for i in order]
        segments, owned = segments + other.segments, owned | other.owned
    sets[0].absorb(sets[1:])
    for name in _COLUMNS:
        assert getattr(sets[0], name) == one_by_one[name], name
    assert sets[0].seqs == sorted(sets[0].seqs) and len(sets[0]) == 40
    assert sets[0].segments == segments and sets[0].owned == owned

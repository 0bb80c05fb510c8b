"""What the flow fabric's solver remembers gives what it would compute: class solves by
their shape (reduced.py), flows by their content (orbits.py token), counters logged and
added in batches (counters.py)."""

from __future__ import annotations

import numpy as np

from simulator.network.bundle import bundle_flows
from simulator.network.counters import Counters
from simulator.network.fabric import Flow
from simulator.network.orbits import LinkClasses
from simulator.network.reduced import ClassSolver
from simulator.network.solve import Solution, Solver, flow_key


class _Forget(dict):
    """A memo that never keeps anything."""

    def __setitem__(self, key, value):
        pass


def _flow(links, coef, size=100.0, **kw):
    return Flow(size, np.array(links, np.int64), np.array(coef, float), **kw)


def _sets(rng, servers=4, per=10):
    """Sets of flows: the same patterns on every server (shapes that recur on other
    classes), bundles over servers (pairs where a lone flow shares a link), caps."""
    pattern = [(rng.choice(per, size=k, replace=False), rng.uniform(0.5, 2.0, k))
               for k in rng.integers(1, 4, size=5)]
    out = []
    for _ in range(40):
        flows = []
        for _ in range(int(rng.integers(1, 4))):
            links, coef = pattern[int(rng.integers(len(pattern)))]
            s = int(rng.integers(servers))
            cap = float(rng.uniform(1.0, 30.0)) if rng.random() < 0.2 else np.inf
            if rng.random() < 0.4:
                flows.append(bundle_flows([_flow(links + per * t, coef, max_rate=cap)
                                           for t in range(servers)]))
            else:
                flows.append(_flow(links + per * s, coef, max_rate=cap))
        out.append(flows)
    return out


def _same(a, b) -> None:
    if a is None or b is None:
        assert a is b
        return
    for x, y in zip((a.rates, a.links, a.occupancy, a.wire, a.group_load),
                    (b.rates, b.links, b.occupancy, b.wire, b.group_load)):
        assert x.tobytes() == y.tobytes()


def test_solves_remembered_by_shape_are_the_solves_computed():
    for seed in range(6):
        rng = np.random.default_rng(seed)
        cap = np.full(40, 10.0)
        cap[rng.integers(40)] = 5.0
        groups = np.arange(40) % 3
        kept, fresh = ClassSolver(cap), ClassSolver(cap)
        fresh._shapes = _Forget()
        for s in (kept, fresh):
            s.track(groups, 3)
        solves = 0
        for flows in _sets(rng):    # new arrays each: every set is a real solve
            a, split_a = kept.solve(flows)
            b, split_b = fresh.solve(flows)
            solves += 1
            _same(a, b)
            assert split_a.tolist() == split_b.tolist()
        assert 0 < len(kept._shapes) < solves       # some shapes recurred on other classes


def test_a_shape_hit_has_its_own_classes_and_group_load():
    cap = np.full(8, 10.0)
    solver = ClassSolver(cap)
    solver.track(np.array([0, 0, 0, 0, 1, 1, 1, 1]), 2)
    a = solver.solve([_flow([0, 1], [1.0, 1.0]), _flow([1], [1.0])])[0]
    b = solver.solve([_flow([4, 5], [1.0, 1.0]), _flow([5], [1.0])])[0]
    assert len(solver._shapes) == 1
    assert a.rates is b.rates and a.links.tolist() != b.links.tolist()
    assert a.group_load.tolist()[1] == 0.0 and b.group_load.tolist()[0] == 0.0
    assert isinstance(a, Solution) and not a.links.flags.writeable


def test_tokens_number_contents_and_never_reuse_a_number():
    classes = LinkClasses(np.full(4, 10.0))
    one, two = classes.token(("a", b"1")), classes.token(("a", b"2"))
    assert classes.token(("a", b"1")) == one != two
    classes.REMEMBERED = 2
    three = classes.token(("b",))       # the table was full: dropped, numbers go on
    assert three not in (one, two) and classes.token(("a", b"1")) not in (one, two, three)
    # two flows with the same entries on different classes: one token
    r1, r2 = classes.restricted([_flow([0], [1.0]), _flow([1], [1.0])])
    assert r1.links.tolist() != r2.links.tolist() and r1.token == r2.token


def _random_solution(rng, n, zero_some=False):
    links = np.sort(rng.choice(n, size=int(rng.integers(1, n)), replace=False))
    occupancy = rng.uniform(0, 1e9, len(links))
    wire = rng.uniform(0, 1e9, len(links))
    if zero_some:       # some slots keep their load: no stretch ends there
        occupancy[::3] = 1.0
        wire[::3] = 2.0
    return Solution(np.zeros(0), links, occupancy, wire)


def test_counters_add_a_stretch_only_where_a_load_changes():
    # The plain model: per slot, a held load and its start; at each change, a slot whose
    # load differs adds load * (now - start) and starts anew. Counters logs the stretches
    # (flushed mid-way too) and must give the same floats.
    rng = np.random.default_rng(3)
    n = 12
    load, load_wire, since = np.zeros(n), np.zeros(n), np.zeros(n)
    plain = [np.zeros(n), np.zeros(n)]
    counters = Counters(n)
    counters.LOG = 7
    now, held = 0.0, []
    for i in range(60):
        now += float(rng.uniform(1e-7, 3.0))
        new = [] if i % 9 == 8 else [_random_solution(rng, n, zero_some=True)]
        target, target_wire = np.zeros(n), np.zeros(n)
        for sol in new:
            target[sol.links], target_wire[sol.links] = sol.occupancy, sol.wire
        moved = (target != load) | (target_wire != load_wire)
        plain[0][moved] += load[moved] * (now - since[moved])
        plain[1][moved] += load_wire[moved] * (now - since[moved])
        load[moved], load_wire[moved], since[moved] = target[moved], target_wire[moved], now
        counters.change(held, new, now)
        held = new
        if i == 20:                 # a read in the middle adds what is logged
            assert counters.occupancy.tobytes() == plain[0].tobytes()
    assert counters.occupancy.tobytes() == plain[0].tobytes()
    assert counters.wire.tobytes() == plain[1].tobytes()
    assert counters.load.tobytes() == load.tobytes()


def test_a_closed_stretch_is_the_stretch_held_per_slot():
    # A set that appeared on idle slots and vanished whole (``close``: no per-slot work)
    # adds what writing its loads per slot and changing them to nothing adds.
    rng = np.random.default_rng(4)
    n = 10
    a, b = Counters(n), Counters(n)
    now = 0.0
    for _ in range(30):
        sol = _random_solution(rng, n)
        start, now = now, now + float(rng.uniform(1e-6, 2.0))
        a.close(sol, start, now)
        b.hold(sol, start)
        b.change([sol], [], now)
    assert a.occupancy.tobytes() == b.occupancy.tobytes()
    assert a.wire.tobytes() == b.wire.tobytes()
    assert not b.load.any() and not b.load_wire.any()      # nothing held after


def test_connected_sets_by_shared_links_in_index_order():
    from simulator.network.solve import connected
    fp = [frozenset(s) for s in ({1, 2}, {5}, {3}, {2, 3}, set(), {5, 6}, {9})]
    # 0-3 through link 2, 3-2 through 3 (a chain); 1-5 through 5; the empty and 9 alone
    assert connected(fp) == [[0, 2, 3], [1, 5], [4], [6]]
    # a late flow joining two earlier sets merges them, indices in order
    assert connected([frozenset({1}), frozenset({2}), frozenset({1, 2})]) == [[0, 1, 2]]


def test_a_mix_of_sets_is_each_set_solved_alone_and_remembered():
    from simulator.network.solve import Composite, Solver
    cap = np.full(40, 10.0)
    cap[7] = 4.0
    groups = np.arange(40) % 3
    for cls in (ClassSolver, Solver):
        rng = np.random.default_rng(2)
        kept, fresh = cls(cap), cls(cap)
        fresh._sets = _Forget()
        for s in (kept, fresh):
            s.track(groups, 3)
        mixes = 0
        for flows in _sets(rng):
            a, split_a = kept.solve(flows)
            b, split_b = fresh.solve(flows)
            assert split_a.tolist() == split_b.tolist()
            _same(a, b)
            if a is None or not isinstance(a, Composite):
                continue
            mixes += 1
            alone = [_tracked(cls(cap), groups).solve([flows[i] for i in index])[0]
                     for index in _index_of_parts(flows)]
            for part, single in zip(a.parts, alone):    # classes are each solver's own
                assert part.rates.tobytes() == single.rates.tobytes()
                if cls is Solver:
                    _same(part, single)
            # the merged view: every link once, sorted, the parts' loads on them
            assert np.all(np.diff(a.links) > 0)
            assert sorted(a.occupancy.tolist()) == sorted(
                x for p in a.parts for x in p.occupancy.tolist())
            np.testing.assert_allclose(a.group_load, sum(p.group_load for p in a.parts),
                                       rtol=0, atol=0)
        assert mixes > 5 and kept._sets


def _tracked(solver, groups):
    solver.track(groups, int(groups.max()) + 1)
    return solver


def _index_of_parts(flows):
    """The flow indices of each part: the sets connected by links, from the flows."""
    from simulator.network.solve import connected
    return connected([frozenset(f.links.tolist()) for f in flows])


def test_a_stretch_between_whole_seconds_is_added_too():
    # SimPy's clock is an int until a float delay makes it one: a stretch closed at int
    # instants must be added like any other (flushed with the float ones).
    counters = Counters(3)
    sol = Solution(np.zeros(0), np.array([0, 2]), np.array([2.0, 4.0]), np.array([1.0, 1.0]))
    counters.close(sol, 1, 4)
    counters.hold(sol, 4)
    counters.change([sol], [], 4.5)
    assert counters.occupancy.tolist() == [2.0 * 3 + 2.0 * 0.5, 0.0, 4.0 * 3 + 4.0 * 0.5]


def test_per_link_slots_are_the_distinct_links_and_one_flow_loads_as_in_a_set():
    """The per-link solver's slots (and footprints) are each flow's links once, whether
    found by marking (entries many against the links) or by sorting (few); a flow solved
    alone (its own wire array, not a copy) loads the links as it does beside a flow on
    other links (the wire arrays concatenated)."""
    rng = np.random.default_rng(3)
    n = 2000
    solver = Solver(rng.uniform(1.0, 5.0, n))
    for size in (3, 40, 5000):      # n > 4 * size + 1024 for 3 and 40: sorted; 5000: marked
        links = rng.integers(0, n, size)
        flow = _flow(links, rng.uniform(0.5, 2.0, size), wire_coef=rng.uniform(0.5, 2.0, size))
        assert solver.slots(flow, flow_key(flow)) == frozenset(links.tolist())
        assert solver._footprints([flow], [flow]) == [frozenset(links.tolist())]
    a = _flow([0, 1, 2, 1], [1.0, 0.5, 2.0, 1.5], wire_coef=np.array([2.0, 1.0, 3.0, 0.25]))
    b = _flow([10, 11], [1.0, 1.0], wire_coef=np.array([4.0, 0.5]))
    alone, _ = Solver(solver.capacity)._compute_one([a], [a])
    both, _ = Solver(solver.capacity)._compute_one([a, b], [a, b])
    rate = alone.rates[0]
    assert rate == both.rates[0]
    # wire load per link: sum of wire coefficient x rate over the flow's entries on it
    expect = {0: 2.0 * rate, 1: 1.0 * rate + 0.25 * rate, 2: 3.0 * rate}
    assert dict(zip(alone.links.tolist(), alone.wire.tolist())) == expect
    assert {k: v for k, v in zip(both.links.tolist(), both.wire.tolist()) if k < 10} == expect

"""The max-min solver alone, each case with its fairness math (SimGrid maxmin_test style)."""

import numpy as np
import pytest

from simulator.network.maxmin import FlowIncidence, share_bandwidth


def solve(links, capacity, coefs=None, max_rate=None):
    return share_bandwidth(FlowIncidence.from_lists(links, coefs, max_rate),
                           np.asarray(capacity, float))


def test_two_flows_share_one_link_equally():
    # Two flows on one 10 B/s link: each gets 10/2 = 5.
    assert solve([[0], [0]], [10.0]).tolist() == [5.0, 5.0]


def test_single_flow_gets_its_bottleneck():
    # One flow over links of 10 and 4 B/s: the 4 B/s link limits it.
    assert solve([[0, 1]], [10.0, 4.0]).tolist() == [4.0]


def test_textbook_parking_lot():
    # Links A (cap 1) and B (cap 1); flow 0 crosses both, flow 1 only A, flow 2 only B.
    # Progressive filling: all grow to 0.5, A and B fill together -> 0.5 each.
    assert solve([[0, 1], [0], [1]], [1.0, 1.0]).tolist() == [0.5, 0.5, 0.5]


def test_unequal_links_release_bandwidth_to_the_unbottlenecked_flow():
    # Link A cap 1 shared by flows 0 and 1; flow 0 also crosses link B cap 3 with flow 2.
    # Level 0.5 fills A (0 and 1 freeze at 0.5); flow 2 takes the rest of B: 3 - 0.5 = 2.5.
    rates = solve([[0, 1], [0], [1]], [1.0, 3.0])
    assert rates.tolist() == pytest.approx([0.5, 0.5, 2.5])


def test_coefficient_counts_a_link_twice():
    # A flow crossing one link with coefficient 2 (a ring using it twice) gets cap / 2,
    # and a plain flow beside it gets the same share r with 2r + r = 9 -> r = 3.
    assert solve([[0], [0]], [9.0], coefs=[[2.0], [1.0]]).tolist() == pytest.approx([3.0, 3.0])


def test_rate_cap_frees_bandwidth_for_others():
    # Flow 0 capped at 1 B/s on a 10 B/s link: flow 1 gets the other 9.
    assert solve([[0], [0]], [10.0], max_rate=[1.0, np.inf]).tolist() == pytest.approx([1, 9])


def test_flow_without_links_or_cap_is_unbounded():
    assert np.isinf(solve([[]], [1.0])[0])


def test_allocation_is_feasible_and_max_min_fair_on_random_instances():
    # Feasible: no link over capacity. Fair: every flow crosses a saturated link on which
    # it has the largest rate (the bottleneck characterisation of max-min fairness).
    rng = np.random.default_rng(7)
    for _ in range(30):
        n_links, n_flows = 6, 8
        cap = rng.uniform(1, 10, n_links)
        links = [rng.choice(n_links, rng.integers(1, 4), replace=False) for _ in range(n_flows)]
        rates = solve(links, cap)
        load = np.zeros(n_links)
        for f, ls in enumerate(links):
            load[ls] += rates[f]
        assert np.all(load <= cap * (1 + 1e-9))
        saturated = load >= cap * (1 - 1e-9)
        for f, ls in enumerate(links):
            ok = [l for l in ls if saturated[l]
                  and rates[f] >= max(rates[g] for g, m in enumerate(links) if l in m) - 1e-9]
            assert ok, f"flow {f} has no bottleneck link"


def test_rejects_non_positive_capacity():
    with pytest.raises(ValueError, match="capacity"):
        solve([[0]], [0.0])


def test_one_flow_is_limited_by_its_most_loaded_link_exactly():
    # The one-flow path (no per-entry owners) gives the bottleneck rate bit for bit.
    rng = np.random.default_rng(3)
    links = rng.integers(0, 40, 300)
    coef = rng.random(300) + 0.1
    cap = rng.random(40) * 1e9 + 1e8
    rate = share_bandwidth(FlowIncidence.from_lists([links], [coef]), cap)
    load = np.bincount(links, coef, 40)
    used = load > 0
    assert rate.tolist() == [float(np.min(cap[used] / load[used]))]


def _exact_max_min(links, cap, coefs, max_rate):
    """Progressive filling in rational arithmetic (the exact allocation): the least share
    (capacity left / active load) or cap fixes the next level; flows of that link or cap
    freeze there."""
    from fractions import Fraction as F
    cap = [F(c) for c in cap]
    coefs = [[F(c) for c in cs] for cs in coefs]
    caps = [None if r == np.inf else F(r) for r in max_rate]
    rate, active = [None] * len(links), set(range(len(links)))
    while active:
        load, taken = [F(0)] * len(cap), [F(0)] * len(cap)
        for f, (ls, cs) in enumerate(zip(links, coefs)):
            for l, c in zip(ls, cs):
                if f in active:
                    load[l] += c
                else:
                    taken[l] += c * rate[f]
        shares = {l: (cap[l] - taken[l]) / load[l] for l in range(len(cap)) if load[l]}
        level = min(list(shares.values()) + [caps[f] for f in active if caps[f] is not None])
        hit = {f for f in active if caps[f] == level or any(
            shares.get(l) == level for l in links[f])}
        for f in hit:
            rate[f] = level
        active -= hit
    return rate


def test_rates_are_the_exact_allocation_to_a_few_ulps():
    # Random instances with coefficients and caps against the rational computation: the
    # float solve differs only by rounding (each rate a few ulps from the exact one).
    rng = np.random.default_rng(11)
    for _ in range(40):
        n_links, n_flows = int(rng.integers(2, 7)), int(rng.integers(1, 9))
        cap = rng.uniform(1, 10, n_links)
        links = [sorted(rng.choice(n_links, int(rng.integers(1, min(n_links, 3) + 1)),
                                   replace=False).tolist())
                 for _ in range(n_flows)]
        coefs = [rng.uniform(0.25, 3.0, len(ls)).tolist() for ls in links]
        caps = [float(rng.uniform(0.5, 5.0)) if rng.random() < 0.3 else np.inf
                for _ in links]
        got = solve(links, cap, coefs, caps)
        exact = _exact_max_min(links, cap.tolist(), coefs, caps)
        np.testing.assert_allclose(got, [float(x) for x in exact], rtol=1e-13, atol=0)


def test_sets_that_share_no_link_solve_alone_to_the_last_bit():
    # A link's share depends only on the flows crossing it, so the flows of disjoint sets
    # (no link in common) get the same rates solved together as each set alone: the flow
    # fabric solves (and remembers) each connected set by itself (network/solve.py).
    from simulator.network.maxmin import share_bandwidth_checked
    rng = np.random.default_rng(5)
    for _ in range(40):
        sets, offset = [], 0
        for _ in range(int(rng.integers(2, 5))):
            n_links = int(rng.integers(1, 5))
            flows = [(sorted((offset + rng.choice(n_links, int(rng.integers(1, n_links + 1)),
                                                  replace=False)).tolist()),
                      float(rng.uniform(0.5, 20.0)) if rng.random() < 0.3 else np.inf)
                     for _ in range(int(rng.integers(1, 4)))]
            sets.append(flows)
            offset += n_links
        cap = rng.uniform(1, 10, offset)
        coefs = {}

        def inc(flows):
            return FlowIncidence.from_lists(
                [ls for ls, _ in flows],
                [coefs.setdefault(tuple(ls), rng.uniform(0.5, 2.0, len(ls))) for ls, _ in flows],
                [r for _, r in flows])
        # interleaved at random, each set's flows in their order (as the fabric keeps them)
        order = [k for k, s in enumerate(sets) for _ in s]
        rng.shuffle(order)
        queues = [list(s) for s in sets]
        together = [queues[k].pop(0) for k in order]
        rates, _ = share_bandwidth_checked(inc(together), cap)
        alone = {}
        for s in sets:
            for f, r in zip(s, share_bandwidth_checked(inc(s), cap)[0].tolist()):
                alone[(tuple(f[0]), f[1])] = r
        assert rates.tolist() == [alone[(tuple(ls), r)] for ls, r in together]

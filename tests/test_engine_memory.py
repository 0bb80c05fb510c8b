"""The GPU memory pool alone (simulator/engine/memory.py): admission in issue order, the
over-capacity rule, peak bytes. Every number is worked out in the comment beside it."""

import pytest
import simpy

from simulator.sim import Environment
from simulator.engine.memory import MemoryPool


def test_unlimited_pool_grants_at_once_and_records_the_peak():
    env = Environment()
    pool = MemoryPool(env, 0, 100, [50, 70])
    assert pool.request(50, 0, "a") is None and pool.request(70, 1, "b") is None
    pool.release(50)
    # 100 static, +50 = 150, +70 = 220 (peak), -50 = 170
    assert pool.peak_bytes == 220 and pool.in_use_bytes == 170
    assert pool.timeline == [(0.0, 100), (0.0, 150), (0.0, 220), (0.0, 170)]
    assert pool.oom_at is None and pool.waiting == 0


def test_a_later_issued_request_leaves_room_for_earlier_ones():
    # capacity 1000, static 100; issue order: a (500), b (400), c (400).
    env = Environment()
    pool = MemoryPool(env, 1000, 100, [500, 400, 400])
    log = []
    assert pool.request(500, 0, "a") is None          # 100 + 500 + 0 ahead = 600 <= 1000
    c = pool.request(400, 2, "c")                      # 600 + 400 + 400 (b ahead) = 1400
    assert c is not None and not c.triggered and pool.waiting == 1
    b = pool.request(400, 1, "b")                      # queued behind nobody older: b first
    assert b.triggered                                 # 600 + 400 + 0 ahead = 1000 <= 1000
    assert not c.triggered                             # 1000 + 400 > 1000
    c.callbacks.append(lambda _e: log.append(("c", env.now)))

    def free_a():
        yield env.timeout(1.0)
        pool.release(500)                              # 500 + 400 = 900 <= 1000: c granted
    env.process(free_a())
    env.run()
    assert log == [("c", 1.0)]
    assert pool.peak_bytes == 1000 and pool.in_use_bytes == 900 and pool.oom_at is None
    assert pool.wait_s == 1.0                          # b waited 0 s, c 1 s


def test_requests_are_granted_in_issue_order_not_arrival_order():
    # capacity 100, static 0, x holds 100; y (position 2) asks first, z (position 1) next.
    # When x frees, z (issued earlier) goes first; y (50 + 50 = 100) fits after it.
    env = Environment()
    pool = MemoryPool(env, 100, 0, [100, 50, 50])
    assert pool.request(100, 0, "x") is None
    order = []
    for position, name in ((2, "y"), (1, "z")):
        ev = pool.request(50, position, name)
        ev.callbacks.append(lambda _e, n=name: order.append(n))
    pool.release(100)
    env.run()
    assert order == ["z", "y"] and pool.in_use_bytes == 100


def test_the_oldest_waiter_goes_over_capacity_only_when_asked():
    # capacity 1000, static 100: a takes 600 (700 in use); b needs 600 more: 1300 > 1000,
    # and nothing will free, so the engine lets b through: 1300 bytes, out of memory at b.
    env = Environment()
    pool = MemoryPool(env, 1000, 100, [600, 600])
    assert pool.request(600, 0, "a") is None
    b = pool.request(600, 1, "b")
    env.run()
    assert not b.triggered and pool.waiting == 1 and pool.oldest_position == 1
    pool.admit_oldest()
    assert b.triggered and pool.waiting == 0
    assert pool.in_use_bytes == 1300 and pool.peak_bytes == 1300 and pool.oom_at == "b"


def test_static_memory_over_capacity_is_out_of_memory_before_any_op():
    pool = MemoryPool(Environment(), 1000, 1200, [])
    assert pool.oom_at == "static memory" and pool.peak_bytes == 1200


def test_fenwick_built_in_one_pass_gives_every_prefix_sum():
    """The pool's prefix sums of allocations not made yet, built in one pass, are the
    plain sums (the arithmetic, in full), before and after point updates."""
    import random

    from simulator.engine.memory import _Fenwick
    rng = random.Random(7)
    for n in (0, 1, 2, 3, 7, 8, 9, 100, 1000):
        values = [rng.choice([0, rng.randrange(1 << 40)]) for _ in range(n)]
        tree = _Fenwick(values)
        assert [tree.prefix(i) for i in range(n + 1)] == \
            [sum(values[:i]) for i in range(n + 1)]
        for _ in range(min(n, 50)):
            i, delta = rng.randrange(n), -rng.randrange(1 << 30)
            tree.add(i, delta)
            values[i] += delta
        assert [tree.prefix(i) for i in range(n + 1)] == \
            [sum(values[:i]) for i in range(n + 1)]


@pytest.mark.parametrize("summed", [1024, 0, 3])
def test_the_room_left_for_earlier_ops_is_their_plain_sum_in_any_start_order(summed,
                                                                              monkeypatch):
    """``_fits``'s shortcut (no earlier-issued op left to request: nothing ahead) answers
    as the plain sum of what the earlier-issued, unstarted ops will still request, over
    random orders of starts (mostly in issue order, some ahead, some ops of 0 bytes): the
    few between summed one by one (``_SUMMED`` ops apart at most), the Fenwick tree built
    from the first wider look-up on (``summed`` 0: at the first; 3: part-way) and kept up
    to date by every later allocation."""
    import random

    from simulator.engine import memory
    monkeypatch.setattr(memory, "_SUMMED", summed)
    rng = random.Random(3)
    built = 0
    for _ in range(30):
        n = rng.randrange(1, 60)
        sizes = [rng.choice([0, 0, rng.randrange(1, 1000)]) for _ in range(n)]
        pool = MemoryPool(Environment(), 10 ** 9, 0, sizes)
        left = list(sizes)
        order = list(range(n))
        for _ in range(n // 4):                  # some ops start ahead of their turn
            i, j = rng.randrange(n), rng.randrange(n)
            order[i], order[j] = order[j], order[i]
        wider = False                   # a look-up over more than ``summed`` ops so far
        for position in order:
            for probe in range(n + 1):
                wider |= probe - pool._first > summed
                ahead = sum(left[:probe])
                assert pool._fits(probe, 10 ** 9 - pool.in_use_bytes - ahead)
                assert not pool._fits(probe, 10 ** 9 - pool.in_use_bytes - ahead + 1)
            assert pool.request(sizes[position], position, f"op{position}") is None
            left[position] = 0
        # the tree exists exactly where a look-up spanned more than ``summed`` ops
        assert (pool._unstarted is not None) == wider
        built += wider
    # the default sums every look-up of these short traces; the others build the tree
    assert (built == 0) if summed == 1024 else (built > 0)

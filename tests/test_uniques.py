"""simulator.uniques gives what np.unique gives (values, first indices, inverse), array for
array, on the kinds of arrays the fabric and the collectives pass it."""

import numpy as np
import pytest

from simulator.uniques import distinct, distinct_below, distinct_where


def _cases():
    rng = np.random.default_rng(7)
    yield np.zeros(0, np.int64)
    yield np.array([5], np.int64)
    yield rng.integers(0, 3, 1000)                       # few values, many repeats
    yield rng.integers(-50, 50, 777)                     # negative codes
    yield rng.integers(0, 1 << 40, 500)                  # mostly distinct
    yield np.repeat(rng.integers(0, 9, 40), rng.integers(1, 30, 40))    # runs
    yield rng.choice([0.25, 1.0 / 3, 2.0, 1e9], 600)     # coefficients
    yield np.array([0.0, -0.0, 1.5, -0.0, 0.0])          # signed zeros are one value
    yield rng.choice([0.5, 1.0], 300).view(np.int64)     # float bits as integers
    yield rng.integers(21, 75, 4000)                     # codes from an offset (counted)
    yield rng.integers(0, 900, 400).astype(np.int32)     # narrower integers
    yield rng.integers(0, 200, 300).astype(np.uint8)     # unsigned
    yield np.array([7, 7, 7], np.int64)                  # one value
    yield rng.integers(0, 3000, 800)                     # just past the counted span


@pytest.mark.parametrize("a", list(_cases()), ids=lambda a: f"{a.dtype}-{len(a)}")
def test_same_arrays_as_np_unique(a):
    values = distinct(a)
    np.testing.assert_array_equal(values, np.unique(a))
    assert values.dtype == np.unique(a).dtype
    for first in (False, True):
        for inverse in (False, True):
            want = np.unique(a, return_index=first, return_inverse=inverse)
            want = want if isinstance(want, tuple) else (want,)
            got = distinct_where(a, first=first, inverse=inverse)
            assert len(got) == len(want)
            for g, w in zip(got, want):
                np.testing.assert_array_equal(g, w.reshape(-1))
            assert got[0].dtype == a.dtype
            assert all(g.dtype == np.intp for g in got[1:])


def test_counted_and_sorted_give_the_same_arrays(monkeypatch):
    """Integers (64 or more) whose values span at most twice their count + 1,024 are
    counted, the rest (and fewer entries) sorted: a span just inside and just outside that
    limit, and 63 entries, each take the path the rule says and give what np.unique gives,
    first and inverse included."""
    import simulator.uniques as uniques

    counted = []
    real = uniques._counted
    monkeypatch.setattr(uniques, "_counted",
                        lambda *args: counted.append(len(args[0])) or real(*args))
    rng = np.random.default_rng(11)
    for n, span, by_table in ((64, 2 * 64 + 1025, True), (64, 2 * 64 + 1026, False),
                              (1000, 2 * 1000 + 1025, True), (1000, 2 * 1000 + 1026, False),
                              (63, 10, False)):
        a = rng.integers(0, span, n)
        a[0], a[-1] = 0, span - 1               # the values span exactly ``span``
        counted.clear()
        want = np.unique(a, return_index=True, return_inverse=True)
        for g, w in zip(distinct_where(a, first=True, inverse=True), want):
            np.testing.assert_array_equal(g, w.reshape(-1))
        assert counted == ([n] if by_table else []), (n, span)


def test_first_index_is_the_first_entry_of_each_value():
    a = np.array([3, 1, 3, 1, 2, 2, 3])
    values, first = distinct_where(a, first=True)
    assert values.tolist() == [1, 2, 3]
    assert first.tolist() == [1, 4, 0]


@pytest.mark.parametrize("top", [8, 10_000])
def test_distinct_below_marks_or_sorts(top):
    """Below ``4 * len + 1024`` it marks a table; above, it sorts: both as np.unique."""
    rng = np.random.default_rng(3)
    codes = rng.integers(0, top, 50)
    np.testing.assert_array_equal(distinct_below(codes, top), np.unique(codes))

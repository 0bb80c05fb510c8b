"""``np.unique`` of one-dimensional integer (or NaN-free float) arrays, by sorting.

NumPy 2.3+ finds the distinct values of a plain ``np.unique(a)`` with a hash table and,
asked for the inverse, sorts with an unstable quicksort that is slow on the many repeats
of the fabric's and the collectives' arrays (link ids, class ids, coefficient bits); one
sort is cheaper than either (docs/speed.md). These give the same arrays (values ascending; the first index of
each value; each entry's position among the values) from one sort, stable where the
first indices are asked for, as ``np.unique`` itself does.

Not for arrays with NaN (``np.unique`` makes one value of all NaNs; here each would be
its own) or more than one dimension.
"""

from __future__ import annotations

import numpy as np


_COUNTED_FROM = 64      # entries; fewer are sorted (a table's few more calls cost more)


def _starts(s: np.ndarray) -> np.ndarray:
    """Where each run of equal values of the sorted ``s`` starts (a bool per entry)."""
    new = np.empty(len(s), bool)
    new[:1] = True
    np.not_equal(s[1:], s[:-1], out=new[1:])
    return new


def distinct(a: np.ndarray) -> np.ndarray:
    """``np.unique(a)``: the distinct values of ``a``, ascending."""
    s = np.sort(a)
    return s[_starts(s)]


def distinct_where(a: np.ndarray, first: bool = False, inverse: bool = False) -> tuple:
    """``np.unique(a, return_index=first, return_inverse=inverse)``: the distinct values
    ascending, then (``first``) the index of each one's first entry in ``a``, then
    (``inverse``) each entry's index among the values (``intp``, shaped as ``a``).

    Integers (64 or more) that span no more than about twice their count (link ids of a
    long bundle, class ids, codes) are counted into a table instead of sorted: counting
    is linear where a sort is not, and such arrays are long and many in a big replay."""
    if a.dtype.kind in "iu" and len(a) >= _COUNTED_FROM:
        lo, hi = int(a.min()), int(a.max())
        if hi - lo <= 2 * len(a) + 1024:
            return _counted(a, lo, hi - lo + 1, first, inverse)
    order = np.argsort(a, kind="stable")
    s = a[order]
    new = _starts(s)
    out: tuple = (s[new],)
    if first:
        out += (order[new],)
    if inverse:
        index = np.empty(len(a), np.intp)
        index[order] = np.cumsum(new.astype(np.intp)) - 1   # (NumPy sums bools slowly)
        out += (index,)
    return out


def _counted(a: np.ndarray, lo: int, span: int, first: bool, inverse: bool) -> tuple:
    """:func:`distinct_where` of integers ``a`` in ``lo .. lo + span - 1`` by a table of
    the span: which values are present, the first position of each (the least position
    that holds it), each value's rank among the present ones."""
    at = a - lo if lo else a
    present = np.zeros(span, bool)
    present[at] = True
    out: tuple = ((np.flatnonzero(present) + lo).astype(a.dtype, copy=False),)
    if first:
        least = np.full(span, len(a), np.intp)
        np.minimum.at(least, at, np.arange(len(a), dtype=np.intp))
        out += (least[present],)
    if inverse:
        rank = np.cumsum(present, dtype=np.intp)
        rank -= 1
        out += (rank[at],)
    return out


def distinct_below(codes: np.ndarray, top: int) -> np.ndarray:
    """``np.unique(codes)`` of integer ``codes`` in ``0..top-1``: by marking where ``top``
    is not much larger than the codes are many, else by sorting."""
    if top > 4 * len(codes) + 1024:
        return distinct(codes)
    mark = np.zeros(top, bool)
    mark[codes] = True
    return np.flatnonzero(mark)

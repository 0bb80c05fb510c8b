"""Comparing collective plans field for field (the read-off plans of collectives/pairs.py
and collectives/groups.py against each pair's or group's own plan)."""

from dataclasses import fields

import numpy as np


def assert_plans_equal(got, want) -> None:
    """Every field of every plan the same, arrays by dtype and value, bit for bit."""
    assert len(got) == len(want)
    for g, w in zip(got, want):
        for f in fields(w):
            x, y = getattr(g, f.name), getattr(w, f.name)
            if isinstance(y, np.ndarray):
                assert x.dtype == y.dtype and np.array_equal(x, y), f.name
            else:
                assert x == y, f.name

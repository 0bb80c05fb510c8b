"""The bounded minimisers of simulator/optimize.py on textbook functions whose
minimum is known in closed form."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.optimize import compass_search, from_unit, nelder_mead, to_unit


def booth(u: np.ndarray) -> float:
    """Booth's function on x = 4 u0, y = 4 u1 (the box [0, 4]^2): (x + 2y - 7)^2 +
    (2x + y - 5)^2 is 0 only at x = 1, y = 3 (1 + 6 - 7 = 0, 2 + 3 - 5 = 0), i.e. at
    u = (0.25, 0.75)."""
    x, y = 4 * u[0], 4 * u[1]
    return float((x + 2 * y - 7) ** 2 + (2 * x + y - 5) ** 2)


def test_nelder_mead_finds_booths_minimum():
    u, fu, evals = nelder_mead(booth, np.array([0.5, 0.5]), max_evals=400)
    assert u == pytest.approx([0.25, 0.75], abs=1e-3)
    assert fu == pytest.approx(0.0, abs=1e-5) and evals <= 400 + len(u)


def test_nelder_mead_stops_on_a_bound_when_the_minimum_is_outside_the_box():
    # sum (u - c)^2 with c = (0.3, 0.7, 1.4): on [0, 1]^3 the minimum is c clipped,
    # (0.3, 0.7, 1.0), where f = (1.4 - 1.0)^2 = 0.16.
    c = np.array([0.3, 0.7, 1.4])
    seen = []

    def f(u):
        seen.append(np.array(u))
        return float(np.sum((u - c) ** 2))
    u, fu, _ = nelder_mead(f, np.array([0.5, 0.5, 0.5]), max_evals=400)
    u, fu, _ = compass_search(f, u)
    assert u == pytest.approx([0.3, 0.7, 1.0], abs=1e-3)
    assert fu == pytest.approx(0.16, abs=1e-5)
    assert all(((p >= 0) & (p <= 1)).all() for p in seen)      # never leaves the box


def test_nelder_mead_is_deterministic():
    assert nelder_mead(booth, np.array([0.9, 0.1]))[1] == nelder_mead(booth,
                                                                      np.array([0.9, 0.1]))[1]


def test_compass_search_walks_each_axis_to_a_separable_minimum():
    # (u0 - 0.25)^2 + (u1 - 0.5)^2 from (0.5, 0.5): five steps of -0.05 along u0 reach 0.25;
    # u1 is already at its minimum, so f ends at 0.
    def f(u):
        return float((u[0] - 0.25) ** 2 + (u[1] - 0.5) ** 2)
    u, fu, evals = compass_search(f, np.array([0.5, 0.5]), step=0.05)
    assert u == pytest.approx([0.25, 0.5], abs=1e-9)
    assert fu == pytest.approx(0.0, abs=1e-15) and evals <= 200


def test_unit_box_mapping():
    bounds = {"a": (0.5, 1.0), "b": (0.0, 60.0)}
    # a = 0.5 + 0.4 x (1.0 - 0.5) = 0.7; b = 0 + 1.3 clipped to 1 -> 60
    assert from_unit(np.array([0.4, 1.3]), bounds, ("a", "b")) == pytest.approx(
        {"a": 0.7, "b": 60.0})
    # the inverse: (0.7 - 0.5) / 0.5 = 0.4, (15 - 0) / 60 = 0.25; out of bounds clips to 0
    assert to_unit({"a": 0.7, "b": 15.0}, bounds, ("a", "b")) == pytest.approx([0.4, 0.25])
    assert to_unit({"a": 0.1, "b": 15.0}, bounds, ("a", "b"))[0] == 0.0

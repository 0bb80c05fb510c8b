"""A generated trace is validated once: by its generator, not again by the replay; a trace
put into a setup by hand, or derived from it, still is."""

from __future__ import annotations

import dataclasses

import pytest

from simulator.errors import ConfigError
from simulator.pipeline import build_setup, run_setup, with_trace
from simulator.scenario import load_scenario, resolve_scenario
from simulator.trace import Trace


@pytest.fixture
def validations(monkeypatch):
    seen = []
    real = Trace.validate
    monkeypatch.setattr(Trace, "validate", lambda self: seen.append(self) or real(self))
    return seen


def _setup(*sets):
    return build_setup(load_scenario(resolve_scenario("quickstart"), list(sets)))


@pytest.mark.parametrize("sets", [(), ("training.grad_accum=64",)])   # plain, extrapolated
def test_a_generated_trace_is_validated_by_its_generator_only(validations, sets):
    setup = _setup(*sets)
    built = list(validations)
    assert built and setup.checked and all(t.validated for t in setup.checked)
    assert {id(t) for t in setup.checked} <= {id(t) for t in built}
    validations.clear()
    run_setup(setup)
    assert validations == []


def test_a_trace_put_in_by_hand_or_derived_is_validated_at_the_replay(validations):
    setup = _setup()
    derived = with_trace(setup, lambda t: dataclasses.replace(t, meta=dict(t.meta)))
    validations.clear()
    run_setup(derived)
    assert [id(t) for t in validations] == [id(derived.trace)]
    broken = dataclasses.replace(setup.trace, world_size=setup.trace.world_size + 1)
    assert not broken.validated
    with pytest.raises(ConfigError, match="rank classes cover"):
        run_setup(dataclasses.replace(setup, trace=broken))

"""op_time_s remembers its answers: the same floats as the computation, the same errors."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from simulator.compute import ComputeModel
from simulator.errors import ConfigError
from simulator.hardware import gpu_spec

H200 = gpu_spec("H200-SXM")
CASES = [(c, f, b, p, s) for c, f, b, p, s in itertools.product(
    ("matmul", "attention", "elementwise", "optimizer"), (0, 1e6, 3 * 2**40, 7),
    (0.0, 1e5, 2**31), ("bf16", "fp32", "fp8"),
    (None, (4096, 53248, 16384), (1, 50257, 8191)))
    if not (p == "fp8" and c != "matmul")]


@pytest.mark.parametrize("attention", ["sdpa", "flash2"])
def test_remembered_times_are_the_computed_floats(attention):
    model = ComputeModel(H200, attention=attention, strategy="fsdp")
    fresh = ComputeModel(H200, attention=attention, strategy="fsdp")
    for args in CASES * 2:                   # the second pass answers from memory
        assert model.op_time_s(*args) == fresh._op_time_s(*args)
    assert len(model._times) == len(CASES)
    # equal numbers of another plain type are the same key and the same float
    c, f, b, p, s = CASES[-1]
    assert model.op_time_s(c, float(f), int(b), p, s) == fresh._op_time_s(c, f, b, p, s)
    slow = model.scaled(1.5)                  # another model: its own memory
    assert slow.op_time_s(*CASES[-1]) == fresh.scaled(1.5)._op_time_s(*CASES[-1])


def test_bad_arguments_still_raise_after_an_equal_good_one():
    model = ComputeModel(H200)
    model.op_time_s("matmul", 1, 1, "bf16")
    with pytest.raises(ValueError):
        model.op_time_s("matmul", True, 1, "bf16")          # True == 1, but not a number
    with pytest.raises(ValueError):
        model.op_time_s("matmul", np.int64(1), 1, "bf16")   # np.int64(1) == 1
    with pytest.raises(ValueError):
        model.op_time_s("matmul", -1.0, 1, "bf16")
    with pytest.raises(ConfigError):
        model.op_time_s("nope", 1, 1, "bf16")
    # a shape given as a list is not remembered, and times as the tuple does
    shape = (4096, 4096, 4096)
    assert model.op_time_s("matmul", 1e9, 1, "bf16", list(shape)) == \
        model.op_time_s("matmul", 1e9, 1, "bf16", shape)
    assert all(isinstance(k[4], (tuple, type(None))) for k in model._times)

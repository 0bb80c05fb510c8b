"""Validation of the simulator against real measurements.

:mod:`simulator.validation.collectives` compares simulated collectives with A100 nccl-tests
tables (``validation/collectives/``); :mod:`simulator.validation.calibrate` fits the
calibration constants on the declared calibration subset only; :mod:`simulator.validation.cli`
is the ``clustersim validate collectives`` command.

The names below come from :mod:`simulator.validation.collectives`, loaded on first use
(``clustersim --help`` imports :mod:`simulator.validation.cli` without pandas).
"""

__all__ = [
    "BUSBW_THRESHOLD", "GOAL", "LARGE_BYTES", "SMALL_BYTES", "SPLITS", "TIME_THRESHOLD", "Case",
    "default_root", "load_cases", "load_measurements", "simulate_case", "summarize",
    "validate", "write_report",
]


def __getattr__(name: str):
    if name in __all__:
        from simulator.validation import collectives
        return getattr(collectives, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

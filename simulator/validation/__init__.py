"""Validation of the simulator against real measurements.

:mod:`simulator.validation.collectives` compares simulated collectives with A100 nccl-tests
tables (``validation/collectives/``); :mod:`simulator.validation.calibrate` fits the
calibration constants on the declared calibration subset only; :mod:`simulator.validation.cli`
is the ``clustersim validate collectives`` command.
"""

from simulator.validation.collectives import (BUSBW_THRESHOLD, GOAL, LARGE_BYTES, SMALL_BYTES,
                                              SPLITS, TIME_THRESHOLD, Case, default_root,
                                              load_cases, load_measurements, simulate_case,
                                              summarize, validate, write_report)

__all__ = [
    "BUSBW_THRESHOLD", "GOAL", "LARGE_BYTES", "SMALL_BYTES", "SPLITS", "TIME_THRESHOLD", "Case",
    "default_root", "load_cases", "load_measurements", "simulate_case", "summarize",
    "validate", "write_report",
]

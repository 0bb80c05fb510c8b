"""Compute model: per-op GPU time from a roofline with size-dependent efficiency.

See ``docs/training-interfaces.md`` section 2 and ``simulator/data/compute.yaml``.
"""

from simulator.compute.model import (OP_CLASSES, ComputeCalibration, ComputeModel,
                                     EfficiencyCurve, OpClassCalibration,
                                     load_compute_calibration)

__all__ = ["OP_CLASSES", "ComputeCalibration", "ComputeModel", "EfficiencyCurve",
           "OpClassCalibration", "load_compute_calibration"]

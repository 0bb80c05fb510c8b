"""The constants of the collective model that the calibration fits: their names
(:data:`PARAMS`, dotted paths into :class:`~simulator.constants.ModelConstants`),
bounds, starting point and rounding, and how to read them from / write them into a
``ModelConstants``. The validation report lists them; the calibration fits them.
"""

from __future__ import annotations

from simulator.constants import ModelConstants

# Fitted constants with their bounds. Names are dotted paths into ModelConstants
# (``field`` or ``field.key`` of a dict field); ``launch_overhead_us`` is in microseconds.
BOUNDS: dict[str, tuple[float, float]] = {
    "launch_overhead_us": (0.0, 60.0),
    "link_efficiency.nvlink": (0.5, 1.0),
    "link_efficiency.net": (0.5, 1.0),
    "pcie_p2p_efficiency": (0.05, 1.0),
    "protocol_bw_efficiency.LL": (0.2, 1.0),
    "protocol_bw_efficiency.LL128": (0.2, 1.0),
    "protocol_latency_factor.LL": (0.5, 3.0),
    "protocol_latency_factor.LL128": (0.5, 3.0),
    "protocol_latency_factor.Simple": (0.5, 3.0),
    "nvls_efficiency": (0.3, 1.0),
    "link_efficiency.efa-v2": (0.5, 1.0),
    "net_message_us.efa-v2": (0.0, 50.0),
    "net_ll_message_us.efa-v2": (0.0, 50.0),
    "p2p_op_us.efa-v2": (0.0, 50.0),
    "p2p_message_us.efa-v2": (0.0, 20.0),
}
PARAMS = tuple(BOUNDS)
# Where every fit starts, so that refitting reproduces simulator/data/calibration.yaml:
# NCCL's own model (protocol factors 1, no extra launch cost beyond 20 us), the NCCL
# maintainers' "24 GB/s per 200 Gb/s NIC" (0.94 of HDR), NVLink at the 235 GB/s that NCCL's
# tuner assumes for A100 (0.78 of 300), PCIe P2P at 0.2, NVLS at the links' full rate, and
# EFA at InfiniBand's 0.94 with links.yaml's 5 us edge latency as its per-message cost.
PRIOR: dict[str, float] = {
    "launch_overhead_us": 20.0, "link_efficiency.nvlink": 0.78, "link_efficiency.net": 0.94,
    "pcie_p2p_efficiency": 0.2, "protocol_bw_efficiency.LL": 1.0,
    "protocol_bw_efficiency.LL128": 1.0, "protocol_latency_factor.LL": 1.0,
    "protocol_latency_factor.LL128": 1.0, "protocol_latency_factor.Simple": 1.0,
    "nvls_efficiency": 1.0, "link_efficiency.efa-v2": 0.94, "net_message_us.efa-v2": 5.0,
    "net_ll_message_us.efa-v2": 5.0,    "p2p_op_us.efa-v2": 5.0, "p2p_message_us.efa-v2": 1.0,
}
DECIMALS = {p: 3 if "_us" in p else 4 for p in PARAMS}


def calibrated_values(k: ModelConstants) -> dict:
    """The fitted constants of ``k``, keyed as :data:`PARAMS`."""
    out = {}
    for p in PARAMS:
        if p == "launch_overhead_us":
            out[p] = k.launch_overhead_s * 1e6
            continue
        field, _, key = p.partition(".")
        value = getattr(k, field)
        out[p] = float(value.get(key, 1.0) if key else value)
    return out


def with_values(base: ModelConstants, values: dict) -> ModelConstants:
    """``base`` with the constants named in ``values`` (keys of :data:`PARAMS`) replaced."""
    changes: dict = {}
    for p, v in values.items():
        if p == "launch_overhead_us":
            changes["launch_overhead_s"] = float(v) * 1e-6
            continue
        field, _, key = p.partition(".")
        if key:
            changes.setdefault(field, dict(getattr(base, field)))[key] = float(v)
        else:
            changes[field] = float(v)
    return base.replace(**changes)


__all__ = ["BOUNDS", "DECIMALS", "PARAMS", "PRIOR", "calibrated_values", "with_values"]

"""``calibration.yaml`` files of the collective model: write the fitted constants in the
format of ``simulator/data/calibration.yaml`` (:func:`write_calibration`) and read one back
over a set of constants (:func:`load_calibration_file`, ``--calibration``)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import yaml

from simulator.constants import ModelConstants, load_constants
from simulator.errors import ConfigError
from simulator.outpaths import writable_file
from simulator.validation.collectives.fitted import PARAMS, calibrated_values
from simulator.validation.common import read_yaml
from simulator.yamlio import write_yaml


def _shipped_calibration() -> dict:
    with resources.files("simulator.data").joinpath("calibration.yaml").open() as fh:
        return yaml.safe_load(fh)


def write_calibration(constants: ModelConstants, report: dict, path, overwrite: bool = False
                      ) -> Path:
    """Write ``constants``' calibrated values as a ``calibration.yaml`` (the format of
    ``simulator/data/calibration.yaml``); unfitted entries keep the shipped sources.

    :raises ConfigError: when ``path`` exists and ``overwrite`` is false, or cannot be written.
    """
    path = writable_file(path, overwrite)
    why = (f"fitted by clustersim validate collectives --calibrate on "
           f"{', '.join(report['tables'])} ({report['date']}); objective {report['objective']}"
           f" = {report['objective_fitted']:.5f} over {report['rows']} rows "
           f"(start {report['objective_start']:.5f}), fidelity {report['fidelity']}")
    values = calibrated_values(constants)
    data = _shipped_calibration()
    for name, entry in data.items():
        if name == "channels":
            entry["value"] = int(constants.channels)
        elif "value" in entry:                      # scalar entry
            entry["value"] = float(values.get(name, entry["value"]))
            if name in PARAMS:
                entry["source"] = why
        else:                                       # mapping of {value, source}
            current = getattr(constants, name)
            for key in set(entry) | set(current):
                sub = entry.setdefault(key, {"source": "kept from the starting constants"})
                sub["value"] = float(current.get(key, sub.get("value", 1.0)))
                if f"{name}.{key}" in PARAMS:
                    sub["source"] = why
    header = ("# Calibration constants of the collective model. Values whose source says\n"
              "# \"fitted by\" were fitted on the declared calibration subset of\n"
              "# validation/collectives/cases.yaml (never on a validation case) by\n"
              "# `clustersim validate collectives --calibrate`. Do not hand-tune them.\n")
    return write_yaml(path, data, header)


_FITTED_KEYS = ("link_efficiency", "pcie_p2p_efficiency", "launch_overhead_us", "channels")


def load_calibration_file(path, base: ModelConstants | None = None) -> ModelConstants:
    """``base`` (default: shipped) with the calibrated values of a calibration YAML file.

    :raises ConfigError: unreadable file, or a missing / non-numeric ``value`` (field named).
    """
    path = Path(path)
    base = base or load_constants()
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError("top level must be a mapping", source=str(path))

    def value(entry, fld):
        if not isinstance(entry, dict) or "value" not in entry:
            raise ConfigError("expected {value: ..., source: ...}", source=str(path), field=fld)
        try:
            return float(entry["value"])
        except (TypeError, ValueError):
            raise ConfigError(f"not a number: {entry['value']!r}", source=str(path),
                              field=f"{fld}.value") from None

    eff = data.get("link_efficiency")
    if not isinstance(eff, dict):
        raise ConfigError("missing mapping", source=str(path), field="link_efficiency")
    for fld in ("pcie_p2p_efficiency", "launch_overhead_us", "channels"):
        if fld not in data:
            raise ConfigError("missing required key", source=str(path), field=fld)
    extra = {}
    for key, entry in data.items():
        if key in _FITTED_KEYS or key not in base.__dataclass_fields__:
            continue
        current = getattr(base, key)
        if isinstance(current, dict) and isinstance(entry, dict):
            extra[key] = {**current, **{sub: value(v, f"{key}.{sub}")
                                        for sub, v in entry.items()}}
        elif isinstance(current, (int, float)):
            extra[key] = type(current)(value(entry, key))
    return base.replace(
        **extra,
        link_efficiency={k: value(v, f"link_efficiency.{k}") for k, v in eff.items()},
        pcie_p2p_efficiency=value(data["pcie_p2p_efficiency"], "pcie_p2p_efficiency"),
        launch_overhead_s=value(data["launch_overhead_us"], "launch_overhead_us") * 1e-6,
        channels=int(value(data["channels"], "channels")),
    )


__all__ = ["load_calibration_file", "write_calibration"]

"""Pieces of :func:`simulator.validation.training.validate.load_cases`: the ``cases.yaml`` cross-checks,
each case checked against its row of ``measurements.csv``, the scenario of a case, and the
simulated setup checked against the measured run."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from simulator.errors import ConfigError
from simulator.scenario import apply_sets, resolve_scenario
from simulator.validation.common import read_yaml as _read_yaml
from simulator.validation.training.schema import Case, CaseSpec


def _scenario_data(spec: CaseSpec, source: str, where: str) -> tuple[dict, str]:
    """The scenario mapping of a case (shipped file or inline) with its ``set`` applied."""
    if isinstance(spec.scenario, dict):
        data, ref = spec.scenario, "inline"
    else:
        try:
            path = resolve_scenario(spec.scenario)
        except ConfigError as exc:
            raise ConfigError(exc.reason, source=source, field=f"{where}.scenario") from None
        data = _read_yaml(path)
        if not isinstance(data, dict):
            raise ConfigError(f"scenario {path} is not a mapping", source=source,
                              field=f"{where}.scenario")
        ref = spec.scenario
    try:
        data = apply_sets(data, list(spec.set), source)
    except ConfigError as exc:
        raise ConfigError(exc.reason, source=source, field=f"{where}.set") from None
    return data, ref


def _check_against_measurement(case: Case, source: str, where: str) -> None:
    """The simulated run must be the measured one: GPUs, GPU model, precision, batch..."""
    m, setup = case.measurement, case.setup
    t = case.scenario.training
    got = {"gpus": setup.trace.world_size, "gpu": setup.compute.gpu.name,
           "precision": t.precision, "micro_batch": t.micro_batch, "grad_accum": t.grad_accum,
           "seq_len": t.seq_len if setup.trace.meta.get("tokens_per_sample") else None}
    for key, value in got.items():
        want = m.get(key)
        if want is None:
            continue          # not stated by the source
        if value != want:
            raise ConfigError(f"simulates {key} = {value!r} but measurement "
                              f"{case.measurement_id} has {want!r}", source=source,
                              field=f"{where}.scenario" if key in ("gpu",) else f"{where}.set")


def _measurement_dict(row: pd.Series) -> dict:
    out = {}
    for k, v in row.items():
        if v is pd.NA or (isinstance(v, float) and math.isnan(v)):
            out[k] = None
        elif isinstance(v, (np.integer,)):
            out[k] = int(v)
        elif isinstance(v, (np.floating,)):
            out[k] = float(v)
        else:
            out[k] = v
    return out


def check_specs(specs: dict[str, CaseSpec], source: str) -> None:
    """Scaling cases name two non-scaling cases of the file, a calibration case depends on
    calibration cases only, and every case has exactly one of scenario and scaling."""
    for cid, c in specs.items():
        where = f"cases.{cid}"
        if (c.metric == "scaling_efficiency") != (c.scaling is not None):
            raise ConfigError("a scaling case has metric scaling_efficiency and a 'scaling' "
                              "entry, other cases neither", source=source,
                              field=f"{where}.{'scaling' if c.scaling else 'metric'}")
        if (c.scenario is None) == (c.scaling is None):
            raise ConfigError("give exactly one of 'scenario' and 'scaling'", source=source,
                              field=f"{where}.scenario")
        if c.scaling is not None:
            _check_scaling_refs(cid, c, specs, source)


def _check_scaling_refs(cid: str, c: CaseSpec, specs: dict[str, CaseSpec], source: str) -> None:
    where = f"cases.{cid}"
    for key in ("of", "baseline"):
        ref = getattr(c.scaling, key)
        if ref not in specs or specs[ref].scaling is not None:
            raise ConfigError(f"{ref!r} is not a (non-scaling) case of this file",
                              source=source, field=f"{where}.scaling.{key}")
        if c.split == "calibration" and specs[ref].split != "calibration":
            raise ConfigError(f"a calibration case cannot depend on the validation "
                              f"case {ref!r}", source=source,
                              field=f"{where}.scaling.{key}")


def needed_cases(specs: dict[str, CaseSpec], wanted: list[str]) -> list[str]:
    """``wanted`` and the cases their scaling cases compare, dependencies first."""
    return list(dict.fromkeys(
        [d for cid in wanted if specs[cid].scaling
         for d in (specs[cid].scaling.of, specs[cid].scaling.baseline)] + wanted))


def check_unused(meas: pd.DataFrame, specs: dict[str, CaseSpec], source: str,
                 meas_source: str) -> None:
    """Every measurement must be used by a case."""
    unused = sorted(set(meas.index) - {c.measurement for c in specs.values()})
    if unused:
        raise ConfigError(f"measurement(s) {', '.join(unused)} are not used by any case "
                          f"of {source}", source=meas_source, field="measurement_id")


def _scaling_expected(case: Case, c: CaseSpec, m: dict, built: dict[str, Case],
                      source: str, where: str) -> float:
    """Link a scaling case to the cases it compares; its measured efficiency."""
    case.of, case.baseline = built[c.scaling.of], built[c.scaling.baseline]
    if case.of.measurement_id != c.measurement:
        raise ConfigError(f"the scaling of {c.scaling.of} is published with its "
                          f"measurement {case.of.measurement_id}", source=source,
                          field=f"{where}.measurement")
    base_sf = case.baseline.measurement.get("scaling_factor")
    if base_sf is None and case.baseline.measurement["gpus"] == 1:
        base_sf = 1.0        # a 1-GPU row is the baseline even where its factor reads '-'
    if base_sf is None or not math.isclose(base_sf, 1.0):
        raise ConfigError(f"{c.scaling.baseline} is not the scaling baseline (its "
                          f"scaling factor is {base_sf})", source=source,
                          field=f"{where}.scaling.baseline")
    sf = m.get("scaling_factor")
    if sf is None:
        raise ConfigError(f"measurement {c.measurement} has no scaling factor",
                          source=source, field=f"{where}.measurement")
    return sf * case.baseline.measurement["gpus"] / m["gpus"]


def measured_case(cid: str, c: CaseSpec, meas: pd.DataFrame, built: dict[str, Case],
                  source: str, meas_source: str) -> Case:
    """The case ``cid`` with its measurement, checked against ``measurements.csv`` (no setup
    yet); a scaling case is linked to its two cases in ``built``."""
    where = f"cases.{cid}"
    if c.measurement not in meas.index:
        raise ConfigError(f"no measurement {c.measurement!r} in {meas_source}",
                          source=source, field=f"{where}.measurement")
    m = _measurement_dict(meas.loc[c.measurement])
    if c.flops != "model" and c.metric != "tflops_per_gpu":
        raise ConfigError(f"'flops' applies to metric tflops_per_gpu, not {c.metric}",
                          source=source, field=f"{where}.flops")
    case = Case(cid, c.split, c.metric, c.measurement, float(c.measured),
                " ".join(c.notes.split()), m, flops=c.flops, source=source)
    if c.scaling is None:
        if m["metric"] != c.metric:
            raise ConfigError(f"measurement {c.measurement} is {m['metric']}, not "
                              f"{c.metric}", source=source, field=f"{where}.metric")
        expected = m["value"]
    else:
        expected = _scaling_expected(case, c, m, built, source, where)
    if not math.isclose(float(c.measured), float(expected), rel_tol=1e-9, abs_tol=1e-12):
        raise ConfigError(f"measured {c.measured} differs from {expected:g} "
                          f"({c.measurement} in {meas_source})", source=source,
                          field=f"{where}.measured")
    return case


__all__ = ["check_specs", "check_unused", "measured_case", "needed_cases"]

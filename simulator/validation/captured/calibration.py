"""Calibrate the capture machine from its microbenchmarks (never from the training runs).

Input: ``validation/traces/capture_machine.csv``, written by ``validation/capture/`` (gloo
collectives between ranks in network namespaces on ``tc``-shaped veth links to one bridge;
CPU kernels of the captured model with 1 thread per process, pinned). Output:
``validation/traces/capture_description.yaml``, the constants of
:mod:`simulator.validation.captured.machine`. ``python -m
simulator.validation.captured.calibration --write`` regenerates it; the tests check that the
fit recomputed from the CSV equals the shipped file.

**Collectives**, per (link bandwidth, ranks, op): ``t = alpha + w * S * beta`` with ``S`` the
nccl-tests size (whole tensor; gathered output; scattered input) and ``w`` the bytes each rank
sends per byte of ``S`` in a ring (2(n-1)/n for all_reduce, (n-1)/n otherwise; a
convention: gloo's reduce_scatter is an all_reduce of the whole input, so its fitted
efficiency comes out near half of all_reduce's). ``beta`` is fitted on the large messages
(``S >= LARGE_BYTES``: the captured jobs' gradients and parameters are 1.5-35 MB) by least
squares weighted 1/t with ``alpha`` fixed; ``alpha`` is the median over the small messages
(``S <= SMALL_BYTES``) of ``t - w S beta`` (>= 0); the two alternate until beta settles.
``efficiency`` = 1 / (beta x link bytes/s): the share of the shaped link gloo achieves.

**CPU**: per framework and mode, the dense-matmul rate (sum of FLOPs / sum of times) and the
elementwise rate; ``shared_core_slowdown``: sum of kernel times with 4 processes on 2 cores
over the same with 2 processes on 2 cores (one call of each benchmarked kernel of the model),
the factor by which a rank's compute stretches when 4 ranks share the 2 cores.
"""

from __future__ import annotations

import argparse
import math
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from simulator.errors import ConfigError
from simulator.outpaths import atomic_write_text
from simulator.validation.paths import data_dir
from simulator.yamlio import read_yaml

CSV_NAME = "capture_machine.csv"
DESCRIPTION_NAME = "capture_description.yaml"
LARGE_BYTES = 1 << 20
SMALL_BYTES = 1 << 16
MAX_ROUNDS = 100           # alternate the two fits until beta settles
DIGITS = 6
BMM = ("attn_scores", "attn_values")     # attention batched matmuls: not dense matmuls
SHARED_MODES = ("2proc_1percore", "4proc_2percore")
HEADER = ("# The capture machine as the simulator sees it "
          "(simulator/validation/captured/machine.py).\n"
          "# Generated from the microbenchmarks by "
          "`python -m simulator.validation.captured.calibration --write`;\n"
          "# do not edit. No training run is used.\n")


def traces_root() -> Path:
    """``validation/traces`` of the repository."""
    return data_dir("traces")


def wire_factor(op: str, n: int) -> float:
    """Bytes each rank sends per byte of the nccl-tests size, for a ring of ``n`` ranks."""
    return 2.0 * (n - 1) / n if op == "all_reduce" else (n - 1) / n


def _sig(x: float) -> float:
    return float(f"{x:.{DIGITS}g}")


def read_microbenchmarks(path: Path | None = None) -> pd.DataFrame:
    """The microbenchmark rows.

    :raises ConfigError: unreadable file or missing columns.
    """
    path = Path(path) if path is not None else traces_root() / CSV_NAME
    try:
        df = pd.read_csv(path)
    except (OSError, pd.errors.ParserError) as exc:
        raise ConfigError(f"cannot read microbenchmarks: {exc}", source=str(path)) from None
    need = ["kind", "framework", "op", "mode", "ranks", "bandwidth", "bandwidth_bit_per_s",
            "size_bytes", "time_s", "flops", "bytes", "machine", "date"]
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise ConfigError(f"missing column(s) {', '.join(missing)}", source=str(path))
    return df


def fit_alpha_beta(sizes, times, op: str, n: int) -> dict:
    """``alpha``, ``beta`` of one (bandwidth, ranks, op) series (see the module doc)."""
    s = np.asarray(sizes, float)
    t = np.asarray(times, float)
    x = wire_factor(op, n) * s
    large, small = s >= LARGE_BYTES, s <= SMALL_BYTES
    if large.sum() < 2 or not small.any():
        raise ConfigError(f"{op} on {n} ranks: need >= 2 sizes >= {LARGE_BYTES} B and one "
                          f"<= {SMALL_BYTES} B")
    alpha, beta = 0.0, math.inf
    for _ in range(MAX_ROUNDS):
        previous = beta
        beta = float(np.sum(x[large] * (t[large] - alpha) / t[large])
                     / np.sum(x[large] ** 2 / t[large]))
        alpha = max(0.0, float(np.median(t[small] - x[small] * beta)))
        if abs(beta - previous) <= 1e-13 * beta:
            break
    err = (alpha + beta * x - t) / t
    return {"alpha_s": alpha, "beta_s_per_byte": beta,
            "max_rel_err_large": float(np.max(np.abs(err[large]))),
            "max_rel_err": float(np.max(np.abs(err)))}


def collective_constants(df: pd.DataFrame) -> dict:
    """``{bandwidth label: {link_bit_per_s, ranks: {n: {op: constants}}}}``."""
    rows = df[df.kind == "collective"]
    out: dict = {}
    for (label, bits, n, op), g in rows.groupby(["bandwidth", "bandwidth_bit_per_s", "ranks",
                                                 "op"]):
        g = g.sort_values("size_bytes")
        fit = fit_alpha_beta(g.size_bytes, g.time_s, op, int(n))
        link = float(bits) / 8
        entry = out.setdefault(str(label), {"link_bit_per_s": int(bits), "ranks": {}})
        entry["ranks"].setdefault(int(n), {})[str(op)] = {
            "alpha_s": _sig(fit["alpha_s"]), "beta_s_per_byte": _sig(fit["beta_s_per_byte"]),
            "efficiency": _sig(1.0 / (fit["beta_s_per_byte"] * link)),
            "wire_factor": _sig(wire_factor(op, int(n))),
            "max_rel_err_large": _sig(fit["max_rel_err_large"]),
            "max_rel_err": _sig(fit["max_rel_err"]),
            "sizes": len(g), "date": str(g.date.iloc[0])}
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["link_bit_per_s"]))


def cpu_constants(df: pd.DataFrame) -> dict:
    """Per framework: per mode the matmul and elementwise rates and the kernel-mix time;
    ``shared_core_slowdown`` where both shared-core modes were measured."""
    rows = df[df.kind.isin(["compute", "elementwise"])]
    out: dict = {}
    for fw, g in rows.groupby("framework"):
        modes = {}
        for mode, m in g.groupby("mode"):
            mm = m[(m.kind == "compute") & ~m.op.str.startswith(BMM)]
            ew = m[m.kind == "elementwise"]
            modes[str(mode)] = {
                "processes": int(m.ranks.iloc[0]),
                "matmul_gflop_per_s": _sig(mm.flops.sum() / mm.time_s.sum() / 1e9),
                "elementwise_gbyte_per_s": _sig(ew["bytes"].sum() / ew.time_s.sum() / 1e9),
                "kernel_mix_s": _sig(m.time_s.sum()), "kernels": len(m)}
        entry = {"modes": modes}
        piv = g.pivot_table(index="op", columns="mode", values="time_s")
        if all(mode in piv.columns for mode in SHARED_MODES):
            both = piv[list(SHARED_MODES)].dropna()
            entry["shared_core_slowdown"] = _sig(both[SHARED_MODES[1]].sum()
                                                 / both[SHARED_MODES[0]].sum())
        out[str(fw)] = entry
    return out


def calibrate(path: Path | None = None) -> dict:
    """The description constants recomputed from the microbenchmark CSV."""
    df = read_microbenchmarks(path)
    machine = next((m for m in df.machine.dropna()), "")
    return {"source": f"validation/traces/{CSV_NAME}", "machine": str(machine),
            "fit": {"large_bytes": LARGE_BYTES, "small_bytes": SMALL_BYTES,
                    "max_rounds": MAX_ROUNDS},
            "collectives": collective_constants(df), "cpu": cpu_constants(df)}


def write_description(data: dict, path: Path | None = None) -> Path:
    path = Path(path) if path is not None else traces_root() / DESCRIPTION_NAME
    atomic_write_text(path, HEADER + yaml.safe_dump(data, sort_keys=False, width=100))
    return path


@cache
def _load(path: str) -> dict:
    return read_yaml(Path(path), "capture-machine description")


def load_description(path: Path | None = None) -> dict:
    """The shipped constants (``validation/traces/capture_description.yaml``).

    :raises ConfigError: missing or malformed file.
    """
    path = Path(path) if path is not None else traces_root() / DESCRIPTION_NAME
    data = _load(str(path.resolve()))
    if not isinstance(data, dict) or "collectives" not in data or "cpu" not in data:
        raise ConfigError("not a capture-machine description (needs collectives and cpu)",
                          source=str(path))
    return data


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m simulator.validation.captured.calibration")
    ap.add_argument("--csv", type=Path, default=None)
    ap.add_argument("--write", action="store_true", help="write capture_description.yaml")
    args = ap.parse_args(argv)
    data = calibrate(args.csv)
    for label, entry in data["collectives"].items():
        for n, ops in entry["ranks"].items():
            for op, k in ops.items():
                print(f"{label:>8} {n} ranks {op:<15} alpha {1e3 * k['alpha_s']:6.2f} ms  "
                      f"efficiency {k['efficiency']:.3f}  max |err| >= 1 MiB "
                      f"{100 * k['max_rel_err_large']:.0f}%")
    for fw, entry in data["cpu"].items():
        print(fw, {m: v["matmul_gflop_per_s"] for m, v in entry["modes"].items()},
              "shared-core slowdown", entry.get("shared_core_slowdown"))
    if args.write:
        print(f"wrote {write_description(data)}")


if __name__ == "__main__":
    main()

"""Energy in words and lines, as ``run``, ``plan`` and report.html say it."""

from __future__ import annotations

from .model import Energy


def energy_rows(e: Energy | None, gpu: str = "") -> list[tuple[str, str]]:
    """(name, value) lines that ``run`` prints after its metrics; one line saying why for a
    GPU without power data."""
    if e is None:
        return [("energy", f"n/a: no power data for {gpu or 'this GPU'} "
                           f"(simulator/data/power.yaml)")]
    rows = [("energy_per_step_kwh", f"{e.kwh_per_step:.4g} kWh (facility, PUE {e.pue:g})"),
            ("avg_gpu_power_w", f"{e.avg_gpu_w:,.0f} W"),
            ("peak_gpu_power_w", f"{e.peak_gpu_w:,.0f} W"),
            ("avg_node_power_w", f"{e.avg_node_w:,.0f} W (AC, {e.nodes} node(s))"),
            ("peak_node_power_w", f"{e.peak_node_w:,.0f} W")]
    if e.kwh_per_million_tokens is not None:
        rows += [("kwh_per_1m_tokens", f"{e.kwh_per_million_tokens:.4g} kWh"),
                 ("co2_kg_per_1m_tokens", f"{e.co2_kg_per_million_tokens:.4g} kg "
                                          f"({e.carbon_kg_per_kwh:g} kg/kWh)"),
                 ("elec_usd_per_1m_tok", f"{e.usd_per_million_tokens:.4g} USD "
                                                   f"({e.usd_per_kwh:g} USD/kWh)")]
    if e.power_cap_w is not None:
        rows.append(("power_cap_w", f"{e.power_cap_w:g} W per GPU"))
    return rows


def energy_sentence(e: Energy | None) -> str | None:
    """The energy of a step in one sentence a manager reads (None without power data)."""
    if e is None:
        return None
    per_m = ""
    if e.kwh_per_million_tokens is not None:
        per_m = (f"; a million tokens take {e.kwh_per_million_tokens:.3g} kWh, "
                 f"{e.co2_kg_per_million_tokens:.3g} kg of CO2 and "
                 f"${e.usd_per_million_tokens:.3g} of electricity")
    cap = f" under a {e.power_cap_w:g} W cap" if e.power_cap_w is not None else ""
    return (f"Each step uses {e.kwh_per_step:.3g} kWh at the site, cooling included "
            f"(PUE {e.pue:g}){per_m}. Each GPU averages {e.avg_gpu_w:,.0f} W{cap} "
            f"(peak {e.peak_gpu_w:,.0f} W) and each server {e.avg_node_w / 1e3:.2f} kW "
            f"(peak {e.peak_node_w / 1e3:.2f} kW).")

"""The Selene memory rows (``korthikanti_selene_memory.csv``) against
:func:`simulator.strategies.parallel.memory.rank_memory`, each gated at ``gates.memory``.

What each figure counts, and so what is compared:

* Figure 1, "parameters + optimizer state memory per GPU": the model state of a rank whose
  stage holds transformer layers only (Megatron's 18 bytes per parameter, no distributed
  optimizer): a middle stage, or the only stage when ``pp = 1`` (embedding and head
  included there). The first stage's extra (the word embedding) is reported beside it.
* Figure 1, "activation memory per GPU": the transformer layers' saved activations on the
  first stage (the most micro-batches in flight), activation only: no embedding or head
  terms, no recompute working set, as the figure counts.
* Figure 7, activation memory in percent of the run without recompute or sequence
  parallelism: the same layer activations, in each mode over the ``none`` mode (the
  ``none`` rows themselves, 100% by definition, are reported, not gated).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from simulator.strategies.parallel.memory import rank_memory
from simulator.validation.parallel.cases import (CasesFile, Run, model_for, read_rows, run_of,
                                                 short)

GIB = 2 ** 30
STATE = "parameters + optimizer state memory per GPU"
ACTIVATIONS = "activation memory per GPU"
RELATIVE = "activation memory relative to no-recompute/no-seq-par baseline"
MEMORY_COLUMNS = ["figure", "mode", "quantity", "value", "unit"]


def _memory(model, run: Run, stage: int):
    return rank_memory(model, run.plan, seq_len=run.seq_len, micro_batch=run.micro_batch,
                       micro_batches=run.micro_batches, precision="fp16", optimizer="adam",
                       ac=run.ac, flash=False, stage=stage)


def _baseline(run: Run) -> Run:
    """The same run without recompute or sequence parallelism (Figure 7's 100%)."""
    return dataclasses.replace(run, ac="none",
                               plan=dataclasses.replace(run.plan, sequence_parallel=False))


def simulated(model, run: Run, quantity: str) -> tuple[float, str]:
    """(simulated value in the row's unit, what was compared)."""
    if quantity == STATE:
        stage = run.plan.pp // 2
        mem, first = _memory(model, run, stage), _memory(model, run, 0)
        note = (f"stage {stage} of {run.plan.pp}; first stage (embedding) "
                f"{first.state_bytes / GIB:.2f} GiB" if run.plan.pp > 1
                else "the only stage, embedding and head included")
        return mem.state_bytes / GIB, note
    mem = _memory(model, run, 0)
    if quantity == ACTIVATIONS:
        return (mem.layer_activations_bytes / GIB,
                f"layers on stage 0, {mem.in_flight} chunk activations in flight")
    base = _memory(model, _baseline(run), 0)
    return (100 * mem.layer_activations_bytes / base.layer_activations_bytes,
            "layer activations on stage 0 over the no-recompute, no-SP run")


def memory_rows(root: Path, spec: CasesFile) -> list[dict]:
    """One result row per memory row of the CSV (columns of :mod:`.report`)."""
    source = str(Path(root) / spec.files.memory)
    df = read_rows(root, spec.files.memory, [*MEMORY_COLUMNS, "source"])
    models, rows = {}, []
    for row in df.to_dict("records"):
        run = run_of(row, spec, source)
        if run.model_ref not in models:
            models[run.model_ref] = model_for(root, run.model_ref)
        sim, note = simulated(models[run.model_ref], run, row["quantity"])
        measured = float(row["value"])
        error = (sim - measured) / measured
        what = {STATE: "state", ACTIVATIONS: "activations"}.get(row["quantity"], "relative")
        fig = row["figure"].replace("Figure ", "fig")
        baseline = what == "relative" and run.mode == "none"    # 100% by definition
        rows.append({
            "case": f"parallel/selene/{short(run.label)}/{fig}/{row['mode']}/{what}",
            "kind": "memory", "model": run.label, "mode": row["mode"],
            "quantity": row["quantity"], "unit": row["unit"], "measured": measured,
            "simulated": sim, "error": error, "bound": spec.gates.memory,
            "ok": None if baseline else abs(error) <= spec.gates.memory,
            "note": "the baseline (100% by definition): not gated" if baseline else note,
            "source": row["source"]})
    return rows


__all__ = ["ACTIVATIONS", "RELATIVE", "STATE", "memory_rows", "simulated"]

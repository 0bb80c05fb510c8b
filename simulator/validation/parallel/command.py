"""``clustersim validate parallel``: Megatron-LM on Selene (memory and iteration times,
gated), NeMo and Megatron-Bridge on DGX H100 and Blackwell, Megatron-LM on one DGX B200
(reported)."""

from __future__ import annotations

from pathlib import Path

import click

from simulator.progress import quiet_option, stage
from simulator.validation.commands import gated_exit, parallel_cases, report_folder


@click.command("parallel")
@click.option("--out", "out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Report folder: new, empty or written by clustersim "
                   "[default: validation/parallel].")
@click.option("--no-nemo", "no_nemo", is_flag=True,
              help="Skip the NeMo, Megatron-Bridge (H100, Blackwell), SimuMax B200 and MLPerf "
                   "GPT-3 rows (reported, not gated).")
@click.option("--workers", type=click.IntRange(min=1, max=64), default=1,
              help="Processes simulating the runs at once [default: 1].")
@click.option("--max-gpus", "max_gpus", type=click.IntRange(min=1), default=None,
              help="Simulate the Selene runs up to this many GPUs [default: cases.yaml's "
                   "selene_max_gpus, 64: the 530B and 1T runs are listed, not simulated; "
                   "512 runs all, 5-8 CPU minutes and 5-6 GB each for those two].")
@quiet_option
def validate_parallel(out, no_nemo=False, workers=1, max_gpus=None):
    """Megatron-LM GPT 22B-1T on Selene (Korthikanti et al. 2022), NeMo and Megatron-Bridge
    on DGX H100, Megatron-Bridge on B200/GB200/B300/GB300, Megatron-LM on one DGX B200 (SimuMax's
    runs) and MLPerf Training v4.1 GPT-3 175B on 64-11,616 GPUs (validation/parallel/); nothing is calibrated on these rows but SimuMax's 24 dense
    B200 rows, the declared calibration split of the Blackwell matmul factor (cases.yaml).

    Gates: each Selene memory row (parameters + optimizer state, activations, Figures 1 and
    7) within 10% of the memory model; the median |iteration-time error| of the simulated
    Selene runs within 10%. The NeMo and Megatron-Bridge rows (FP8, MXFP8, BF16) are
    reported per GPU, dense and MoE apart, SimuMax's B200 runs per split and the MLPerf
    GPT-3 steps. Writes report.md and
    results.csv. Exit code 0: every gated case passes; 3: only known misses
    (validation/known_misses.yaml) fail; 1: any other failure.
    """
    from simulator.validation.parallel.cases import default_root
    from simulator.validation.parallel.report import summary_line, validate, write_report
    folder = report_folder(out, default_root())
    stage("validate parallel: memory model, then the Selene, NeMo, Megatron-Bridge and "
          "SimuMax runs, MLPerf GPT-3")
    df = validate(nemo=not no_nemo, workers=workers, max_gpus=max_gpus)
    report = write_report(df, folder)
    click.echo(summary_line(df))
    click.echo(f"report: {report}")
    gated_exit(parallel_cases(df))


__all__ = ["validate_parallel"]

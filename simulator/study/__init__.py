"""What-if studies: a scenario swept over axes, run locally or on a Dask cluster, with
resumable results, plots and a report (``clustersim study``, docs/studies.md).

Layers: :mod:`.spec` (the study file), :mod:`.points` (axes -> checked, self-contained
points), :mod:`.commands` (what runs per point, the worker entry point), :mod:`.executors`
(this process, local processes, Dask), :mod:`.parts` (one point's stamped Parquet part),
:mod:`.store` (the output folder: its lock, parts checked and set aside, resume),
:mod:`.answers` / :mod:`.plots` / :mod:`.report` (the outputs), :mod:`.runner` (all of it).
"""

from .runner import StudyRun, load_study, resolve_study, run_study

__all__ = ["StudyRun", "load_study", "resolve_study", "run_study"]

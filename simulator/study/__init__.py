"""What-if studies: a scenario swept over axes, run locally or on a Dask cluster, with
resumable results, plots and a report (``clustersim study``, docs/studies.md).

Layers: :mod:`.spec` (the study file), :mod:`.points` (axes -> checked, self-contained
points), :mod:`.commands` (what runs per point, the worker entry point), :mod:`.executors`
(this process, local processes, Dask), :mod:`.parts` (one point's stamped Parquet part),
:mod:`.store` (the output folder: its lock, parts checked and set aside, resume),
:mod:`.answers` / :mod:`.plots` / :mod:`.report` (the outputs), :mod:`.runner` (all of it).
"""

__all__ = ["StudyRun", "load_study", "resolve_study", "run_study"]


def __getattr__(name: str):
    # The runner (and through it the topology loader and networkx) loads at the first use
    # of a name, not with the package: `clustersim study` finds its file before that.
    if name in __all__:
        from . import runner
        return getattr(runner, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

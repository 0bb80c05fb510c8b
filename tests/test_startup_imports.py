"""What a command loads before it starts working (issue 20, README "Speed", start-up).

Start-up time is mostly imports, so the guard is on the modules a fresh interpreter has
loaded at the moment the work would begin, not on a clock: a heavy library, or the stack of
a strategy or command that is not used, showing up there is the regression.
"""

from __future__ import annotations

import json
import subprocess
import sys

# Libraries that only some outputs need (tables, plots, Parquet parts, a Dask cluster).
HEAVY = ("pandas", "matplotlib", "pyarrow", "scipy", "dask", "distributed", "PIL")
# What `clustersim --help` does without: the simulator's own libraries.
SIMULATOR_LIBS = ("numpy", "networkx", "simpy", "pydantic")
SHOW = "print(json.dumps(sorted(sys.modules)))"


def modules_after(code: str) -> list:
    """What ``code``, run by a fresh interpreter, prints last as JSON (``SHOW``)."""
    out = subprocess.run([sys.executable, "-c", "import json, sys\n" + code],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def present(modules, names) -> list[str]:
    """The ``names`` loaded in ``modules``, as packages or as any of their submodules."""
    return sorted(n for n in names
                  if any(m == n or m.startswith(n + ".") for m in modules))


def test_quickstart_run_loads_only_what_it_simulates():
    """`clustersim run` (the quick start, FSDP), stopped where the simulation would start:
    the strategy, model and cluster are built, and nothing else is loaded."""
    loaded = modules_after(f"""
import simulator.pipeline as pipeline
from simulator.cli import main
def stop(setup):
    {SHOW}
    raise SystemExit(0)
pipeline.run_setup = stop
main(["run", "-q"])
""")
    assert "simulator.strategies.fsdp" in loaded          # the stop is past the build
    assert present(loaded, HEAVY) == []
    assert present(loaded, ("simulator.parallel", "simulator.strategies.tf_common",
                            "simulator.strategies.horovod", "simulator.study",
                            "simulator.importers", "simulator.planner", "simulator.compare",
                            "simulator.capacity", "simulator.report",
                            "simulator.reliability.runner", "simulator.metrics.outputs")) == []


def test_help_loads_no_simulator_library():
    loaded = modules_after(f"""
from simulator.cli import main
try:
    main(["--help"])
except SystemExit:
    pass
{SHOW}
""")
    assert present(loaded, SIMULATOR_LIBS + HEAVY) == []


def test_study_replay_import_bodies_load_no_table_or_plot_library():
    """What the study, replay and import commands import before their work: pandas,
    pyarrow and matplotlib load only once a point has run, the replay is done, or --out
    asks for plots."""
    loaded = modules_after(f"""
from simulator.importers import import_trace
from simulator.importers.replay import collective_table, replay_trace
from simulator.study import load_study, run_study
from simulator.trace.io import read_trace
{SHOW}
""")
    assert "simulator.study.store" in loaded and "simulator.study.parts" in loaded
    assert present(loaded, HEAVY) == []


def test_strategies_load_when_named():
    """The registry names every strategy without loading it; looking one up loads it."""
    seen = modules_after("""
from simulator.strategies import STRATEGIES
names, before = list(STRATEGIES), sorted(sys.modules)
megatron, ps = STRATEGIES["megatron"], STRATEGIES["tf_ps"]
print(json.dumps({"names": names, "before": before, "after": sorted(sys.modules),
                  "classes": [megatron.config.__name__, ps.config.__name__]}))
""")
    assert seen["names"] == ["ddp", "fsdp", "tf_mirrored", "tf_multiworker", "tf_ps",
                             "tf_central_storage", "horovod", "megatron", "torchtitan",
                             "deepspeed"]
    assert present(seen["before"], ("simulator.parallel", "simulator.strategies.tf_ps",
                                    "simulator.strategies.horovod")) == []
    assert seen["classes"] == ["MegatronConfig", "PSConfig"]
    assert present(seen["after"], ("simulator.parallel.frameworks.megatron",
                                   "simulator.strategies.tf_ps")) == [
        "simulator.parallel.frameworks.megatron", "simulator.strategies.tf_ps"]
    assert "simulator.parallel.frameworks.deepspeed" not in seen["after"]

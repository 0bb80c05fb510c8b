"""Startup: a command loads only what it needs before it works. The heavy libraries that
only outputs need (pandas for tables and CSV, matplotlib for plots, Dask and pyarrow for
studies) are not imported by a command until it writes them, so `run`, `compare`,
`capacity` and `reliability` start working without them; `--help` and `list` load none of
the numeric stack. A strategy's module (and the 3-D parallel stack behind megatron,
torchtitan and deepspeed) loads when a scenario names it, so the quick start reaches its
simulation with FSDP's alone. (No wall-time assert: the modules are what a test can check;
the README gives `benchmarks/bench_startup.py` numbers.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
OUTPUT_ONLY = ("pandas", "matplotlib", "dask", "pyarrow", "scipy")
NUMERIC = ("numpy", "networkx", "simpy", "pandas", "matplotlib")
HEAVY = OUTPUT_ONLY + ("distributed", "PIL")
SHOW = "print(json.dumps(sorted(sys.modules)))"


def _loaded(argv: list[str], families: tuple[str, ...]) -> list[str]:
    """Top-level packages of ``families`` in sys.modules after ``clustersim ARGV``."""
    probe = (f"import sys\nfrom simulator.cli import main\ntry:\n    main({argv!r})\n"
             f"except SystemExit:\n    pass\n"
             f"print('LOADED:', *sorted({{m.split('.')[0] for m in sys.modules}} & "
             f"{set(families)!r}), file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stderr.splitlines() if x.startswith("LOADED:"))
    return line.split()[1:]


@pytest.mark.parametrize("command", ["run", "compare", "capacity", "reliability", "trace"])
def test_a_command_loads_no_output_library_before_it_works(command):
    # a bad precision stops each command at its first look at the scenario, after every
    # import its body does before working
    argv = [command, "--set", "training.precision=nosuch"]
    argv += ["-o", "unused.json"] if command == "trace" else []
    assert _loaded(argv, OUTPUT_ONLY) == []


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["list", "topologies"],
                                  ["list", "scenarios"], ["--version"]])
def test_help_and_list_load_no_numeric_library(argv):
    assert _loaded(argv, NUMERIC) == []


# ---- what is loaded where the work starts, submodules included (issue 20)
def modules_after(code: str) -> list:
    """What ``code``, run by a fresh interpreter, prints last as JSON (``SHOW``)."""
    out = subprocess.run([sys.executable, "-c", "import json, sys\n" + code], cwd=REPO,
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def present(modules, names) -> list[str]:
    """The ``names`` loaded in ``modules``, as packages or as any of their submodules."""
    return sorted(n for n in names
                  if any(m == n or m.startswith(n + ".") for m in modules))


COMPARE_NOT_COST = sorted(p.stem for p in (REPO / "simulator" / "compare").glob("*.py")
                          if p.stem not in ("__init__", "cost"))


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
    assert {"runner", "report", "charts"} <= set(COMPARE_NOT_COST)
    assert present(loaded, ("simulator.strategies.parallel", "simulator.strategies.frameworks",
                            "simulator.strategies.tf_common",
                            "simulator.strategies.horovod", "simulator.study",
                            "simulator.importers", "simulator.planner",
                            # compare's runs, tables and charts; its cost module prices
                            # run's step (one price for both) and loads pydantic alone
                            *(f"simulator.compare.{m}" for m in COMPARE_NOT_COST),
                            "simulator.capacity", "simulator.report",
                            "simulator.reliability.runner", "simulator.metrics.outputs",
                            "simulator.validation.commands", "simulator.validation.suite")) == []


def test_study_replay_import_bodies_load_no_table_or_plot_library():
    """What the study, replay and import commands import before their work: pandas,
    pyarrow and matplotlib load only once a point has run, the replay is done, or --out
    asks for plots."""
    loaded = modules_after(f"""
from simulator.importers import import_trace
from simulator.trace_replay import collective_table, replay_trace
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
    assert present(seen["before"], ("simulator.strategies.parallel",
                                    "simulator.strategies.frameworks",
                                    "simulator.strategies.tf_ps",
                                    "simulator.strategies.horovod")) == []
    assert seen["classes"] == ["MegatronConfig", "PSConfig"]
    assert present(seen["after"], ("simulator.strategies.frameworks.megatron",
                                   "simulator.strategies.tf_ps")) == [
        "simulator.strategies.frameworks.megatron", "simulator.strategies.tf_ps"]
    assert "simulator.strategies.frameworks.deepspeed" not in seen["after"]


# ---- a bad input is refused before the simulation stack loads (issue 20)
SIM_STACK = ("numpy", "networkx", "simpy", "simulator.engine", "simulator.pipeline",
             "simulator.cluster", "simulator.network", "simulator.collectives.model",
             "simulator.strategies", "simulator.topology")
BAD_SCENARIO = ["--set", "training.precision=nosuch"]


def refusal(argv: list[str]) -> tuple[object, str, list[str]]:
    """(exit code, stderr, every module loaded) of ``clustersim ARGV`` in a fresh
    interpreter that stops where the command stops."""
    code = (f"from simulator.cli import main\ntry:\n    main({argv!r})\n"
            f"except SystemExit as exc:\n    print(json.dumps(exc.code))\n{SHOW}")
    out = subprocess.run([sys.executable, "-c", "import json, sys\n" + code], cwd=REPO,
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    lines = out.stdout.strip().splitlines()
    return json.loads(lines[-2]), out.stderr, json.loads(lines[-1])


@pytest.mark.parametrize("command", ["run", "compare", "capacity", "reliability", "plan",
                                     "trace"])
def test_a_bad_scenario_is_refused_before_the_simulator_loads(command):
    argv = [command, *BAD_SCENARIO] + (["-o", "unused.json"] if command == "trace" else [])
    code, err, loaded = refusal(argv)
    assert code == 2
    assert err.startswith("clustersim: error: ") and "training.precision" in err
    assert present(loaded, SIM_STACK + HEAVY) == []
    assert "pydantic" in loaded and "simulator.scenario" in loaded   # the input was read


def test_a_missing_trace_is_refused_before_the_simulator_loads():
    code, err, loaded = refusal(["replay", "/nonexistent/trace.json"])
    assert code == 2 and "cannot read trace file: no such file" in err
    assert "simulator.trace.io" in loaded
    assert present(loaded, SIM_STACK + HEAVY + ("simulator.importers",)) == []


def test_import_refuses_an_existing_output_before_the_importers_load(tmp_path):
    taken = tmp_path / "taken.json"
    taken.write_text("{}")
    code, err, loaded = refusal(["import", "pytorch", "/nonexistent/trace.json", "-o",
                                 str(taken)])
    assert code == 2 and "file exists" in err
    assert present(loaded, SIM_STACK + HEAVY + ("simulator.importers", "pydantic")) == []


@pytest.mark.parametrize("argv", [["topology", "nosuch-topology"],
                                  ["collective", "all_reduce", "--topology", "nosuch-topology"],
                                  ["study", "/nonexistent/study.yaml"]])
def test_a_bad_name_is_refused_before_numpy_and_the_engine_load(argv):
    # the topology loader's generators build networkx graphs, so networkx is loaded here
    code, err, loaded = refusal(argv)
    assert code == 2 and err.startswith("clustersim: error: ")
    assert argv[-1] in err                        # the name it refused
    assert present(loaded, ("numpy", "simpy", "simulator.engine", "simulator.pipeline",
                            "simulator.cluster", "simulator.collectives.model") + HEAVY) == []
    if argv[0] == "study":      # a study finds its file before the runner (and networkx) load
        assert present(loaded, ("networkx", "simulator.study.runner",
                                "simulator.topology")) == []


def test_a_scenario_with_default_variability_validates_without_the_engine():
    """`simulation.variability: default | none` is checked by name; a mapping of sigmas is
    checked by the engine's own reader (it still refuses a bad sigma, test_variability)."""
    loaded = modules_after(f"""
from simulator.scenario import load_scenario, resolve_scenario
for v in ("default", "none"):
    load_scenario(resolve_scenario("quickstart"), [f"simulation.variability={{v}}"])
{SHOW}
""")
    assert present(loaded, ("numpy", "simulator.engine")) == []


def test_a_lazy_module_loads_at_its_first_attribute(tmp_path, monkeypatch):
    from simulator.lazy import LazyModule
    (tmp_path / "lazy_probe_mod.py").write_text("X = 3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "lazy_probe_mod", raising=False)
    probe = LazyModule("lazy_probe_mod")
    assert "lazy_probe_mod" not in sys.modules and "not loaded yet" in repr(probe)
    assert probe.X == 3 and "lazy_probe_mod" in sys.modules
    assert probe.module() is sys.modules["lazy_probe_mod"]


def test_trace_checks_load_numpy_when_they_check():
    loaded = modules_after(f"""
from simulator.trace.matching import ranks_array
before = sorted(sys.modules)
assert ranks_array((3, 4)).tolist() == [3, 4]
print(json.dumps([m for m in before if m == "numpy"] + ["after:" + m for m in sys.modules
                                                          if m == "numpy"]))
""")
    assert loaded == ["after:numpy"]


def _entry(argv: list[str]) -> subprocess.CompletedProcess:
    """``clustersim ARGV`` through the console script's :func:`entry`, in a process that
    registered an exit handler (it prints TEARDOWN if Python's teardown runs)."""
    probe = (f"import atexit, sys\natexit.register(print, 'TEARDOWN', file=sys.stderr)\n"
             f"sys.argv = ['clustersim', *{argv!r}]\nfrom simulator.cli import entry\nentry()")
    return subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})


def test_the_console_script_ends_without_teardown_its_output_whole():
    done = _entry(["run", "--format", "json"])
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["world_size"] == 8        # every byte flushed
    assert "TEARDOWN" not in done.stderr


def test_the_console_script_keeps_main_s_exit_codes():
    done = _entry(["run", "no-such-scenario"])
    assert done.returncode == 2 and "TEARDOWN" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("clustersim: error: scenario:")
    assert _entry(["--version"]).returncode == 0


def test_the_installed_script_and_module_run_entry():
    import tomllib
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["clustersim"] == "simulator.cli:entry"
    for main in (REPO / "simulator" / "cli" / "__main__.py", REPO / "simulator" / "__main__.py"):
        assert "entry()" in main.read_text()


def test_only_the_executable_keeps_a_replay_to_the_end():
    """In the process of the ``clustersim`` executable (it ends with os._exit) a replay's
    working objects and `run`'s setup and timeline are held to the end, one per name; in a
    library process nothing is held (lifetime.keep does nothing)."""
    probe = """
import sys, weakref
from simulator import lifetime
from simulator.cli import main
class Big:
    pass
a, b = Big(), Big()
lifetime.keep("x", a)
print("library holds:", sorted(lifetime._kept))
lifetime.ends_with_exit()
lifetime.keep("x", a)
lifetime.keep("y", b)
gone = weakref.ref(a)
del a
lifetime.keep("x", Big())          # the next object under a name frees the one before
print("executable holds:", sorted(lifetime._kept), "first freed:", gone() is None)
try:
    main(["run", "--format", "json"])
except SystemExit:
    pass
print("after run:", sorted(lifetime._kept), type(lifetime._kept["replay"]).__name__)
"""
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    lines = [x for x in done.stdout.splitlines() if x.startswith(("library", "executable",
                                                                   "after"))]
    assert lines == ["library holds: []", "executable holds: ['x', 'y'] first freed: True",
                     "after run: ['replay', 'run', 'x', 'y'] Job"]


def test_the_console_script_under_a_profiler_exits_as_python_does(tmp_path):
    """`python -m cProfile -m simulator.cli ...` writes its profile at exit: the console
    script leaves a profiled (or traced, coverage) process to Python's own exit."""
    out = tmp_path / "prof.out"
    done = subprocess.run([sys.executable, "-m", "cProfile", "-o", str(out), "-m",
                           "simulator.cli", "--version"], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert "clustersim" in done.stdout and out.stat().st_size > 0


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads in /proc")
def test_the_command_line_keeps_blas_to_one_thread_and_a_users_choice():
    """The CLI sets OPENBLAS_NUM_THREADS=1 before numpy loads (OpenBLAS would start a
    spinning thread per core); a value the user set wins. Counted in the process: with
    numpy loaded after `simulator.cli`, the interpreter has its one thread."""
    probe = ("import os, sys\nimport simulator.cli\nimport numpy\n"
             "print(os.environ['OPENBLAS_NUM_THREADS'], len(os.listdir('/proc/self/task')))")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    for given, expected in ((None, "1"), ("2", "2")):
        run_env = {**env, "PYTHONPATH": str(REPO),
                   **({} if given is None else {"OPENBLAS_NUM_THREADS": given})}
        out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True,
                             text=True, timeout=120, env=run_env)
        assert out.returncode == 0, out.stderr
        value, threads = out.stdout.split()
        assert value == expected
        if given is None:
            assert threads == "1"


def test_the_command_line_collects_garbage_per_100000_allocations():
    """The CLI's first generation holds 100,000 allocations before a pass (the default 700
    walked the imports' objects over and over); the older generations keep their pace."""
    probe = ("import gc\ndefault = gc.get_threshold()\nimport simulator.cli\n"
             "print(*default, *gc.get_threshold())")
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True,
                         text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr
    before, after = out.stdout.split()[:3], out.stdout.split()[3:]
    assert after == ["100000", *before[1:]]


def test_a_run_makes_no_garbage_collector_pass():
    """`clustersim run` (the quick start): its imports, scenario, setup and replay hold the
    collector (simulator.gcpause) or stay under the 100,000 allocations a pass waits for,
    so not one pass walks what they built (one pass over the freshly imported modules took
    29 ms at 16,384 GPUs)."""
    probe = ("import gc, sys\npasses = []\n"
             "gc.callbacks.append(lambda phase, info: passes.append(info['generation'])\n"
             "                    if phase == 'start' else None)\n"
             "from simulator.cli import main\ntry:\n    main(['run', '-q'])\n"
             "except SystemExit:\n    pass\nprint('PASSES', len(passes), file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True,
                         text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr
    assert "PASSES 0" in out.stderr.splitlines()[-1]


def test_a_whole_quickstart_run_loads_no_yaml_parser_from_the_caches_nor_the_3d_stack(tmp_path):
    """The quick start reads only shipped YAML (its scenario, its topology, data files): once
    their parsed values are kept (a first run, writing bytecode), a run loads no PyYAML
    (simulator.yamlparse, ~10 ms of every start). Its header's words load no part of the 3-D
    parallel stack (simulator.planwords). docs/speed.md."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONPYCACHEPREFIX": str(tmp_path)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    probe = ("import json, sys\nfrom simulator.cli import main\ntry:\n    main(['run', '-q'])\n"
             "except SystemExit:\n    pass\nprint(json.dumps(sorted(sys.modules)), file=sys.stderr)")
    runs = [subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True,
                           text=True, timeout=300, env=env) for _ in range(2)]
    first, again = (json.loads(r.stderr.strip().splitlines()[-1]) for r in runs)
    assert "yaml" in first                          # the first run parsed (and kept) them
    assert present(again, ("yaml", "simulator.yamlparse")) == []
    assert present(again, ("simulator.strategies.parallel", "simulator.planner",
                           "simulator.strategies.frameworks")) == []

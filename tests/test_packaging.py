"""The package as people install it: a wheel built from the sources carries every shipped
scenario, study, config, topology and catalog file and the validation data, and a fresh
virtual environment with that wheel runs every command of README.md from an empty folder
(with test_doc_examples' cheaper options, ~1 min), `validate` as from a checkout, and names
a shipped scenario by its name in errors; an editable install (this test run's) resolves the
same names from any folder."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

from simulator import __version__
from simulator.shipped import FOLDERS, find_shipped, shipped_names

REPO = Path(__file__).resolve().parents[1]
SOURCES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "simulator", "scenarios",
           "topologies", "validation")


def _yaml_files(folder: Path) -> set[str]:
    """The shipped files of a kind's folder (a config keeps its own ending)."""
    pattern = "*" if folder.name == "configs" else "*.yaml"
    return {p.relative_to(folder).as_posix() for p in folder.glob(pattern) if p.is_file()}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """A wheel built by pip from a copy of the sources (no stale build/ folder)."""
    src = tmp_path_factory.mktemp("src")
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(REPO / name, src / name)
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w",
                           str(out), str(src)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    (whl,) = out.glob("clustersim-*.whl")
    assert whl.name.startswith(f"clustersim-{__version__}-")    # one version, one place
    return whl


def test_wheel_carries_every_shipped_file(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for kind, folder in FOLDERS.items():
        expected = {f"simulator/_shipped/{folder}/{f}" for f in _yaml_files(REPO / folder)}
        assert expected and expected <= names, kind
    data = REPO / "simulator" / "data"
    catalog = {f"simulator/{p.relative_to(data.parent).as_posix()}"
               for p in data.rglob("*") if p.suffix in (".yaml", ".csv")}
    assert catalog and catalog <= names        # models, GPUs, links, prices, histograms...
    assert "simulator/__main__.py" in names
    configs = {f"simulator/_shipped/scenarios/configs/{p.name}"
               for p in (REPO / "scenarios" / "configs").iterdir()}
    assert configs and configs <= names                  # `run --config ds_zero3.json`
    for needed in ("known_misses.yaml", "traces/a100/nccl_data.json.gz",
                   "collectives/cases.yaml", "training/cases.yaml"):
        assert f"simulator/_shipped/validation/{needed}" in names, needed
    assert not any(n.startswith("simulator/_shipped/validation/capture/") or
                   n.endswith((".png", ".md", ".py")) and "_shipped/validation" in n
                   for n in names)                       # data only, no reports or scripts


@pytest.fixture(scope="module")
def fresh_venv(wheel, tmp_path_factory) -> Path:
    """A new virtual environment holding only the wheel; its dependencies come from this
    test run's environment (a path entry, so nothing is downloaded)."""
    env_dir = tmp_path_factory.mktemp("venv")
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path("
                           "'purelib'))"], capture_output=True, text=True, check=True)
    Path(site.stdout.strip(), "_deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                           "-q", "--no-deps", "--no-index", str(wheel)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return env_dir


def _run(env_dir: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([str(env_dir / "bin" / "clustersim"), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_wheel_install_runs_from_any_folder(fresh_venv, tmp_path):
    where = subprocess.run([str(fresh_venv / "bin" / "python"), "-c",
                            "import simulator; print(simulator.__file__)"], cwd=tmp_path,
                           capture_output=True, text=True, check=True,
                           env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert Path(where.stdout.strip()).is_relative_to(fresh_venv)    # not the repository
    run = _run(fresh_venv, tmp_path, "run", "--quiet")
    assert run.returncode == 0, run.stderr
    assert "iteration_time_s" in run.stdout
    compare = _run(fresh_venv, tmp_path, "compare", "--strategies", "fsdp-full,ddp")
    assert compare.returncode == 0, compare.stderr
    assert "fsdp-full" in compare.stdout and "ddp" in compare.stdout
    fleet = _run(fresh_venv, tmp_path, "cluster", "--set", "generate.jobs=4", "--quiet")
    assert fleet.returncode == 0, fleet.stderr          # the shipped mix, by its default name
    assert "4 done of 4" in fleet.stdout
    listed = _run(fresh_venv, tmp_path, "list", "topologies")
    assert [line.split()[0] for line in listed.stdout.splitlines()] == \
        sorted(p.stem for p in (REPO / "topologies").glob("*.yaml"))
    version = _run(fresh_venv, tmp_path, "--version")
    assert version.stdout.strip() == f"clustersim {__version__}"
    assert list(tmp_path.iterdir()) == []          # nothing written where it ran


def test_editable_install_resolves_names_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert find_shipped("scenarios", "quickstart") == REPO / "scenarios" / "quickstart.yaml"
    assert find_shipped("studies", "link-latency.yaml") == \
        REPO / "scenarios" / "studies" / "link-latency.yaml"
    assert shipped_names("topologies") == sorted(p.stem for p in
                                                 (REPO / "topologies").glob("*.yaml"))
    assert find_shipped("topologies", "no-such-thing") is None


def test_a_local_file_wins_over_the_shipped_one(tmp_path, monkeypatch):
    (tmp_path / "scenarios").mkdir()
    (tmp_path / "scenarios" / "quickstart.yaml").write_text("name: mine\n")
    monkeypatch.chdir(tmp_path)
    assert find_shipped("scenarios", "quickstart") == Path("scenarios/quickstart.yaml").absolute()


def test_python_dash_m_simulator(tmp_path):
    done = subprocess.run([sys.executable, "-m", "simulator", "--version"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == f"clustersim {__version__}"


def _readme_commands() -> list[list[str]]:
    """The fenced ``clustersim`` lines of README.md that are examples, as test_doc_examples
    runs them (its cheaper options appended; the ones it does not run left out)."""
    import shlex

    from test_doc_examples import CHEAPER, NOT_RUN, _lines, _synopsis
    out = []
    for line in _lines(REPO / "README.md"):
        if _synopsis(line) or line in NOT_RUN:
            continue
        extra = next((v for k, v in CHEAPER.items() if line.startswith(k)), [])
        out.append([*shlex.split(line), *extra])
    return out


def test_every_readme_command_runs_from_a_wheel(fresh_venv, tmp_path):
    commands = _readme_commands()
    assert len(commands) >= 10
    for args in commands:
        done = _run(fresh_venv, tmp_path, *args)
        ok = (0, 3) if args[0] == "validate" else (0,)   # 3: only known misses miss
        assert done.returncode in ok, f"{args}: {done.stderr[-1500:]}"


def test_validate_from_a_wheel_is_as_from_a_checkout(fresh_venv, tmp_path):
    done = _run(fresh_venv, tmp_path, "validate", "traces")
    assert done.returncode == 3, done.stderr[-1500:]             # the known miss, not FAIL
    assert "known miss: traces/a100/nccl-kernels" in done.stdout
    assert not any(x.startswith("FAIL:") for x in done.stdout.splitlines())
    assert (tmp_path / "validation-report" / "traces" / "report.md").is_file()
    assert "--root" not in done.stderr
    done = _run(fresh_venv, tmp_path, "validate", "collectives", "-q")   # ~20 s
    assert done.returncode == 3, done.stderr[-1500:]
    assert "known miss: collectives/" in done.stdout
    assert not any(x.startswith("FAIL:") for x in done.stdout.splitlines())
    assert (tmp_path / "validation-report" / "collectives" / "report").is_dir()


def test_errors_from_a_wheel_name_what_the_user_named(fresh_venv, tmp_path):
    done = _run(fresh_venv, tmp_path, "run", "--set", "training.micro_bach=2")
    assert done.returncode == 2
    assert done.stderr.startswith("clustersim: error: scenario quickstart: --set "
                                  "training.micro_bach: unknown key"), done.stderr
    assert "did you mean 'micro_batch'?" in done.stderr and "site-packages" not in done.stderr

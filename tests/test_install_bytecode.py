"""An editable install compiles clustersim's own modules (setup.py ``compile_sources``), so a
machine that sets ``PYTHONDONTWRITEBYTECODE`` still starts from bytecode instead of compiling
every module at every start (docs/speed.md, start-up). Python reads that bytecode although
it may not write any: checked with ``python -v``, which names each code object it loads from
a cache file."""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _setup_namespace() -> dict:
    """setup.py's functions and classes, without running ``setup()`` (it runs as __main__)."""
    return runpy.run_path(str(REPO / "setup.py"), run_name="clustersim_setup")


def _no_write_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPYCACHEPREFIX", "PYTHONPATH")}
    return {**env, "PYTHONDONTWRITEBYTECODE": "1"}


def test_compiled_sources_are_read_where_bytecode_may_not_be_written(tmp_path):
    pkg = tmp_path / "pkgx"
    (pkg / "sub").mkdir(parents=True)
    sources = {pkg / "__init__.py": "", pkg / "sub" / "__init__.py": "",
               pkg / "sub" / "mod.py": "X = 1\n"}
    for path, text in sources.items():
        path.write_text(text)
    env = _no_write_env()
    compile_it = ("import runpy, sys\nns = runpy.run_path(sys.argv[1], run_name='s')\n"
                  "ns['compile_sources'](sys.argv[2])")
    subprocess.run([sys.executable, "-c", compile_it, str(REPO / "setup.py"), str(pkg)],
                   env=env, check=True, timeout=60)
    tag = sys.implementation.cache_tag
    cached = [p.parent / "__pycache__" / f"{p.stem}.{tag}.pyc" for p in sources]
    assert all(p.is_file() for p in cached)
    done = subprocess.run([sys.executable, "-v", "-c", "import pkgx.sub.mod"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    for pyc in cached:                               # loaded from the file compile_sources wrote
        assert f"code object from '{pyc}'" in done.stderr


def test_an_editable_build_compiles_the_package_in_place():
    ns = _setup_namespace()
    from setuptools.dist import Distribution
    asked = []
    cmd = ns["BuildPyWithShipped"](Distribution({"name": "x", "packages": []}))
    cmd.run.__globals__["compile_sources"] = asked.append   # record instead of compiling
    cmd.editable_mode = True
    cmd.ensure_finalized()
    cmd.run()
    assert asked == [REPO / "simulator"]

"""The package's shape: no import cycle between modules (imports inside functions count, as a
lazy import hides a cycle from Python but not from the design), the machine side imports
nothing from the program side or the front hall, and the top level keeps no loose command
modules (docs/how-it-works.md, "Layout")."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

PACKAGE = Path(__file__).resolve().parents[1] / "simulator"

# Packages (or top-level modules) that replay a Trace on a machine; they must not know who
# wrote the Trace or who asked for the answer.
MACHINE = ("engine", "network", "collectives", "trace", "cluster", "routing", "routes",
           "memo")
ABOVE_MACHINE = ("cli", "capacity", "compare", "study", "reliability", "validation",
                 "strategies", "models", "importers", "pipeline", "scenario")
# The strategies: every trace generator (data-parallel, model-parallel under parallel/, the
# framework spellings under frameworks/) in one room, which builds on the models and the
# Trace and knows nothing of who runs it: the wiring and the front hall import it, not the
# other way round.
STRATEGIES_BELOW = ("models", "trace", "errors", "inputs", "lazy", "precision", "units",
                    "yamlio", "compute")


def _modules() -> dict[str, Path]:
    mods = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        mods[name] = path
    return mods


def _imports(name: str, path: Path, mods: dict[str, Path]) -> set[str]:
    """Modules of the package that ``name`` imports anywhere in its file."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in mods:           # a name inside a module
                target = target.rpartition(".")[0]
            # a package's own __init__ is not an edge from its submodules
            if target and target != name and not name.startswith(target + "."):
                found.add(target)
    return found


def _graph() -> nx.DiGraph:
    mods = _modules()
    G = nx.DiGraph()
    G.add_nodes_from(mods)
    for name, path in mods.items():
        G.add_edges_from((name, t) for t in _imports(name, path, mods))
    return G


def test_the_import_graph_is_read_like_the_tool_does():
    # A known edge of each kind: relative, absolute, function-level, package __init__.
    G = _graph()
    assert G.has_edge("simulator.pipeline", "simulator.topology.build")
    assert G.has_edge("simulator.engine.job", "simulator.engine.memory")
    assert G.has_edge("simulator.cli", "simulator.cli.validate")
    assert G.number_of_nodes() > 150


def test_no_module_imports_one_that_imports_it_back():
    cycles = [sorted(c) for c in nx.strongly_connected_components(_graph()) if len(c) > 1]
    assert cycles == []


def test_machine_side_imports_nothing_from_the_program_side_or_the_front_hall():
    G = _graph()

    def unit(module: str) -> str:
        return module.split(".")[1] if module.count(".") else ""

    upward = sorted((a, b) for a, b in G.edges
                    if unit(a) in MACHINE and unit(b) in ABOVE_MACHINE)
    assert upward == []


def test_no_loose_command_modules_at_the_top():
    loose = sorted(p.name for p in PACKAGE.glob("*.py")
                   if p.name.startswith(("cli", "capacity", "compare", "cost")))
    assert loose == []


def test_the_strategies_are_one_room_that_imports_only_what_is_below_it():
    G = _graph()
    assert not (PACKAGE / "parallel").exists() and not (PACKAGE / "configs").exists()
    out = sorted({b.split(".")[1] for a, b in G.edges if a.startswith("simulator.strategies")
                  and not b.startswith("simulator.strategies")})
    assert set(out) <= set(STRATEGIES_BELOW), out


def test_benchmarks_and_tools_use_no_private_name_of_the_package():
    """Scripts outside the package (benchmarks/) import only its public names: a private
    ``_name`` may change without notice (bench_plan.py imported cli.plan._global_batch)."""
    repo = PACKAGE.parent
    bad = []
    for path in sorted((repo / "benchmarks").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("simulator"):
                bad += [f"{path.relative_to(repo)}: {node.module}.{a.name}"
                        for a in node.names if a.name.startswith("_")]
    assert not bad, bad

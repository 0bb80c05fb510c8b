"""Measures of the house: the numbers an architecture review quotes, read from the source.

usage: python benchmarks/house.py [--list]

Prints, for ``simulator/``: rooms (packages, the top level one of them), modules, arrows
(distinct room -> room imports, imports inside functions included), arrows up (an import
from a lower layer of :data:`LAYERS` to a higher one), the largest module, functions over
40 lines (body, docstring excluded), functions with 8 or more parameters, private reaches
(``x._name`` where ``x`` is not ``self``/``cls``, and ``_name`` is not a dunder), uses of
SimPy or networkx internals (:data:`FOREIGN_PRIVATE`), and ops built by position
(``Op(...)`` with more than one positional argument). ``--list`` names each finding.
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "simulator"

# Rooms from the bottom up: a room may import its own layer and those below it. The top
# level's loose modules are one room, "(top)" (units, errors, choices, the cluster: the
# second layer), except those that wire the layers together (:data:`WIRING`), each a room
# of its own.
WIRING = {"pipeline", "accum", "scenario", "trace_replay", "__main__"}
LAYERS = [
    {"sim"},
    {"(top)", "network", "topology"},
    {"collectives", "trace", "compute"},
    {"engine", "models"},
    {"strategies", "importers"},
    {"metrics", "report", "accum", "pipeline", "scenario", "trace_replay"},
    {"reliability", "compare", "study", "capacity", "planner", "validation"},
    {"cli", "__main__"},
]
# attributes of SimPy's Environment/Event and networkx's graphs that are private to them
FOREIGN_PRIVATE = {"_queue", "_eid", "_now", "_ok", "_value", "_defused", "_adj", "_succ",
                   "_pred", "_node", "_active_proc"}
SIMPY_CALLBACKS = "callbacks"


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def room(module: str, mods: dict[str, Path]) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "(top)"
    if len(parts) == 2 and not mods[module].name == "__init__.py":
        return parts[1] if parts[1] in WIRING else "(top)"
    return parts[1]


def imports(name: str, path: Path, mods: dict[str, Path]) -> set[str]:
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
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
            while target and target not in mods:
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(target + "."):
                found.add(target)
    return found


def layer(r: str) -> int:
    for i, rooms in enumerate(LAYERS):
        if r in rooms:
            return i
    return len(LAYERS)


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = fn.args
    names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    names += [x.arg for x in (a.vararg, a.kwarg) if x is not None]
    return len([n for n in names if n not in ("self", "cls")])


def _body_lines(fn) -> int:
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None),
                                                              ast.Constant):
        body = body[1:]
    if not body:
        return 0
    return body[-1].end_lineno - body[0].lineno + 1


def _foreign_base(cls: ast.ClassDef) -> bool:
    """A class built on SimPy's (its ``self._now`` is SimPy's own)."""
    return any(isinstance(b, (ast.Name, ast.Attribute)) and
               ("simpy" in ast.unparse(b) or ast.unparse(b) in ("Environment", "Event"))
               for b in cls.bases)


def _scan(tree: ast.AST, rel: str, lists: dict[str, list]) -> None:
    """Add the findings of one module's ``tree`` to ``lists``."""
    def visit(node: ast.AST, simpy_self: bool) -> None:
        where = f"{rel}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.ClassDef):
            simpy_self = _foreign_base(node)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if _body_lines(node) > 40:
                lists["long"].append(f"{where} {node.name} ({_body_lines(node)} lines)")
            if _params(node) >= 8:
                lists["params"].append(f"{where} {node.name} ({_params(node)})")
        elif isinstance(node, ast.Attribute):
            attr = node.attr
            own = isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
            if attr in FOREIGN_PRIVATE and (simpy_self or not own):
                lists["foreign"].append(f"{where} {ast.unparse(node)}")
            elif attr.startswith("_") and not attr.startswith("__") and not own:
                lists["private"].append(f"{where} {ast.unparse(node)}")
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Attribute) and t.attr == SIMPY_CALLBACKS:
                    lists["foreign"].append(f"{where} {ast.unparse(t)} =")
        elif isinstance(node, ast.Call):
            func = node.func
            fname = func.id if isinstance(func, ast.Name) else (
                func.attr if isinstance(func, ast.Attribute) else "")
            if fname == "Op" and len(node.args) > 1:
                lists["op"].append(f"{where} Op({len(node.args)} positional)")
        for child in ast.iter_child_nodes(node):
            visit(child, simpy_self)
    visit(tree, False)


def measure() -> dict:
    mods = modules()
    arrows, up, findings = set(), set(), Counter()
    lists: dict[str, list] = {k: [] for k in ("long", "params", "private", "foreign", "op")}
    sizes = {}
    for name, path in mods.items():
        text = path.read_text(encoding="utf-8")
        sizes[name] = len(text.splitlines())
        mine = room(name, mods)
        for target in imports(name, path, mods):
            theirs = room(target, mods)
            if theirs != mine:
                arrows.add((mine, theirs))
                if layer(theirs) > layer(mine):
                    up.add((name, target))
        _scan(ast.parse(text), str(path.relative_to(PACKAGE.parent)), lists)
    biggest = max(sizes, key=sizes.get)
    rooms = sorted({room(m, mods) for m in mods})
    return {
        "rooms": len(rooms), "modules": len(mods), "arrows": len(arrows),
        "arrows up": len(up), "largest module": f"{biggest} ({sizes[biggest]} lines)",
        "functions over 40 lines": len(lists["long"]),
        "functions with 8+ parameters": len(lists["params"]),
        "private reaches": len(lists["private"]),
        "SimPy/networkx internals": len(lists["foreign"]),
        "ops built by position": len(lists["op"]),
        "_lists": {**lists, "up": sorted(f"{a} -> {b}" for a, b in up), "rooms": rooms},
    }


def main(argv: list[str]) -> int:
    found = measure()
    lists = found.pop("_lists")
    for key, value in found.items():
        print(f"{key:30s} {value}")
    if "--list" in argv:
        for key, items in lists.items():
            print(f"\n# {key}")
            for item in items:
                print(f"  {item}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

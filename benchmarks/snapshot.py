"""Write the outputs a refactoring must leave byte for byte the same, into one folder.

usage: python benchmarks/snapshot.py OUT [--quick]
       diff -r OUT_BEFORE OUT_AFTER

Runs the installed ``clustersim`` (the one beside this Python) on: ``run --format json`` of
every shipped scenario, two scaled runs (the 3-D plan at 2,048 GPUs, FSDP at 4,096), ``run
--out`` folders of the 3-D and Llama-2-70B FSDP scenarios, ``trace`` of every shipped
scenario (clustersim JSON) and of two as Chakra, ``replay`` of a written trace in either
format, ``collective --format json`` of five operations on two fabrics and at scale,
``reliability``, ``compare`` and ``plan``. Each command's stdout goes to a file of its
own; wall-clock fields (``timings_s``, ``wall_s``) and the output folder's path are
blanked so two snapshots of the same code compare equal. ``--quick`` leaves out the
scaled runs, the collectives at scale and the ``--out`` folders (a minute instead of
several).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLI = str(Path(sys.executable).with_name("clustersim"))
SCENARIOS = sorted(p.stem for p in (ROOT / "scenarios").glob("*.yaml"))
THREE_D = "llama3-405b-tp8-pp8-fsdp-512gpu"
WALL_KEYS = ("timings_s", "wall_s", "elapsed_s")


def _blank_wall(value):
    """``value`` (parsed JSON) with wall-clock fields set to 0."""
    if isinstance(value, dict):
        return {k: (0 if k in WALL_KEYS else _blank_wall(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_blank_wall(v) for v in value]
    return value


def _normal(text: str, out: Path) -> str:
    text = text.replace(str(out), "<OUT>")
    try:
        return json.dumps(_blank_wall(json.loads(text)), indent=1, sort_keys=True) + "\n"
    except ValueError:
        return re.sub(r"\b\d+(\.\d+)? s wall\b", "<wall>", text)


def _run(out: Path, name: str, *args: str) -> None:
    done = subprocess.run([CLI, *args], capture_output=True, text=True, cwd=out)
    (out / f"{name}.txt").write_text(f"exit {done.returncode}\n" + _normal(done.stdout, out)
                                     + ("\n--- stderr\n" + _normal(done.stderr, out)
                                        if done.returncode else ""))
    print(f"{name}: exit {done.returncode}", file=sys.stderr)


def _commands(quick: bool) -> list[tuple]:
    cmds = [(f"run.{s}", "run", s, "--format", "json", "-q") for s in SCENARIOS]
    cmds += [(f"trace.{s}", "trace", s, "-o", f"traces/{s}.json") for s in SCENARIOS]
    cmds += [("trace.chakra.resnet50-ddp-8gpu", "trace", "resnet50-ddp-8gpu", "--format",
              "chakra", "-o", "traces/chakra/resnet"),
             ("import.chakra.resnet50-ddp-8gpu", "import", "chakra",
              *(f"traces/chakra/resnet.{r}.et" for r in range(8)), "-o",
              "traces/chakra/resnet.json"),
             ("replay.chakra.resnet50-ddp-8gpu", "replay", "traces/chakra/resnet.json",
              "--format", "json"),
             ("replay.resnet50-ddp-8gpu", "replay", "traces/resnet50-ddp-8gpu.json",
              "--format", "json"),
             ("replay.quickstart", "replay", "traces/quickstart.json", "--format", "json")]
    for topo, nodes in (("dgx-a100-superpod", "64"), ("dgx-h100-superpod", "16")):
        for op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"):
            cmds.append((f"collective.{op}.{topo}", "collective", op, "--topology", topo,
                         "--nodes", nodes, "-b", "1K", "-e", "1G", "-f", "8",
                         "--format", "json"))
    cmds += [("reliability", "reliability", "--trials", "50", "--format", "json"),
             ("compare", "compare", "--format", "json"),
             ("plan", "plan", "--format", "json")]
    if not quick:
        cmds += [
            ("run.3d-2048", "run", THREE_D, "--set", "cluster.nodes=256", "--format", "json",
             "-q"),
            ("run.fsdp-4096", "run", "llama2-7b-fsdp-128gpu", "--set", "cluster.nodes=512",
             "--format", "json", "-q"),
            ("run.out.3d", "run", THREE_D, "--out", "out3d", "-q"),
            ("run.out.70b", "run", "llama2-70b-fsdp-128gpu", "--out", "out70b", "-q"),
            ("collective.all_reduce.16k", "collective", "all_reduce", "--topology",
             "dgx-a100-superpod", "--nodes", "2048", "-b", "1G", "-e", "1G", "--format",
             "json"),
            ("collective.all_to_all.1k", "collective", "all_to_all", "--topology",
             "dgx-a100-superpod", "--nodes", "128", "-b", "64M", "-e", "64M", "--format",
             "json"),
        ]
    return cmds


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[0]).resolve()
    (out / "traces" / "chakra").mkdir(parents=True, exist_ok=True)
    for name, *args in _commands("--quick" in argv):
        _run(out, name, *args)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

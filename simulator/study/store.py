"""A study's results on disk: one Parquet part per finished point, written atomically.

``OUT/parts/<point id>.<status>.parquet`` appears only when complete (written to a hidden
temporary file, synced, then renamed), so a study killed at any instant loses at most the
points that were running and never leaves a half-written part; the next run skips points
whose ``ok`` part exists and retries failed ones. :meth:`ResultStore.compact` gathers the
parts of the current study's points, in the study's order, into ``results.parquet`` and
``results.csv``.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pandas as pd

from ..errors import ConfigError
from ..outpaths import prepare_out_dir
from .commands import BASE_COLUMNS
from .points import cell

PARTS = "parts"
STUDY_FILE = "study.json"
STATUSES = ("ok", "error")
OUTPUT_FILES = ("results.parquet", "results.csv", "report.md")


def prepare_study_dir(out: Path, name: str, fresh: bool) -> Path:
    """Create ``out`` (refusing a folder of someone else's files, as ``clustersim run``
    does) or reuse the one this study wrote; ``fresh`` removes earlier results first.

    :raises ConfigError: ``out`` holds another study's results and ``fresh`` is not set.
    """
    out = prepare_out_dir(out)
    meta = out / STUDY_FILE
    if meta.exists() and not fresh:
        try:
            other = json.loads(meta.read_text()).get("name")
        except (OSError, ValueError, AttributeError):
            other = None
        if other != name:
            raise ConfigError(f"holds the results of study {other!r}, not {name!r}; use "
                              f"--fresh to replace them or choose another --out",
                              source=str(out), field="--out")
    if fresh:
        for part in (out / PARTS).glob("*") if (out / PARTS).is_dir() else ():
            part.unlink()
        for name_ in OUTPUT_FILES:
            (out / name_).unlink(missing_ok=True)
        for png in out.glob("*.png"):
            png.unlink()
    (out / PARTS).mkdir(exist_ok=True)
    meta.write_text(json.dumps({"name": name}) + "\n")
    return out


class ResultStore:
    """The parts folder of one study's output folder."""

    def __init__(self, out: Path):
        self.folder = Path(out) / PARTS
        self.folder.mkdir(parents=True, exist_ok=True)
        for tmp in self.folder.glob(".*.tmp"):      # left by a run that was killed
            tmp.unlink(missing_ok=True)

    def _path(self, pid: str, status: str) -> Path:
        return self.folder / f"{pid}.{status}.parquet"

    def finished(self) -> dict[str, str]:
        return finished_parts(self.folder.parent)

    def write(self, point: dict, rows: list[dict]) -> str:
        """Store the rows of a finished point; returns its status."""
        status = "ok" if rows and all(r.get("status") == "ok" for r in rows) else "error"
        frame = pd.DataFrame([{"point": point["id"], "index": point["index"],
                               **{k: cell(v) for k, v in r.items()}} for r in rows])
        tmp = self.folder / f".{point['id']}.{uuid.uuid4().hex}.tmp"
        with open(tmp, "wb") as f:
            frame.to_parquet(f, index=False)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._path(point["id"], status))
        for other in STATUSES:
            if other != status:
                self._path(point["id"], other).unlink(missing_ok=True)
        return status

    def compact(self, points: list[dict], out: Path) -> pd.DataFrame:
        """The results of ``points`` (in their order, with their current axis values) as
        one table, also written to ``results.parquet`` and ``results.csv``."""
        status = self.finished()
        frames = []
        for p in points:
            if p["id"] not in status:
                continue
            frame = pd.read_parquet(self._path(p["id"], status[p["id"]]))
            frame["index"] = p["index"]
            for key, value in p["params"].items():
                frame[key] = cell(value)
            frames.append(frame)
        axes = list(points[0]["params"]) if points else []
        first = ["point", "index", "status", *axes]
        table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
            columns=list(dict.fromkeys([*first, *BASE_COLUMNS])))
        table = table[first + [c for c in table.columns if c not in first]]
        _write_atomic(out / "results.parquet", lambda f: table.to_parquet(f, index=False))
        _write_atomic(out / "results.csv", lambda f: table.to_csv(f, index=False))
        return table


def finished_parts(out: Path) -> dict[str, str]:
    """Point id -> status of every part in ``out`` (``ok`` wins); reads nothing else."""
    found: dict[str, str] = {}
    for path in (Path(out) / PARTS).glob("*.parquet"):
        pid, _, status = path.name[: -len(".parquet")].partition(".")
        if status in STATUSES and found.get(pid) != "ok":
            found[pid] = status
    return found


def _write_atomic(path: Path, write) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    with open(tmp, "wb") as f:
        write(f)
    os.replace(tmp, path)

"""A study's output folder: held by one run at a time, its parts checked before they are
used, each finished point stored at once, and the results gathered into one table.

``OUT/parts/<point id>.<status>.parquet`` appears only when complete (:mod:`.parts`), so a
study killed at any instant loses at most the points that were running; the next run uses
the parts of the study's points that pass :func:`~.parts.read_part`, moves every other part
of its points to ``parts/.bad/`` (with one warning line each, nothing deleted) and runs
those points again. Parts of points the study no longer has are left where they are and not
read (adding the value back reuses them). :meth:`ResultStore.compact` gathers the current
points' rows, in the study's order, into ``results.parquet`` and ``results.csv``.
"""

from __future__ import annotations

import fcntl
import json
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from ..errors import ConfigError
from ..outpaths import (atomic_write_csv, atomic_write_text, atomic_writer, open_no_follow,
                        prepare_out_dir, real_folder)
from .commands import BASE_COLUMNS
from .parts import STATUSES, BadPart, parse_name, part_name, read_part, write_part
from .points import cell

if TYPE_CHECKING:           # pandas loads with the first part (start-up time)
    import pandas as pd

PARTS = "parts"
BAD = ".bad"
STUDY_FILE = "study.json"
LOCK_FILE = ".study.lock"
OUTPUT_FILES = ("results.parquet", "results.csv", "report.md")


@contextmanager
def open_study_dir(out: Path, name: str, fresh: bool) -> Iterator[Path]:
    """Create ``out`` (refusing a folder of someone else's files, as ``clustersim run``
    does) or reuse the one this study wrote, and hold it until the block ends; ``fresh``
    removes earlier results first (not the parts set aside in ``parts/.bad/``). A
    ``parts/`` or ``.study.lock`` that is a symbolic link is replaced, never followed
    (:func:`~simulator.outpaths.real_folder`, :func:`~simulator.outpaths.open_no_follow`).

    :raises ConfigError: another run holds ``out``, or ``out`` holds another study's
        results and ``fresh`` is not set.
    """
    out = prepare_out_dir(out)
    with _held(out):
        _claim(out, name, fresh)
        yield out


@contextmanager
def _held(out: Path) -> Iterator[None]:
    """An exclusive lock on ``out/.study.lock`` (the kernel drops it when this process
    ends, however it ends); the file says which process holds it."""
    fd = open_no_follow(out / LOCK_FILE, os.O_RDWR | os.O_CREAT)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            raise ConfigError(f"is in use by another clustersim study (pid {holder}); wait "
                              f"for it to end, or choose another --out", source=str(out),
                              field="--out") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        os.close(fd)


def _claim(out: Path, name: str, fresh: bool) -> None:
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
    parts = real_folder(out / PARTS)         # a link there is replaced, never followed
    if fresh:
        for part in parts.iterdir():
            if not part.is_dir() or part.is_symlink():
                part.unlink()
        for name_ in OUTPUT_FILES:
            (out / name_).unlink(missing_ok=True)
        for png in out.glob("*.png"):
            png.unlink()
    atomic_write_text(meta, json.dumps({"name": name}) + "\n")


@dataclass
class Scan:
    """The usable parts of a study's points, and the unusable ones with why."""

    status: dict[str, str] = field(default_factory=dict)          # point id -> status
    frames: dict[str, pd.DataFrame] = field(default_factory=dict)
    bad: list[tuple[Path, str]] = field(default_factory=list)


def scan_parts(out: Path, points: list[dict], columns: tuple[str, ...]) -> Scan:
    """Read the parts of ``points`` in ``out`` (an ``ok`` part first); changes nothing."""
    scan, folder = Scan(), Path(out) / PARTS
    for p in points:
        for status in STATUSES:
            path = folder / part_name(p["id"], status)
            if not (path.exists() or path.is_symlink()):
                continue
            try:
                scan.frames[p["id"]] = read_part(path, p["id"], status, columns)
            except BadPart as exc:
                scan.bad.append((path, str(exc)))
                continue
            scan.status[p["id"]] = status
            break
    return scan


class ResultStore:
    """The parts folder of one study's output folder, for the points of one run."""

    def __init__(self, out: Path, points: list[dict], columns: tuple[str, ...],
                 warn: Callable[[str], None]):
        self.folder = real_folder(Path(out) / PARTS)
        for tmp in self.folder.glob(".*.tmp"):      # left by a run that was killed
            tmp.unlink(missing_ok=True)
        scan = scan_parts(out, points, columns)
        for path, reason in scan.bad:
            warn(f"{path}: {reason}; moved to {set_aside(path)}, its point runs again")
        self.status, self.frames = scan.status, scan.frames

    def write(self, point: dict, rows: list[dict]) -> str:
        """Store the rows of a finished point; returns its status."""
        import pandas as pd                  # loaded once a point has finished
        status = "ok" if rows and all(r.get("status") == "ok" for r in rows) else "error"
        frame = pd.DataFrame([{"point": point["id"], "index": point["index"],
                               **{k: cell(v) for k, v in r.items()}} for r in rows])
        path = self.folder / part_name(point["id"], status)
        write_part(path, frame, point["id"], status)
        for other in STATUSES:
            if other != status:
                (self.folder / part_name(point["id"], other)).unlink(missing_ok=True)
        self.status[point["id"]] = status
        self.frames[point["id"]] = pd.read_parquet(path)     # as a later resume reads it
        return status

    def compact(self, points: list[dict], out: Path) -> pd.DataFrame:
        """The results of ``points`` (in their order, with their current axis values) as
        one table, also written to ``results.parquet`` and ``results.csv``."""
        import pandas as pd                  # loaded once the points have run
        frames = []
        for p in points:
            if p["id"] not in self.frames:
                continue
            frame = self.frames[p["id"]].copy()
            frame["index"] = p["index"]
            for key, value in p["params"].items():
                frame[key] = cell(value)
            frames.append(frame)
        axes = list(points[0]["params"]) if points else []
        first = ["point", "index", "status", *axes]
        table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
            columns=list(dict.fromkeys([*first, *BASE_COLUMNS])))
        table = table[first + [c for c in table.columns if c not in first]]
        with atomic_writer(out / "results.parquet") as f:
            table.to_parquet(f, index=False)
        atomic_write_csv(table, out / "results.csv", index=False)
        return table


def set_aside(path: Path) -> Path:
    """Move the part ``path`` into ``parts/.bad/`` (a free name there); returns where.

    :raises ConfigError: it cannot be moved (its point is then not run again, which would
        write over it).
    """
    bad = path.parent / BAD
    target, n = bad / path.name, 0
    try:
        real_folder(bad)
        while target.exists() or target.is_symlink():
            n += 1
            target = bad / f"{path.name}.{n}"
        os.rename(path, target)
    except OSError as exc:
        raise ConfigError(f"cannot move an unusable part to {bad} ({exc.strerror}); move "
                          f"it away and run again", source=str(path)) from None
    return target


def finished_parts(out: Path) -> dict[str, str]:
    """Point id -> status of every part in ``out`` by file name (``ok`` wins); reads no
    part."""
    found: dict[str, str] = {}
    for path in (Path(out) / PARTS).glob("*.parquet"):
        parsed = parse_name(path.name)
        if parsed and found.get(parsed[0]) != "ok":
            found[parsed[0]] = parsed[1]
    return found

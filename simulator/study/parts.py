"""One point's part file: how it is written, and what it must hold to be read back.

A part is ``<point id>.<status>.parquet``, written whole or not at all (a hidden temporary
file, synced, renamed, the folder synced: :func:`simulator.outpaths.atomic_writer`), and
stamped in its Parquet metadata with the part format's version, the point id and the
status. :func:`read_part` accepts a part only if it can be read, carries this stamp for the
point and status its name gives, and has the columns of the study's command; anything else
is a :class:`BadPart`, whose reason is one line, and its point is computed again.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import TYPE_CHECKING

from ..outpaths import atomic_writer
from .commands import BASE_COLUMNS

if TYPE_CHECKING:           # pandas and pyarrow load with the first part (start-up time)
    import pandas as pd

PART_VERSION = 1
STAMP_KEY = b"clustersim.part"
STATUSES = ("ok", "error")
SUFFIX = ".parquet"


class BadPart(Exception):
    """A part that cannot be used; ``str()`` is the reason, in one line."""


def part_name(pid: str, status: str) -> str:
    return f"{pid}.{status}{SUFFIX}"


def parse_name(name: str) -> tuple[str, str] | None:
    """``(point id, status)`` of a part's file name, or None for any other name."""
    if not name.endswith(SUFFIX) or name.startswith("."):
        return None
    pid, _, status = name[: -len(SUFFIX)].partition(".")
    return (pid, status) if pid and status in STATUSES else None


def write_part(path: Path, frame: pd.DataFrame, pid: str, status: str) -> None:
    """Write ``frame`` as the stamped part ``path``, atomically and durably."""
    import pyarrow as pa                     # pyarrow: only once a part is written
    import pyarrow.parquet as pq
    table = pa.Table.from_pandas(frame, preserve_index=False)
    stamp = json.dumps({"version": PART_VERSION, "point": pid, "status": status})
    table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                           STAMP_KEY: stamp.encode()})
    with atomic_writer(path, durable=True) as f:
        pq.write_table(table, f, compression="snappy")


def read_part(path: Path, pid: str, status: str, columns: tuple[str, ...]) -> pd.DataFrame:
    """The rows of the part ``path`` of point ``pid`` with ``status``, whose command has
    ``columns`` (besides the base columns).

    :raises BadPart: it cannot be read, is not stamped for this point and status by this
        part version, or its columns or rows are not those of the command.
    """
    import pandas as pd                      # pandas, pyarrow: only once a part is read
    import pyarrow as pa
    import pyarrow.parquet as pq
    try:
        data = path.read_bytes()
        metadata = pq.ParquetFile(pa.BufferReader(data)).schema_arrow.metadata or {}
        _check_stamp(metadata.get(STAMP_KEY), pid, status)
        frame = pd.read_parquet(io.BytesIO(data))
    except BadPart:
        raise
    except Exception as exc:                 # noqa: BLE001 (whatever stops reading it)
        raise BadPart(f"cannot be read as Parquet ({_one_line(exc)})") from None
    _check_rows(frame, pid, status, columns)
    return frame


def _check_stamp(raw: bytes | None, pid: str, status: str) -> None:
    if raw is None:
        raise BadPart("carries no clustersim part stamp (another program's file, or a "
                      f"part written before part version {PART_VERSION})")
    try:
        stamp = json.loads(raw)
        version, point, stamped = stamp["version"], stamp["point"], stamp["status"]
    except (ValueError, TypeError, KeyError):
        raise BadPart(f"has an unreadable clustersim part stamp {raw[:80]!r}") from None
    if version != PART_VERSION:
        raise BadPart(f"is part version {version!r}; this clustersim reads version "
                      f"{PART_VERSION}")
    if point != pid:
        raise BadPart(f"holds point {point!r}, not {pid!r} (a part of another study, or "
                      f"renamed)")
    if stamped != status:
        raise BadPart(f"holds a point with status {stamped!r}, not {status!r}")


def _check_rows(frame: pd.DataFrame, pid: str, status: str, columns: tuple[str, ...]) -> None:
    have, base, command = set(frame.columns), set(BASE_COLUMNS), set(columns)
    extra = sorted(have - base - command)
    missing = sorted((base | command if status == "ok" else base) - have)
    if extra or missing:
        said = [f"{len(extra)} unknown ({', '.join(extra[:3])})" if extra else "",
                f"{len(missing)} missing ({', '.join(missing[:3])})" if missing else ""]
        raise BadPart("does not have the columns of this study's command: "
                      + ", ".join(s for s in said if s))
    if not len(frame) or set(frame["point"]) != {pid}:
        raise BadPart(f"has {len(frame)} row(s), not the rows of point {pid!r}")
    statuses = set(frame["status"])
    if status == "ok":
        fits = statuses == {"ok"}
    else:
        fits = "error" in statuses and statuses <= set(STATUSES)
    if not fits:
        raise BadPart(f"has rows of status {sorted(map(str, statuses))}, not {status!r}")


def _one_line(exc: BaseException) -> str:
    """The error without the path that pyarrow repeats, on one line, at most 120 chars."""
    text = " ".join(str(exc).split())
    head, sep, rest = text.partition("': ")
    text = rest if sep and "'" in head else text
    return text if len(text) <= 120 else text[:117] + "..."

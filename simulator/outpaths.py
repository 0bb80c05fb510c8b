"""Where and how a command writes: the one check of every file and folder a command writes
to a user's path, and the one way every output file is written.

Where:

* A file (:func:`writable_file`): one that does not exist, or that ``overwrite``
  (``--overwrite``) lets the command replace. A symbolic link counts as there (one to
  nothing too): with ``overwrite`` the link itself is replaced, never what it points to.
* A folder (:func:`prepare_out_dir`): created, or reused when it is empty or marked with
  :data:`MARK` (clustersim wrote it); a folder that is not empty and lacks the mark holds
  someone else's files and is refused, so nothing a user wrote is replaced.
* A name inside an output folder that a file spells (a study's ``plots[].file``,
  :func:`confined`): relative, no ``..``, into a folder that exists there and is not a
  symbolic link; a folder clustersim keeps inside its own (a study's ``parts/``,
  :func:`real_folder`) that has become a symbolic link is replaced by a real folder.

How (:func:`atomic_writer` and the functions on it): every file is written to a new hidden
temporary file in the same folder (``.<name>.<random>.tmp``, created exclusively, so never
through a link) and renamed onto its name only once it is complete. The rename replaces
whatever is at the name, a symbolic link included (the link goes; the file it pointed to is
untouched), and a write that fails or is killed leaves the previous file as it was (a kill
leaves the hidden temporary file, nothing else).
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import IO, Iterator

from .errors import ConfigError

MARK = ".clustersim-run"
NAME_MAX = 255          # bytes in one file or folder name (Linux, macOS, Windows NTFS)
TMP_SUFFIX = ".tmp"


def _dangling(path: Path) -> bool:
    return path.is_symlink() and not path.exists()


def writable_file(path: Path | str, overwrite: bool = False, option: str | None = None) -> Path:
    """``path`` as a :class:`Path` once it may be written.

    :raises ConfigError: (naming ``path`` and ``option``) for a folder, for a file that
        exists or a symbolic link (to a file or to nothing) unless ``overwrite``.
    """
    path = Path(path)
    if path.is_dir():
        raise ConfigError("is a folder; name a file", source=str(path), field=option)
    if _dangling(path) and not overwrite:
        raise ConfigError("is a symbolic link to a missing file; refusing to replace it "
                          "(add --overwrite)", source=str(path), field=option)
    if path.exists() and not overwrite:
        raise ConfigError("file exists; refusing to overwrite it (add --overwrite)",
                          source=str(path), field=option)
    return path


def prepare_out_dir(out: Path | str, option: str = "--out") -> Path:
    """Create ``out`` or reuse one of ours; refuse a foreign non-empty folder.

    :raises ConfigError: (naming ``out`` and ``option``) for a file, a symbolic link to
        nothing, or a non-empty folder without :data:`MARK`.
    """
    out = Path(out)
    if _dangling(out):
        raise ConfigError("is a symbolic link to a missing folder; refusing to write "
                          "through it", field=option, source=str(out))
    if out.exists():
        if not out.is_dir():
            raise ConfigError("exists and is not a folder", field=option, source=str(out))
        if any(out.iterdir()) and not (out / MARK).exists():
            raise ConfigError("folder is not empty and was not written by clustersim; "
                              f"choose another {option}", field=option, source=str(out))
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the folder: {exc.strerror or exc}", field=option,
                          source=str(out)) from None
    atomic_write_text(out / MARK, "written by clustersim run; files here may be replaced\n")
    return out


# ------------------------------------------------------------------------- names
def confined(out_dir: Path | str, name: str, field: str, source: str) -> Path:
    """``out_dir / name`` once ``name`` (spelled by the file ``source`` at ``field``) stays
    inside ``out_dir``: relative, without ``..``, no NUL byte or name past :data:`NAME_MAX`
    bytes, and every folder it names exists in ``out_dir`` as a real folder (not a symbolic
    link).

    :raises ConfigError: naming ``source`` and ``field``, in one line.
    """
    def refuse(why: str) -> ConfigError:
        return ConfigError(f"{why} (got {name!r})", source=source, field=field)

    parts = PurePosixPath(name).parts
    if not name or not parts or name.endswith("/"):
        raise refuse("must name a file in the output folder")
    if PurePosixPath(name).is_absolute() or "\\" in name:
        raise refuse("must be a file name inside the output folder, not an absolute path")
    if ".." in parts:
        raise refuse("must stay inside the output folder: '..' is not allowed")
    if "\0" in name:
        raise refuse("holds a NUL byte, which no file name can")
    longest = max(len(part.encode()) for part in parts)
    if longest > NAME_MAX:
        raise refuse(f"a name of {longest} bytes is longer than file systems take "
                     f"({NAME_MAX})")
    out_dir = Path(out_dir)
    folder = out_dir
    for part in parts[:-1]:
        folder = folder / part
        if folder.is_symlink():
            raise refuse(f"folder {part!r} in the output folder is a symbolic link; "
                         f"clustersim writes only into real folders there")
        if not folder.is_dir():
            raise refuse(f"folder {part!r} does not exist in the output folder; name a file "
                         f"directly in it")
    return out_dir.joinpath(*parts)


def real_folder(path: Path | str) -> Path:
    """The folder ``path`` that clustersim keeps inside an output folder of its own,
    created if missing; a symbolic link there is removed (the link, never what it points
    to) and replaced by a real, empty folder.

    :raises ConfigError: ``path`` is a file, or cannot be created.
    """
    path = Path(path)
    try:
        if path.is_symlink():
            path.unlink()
        if path.exists() and not path.is_dir():
            raise ConfigError("is a file where clustersim keeps a folder; move it away",
                              source=str(path))
        path.mkdir(exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the folder: {exc.strerror or exc}",
                          source=str(path)) from None
    return path


def open_no_follow(path: Path | str, flags: int, mode: int = 0o644) -> int:
    """``os.open(path, flags | O_NOFOLLOW)`` after removing a symbolic link at ``path``
    (the link, not its target): for files a command opens in place (a lock file)."""
    path = Path(path)
    if path.is_symlink():
        path.unlink()
    return os.open(path, flags | os.O_NOFOLLOW, mode)


# ------------------------------------------------------------------------- writing
@contextmanager
def atomic_writer(path: Path | str, text: bool = False, durable: bool = False
                  ) -> Iterator[IO]:
    """A file open on a new temporary file beside ``path`` (text: UTF-8, newlines as
    written); renamed onto ``path`` when the block ends normally, removed when it raises.
    ``durable``: synced to disk before the rename, and the rename synced after it.

    :raises ConfigError: ``path`` is a folder, or the file cannot be created, written or
        renamed (a full disk, no permission), naming ``path``.
    """
    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        raise ConfigError("is a folder where clustersim writes a file; move it away",
                          source=str(path))
    fd, tmp = _new_temporary(path)
    try:
        with open(fd, "w" if text else "wb",
                  **({"encoding": "utf-8", "newline": ""} if text else {})) as f:
            yield f
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise ConfigError(f"cannot write: {exc.strerror or exc}", source=str(path)) \
                from None
        raise
    if durable:
        _sync_folder(path.parent)


def atomic_write_text(path: Path | str, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` through :func:`atomic_writer`; returns ``path``."""
    with atomic_writer(path, text=True) as f:
        f.write(text)
    return Path(path)


def atomic_write_bytes(path: Path | str, data: bytes) -> Path:
    """Write ``data`` to ``path`` through :func:`atomic_writer`; returns ``path``."""
    with atomic_writer(path) as f:
        f.write(data)
    return Path(path)


def atomic_write_csv(frame, path: Path | str, **to_csv) -> Path:
    """A pandas DataFrame's ``to_csv(**to_csv)`` written to ``path`` through
    :func:`atomic_writer` (the same bytes as ``frame.to_csv(path)``)."""
    with atomic_writer(path, text=True) as f:
        frame.to_csv(f, **to_csv)
    return Path(path)


def save_figure(fig, path: Path | str, **savefig) -> Path:
    """A matplotlib figure saved to ``path`` through :func:`atomic_writer`, in the format
    its suffix names (``.png``: PNG), with ``savefig``'s other arguments."""
    path = Path(path)
    with atomic_writer(path) as f:
        fig.savefig(f, format=path.suffix.lstrip(".").lower() or "png", **savefig)
    return path


def _new_temporary(path: Path) -> tuple[int, Path]:
    """A new hidden file beside ``path``, created exclusively (never through a link), with
    the permissions a new file gets (the umask applies)."""
    for _ in range(100):
        tmp = path.with_name(f".{path.name}.{os.urandom(6).hex()}{TMP_SUFFIX}")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                           0o666), tmp
        except FileExistsError:
            continue
        except OSError as exc:
            raise ConfigError(f"cannot write: {exc.strerror or exc}", source=str(path)) \
                from None
    raise ConfigError("cannot write: no free temporary name beside it", source=str(path))


def _sync_folder(folder: Path) -> None:
    """Make a rename in ``folder`` durable (where the system allows opening a folder)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)

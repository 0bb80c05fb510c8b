"""Where a command may write what a user names: the one check of every file and folder a
command writes to a user's path.

* A file (:func:`writable_file`): one that does not exist, or that ``overwrite``
  (``--overwrite``) lets the command replace. A symbolic link counts as there: one to
  nothing is refused too, as writing would go through it to wherever it points.
* A folder (:func:`prepare_out_dir`): created, or reused when it is empty or marked with
  :data:`MARK` (clustersim wrote it); a folder that is not empty and lacks the mark holds
  someone else's files and is refused, so nothing a user wrote is replaced.
"""

from __future__ import annotations

from pathlib import Path

from .errors import ConfigError

MARK = ".clustersim-run"


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
        raise ConfigError("is a symbolic link to a missing file; refusing to write through "
                          "it (add --overwrite)", source=str(path), field=option)
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
        (out / MARK).write_text("written by clustersim run; files here may be replaced\n")
    except OSError as exc:
        raise ConfigError(f"cannot create the folder: {exc.strerror or exc}", field=option,
                          source=str(out)) from None
    return out

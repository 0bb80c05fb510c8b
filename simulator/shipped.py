"""Where the shipped scenarios, studies and topologies are found, from any folder.

They live at the top of the repository (``scenarios/``, ``scenarios/studies/``,
``scenarios/configs/``, ``topologies/``; the validation data of ``validation/`` too). A wheel
carries copies inside the package, under ``simulator/_shipped/`` (``setup.py`` copies them at
build time), found with :mod:`importlib.resources`; an editable install or a source checkout
reads the repository's folders. A bare name is looked up in the current folder's
``scenarios/`` (or ``topologies/``...) first, so a user's own files of the same name win.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from .errors import ConfigError, did_you_mean

# kind -> folder, relative to the repository top and to simulator/_shipped/
FOLDERS = {"scenarios": "scenarios", "studies": "scenarios/studies", "mixes": "scenarios/mixes",
           "configs": "scenarios/configs", "topologies": "topologies"}
# kinds whose files keep their own endings (a framework's config: .toml, .json, .args)
ANY_ENDING = ("configs",)
PACKAGED = "_shipped"


def packaged_dir(kind: str) -> Path:
    """The copy of ``kind``'s folder inside the installed package (exists in a wheel)."""
    return Path(str(resources.files("simulator"))) / PACKAGED / FOLDERS[kind]


def source_dir(kind: str) -> Path:
    """``kind``'s folder in the repository holding the package (an editable install)."""
    return Path(__file__).resolve().parents[1] / FOLDERS[kind]


def search_dirs(kind: str, cwd: bool = True) -> list[Path]:
    """Existing folders searched for a bare name of ``kind``, in order, without repeats:
    the current folder's (when ``cwd``), the packaged copy, the repository's."""
    dirs = ([Path.cwd() / FOLDERS[kind]] if cwd else []) + [packaged_dir(kind), source_dir(kind)]
    found: list[Path] = []
    for d in dirs:
        if d.is_dir() and all(d.resolve() != f.resolve() for f in found):
            found.append(d)
    return found


def find_shipped(kind: str, name: str) -> Path | None:
    """The file a bare ``name`` (``quickstart`` or ``quickstart.yaml``) of ``kind`` names,
    or None."""
    file = name if name.endswith((".yaml", ".yml")) or kind in ANY_ENDING else f"{name}.yaml"
    for folder in search_dirs(kind):
        if (folder / file).is_file():
            return folder / file
    return None


def file_or_shipped(name_or_path, path: Path, kind: str, what: str) -> Path:
    """``path`` (as given: ``name_or_path``) where it is a file, else the shipped file of
    ``kind`` that its bare name names.

    :raises ConfigError: ``no <what> file or shipped <what> named ...``, field ``what``.
    """
    if path.is_file():
        return path
    found = find_shipped(kind, path.name) if len(path.parts) == 1 else None
    if found is None:
        hint = did_you_mean(path.stem if kind != "configs" else path.name, shipped_names(kind))
        raise ConfigError(f"no {what} file or shipped {what} named {str(name_or_path)!r}{hint}",
                          field=what)
    return found


def shown_as(path: Path, kind: str, what: str) -> str:
    """What messages call the file at ``path``: ``scenario quickstart`` for a copy inside
    the installed package (its place in site-packages means nothing to the user, the name
    they gave does), else the path."""
    path = Path(path)
    try:
        inside = path.resolve().parent == packaged_dir(kind).resolve()
    except OSError:
        inside = False
    return f"{what} {path.stem if kind != 'configs' else path.name}" if inside else str(path)


def shipped_names(kind: str, cwd: bool = True) -> list[str]:
    """Bare names of the files of ``kind`` found in :func:`search_dirs`, sorted (a
    config's with its ending)."""
    if kind in ANY_ENDING:
        return sorted({p.name for d in search_dirs(kind, cwd) for p in d.iterdir()
                       if p.is_file() and not p.name.startswith(".")})
    return sorted({p.stem for d in search_dirs(kind, cwd) for p in d.glob("*.yaml")})

"""Every fenced ``clustersim ...`` line of README.md and docs/*.md keeps working.

Two kinds of line: a *synopsis* (``clustersim run [SCENARIO] [--set KEY=VALUE ...]``, with
brackets, braces, bars or CAPITAL placeholders) must name only options its command's
``--help`` lists; an *example* is run as written, from a temporary folder (paths into the
repository made absolute, so nothing is written into it), in the order the page gives them,
and must exit 0. The few that are too long for a test run with the cheap options of
:data:`CHEAPER` appended (a later click option wins), and the ones that cannot run here
(they name a user's files or a Dask scheduler) are listed in :data:`NOT_RUN` with the
reason; both lists are checked against the pages, so they cannot go stale either."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from test_cli import run_main

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

# example prefix -> options appended to keep the test run short (what it checks: the line
# parses, resolves its names and runs to the end)
CHEAPER = {
    "compare ": ["--strategies", "fsdp-full", "--no-scaling", "--no-capacity"],
    "reliability ": ["--trials", "2", "--workers", "1", "--set", "reliability.search.trials=1",
                     "--set", "reliability.search.points=2"],
    "study scaling-linearity": ["--workers", "1"],
    "validate traces": ["--out", "traces-report"],        # not into the repository's
    "plan ": ["--replay", "1", "--max-pp", "2", "--max-tp", "2"],
    "cluster llm-oversubscribed": ["--set", "generate.jobs=3"],     # (before "cluster ")
    "cluster ": ["--set", "generate.jobs=6"],
}
NOT_RUN = {
    "import pytorch rank0.json.gz rank1.json.gz -o job.json.gz":
        "illustrative: the rank files are the user's own",
    "study switch-bandwidth --executor dask://10.0.0.5:8786":
        "needs a running Dask scheduler at that address",
    "validate": "every suite (~90 s); each suite's own line runs",
    "validate gpu": "replays nine H200 profiles (~40 s); tests/test_validation_gpu.py runs it",
    "validate captured": "replays the captured runs (~30 s); tests/test_captured_validation.py",
}
_PLACEHOLDER = re.compile(r"(^|\s)[A-Z][A-Z_]+(\s|$|\.\.\.)")


def _lines(page: Path) -> list[str]:
    """Commands (``clustersim`` dropped) in the fenced blocks of ``page``, continuation
    lines (``\\`` at the end, or an indented synopsis line) joined, comments dropped."""
    out, inside, joining = [], False, False
    for raw in page.read_text().splitlines():
        if raw.lstrip().startswith("```"):
            inside, joining = not inside, False
            continue
        if not inside:
            continue
        text = re.sub(r"\s+#\s.*$", "", raw).rstrip()
        if joining and (raw.startswith(" ") and text.strip()):
            out[-1] = (out[-1] + " " + text.strip()).replace("\\ ", "")
            joining = True
            continue
        joining = text.startswith("clustersim ")
        if joining:
            out.append(text[len("clustersim "):].strip())
    return [line.replace(" \\", "").strip().rstrip("\\").strip() for line in out]


def _examples():
    return [(page, line) for page in PAGES for line in _lines(page)]


def _synopsis(line: str) -> bool:
    return any(c in line for c in "[{|") or bool(_PLACEHOLDER.search(line))


def _command_path(line: str) -> list[str]:
    words = [w.strip("[]") for w in line.split()]
    if words[0] != "validate":
        return words[:1]
    return ["validate", words[1] if len(words) > 1 and not words[1].startswith("-")
            else "all"]


def _options(line: str) -> set[str]:
    found = set()
    for token in re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", line):
        found.add(token)
    return found


def test_the_pages_have_examples_and_synopses():
    kinds = [_synopsis(line) for _, line in _examples()]
    assert sum(kinds) >= 15 and len(kinds) - sum(kinds) >= 10


def test_every_listed_exception_is_still_on_a_page():
    lines = {line for _, line in _examples()}
    for line in NOT_RUN:
        assert line in lines, line
    for prefix in CHEAPER:
        assert any(line.startswith(prefix) for line in lines), prefix


@pytest.mark.parametrize("page,line", [e for e in _examples() if _synopsis(e[1])],
                         ids=lambda v: v if isinstance(v, str) else v.name)
def test_a_synopsis_names_only_options_its_command_has(capsys, page, line):
    path = _command_path(line)
    code, text, err = run_main(capsys, *path, "--help")
    assert code == 0, err
    listed = set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", text))
    assert _options(line) <= listed, f"{page.name}: {line}: {_options(line) - listed}"


def _absolute(arg: str) -> str:
    head = arg.split("/", 1)[0]
    return str(REPO / arg) if "/" in arg and (REPO / head).is_dir() else arg


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("examples")


@pytest.mark.parametrize("page,line", [e for e in _examples() if not _synopsis(e[1])],
                         ids=lambda v: v if isinstance(v, str) else v.name)
def test_an_example_runs_as_written(capsys, monkeypatch, workdir, page, line):
    if line in NOT_RUN:
        pytest.skip(NOT_RUN[line])
    folder = workdir / page.stem            # a page's examples share a folder, in order
    folder.mkdir(exist_ok=True)
    monkeypatch.chdir(folder)
    args = [_absolute(a) for a in shlex.split(line)]
    extra = next((v for k, v in CHEAPER.items() if line.startswith(k)), [])
    code, out, err = run_main(capsys, *args, *extra)
    assert code in (0, 3) if args[0] == "validate" else code == 0, f"{line}: {err}"
    assert not list(REPO.glob("*.json")) and not (REPO / "runs").exists()

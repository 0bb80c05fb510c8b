"""Numbers that README.md and docs/ quote from the tool are what it prints today.

A block marked ``<!-- quoted: ARGS -->`` (a ``>`` quote or a fenced block right below) holds
lines of ``clustersim ARGS``'s output, verbatim: the test runs the command once and finds
each line in what it printed. docs/compare.md's first example is checked on two of its rows
(the whole comparison takes a minute; these rows do not depend on the others). Each run here
takes 5-20 s."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from test_cli import run_main

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
MARK = re.compile(r"^<!-- quoted: (.+?) -->$")


def quoted_blocks() -> list[tuple[str, str, list[str]]]:
    """(page name, ARGS, the quoted lines) of every marked block."""
    found = []
    for page in PAGES:
        lines = page.read_text().splitlines()
        for i, line in enumerate(lines):
            m = MARK.match(line)
            if not m:
                continue
            body = lines[i + 1:]
            if body[0].startswith("```"):
                block = body[1:body.index("```", 1)]
            else:
                block = [x[2:] for x in body[:next((j for j, x in enumerate(body)
                                                     if not x.startswith("> ")), len(body))]]
            found.append((page.name, m.group(1), [x for x in block if x.strip()]))
    return found


def test_the_pages_quote_the_tool():
    assert {args.split()[0] for _, args, _ in quoted_blocks()} >= {"study", "reliability"}


@pytest.mark.parametrize("page,args,quoted", quoted_blocks(), ids=lambda v: v
                         if isinstance(v, str) and " " not in v else None)
def test_a_quoted_output_is_what_the_tool_prints(capsys, monkeypatch, tmp_path, page, args,
                                                 quoted):
    monkeypatch.chdir(tmp_path)                     # a study writes its folder here
    code, out, err = run_main(capsys, *shlex.split(args), "-q")
    assert code == 0, err
    assert quoted
    for line in quoted:
        assert line in out, f"{page}: {args}: {line!r} is not printed; it prints:\n{out}"


def _rows(text: str, names: tuple[str, ...]) -> dict[str, list[str]]:
    """The first row of each of ``names`` (the time and memory table's), its first ten
    columns (strategy to exposed s)."""
    rows: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line.split() and line.split()[0] in names:
            rows.setdefault(line.split()[0], line.split()[:10])
    return rows


def test_compare_example_rows_are_what_compare_prints(capsys):
    names = ("fsdp-full", "fsdp-grad-op")
    page = (REPO / "docs" / "compare.md").read_text()
    example = page.split("## Example 1", 1)[1].split("## Example 2", 1)[0]
    quoted = _rows(example.split("```", 2)[1], names)
    code, out, err = run_main(capsys, "compare", "llama2-7b-fsdp-128gpu", "--strategies",
                              ",".join(names), "--no-capacity", "--no-scaling", "-q")
    assert code == 0, err
    assert set(quoted) == set(names) and _rows(out, names) == quoted

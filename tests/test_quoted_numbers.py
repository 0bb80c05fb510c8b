"""Numbers that README.md and docs/ quote from the tool are what it prints today.

A block marked ``<!-- quoted: ARGS -->`` (a ``>`` quote or a fenced block right below) holds
lines of ``clustersim ARGS``'s output, verbatim: the test runs the command once (once for
every block marked with the same ARGS, on any page) and finds each line in what it
printed. docs/compare.md's first example is checked whole (its second, its fabric table and
folk claims: tests/test_docs_numbers.py). Each run here takes 5-20 s."""

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


def quoted_commands() -> dict[str, list[tuple[str, str]]]:
    """ARGS -> (page name, quoted line) of every block marked with it: a command quoted on
    several pages runs once."""
    found: dict[str, list[tuple[str, str]]] = {}
    for page, args, quoted in quoted_blocks():
        assert quoted, f"{page}: {args}: an empty quoted block"
        found.setdefault(args, []).extend((page, line) for line in quoted)
    return found


@pytest.mark.parametrize("args", sorted(quoted_commands()))
def test_a_quoted_output_is_what_the_tool_prints(capsys, monkeypatch, tmp_path, args):
    monkeypatch.chdir(tmp_path)                     # a study writes its folder here
    code, out, err = run_main(capsys, *shlex.split(args), "-q")
    assert code == 0, err
    for page, line in quoted_commands()[args]:
        assert line in out, f"{page}: {args}: {line!r} is not printed; it prints:\n{out}"


def test_compare_example_1_is_what_compare_prints(capsys):
    """docs/compare.md's first example, every line of its block (the run takes ~10 s)."""
    page = (REPO / "docs" / "compare.md").read_text()
    block = page.split("## Example 1", 1)[1].split("```", 2)[1]
    quoted = [line for line in block.splitlines() if line.strip()]
    code, out, err = run_main(capsys, "compare", "llama2-7b-fsdp-128gpu", "--tokens", "1T",
                              "-q")
    assert code == 0, err
    out = out.replace(f"{REPO}/", "")              # a shipped scenario named from the checkout
    missing = [line for line in quoted if line not in out]
    assert quoted and not missing, f"docs/compare.md, Example 1: not printed: {missing[:3]}"

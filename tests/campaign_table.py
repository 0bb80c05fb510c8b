"""A hostile-input campaign's table in docs/inputs.md against its committed results CSV
(tests/test_hostile3.py, tests/test_hostile4.py)."""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BAD = {"traceback", "MemoryError", "hang", "multi-line", "overlong line", "silent success",
       "failed run", "user file changed"}


def check_campaign_table(results: str, heading: str, at_least: int) -> None:
    """Each row of the docs section ``heading`` (family | inputs | clean | bad before
    (inputs run before) | bad after) is counted from ``results`` (under benchmarks/hostile/)."""
    n, clean, b0, n0, b1 = Counter(), Counter(), Counter(), Counter(), Counter()
    with open(REPO / "benchmarks/hostile" / results) as f:
        for row in csv.DictReader(f):
            for fam in (row["family"], "all"):
                n[fam] += 1
                clean[fam] += row["after"] not in BAD
                b1[fam] += row["after"] in BAD
                n0[fam] += bool(row["before"])
                b0[fam] += row["before"] in BAD
    text = (REPO / "docs/inputs.md").read_text()
    section = text[text.index(heading):]
    section = section[:section.index("\n## ", 1)] if "\n## " in section[1:] else section
    rows = [line for line in section.splitlines() if line.startswith("| ")][1:]
    assert len(rows) == len(n) and n["all"] >= at_least
    for line in rows:
        fam, *cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells == [str(n[fam]), str(clean[fam]), f"{b0[fam]} ({n0[fam]})",
                         str(b1[fam])], line

"""The front door: README.md stays a page or two, every link of README.md and docs/ leads
somewhere, its accuracy table is what ``simulator/data/validated.csv`` says, and the
question -> command table and the block of commands to copy hold the same commands.

``python tests/test_front_door.py`` rewrites the accuracy table from the data (after
``python -m simulator.validation.envelope_data`` regenerated it)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
PAGES = [README, *sorted((REPO / "docs").glob("*.md"))]
GROUND = REPO / "simulator" / "data" / "validated.csv"
LABEL = {"ddp": "DDP", "fsdp": "FSDP", "tensorflow": "TensorFlow", "horovod": "Horovod",
         "megatron": "Megatron", "torchtitan": "torchtitan"}
FINETUNE = {"lora": "LoRA fine-tuning", "qlora": "QLoRA fine-tuning", "full": "full fine-tuning"}
START, END = "<!-- accuracy-table", "<!-- /accuracy-table -->"


ARCHITECTURE = {"cnn": "CNN", "detection": "detection model"}


def accuracy_table() -> list[str]:
    """The README's accuracy table: median and largest |error| of the validation split, per
    framework (the envelope's: ``horovod`` is TensorFlow's), model architecture, dense or
    mixture of experts, pre-training or fine-tuning, and GPU type."""
    from simulator.validation.envelope import framework_of
    df = pd.read_csv(GROUND, keep_default_na=False)
    held = df[df.split == "validation"].assign(framework=lambda d: d.family.map(framework_of))
    lines = ["| framework | GPU | held-out runs | median abs. error | largest abs. error |",
             "|---|---|---:|---:|---:|"]
    for (framework, arch, moe, finetune, gpu), rows in held.groupby(
            ["framework", "architecture", "moe", "finetune", "gpu"], sort=True):
        err = rows.error.abs()
        name = (LABEL[framework] + (f", {ARCHITECTURE[arch]}" if arch in ARCHITECTURE else "")
                + (", mixture of experts" if moe else "")
                + (f", {FINETUNE[finetune]}" if finetune else ""))
        lines.append(f"| {name} | {gpu} | {len(rows)} | {100 * err.median():.1f}% | "
                     f"{100 * err.max():.1f}% |")
    return lines


def _table_in_readme(text: str) -> list[str]:
    block = text.split(START, 1)[1].split(END, 1)[0]
    return [line for line in block.splitlines()[1:] if line.strip()]


def test_readme_is_a_front_door():
    lines = README.read_text().splitlines()
    assert len(lines) <= 250, len(lines)
    heads = [line for line in lines if line.startswith("## ")]
    assert heads[:2] == ["## Install", "## Your question, the command"]


def test_accuracy_table_is_the_data():
    assert _table_in_readme(README.read_text()) == accuracy_table()


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    inside, found = False, set()
    for line in page.read_text().splitlines():
        if line.lstrip().startswith("```"):
            inside = not inside
        elif not inside and line.startswith("#"):
            found.add(_slug(line.lstrip("#")))
    return found


LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")


def _links(page: Path):
    inside = False
    for n, line in enumerate(page.read_text().splitlines(), 1):
        if line.lstrip().startswith("```"):
            inside = not inside
            continue
        if inside:
            continue
        for m in LINK.finditer(line):
            yield n, m.group(1) or m.group(2)


def test_every_link_leads_somewhere():
    broken = []
    for page in PAGES:
        for n, target in _links(page):
            if re.match(r"[a-z]+:", target):
                continue                         # http(s), mailto: not checked offline
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.name}:{n}: {target}")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{page.name}:{n}: {target} (no such heading)")
    assert not broken, broken


def test_every_docs_page_is_reachable_and_in_the_site():
    text = README.read_text()
    site = (REPO / "mkdocs.yml").read_text()
    for page in sorted((REPO / "docs").glob("*.md")):
        assert f"docs/{page.name}" in text, page.name       # linked from the front door
        assert page.name in site, page.name                 # in the site's navigation


def test_the_docs_site_builds_strict(tmp_path):
    """The manual builds as a site (mkdocs.yml) with no warning: every page in the
    navigation exists, every link and anchor between pages resolves inside the site."""
    import subprocess
    pytest.importorskip("mkdocs", reason="MkDocs is not installed (the test extra has it)")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q",
                           "-f", str(REPO / "mkdocs.yml"), "-d", str(tmp_path / "site")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "site" / "commands" / "index.html").is_file()


def _question_commands(text: str) -> list[str]:
    rows = [line for line in text.split("## Your question, the command", 1)[1]
            .split("\n\n", 2)[1].splitlines() if line.startswith("| ")][1:]
    return [m for row in rows for m in re.findall(r"`(clustersim [^`]+)`", row.split("|")[2])]


def _copy_block(text: str) -> list[str]:
    block = text.split("The same commands, to copy", 1)[1].split("```", 2)[1]
    return [line.strip() for line in block.splitlines() if line.strip()]


# Issue 47's questions a manager asks, and what the command answering each must contain
QUESTIONS = {"step time": "clustersim run ", "what-if fabric": "cluster.links=",
             "scaling": "clustersim study scaling-linearity",
             "memory / largest model": "clustersim capacity ",
             "which strategy and its cost": "clustersim compare ", "token budget": "--tokens",
             "failures": "clustersim reliability ", "best plan": "clustersim plan ",
             "shared cluster": "clustersim cluster ", "energy": "power_cap_w"}


def test_the_question_table_answers_every_question_of_the_front_door():
    commands = _question_commands(README.read_text())
    missing = [q for q, needle in QUESTIONS.items() if not any(needle in c for c in commands)]
    assert not missing, missing


def test_the_table_and_the_block_to_copy_agree():
    text = README.read_text()
    table = [c for c in _question_commands(text) if "COMMAND" not in c]
    block = _copy_block(text)
    assert table and set(table) <= set(block) | {"clustersim validate"}, \
        set(table) - set(block)
    assert set(block) <= set(table)


if __name__ == "__main__":               # rewrite the accuracy table from the data
    text = README.read_text()
    head, rest = text.split(START, 1)
    marker, _, tail = rest.partition("\n")
    body_end = tail.split(END, 1)[1]
    README.write_text(head + START + marker + "\n" + "\n".join(accuracy_table()) + "\n"
                      + END + body_end)
    sys.exit(0)


def test_the_two_setup_commands_are_marked_and_ci_runs_the_test_one():
    # fresh-clone-check reads the fenced block after each marker; .ci/run ends with the
    # test command itself
    text = README.read_text()
    blocks = {}
    for kind in ("run", "test"):
        m = re.search(rf"<!-- setup:{kind} -->\n```\n(.+?)\n```", text)
        assert m, f"README.md: no fenced block after <!-- setup:{kind} -->"
        blocks[kind] = m.group(1)
    assert blocks["run"].endswith("clustersim run")
    ci = (REPO / ".ci" / "run").read_text().strip().splitlines()
    assert ci[-1] == blocks["test"]

"""A self-contained HTML report: the answer first, then tables, the plots inline (base64
PNG), the detail, and the inputs that produced it. One file, no script, no fetch: it opens
from a mail attachment or a shared drive as it is.

Each command builds its page with :class:`HtmlReport` (``run``, ``compare``, ``study``,
``reliability``; any later command does the same) and writes it into its ``--out`` folder as
``report.html``. The page depends only on the inputs and results, never on the clock, so a
seed gives the same bytes.
"""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import yaml

from ..outpaths import atomic_write_text

FILE = "report.html"

_CSS = """
body { font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; margin: 2rem auto;
       max-width: 70rem; padding: 0 1rem; color: #1d2433; line-height: 1.45; }
h1 { font-size: 1.6rem; margin-bottom: 0.2rem; } h2 { font-size: 1.2rem; margin-top: 2rem; }
.subtitle { color: #5b6478; margin-top: 0; }
.answer { background: #eef5ff; border-left: 5px solid #2f6fde; padding: 0.8rem 1.2rem;
          font-size: 1.1rem; }
.answer p { margin: 0.4rem 0; }
table { border-collapse: collapse; margin: 0.8rem 0; font-size: 0.9rem; }
caption { text-align: left; font-weight: 600; padding-bottom: 0.3rem; }
th, td { border: 1px solid #d5dae3; padding: 0.25rem 0.6rem; }
th { background: #f3f5f9; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.best td { background: #e9f7ec; font-weight: 600; }
figure { margin: 1rem 0; } figure img { max-width: 100%; border: 1px solid #e3e6ec; }
figcaption { color: #5b6478; font-size: 0.85rem; }
pre { background: #f6f7f9; padding: 0.8rem; overflow-x: auto; font-size: 0.8rem; }
.note { color: #5b6478; font-size: 0.9rem; }
"""


@dataclass
class Table:
    """A table: ``rows`` of cells (str or numbers, already formatted as wanted); ``best``
    marks one row index to highlight; numeric-looking cells are right-aligned."""

    caption: str
    header: Sequence[str]
    rows: Sequence[Sequence[Any]]
    best: int | None = None
    note: str = ""


@dataclass
class HtmlReport:
    """A page being built; :meth:`write` puts it into a folder as ``report.html``."""

    title: str
    subtitle: str = ""
    _answer: list[str] = field(default_factory=list)
    _body: list[str] = field(default_factory=list)
    _inputs: list[tuple[str, str]] = field(default_factory=list)

    def answer(self, *sentences: str) -> HtmlReport:
        """The decision in plain words, shown first (one paragraph each)."""
        self._answer += [s for s in sentences if s]
        return self

    def heading(self, text: str) -> HtmlReport:
        self._body.append(f"<h2>{_e(text)}</h2>")
        return self

    def text(self, *paragraphs: str, note: bool = False) -> HtmlReport:
        cls = ' class="note"' if note else ""
        self._body += [f"<p{cls}>{_e(p)}</p>" for p in paragraphs if p]
        return self

    def folded(self, summary: str, *paragraphs: str) -> HtmlReport:
        """Details a reader opens on demand: ``summary`` shown, ``paragraphs`` folded
        below it (``<details>``)."""
        if paragraphs:
            self._body.append(f"<details><summary>{_e(summary)}</summary>"
                              + "".join(f'<p class="note">{_e(p)}</p>' for p in paragraphs)
                              + "</details>")
        return self

    def preformatted(self, text: str) -> HtmlReport:
        """Text shown as it is (a command's own table), in a fixed-width box."""
        self._body.append(f"<pre>{_e(text)}</pre>")
        return self

    def table(self, table: Table) -> HtmlReport:
        self._body.append(_table_html(table))
        return self

    def image(self, path: Path | str, caption: str = "") -> HtmlReport:
        """A PNG file, embedded (base64); a missing file is skipped."""
        path = Path(path)
        if path.is_file():
            data = base64.b64encode(path.read_bytes()).decode("ascii")
            cap = f"<figcaption>{_e(caption)}</figcaption>" if caption else ""
            self._body.append(f'<figure><img alt="{_e(caption or path.stem)}" '
                              f'src="data:image/png;base64,{data}">{cap}</figure>')
        return self

    def inputs(self, label: str, data: Any) -> HtmlReport:
        """What produced the result (a scenario, options), shown as YAML at the end."""
        text = data if isinstance(data, str) else yaml.safe_dump(
            data, sort_keys=False, default_flow_style=False, allow_unicode=True)
        self._inputs.append((label, text))
        return self

    def render(self) -> str:
        parts = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
                 '<meta name="viewport" content="width=device-width, initial-scale=1">',
                 f"<title>{_e(self.title)}</title>", f"<style>{_CSS}</style>", "</head>",
                 "<body>", f"<h1>{_e(self.title)}</h1>"]
        if self.subtitle:
            parts.append(f'<p class="subtitle">{_e(self.subtitle)}</p>')
        if self._answer:
            parts.append('<section class="answer">'
                         + "".join(f"<p>{_e(s)}</p>" for s in self._answer) + "</section>")
        parts += self._body
        if self._inputs:
            parts.append("<h2>Inputs</h2>")
            for label, text in self._inputs:
                parts.append(f"<h3>{_e(label)}</h3><pre>{_e(text)}</pre>")
        parts += ['<p class="note">Generated by clustersim. These are simulated answers, '
                  'not measurements; the accuracy of each part is stated in the README '
                  '("Accuracy").</p>', "</body>", "</html>", ""]
        return "\n".join(parts)

    def write(self, folder: Path | str) -> Path:
        """Write ``report.html`` into ``folder`` (which the command has already checked)."""
        path = Path(folder) / FILE
        return atomic_write_text(path, self.render())


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _numeric(cell: Any) -> bool:
    if isinstance(cell, (int, float)) and not isinstance(cell, bool):
        return True
    text = str(cell).strip().replace(",", "").rstrip("%").lstrip("$+-")
    return bool(text) and text.replace(".", "", 1).isdigit()


def _table_html(t: Table) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in t.header)
    rows = []
    for i, row in enumerate(t.rows):
        cells = "".join(f'<td class="num">{_e(c)}</td>' if _numeric(c) else f"<td>{_e(c)}</td>"
                        for c in row)
        rows.append(f'<tr class="best">{cells}</tr>' if i == t.best else f"<tr>{cells}</tr>")
    note = f'<p class="note">{_e(t.note)}</p>' if t.note else ""
    return (f"<table><caption>{_e(t.caption)}</caption><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>{note}")

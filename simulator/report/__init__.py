"""``report.html``: one self-contained page per ``--out`` folder, for a reader who will not
open a terminal (:mod:`.html`)."""

from .html import HtmlReport, Table

__all__ = ["HtmlReport", "Table"]

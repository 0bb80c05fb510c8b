"""``report.html``: built for a reader who will not open a terminal (answer first, tables,
plots inline, the inputs), self-contained, and checked in a real browser: headless Chromium
loads each command's page with no console error, finds the tables, and decodes every image.
The screenshot stays in a temporary folder, never in the repository."""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from simulator.report import HtmlReport, Table
from study_helpers import register, write_study

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="headless Chromium is not installed (apt-get install chromium; "
                             ".ci/run installs it, so CI runs this test)")
PNG = b"\x89PNG\r\n\x1a\n"

# Injected at the top of <head>: records every error and console.error, then after load
# reports the counts in a <pre id="__probe"> that --dump-dom prints.
_PROBE = (
    "<script>window.__errors=[];window.addEventListener('error',function(e){"
    "window.__errors.push(String(e.message||'a resource failed to load'))},true);"
    "var __ce=console.error;console.error=function(){window.__errors.push("
    "Array.prototype.join.call(arguments,' '));__ce.apply(console,arguments)};"
    "window.addEventListener('load',function(){var imgs=Array.prototype.slice.call("
    "document.images);var r={errors:window.__errors,tables:document.querySelectorAll("
    "'table').length,rows:document.querySelectorAll('tbody tr').length,images:imgs.length,"
    "decoded:imgs.filter(function(i){return i.complete&&i.naturalWidth>0}).length,"
    "answer:document.querySelectorAll('.answer p').length,title:document.title};"
    "var p=document.createElement('pre');p.id='__probe';p.textContent=JSON.stringify(r);"
    "document.body.appendChild(p)})</script>")


def _chromium(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                           "--enable-logging=stderr", "--v=0", *args],
                          capture_output=True, text=True, timeout=120)


def browse(page: Path, work: Path) -> dict:
    """What Chromium saw loading ``page`` (a probed copy in ``work``)."""
    probed = work / f"probed-{page.parent.name}.html"
    probed.write_text(page.read_text().replace("<head>", "<head>" + _PROBE, 1))
    done = _chromium("--virtual-time-budget=5000", "--dump-dom", probed.as_uri())
    found = re.search(r'<pre id="__probe">([^<]*)</pre>', done.stdout)
    assert found, done.stderr[-2000:]
    seen = json.loads(found.group(1).replace("&quot;", '"'))
    seen["console_errors"] = [line for line in done.stderr.splitlines()
                              if "CONSOLE" in line and ("ERROR" in line or "error" in line)]
    return seen


def _self_contained(text: str) -> None:
    assert "<script" not in text                      # nothing to run, nothing to fetch
    assert not re.search(r'(src|href)="(?!data:)', text)


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict[str, Path]:
    """``report.html`` of run, compare, study and reliability, each from its ``--out``."""
    root = tmp_path_factory.mktemp("pages")
    register()
    study = write_study(root, "tiny", command="probe",
                        axes={"grid": {"training.micro_batch": [1, 2]}},
                        plots=[{"kind": "line", "x": "training.micro_batch", "y": "value",
                                "file": "value"}],
                        questions=[{"kind": "best", "ask": "Which micro-batch gives the "
                                    "largest value?", "metric": "value", "goal": "max"}])
    commands = {
        "run": ["run", "--out", str(root / "run")],
        "compare": ["compare", "--strategies", "fsdp-full,ddp", "--no-scaling",
                    "--no-capacity", "--out", str(root / "compare")],
        "study": ["study", str(study), "--out", str(root / "study"), "--workers", "1"],
        "reliability": ["reliability", "--trials", "4", "--workers", "1", "--set",
                        "reliability.search.trials=2", "--out", str(root / "reliability")],
    }
    from simulator.cli import main
    for name, argv in commands.items():
        with pytest.raises(SystemExit) as info:
            main([*argv, "--quiet"])
        assert info.value.code == 0, name
    return {name: root / name / "report.html" for name in commands}


@pytest.mark.parametrize("name", ["run", "compare", "study", "reliability"])
def test_each_command_writes_a_report_with_the_answer_first(pages, name):
    text = pages[name].read_text()
    _self_contained(text)
    answer, table, inputs = (text.find('class="answer"'), text.find("<table>"),
                             text.find("<h2>Inputs</h2>"))
    assert 0 < answer < table < inputs                  # answer, then tables, then inputs
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', text)
    assert images and all(base64.b64decode(b)[:8] == PNG for b in images)


def test_the_compare_answer_names_the_cheapest_strategy(pages):
    text = pages["compare"].read_text()
    best = re.search(r'<tr class="best"><td>([^<]+)</td>', text).group(1)
    assert best == "fsdp-full"
    assert "FSDP FULL_SHARD (ZeRO-3) (fsdp-full) is the cheapest strategy that fits" in text
    assert "Out of memory" in text and "ddp" in text


@needs_chromium
@pytest.mark.parametrize("name", ["run", "compare", "study", "reliability"])
def test_chromium_loads_the_page_without_errors(pages, name, tmp_path):
    seen = browse(pages[name], tmp_path)
    assert seen["errors"] == [] and seen["console_errors"] == []
    assert seen["tables"] >= 1 and seen["rows"] >= 2 and seen["answer"] >= 1
    assert seen["images"] >= 1 and seen["decoded"] == seen["images"]


@needs_chromium
def test_chromium_sees_a_broken_image(pages, tmp_path):
    """The probe would catch a page whose image does not decode."""
    broken = tmp_path / "broken" / "report.html"
    broken.parent.mkdir()
    broken.write_text(re.sub(r"base64,[A-Za-z0-9+/]{40}", "base64,AAAA", pages["run"].read_text(),
                             count=1))
    seen = browse(broken, tmp_path)
    assert seen["decoded"] == seen["images"] - 1


@needs_chromium
def test_screenshot_stays_out_of_the_repository(pages, tmp_path):
    shot = tmp_path / "compare.png"
    _chromium("--window-size=1200,1600", f"--screenshot={shot}", pages["compare"].as_uri())
    assert shot.read_bytes()[:8] == PNG and shot.stat().st_size > 10_000


def test_html_escapes_every_text_and_marks_the_best_row(tmp_path):
    page = HtmlReport("<b>x</b>").answer("a & b").table(
        Table("t", ["k", "v"], [("<i>", "1,234.5"), ("y", "-")], best=1))
    page.image(tmp_path / "missing.png", "skipped")
    text = page.render()
    assert "<b>x</b>" not in text and "&lt;b&gt;x&lt;/b&gt;" in text and "a &amp; b" in text
    assert '<td class="num">1,234.5</td>' in text and '<tr class="best"><td>y</td>' in text
    assert "<img" not in text
    assert page.write(tmp_path) == tmp_path / "report.html"
    assert (tmp_path / "report.html").read_text() == text          # no clock, same bytes

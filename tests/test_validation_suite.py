"""`clustersim validate` (all suites): case statuses, known misses, REPORT.md and the exit
code, with stand-in suites (the real ones run in their own test files)."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.validation import known_misses as km
from simulator.validation.suite import run as suite
from simulator.validation.suite import runners as suite_runs
from test_cli import run_main


def _case(case, ok, result="x"):
    return {"case": case, "what": "w", "result": result, "bound": "b", "ok": ok,
            "error": None}


def _runner(cases, report=None):
    return lambda workers, folder=None: (cases, report)


def _boom(workers, folder=None):
    raise RuntimeError("suite exploded")


@pytest.mark.parametrize("cases,known,code,statuses", [
    ([_case("a/1", True), _case("a/2", None)], {}, 0, ["pass", "not gated"]),
    ([_case("a/1", True), _case("a/2", False)], {"a/2": "why"}, 3, ["pass", "known miss"]),
    ([_case("a/1", False), _case("a/2", False)], {"a/2": "why"}, 1, ["FAIL", "known miss"]),
    ([_case("a/1", True)], {"a/1": "why"}, 1, ["XPASS"]),
    ([_case("a/1", True)], {"a/gone": "why"}, 1, ["pass"]),        # stale record
])
def test_statuses_and_exit_code(tmp_path, cases, known, code, statuses):
    df, got, out = suite.run_all(("a",), 1, tmp_path / "REPORT.md", known,
                                 {"a": _runner(cases, tmp_path / "a.md")})
    assert got == code and list(df.status) == statuses
    text = out.read_text()
    assert f"exit code {code}" in text and "[a.md](a.md)" in text
    for c, s in zip(df.case, statuses):
        assert any(line.startswith(f"| {c} |") and f"| {s} |" in line
                   for line in text.splitlines())
    if "a/gone" in known:
        assert "`a/gone`" in text


def test_a_broken_suite_is_a_fail_and_does_not_hide_the_others(tmp_path):
    runners = {"a": _boom, "b": _runner([_case("b/1", True)])}
    df, code, out = suite.run_all(("a", "b"), 1, tmp_path / "R.md", {}, runners)
    assert code == km.EXIT_FAIL
    assert list(df.case) == ["a/error", "b/1"] and list(df.status) == ["FAIL", "pass"]
    assert "suite exploded" in out.read_text()


def test_known_misses_file_is_read_and_checked(tmp_path):
    assert all(reason for reason in km.load().values())
    bad = tmp_path / "k.yaml"
    bad.write_text("misses:\n  a/1: ''\n")
    with pytest.raises(Exception, match="reason"):
        km.load(bad)
    assert km.load(tmp_path / "missing.yaml") == {}


def test_reliability_rows_are_kept_from_the_single_report_run(tmp_path):
    rows = {"daly_examples": [{"M": "1 h", "daly_min": 1.0, "printed": 1.0, "ok": True}],
            "daly_simulation": [], "meta_ettr": [{"u0": "5 min", "interval": "1 h",
                                                  "error": 0.2, "ok": False}],
            "meta_mttf": [], "llama3_interruptions": [
                {"link_effect": "auto", "mean": 3.0, "measured": 4, "ok": None}]}
    calls = []

    def checks(cases, workers):
        calls.append(workers)
        return rows

    def text(cases, got):
        assert got is rows                       # the report is written from the same rows
        return "\n".join(str(got[n]) for n in rows)
    out = tmp_path / "report.md"
    cases, report = suite_runs.reliability(3, checks=checks, text=text, out=out)
    assert calls == [3] and report == out and out.read_text() == text({}, rows)
    assert [(c["case"], c["ok"]) for c in cases] == [
        ("reliability/daly/1 h", True), ("reliability/meta-ettr/5 min/1 h", False),
        ("reliability/llama3/auto", None)]


def test_validate_without_subcommand_runs_every_suite(capsys, monkeypatch, tmp_path):
    seen = []
    for name in suite_runs.RUNNERS:
        def run(workers, _n=name):
            seen.append(_n)
            return [_case(f"{_n}/1", True)], None
        monkeypatch.setitem(suite_runs.RUNNERS, name, run)
    monkeypatch.setattr(suite, "REPORT", tmp_path / "REPORT.md")
    monkeypatch.setattr(km, "load", lambda path=None: {})      # no record names a stub case
    code, out, err = run_main(capsys, "validate")
    assert code == 0, err
    assert seen == list(suite_runs.RUNNERS) and (tmp_path / "REPORT.md").is_file()
    assert "exit code 0" in out


def test_validate_all_exit_code_and_listing(capsys, monkeypatch, tmp_path):
    monkeypatch.setitem(suite_runs.RUNNERS, "captured",
                        _runner([_case("captured/x", False, "+20.0%")]))
    code, out, err = run_main(capsys, "validate", "all", "--only", "captured", "--out",
                              str(tmp_path / "R.md"))
    assert code == km.EXIT_FAIL and "FAIL: captured/x: +20.0%" in err
    assert Path(tmp_path / "R.md").read_text().count("| captured/x |") == 2


def test_committed_report_lists_the_known_misses():
    text = suite.REPORT.read_text()
    for case in km.load():
        assert f"| {case} |" in text, case


def test_validate_all_out_folder_keeps_every_report_out_of_the_repository(
        capsys, monkeypatch, tmp_path):
    """`validate all --out DIR`: REPORT.md in DIR and each suite's report in DIR/<suite>/;
    the repository's validation/ is not written."""
    seen = {}

    def run(workers, folder=None):
        seen["folder"] = folder
        (folder / "report.md").write_text("r")
        return [_case("captured/x", True)], folder / "report.md"
    monkeypatch.setitem(suite_runs.RUNNERS, "captured", run)
    monkeypatch.setattr(km, "load", lambda path=None: {})      # no record names a stub case
    code, out, err = run_main(capsys, "validate", "all", "--only", "captured", "--out",
                              str(tmp_path / "v"), "--quiet")
    assert code == 0, err
    assert seen["folder"] == tmp_path / "v" / "captured"
    assert (tmp_path / "v" / "REPORT.md").is_file() and err == ""
    assert "[report.md](captured/report.md)" in (tmp_path / "v" / "REPORT.md").read_text()


@pytest.mark.parametrize("oks,known,code", [
    ([True, None], {}, 0),
    ([True, False], {"s/2": "why"}, km.EXIT_KNOWN),
    ([False, False], {"s/2": "why"}, km.EXIT_FAIL),
    ([True, True], {"s/2": "why"}, km.EXIT_FAIL),         # XPASS: the record must go
])
def test_each_validate_command_exits_by_the_one_convention(monkeypatch, capsys, oks, known,
                                                           code):
    import click

    from simulator.validation.commands import gated_exit
    monkeypatch.setattr(km, "load", lambda path=None: known)
    cases = [_case(f"s/{i}", ok) for i, ok in enumerate(oks, 1)]
    if code == 0:
        gated_exit(cases)
        return
    with pytest.raises(click.exceptions.Exit) as info:
        gated_exit(cases)
    assert info.value.exit_code == code
    assert "s/2" in capsys.readouterr().out


def test_validate_help_states_the_exit_codes(capsys):
    for suite_name in ("collectives", "training", "traces", "captured", "gpu", "all", None):
        code, out, _ = run_main(capsys, "validate", *([suite_name] if suite_name else []),
                                "--help")
        assert code == 0 and "3" in out and "known misses" in " ".join(out.split()), suite_name


def test_validate_all_runs_the_parallel_rows_with_its_workers(monkeypatch, tmp_path):
    """``validate all --workers N`` runs the parallel suite's rows N at a time (each in a
    fresh process); its Selene 530B/1T runs, the ones too big for that, are off there."""
    import pandas as pd
    from simulator.validation.parallel import report
    seen = {}

    def validate(**kwargs):
        seen.update(kwargs)
        return pd.DataFrame(columns=report.COLUMNS)
    monkeypatch.setattr(report, "validate", validate)
    monkeypatch.setattr(report, "write_report", lambda df, folder: tmp_path / "report.md")
    suite_runs.parallel(workers=2, folder=tmp_path)
    assert seen == {"workers": 2}

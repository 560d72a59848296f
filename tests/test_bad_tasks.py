"""A bad or duplicate task, or a bad suite, is an ERROR of its own; the other tasks run and the report lists it.

Also: a run that selects no episode leaves the last report as it was.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from task_files import N_TASKS, edit_toml, report_of, run_clean


def test_one_bad_task_is_an_error_the_others_run_and_the_report_lists_it(pytester: pytest.Pytester,
                                                                         suite: Path) -> None:
    edit_toml(suite / "share-report" / "task.toml", lambda d: d["facts"][0].__setitem__("cues", "report"))
    result = run_clean(pytester)
    result.assert_outcomes(passed=N_TASKS - 1, errors=1)
    result.stdout.fnmatch_lines([
        "tasks not loaded: 1 (each an ERROR; the other tasks ran)",
        "*share-report/task.toml: field 'facts?0?.cues': expected a list of strings*",
        "*ERROR suites/workflows::share-report::invalid-task*",
    ])
    assert "Interrupted" not in result.stdout.str()
    page = report_of(result).read_text()
    assert "not loaded: suites/workflows::share-report::invalid-task" in page and "facts[0].cues" in page


def test_the_bad_task_still_shows_under_k_and_in_collect_only(pytester: pytest.Pytester, suite: Path) -> None:
    (suite / "share-report" / "instruction.md").write_bytes(b"\xff\xfe")
    result = run_clean(pytester, "-k", "share-report and clean")
    result.assert_outcomes(passed=0, errors=1)
    for select in (["-m", "tool and missing"], ["-k", "share-report and inserted"]):
        result = pytester.runpytest("--agentperturb", "suites/workflows", "-p", "no:cacheprovider",
                                    "--agentperturb-model", "reference/oracle", "--collect-only", "-q", *select)
        assert "suites/workflows::share-report::invalid-task" in result.outlines, (select, result.outlines)
    result = run_clean(pytester, "--collect-only", "-q")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["suites/workflows::share-report::invalid-task", "tasks not loaded: 1*",
                                 "*instruction.md: field 'files.user': expected UTF-8 text*"])


def test_a_malformed_suite_is_an_error_of_that_suite(pytester: pytest.Pytester, suite: Path) -> None:
    other = pytester.path / "suites" / "other"
    shutil.copytree(suite, other)
    (other / "suite.toml").write_text('name = "../../escape"\n')
    result = pytester.runpytest("--agentperturb", "suites/workflows", "suites/other", "-p", "no:cacheprovider",
                                "--agentperturb-families", "clean", "--agentperturb-model", "reference/oracle")
    result.assert_outcomes(passed=N_TASKS, errors=1)
    result.stdout.fnmatch_lines(["*invalid suite: *suite.toml: field 'name': expected a plain name*",
                                 "*ERROR suites/other::invalid-suite*"])


def test_two_tasks_with_one_id_the_second_is_an_error_and_no_row_is_lost(pytester: pytest.Pytester,
                                                                        suite: Path) -> None:
    shutil.copytree(suite / "share-report", suite / "share-report-copy")
    result = run_clean(pytester, "-n", "2")
    result.assert_outcomes(passed=N_TASKS, errors=1)
    result.stdout.fnmatch_lines(["*share-report-copy/task.toml: field 'id': expected a task id unique within "
                                 "suite 'workflows', found 'share-report', already the id of "
                                 "suites/workflows::share-report*"])
    from pytest_agentperturb.run.store import read_episodes

    rows = read_episodes(pytester.path / "reports" / "agentperturb.sqlite")
    assert len(rows) == N_TASKS  # every episode that ran is stored: none overwrote another


def test_a_run_without_episodes_keeps_the_last_report(pytester: pytest.Pytester, suite: Path) -> None:
    same = ("--agentperturb-report", "reports/agentperturb.html")  # a -k subset's own report otherwise
    run_clean(pytester, "-k", "share-report", *same).assert_outcomes(passed=1)
    page = pytester.path / "reports" / "agentperturb.html"
    before = page.read_bytes()
    result = run_clean(pytester, "-k", "no-such-task", *same)
    result.stdout.fnmatch_lines(["report: not written (no episode ran); * is left as it was"])
    assert page.read_bytes() == before

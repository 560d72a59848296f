"""What CI tools see: the gate as a test item, agent failures as JUnit failures and a pytest-html category."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from browser import browse, chromium  # noqa: F401 - the fixture
from task_files import line_counts, run_fast

run = run_fast


def _collected(result: pytest.RunResult) -> list[str]:
    return [ln for ln in result.outlines if "::" in ln and not ln.startswith(("agentperturb: ", "="))]


def _outcomes(result: pytest.RunResult) -> dict[str, int]:
    return line_counts(result.outlines[-1])


def _cases(path: Path) -> dict[str, ET.Element]:
    return {f"{c.get('classname')}::{c.get('name')}": c for c in ET.parse(path).iter("testcase")}


# -- 1. the gate is a test case -------------------------------------------------------
@pytest.mark.parametrize("select", [["-k", "tool and missing"], ["-m", "clean"], ["-k", "not gate"], []])
def test_gate_item_is_collected_last_and_no_selection_drops_it(pytester: pytest.Pytester, suite_path: Path,
                                                                select: list[str]) -> None:
    r = run(pytester, suite_path, "--collect-only", "-q", "--agentperturb-max-drop", "25", *select)
    ids = _collected(r)
    assert ids[-1] == "agentperturb::gate", r.stdout.str()
    assert ids.count("agentperturb::gate") == 1 and len(ids) >= 2


def test_no_gate_item_without_thresholds_and_deselect_by_name(pytester: pytest.Pytester, suite_path: Path) -> None:
    r = run(pytester, suite_path, "--collect-only", "-q")
    assert "agentperturb::gate" not in _collected(r)
    r = run(pytester, suite_path, "--agentperturb-max-drop", "25", "--deselect", "agentperturb::gate",
            "--junitxml", "junit.xml")
    assert "agentperturb::gate" not in _cases(pytester.path / "junit.xml")
    assert r.ret == pytest.ExitCode.TESTS_FAILED  # left out on purpose: the verdict still sets the exit status
    assert any(ln.startswith("agentperturb gate: --agentperturb-max-drop breached") for ln in r.outlines)


def test_breached_gate_is_a_failed_test_in_junit_and_the_last_line(pytester: pytest.Pytester,
                                                                    suite_path: Path) -> None:
    r = run(pytester, suite_path, "--agentperturb-max-drop", "25", "--agentperturb-min-bypass", "0.6",
            "--junitxml", "junit.xml")
    assert r.ret == pytest.ExitCode.TESTS_FAILED
    assert re.search(r"=+ 1 failed, .*agent-failed", r.outlines[-1]), r.outlines[-1]
    r.stdout.fnmatch_lines(["FAILED agentperturb::gate - 2 gate thresholds breached or not evaluated"])
    gate = _cases(pytester.path / "junit.xml")["agentperturb::gate"]
    failure = gate.find("failure")
    assert failure is not None
    assert "--agentperturb-max-drop breached by reference/literal on workflows" in (failure.text or "")
    assert "--agentperturb-min-bypass breached" in (failure.text or "")
    # the summary keeps one line per breach (the failure section indents its copy)
    assert sum(ln.startswith("agentperturb gate:") and "breached" in ln for ln in r.outlines) == 2


def test_met_gate_is_a_passed_test(pytester: pytest.Pytester, suite_path: Path) -> None:
    r = run(pytester, suite_path, "--agentperturb-max-drop", "100", "--junitxml", "junit.xml")
    assert r.ret == pytest.ExitCode.OK
    gate = _cases(pytester.path / "junit.xml")["agentperturb::gate"]
    assert gate.find("failure") is None and gate.find("error") is None


def test_gate_under_xdist_is_one_failed_case(pytester: pytest.Pytester, suite_path: Path) -> None:
    r = run(pytester, suite_path, "--agentperturb-max-drop", "25", "--junitxml", "junit.xml", n=2)
    assert r.ret == pytest.ExitCode.TESTS_FAILED
    cases = [c for c in ET.parse(pytester.path / "junit.xml").iter("testcase") if c.get("name") == "gate"]
    assert len(cases) == 1 and cases[0].find("failure") is not None
    assert "--agentperturb-max-drop breached" in (cases[0].find("failure").text or "")  # type: ignore[union-attr]


# -- 2. agent failures are visible as what they are ------------------------------------
def test_agent_failures_are_junit_failures_with_the_failed_checks(pytester: pytest.Pytester,
                                                                  suite_path: Path) -> None:
    r = run(pytester, suite_path, "--junitxml", "junit.xml")
    assert r.ret == pytest.ExitCode.OK  # no gate: agent failures never fail the session
    outcomes = _outcomes(r)
    assert outcomes.get("failed", 0) == 0 and outcomes["agent-failed"] > 0
    cases = _cases(pytester.path / "junit.xml")
    failed = {k: c for k, c in cases.items() if c.find("failure") is not None}
    assert len(failed) == outcomes["agent-failed"]
    props = {k: {p.get("name"): p.get("value") for p in c.iter("property")} for k, c in cases.items()}
    assert all(props[k]["agentperturb_verdict"] == "fail" for k in failed)
    assert all(p["agentperturb_verdict"] == "pass" for k, p in props.items() if k not in failed)
    text = next(iter(failed.values())).find("failure").text or ""  # type: ignore[union-attr]
    assert "failed grader checks: " in text and "reproduce: pytest --agentperturb" in text
    root = ET.parse(pytester.path / "junit.xml").getroot()
    suite_el = root if root.tag == "testsuite" else root.find("testsuite")
    assert suite_el is not None and int(suite_el.get("failures", "0")) == len(failed)


def test_old_outcome_on_request(pytester: pytest.Pytester, suite_path: Path) -> None:
    r = run(pytester, suite_path, "--junitxml", "junit.xml", "--agentperturb-agent-failures-pass")
    assert r.ret == pytest.ExitCode.OK and _outcomes(r)["agent-failed"] > 0
    assert all(c.find("failure") is None for c in _cases(pytester.path / "junit.xml").values())


def test_agent_failures_do_not_stop_a_maxfail_run(pytester: pytest.Pytester, suite_path: Path) -> None:
    r = run(pytester, suite_path, "-x")
    assert r.ret == pytest.ExitCode.OK
    assert _outcomes(r)["passed"] + _outcomes(r)["agent-failed"] == 16


def test_pytest_html_has_an_agent_failed_category(pytester: pytest.Pytester, suite_path: Path) -> None:
    r = run(pytester, suite_path, "--html", "ci.html", "--agentperturb-max-drop", "25")
    page = (pytester.path / "ci.html").read_text(encoding="utf-8")
    blob = json.loads(re.search(r'data-jsonblob="([^"]*)"', page).group(1)  # type: ignore[union-attr]
                      .replace("&#34;", '"').replace("&quot;", '"').replace("&amp;", "&")
                      .replace("&lt;", "<").replace("&gt;", ">").replace("&#39;", "'"))
    results = {t["testId"]: t["result"] for tests in blob["tests"].values() for t in tests}
    assert results["agentperturb::gate"] == "Failed"
    assert results["suites/workflows::share-report::clean[reference/literal]"] == "Passed"
    assert list(results.values()).count("Agent-failed") == _outcomes(r)["agent-failed"] > 0
    assert 'data-test-result="agent-failed"' in page
    assert re.search(rf"{_outcomes(r)['agent-failed']} Agent failed", re.sub(r"<[^>]+>|\s+", " ", page)), "the count of the category"
    assert re.search(r"1 Failed", re.sub(r"<[^>]+>|\s+", " ", page))
    assert "'agent-failed'," in page[page.index("const possibleFilters = ["):][:300]  # rows its script can draw
    o = _outcomes(r)
    assert re.search(rf"\b{o['passed'] + o['failed'] + o['agent-failed']} tests took ", page), "the test count"


def test_pytest_html_draws_the_agent_failed_rows_in_a_browser(pytester: pytest.Pytester, suite_path: Path,
                                                              chromium: str) -> None:
    """What a person sees: pytest-html's page, its script run, lists the agent-failed rows under their own result
    (its script used to draw only the results of a fixed list: the box counted them, the table showed none)."""
    r = run(pytester, suite_path, "--html", "ci.html", "--self-contained-html", "--agentperturb-max-drop", "25")
    o = _outcomes(r)
    dom = browse(chromium, pytester.path, (pytester.path / "ci.html").as_uri())
    rows = re.findall(r'<td class="col-result[^"]*">([^<]*)</td>', dom)  # (passed rows are "collapsed")
    assert rows.count("Agent-failed") == o["agent-failed"] > 0, sorted(set(rows))
    assert rows.count("Failed") == o["failed"] and rows.count("Passed") == o["passed"], (o, {x: rows.count(x) for x in set(rows)})
    only = browse(chromium, pytester.path, (pytester.path / "ci.html").as_uri() + "?visible=agent-failed")
    assert set(re.findall(r'<td class="col-result[^"]*">([^<]*)</td>', only)) == {"Agent-failed"}  # its filter box

"""Errors say whose they are (issue 29, acceptance 4), as a user of ``pytest --agentperturb`` meets them.

An exception raised in the user's agent is an *agent error*: the terminal
shows it once with the last frames of the user's own code (never the
harness's), the store keeps its full traceback and the task page shows it.
A provider's failure and the harness's own (a broken grader) read
``... (not an agent failure)``.  A failed item's line names the grader
checks that failed; an undefined figure prints as ``n/a (why)``, never ``nan``.
"""

from __future__ import annotations

import html
import sqlite3
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, Script, preimported  # noqa: F401 (fixture)
from task_files import report_of

from pytest_agentperturb.model.ownership import AGENT, HARNESS, PROVIDER, error_kind

HERE = Path(__file__).resolve().parent
ARGS = ("--agentperturb", "suites/workflows", "--agentperturb-families", "clean", "-k", "book-offsite",
        "-p", "no:cacheprovider")

AGENT_CODE = '''
def helper(ctx):
    raise RuntimeError("boom from my agent")
def crashes(ctx):
    x = 1
    helper(ctx)
def exits(ctx):
    raise SystemExit(3)
def lazy(ctx):
    ctx.finish("I did nothing")
'''


def _pages(result: pytest.RunResult) -> Path:
    """The task-pages folder of the report the run wrote (a subset run names its report after the selection)."""
    report = report_of(result)
    return report.with_name(f"{report.stem}-tasks")


def _store(pytester: pytest.Pytester) -> list[tuple[str, str]]:
    with sqlite3.connect(pytester.path / "reports" / "agentperturb.sqlite") as db:
        return db.execute("SELECT error, trajectory FROM episodes WHERE error != ''").fetchall()


@pytest.mark.parametrize("ci", ["", "true"], ids=["terminal", "on-CI"])
def test_a_crashing_agent_is_an_agent_error_with_its_own_frames_shown_once(pytester: pytest.Pytester, suite: Path,
                                                                          monkeypatch: pytest.MonkeyPatch,
                                                                          ci: str) -> None:
    # on CI (CI or BUILD_NUMBER set) pytest writes a failure's whole message on its short-summary line
    monkeypatch.setenv("CI", ci)
    monkeypatch.delenv("BUILD_NUMBER", raising=False)
    pytester.makepyfile(myagent=AGENT_CODE)
    result = pytester.runpytest(*ARGS, "--agentperturb-agent", "myagent.py:crashes")
    result.assert_outcomes(errors=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "agent error: RuntimeError: boom from my agent",
        "in your agent's code (last frames; the full traceback is in the store and on the task page):",
        "  */myagent.py:5 in crashes: helper(ctx)",
        '  */myagent.py:2 in helper: raise RuntimeError("boom from my agent")',
        "reproduce: pytest --agentperturb *",
    ])
    out = result.stdout.str()
    assert out.count("in helper: raise RuntimeError") == 1, out   # shown once
    # the short summary names the error by its heading alone
    result.stdout.fnmatch_lines(["ERROR *::book-offsite::clean* - agent error*"])   # cut to the width off CI
    assert "pytest_agentperturb/" not in out and "Traceback" not in out, out   # none of the harness's frames
    assert "not an agent failure" not in out and "infrastructure" not in out, out
    assert "errors: 1 (excluded from every aggregate) [agent 1]," in out, out   # counted by owner
    # the store keeps the error as it was (class: message) and the full traceback in the trajectory
    (error, traj), = _store(pytester)
    assert error == "RuntimeError: boom from my agent"
    assert "Traceback (most recent call last)" in traj and 'myagent.py\\", line 2, in helper' in traj
    assert "pytest_agentperturb" in traj   # the full traceback, the harness's frames included
    # the task page says whose the error is and shows the full traceback
    page = (_pages(result) / "workflows" / "book-offsite.html").read_text()
    assert "agent error: RuntimeError: boom from my agent" in page
    assert "<pre class=err>Traceback (most recent call last):" in page
    assert html.escape('myagent.py", line 2, in helper') in page
    assert "not an agent failure" not in page


def test_systemexit_in_the_agents_thread_is_the_agents_error(pytester: pytest.Pytester, suite: Path) -> None:
    pytester.makepyfile(myagent=AGENT_CODE)
    result = pytester.runpytest_subprocess(*ARGS, "--agentperturb-agent", "myagent.py:exits", timeout=120)
    out = result.stdout.str()
    assert "agent error: SystemExit: 3" in out and "myagent.py:7 in exits: raise SystemExit(3)" in out, out
    assert "not an agent failure" not in out and "errors: 1" in out, out
    (error, _), = _store(pytester)
    assert error.startswith("SystemExit")


@pytest.mark.usefixtures("preimported")
def test_a_provider_failure_is_a_provider_error(pytester: pytest.Pytester, suite: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    with FakeOpenAI(Script([])) as srv:   # every request: HTTP 500
        result = pytester.runpytest(*ARGS, "--agentperturb-model", "openai/fake", "--agentperturb-api-base", srv.base,
                                    "--agentperturb-backoff", "0.01")
    result.assert_outcomes(errors=1)
    assert srv.requests   # the model was really called
    result.stdout.fnmatch_lines(["provider error (not an agent failure): ProviderError: openai/fake: InternalServerError: *"])
    out = result.stdout.str()
    assert "agent error" not in out and "in your agent's code" not in out, out
    assert "errors: 1 (excluded from every aggregate) [provider 1]," in out, out
    page = (_pages(result) / "workflows" / "book-offsite.html").read_text()
    assert "provider error (not an agent failure): ProviderError: openai/fake" in page
    assert "<pre class=err>" not in page


def _kv(pytester: pytest.Pytester, *replace: tuple[str, str]) -> None:
    """The README's Python benchmark as the project's conftest, with its text edited."""
    text = (HERE / "kv_benchmark.py").read_text()
    for old, new in replace:
        assert old in text
        text = text.replace(old, new)
    pytester.makeconftest(text)


KV = ("--agentperturb", "--agentperturb-suite", "kv", "--agentperturb-families", "clean", "-p", "no:cacheprovider")


def test_a_broken_grader_is_a_harness_error(pytester: pytest.Pytester) -> None:
    _kv(pytester, ("    values = {e[", "    raise KeyError('ledger')\n    values = {e["))
    result = pytester.runpytest(*KV, "--agentperturb-model", "reference/oracle")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["harness error (not an agent failure): GraderError: KeyError: 'ledger'"])
    assert "agent error" not in result.stdout.str()
    assert "errors: 1 (excluded from every aggregate) [harness 1]," in result.stdout.str()


LONG = "INV-2044 is approved " + "and its approval is written to the ledger with the reviewer's initials " * 2


def test_a_failed_items_line_names_its_failed_checks(pytester: pytest.Pytester) -> None:
    _kv(pytester, ('("INV-2044 is approved"', f'("{LONG}"'),
        ('("no other invoice changed"', '("the ledger was read", False), ("no other invoice changed"'))
    pytester.makepyfile(myagent=AGENT_CODE)
    result = pytester.runpytest(*KV, "--agentperturb-agent", "myagent.py:lazy", "--junitxml", "junit.xml")
    shown = "INV-2044 is approved and its approval is written to the ledger with the..."   # cut at a word
    result.stdout.fnmatch_lines([
        "agent failures: 1 *",
        f"  *invoice-approval*  failed: {shown}; the reviewer is notified (+1 more); reward=0.0",
    ])
    assert "the ledger was read" not in result.stdout.str()   # the third failed check: counted, not named
    (case,) = [c for c in ET.parse(pytester.path / "junit.xml").iter("testcase") if c.find("failure") is not None]
    text = case.find("failure").text or ""   # type: ignore[union-attr]
    assert f"failed grader checks: {shown}; the reviewer is notified (+1 more); reward 0.0" in text, text


def test_undefined_figures_print_as_na_with_why(pytester: pytest.Pytester, suite: Path) -> None:
    pytester.makepyfile(myagent=AGENT_CODE)
    result = pytester.runpytest(*ARGS[:2], "--agentperturb-families", "clean,tool-incorrect", *ARGS[4:],
                                "--agentperturb-agent", "myagent.py:lazy")
    (line,) = [ln for ln in result.outlines if ln.startswith("myagent.py:lazy")]
    assert "clean 0.000" in line and "drop n/a (no clean passes)" in line, line   # D divides by the clean score
    assert "nan" not in result.stdout.str().lower(), result.stdout.str()
    report = report_of(result).read_text()
    assert "<td>n/a (no clean passes)</td><td class=ci>n/a (no clean passes)</td>" in report
    assert ">nan" not in report.lower() and "nan %" not in report.lower()


TB_HARNESS_ONLY = '''Traceback (most recent call last):
  File "/x/site-packages/pytest_agentperturb/run/episode.py", line 192, in _play
    await agent.run(ctx)
  File "/x/site-packages/pytest_agentperturb/agents/litellm_agent.py", line 300, in run
    msg = reply["choices"][0]
KeyError: 'choices'
'''


@pytest.mark.parametrize("error, trajectory, kind", [
    ("RuntimeError: boom", None, AGENT),
    ("SystemExit: 3", None, AGENT),
    ("KeyboardInterrupt: ", None, AGENT),
    ("EpisodeTimeout: no answer within 5 s", None, AGENT),
    ("AgentValueError: finish(): the answer must be str, got bytes", None, AGENT),
    ("ProviderError: openai/fake: InternalServerError: boom", None, PROVIDER),
    ("RateLimitError: openai/fake: slow down", None, PROVIDER),
    ("openai.APIConnectionError: Connection error.", None, PROVIDER),
    ("GraderError: KeyError: 'x'", None, HARNESS),
    ("SimulatorError: the user model failed", None, HARNESS),
    ("EnvironmentError: OSError: no file", None, HARNESS),
    ("WorkerLost: worker gw0 died while running this episode", None, HARNESS),
    ("provider <timeout>", None, HARNESS),   # names no class: not an agent's exception
    # an exception with no frame of the user's code: a built-in agent's bug, the harness's
    ("KeyError: 'choices'", [{"role": "harness", "content": "the agent raised:\n" + TB_HARNESS_ONLY}], HARNESS),
    ("KeyError: 'choices'", [{"role": "harness", "content": "the agent raised:\n" + TB_HARNESS_ONLY.replace(
        '  File "/x/site-packages/pytest_agentperturb/agents/litellm_agent.py"', '  File "/home/me/agent.py"')}],
     AGENT),
    ("", None, None),
])
def test_error_kind_of_stored_errors(error: str, trajectory: object, kind: str | None) -> None:
    assert error_kind(error, trajectory) == kind


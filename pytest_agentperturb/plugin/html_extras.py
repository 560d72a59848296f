"""pytest-html integration: each perturbation item's extras carry its diff, verdicts and a report link.

Registered by the session only when the pytest-html plugin is active and
writes a report (``--html``); the ``pytest_html`` module is imported here,
never elsewhere.  pytest-html
inserts its table cells into the page with ``innerHTML`` and puts the node
id into its cell unescaped, so :meth:`HtmlExtras.pytest_html_results_table_row`
escapes that cell: a task id from an adapter or a folder name can never
become markup.  Everything in the extras is escaped here too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .collect import PerturbItem
from .finish import AGENT_FAILED_ATTR

#: pytest-html's result word of an agent-failed episode (its filter key is the word in lower case)
AGENT_FAILED_LABEL = "Agent-failed"
#: The start of pytest-html 4's list of the results its page can show (rows of any other result are never
#: drawn); the page gets ``agent-failed`` added to it (:func:`show_agent_failed`).
_FILTERS = "const possibleFilters = [\n"


def show_agent_failed(page: str) -> str:
    """pytest-html's rendered page with the agent-failed result among those its table shows and filters.

    pytest-html 4's script draws only the rows whose result is in a fixed
    list, so without this the "Agent failed" box counted the rows and the
    table never showed one.  A page without that list (another pytest-html)
    is returned as it is.
    """
    at = page.find(_FILTERS)
    if at < 0 or f"'{AGENT_FAILED_LABEL.lower()}'" in page[at:at + 400]:
        return page
    at += len(_FILTERS)
    return f"{page[:at]}    '{AGENT_FAILED_LABEL.lower()}',\n{page[at:]}"


class HtmlExtras:
    """Adds ``extras`` (pytest-html 4) to the call report of every :class:`PerturbItem`."""

    def __init__(self, report_path: Path, config: pytest.Config | None = None) -> None:
        self.report_path = report_path
        self.config = config
        self._html_outcomes: dict[str, Any] | None = None
        self._agent_failed: set[str] = set()

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self._outcomes_ready()

    def _outcomes_ready(self) -> None:
        """Add the ``Agent-failed`` filter box before pytest-html renders its first page."""
        self._outcomes()

    @pytest.hookimpl(trylast=True)
    def pytest_html_results_table_row(self, report: pytest.TestReport, cells: list[Any]) -> None:
        """Replace the test-id cell (raw node id in pytest-html 4) by an escaped one, for every report."""
        from ..report.svg import esc

        test_id = report.nodeid + ("" if report.when == "call" else f"::{report.when}")
        agent_failed = report.failed and getattr(report, AGENT_FAILED_ATTR, False)
        for i, cell in enumerate(cells):
            if isinstance(cell, str) and cell.startswith('<td class="col-testId">'):
                cells[i] = f'<td class="col-testId">{esc(test_id)}</td>'
            elif agent_failed and isinstance(cell, str) and cell.startswith('<td class="col-result">'):
                cells[i] = f'<td class="col-result">{AGENT_FAILED_LABEL}</td>'  # its own filter box

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> Any:
        """Count an agent-failed episode under its own outcome, not "Failed" (pytest-html 4's outcome table)."""
        result = yield
        if report.when == "call" and report.failed and getattr(report, AGENT_FAILED_ATTR, False):
            self._agent_failed.add(report.nodeid)  # pytest-html counts an item's reports at its teardown
        elif report.when == "teardown" and report.nodeid in self._agent_failed:
            self._agent_failed.discard(report.nodeid)
            outcomes = self._outcomes()
            if outcomes is not None and outcomes["failed"]["value"] > 0:
                outcomes["failed"]["value"] -= 1
                outcomes[AGENT_FAILED_LABEL.lower()]["value"] += 1
        return result

    def _outcomes(self) -> dict[str, Any] | None:
        """pytest-html's outcome counters, with an ``agent-failed`` entry added (None if its layout is unknown)."""
        if self._html_outcomes is None:
            for plugin in self.config.pluginmanager.get_plugins() if self.config is not None else ():
                outcomes = getattr(getattr(plugin, "_report", None), "_outcomes", None)
                if isinstance(outcomes, dict) and "failed" in outcomes and "passed" in outcomes:
                    outcomes.setdefault(AGENT_FAILED_LABEL.lower(), {"label": "Agent failed", "value": 0})
                    self._html_outcomes = outcomes
                    self._patch_page(plugin, outcomes)
                    break
        return self._html_outcomes

    @staticmethod
    def _patch_page(html: Any, outcomes: dict[str, Any]) -> None:
        """Wrap this pytest-html report's page writer and test count (on the instance: nothing else changes).

        The page shows the agent-failed rows (:func:`show_agent_failed`), and
        its "N tests took" line counts them (pytest-html counts passed,
        failed, xpassed and xfailed only).
        """
        write, count = getattr(html, "_write_report", None), getattr(html, "_run_count", None)
        if not callable(write) or not callable(count):
            return

        def write_report(rendered: str) -> None:
            write(show_agent_failed(rendered))

        def run_count() -> str:
            text = str(count())
            n = int(outcomes.get(AGENT_FAILED_LABEL.lower(), {}).get("value", 0))
            head, sep, tail = text.partition(" ")
            if not n or not head.isdigit():
                return text
            total = int(head) + n
            return f"{total} {'tests' if total > 1 else 'test'} {tail.split(' ', 1)[1]}" if sep else text

        html._write_report = write_report
        html._run_count = run_count

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        report = yield
        if not isinstance(item, PerturbItem) or item.record is None:
            return report
        if report.when != "call" and not (report.when == "setup" and not report.passed):
            return report
        from pytest_html import extras

        from ..report import diff_html, episode_url
        from ..report.svg import esc

        from .reporting import failed_checks

        rec = item.record
        checks = failed_checks(rec)
        row = {k: getattr(rec, k) for k in ("run_id", "model", "suite", "task", "family", "seed", "repeat")}
        verdict = "error" if rec.error else ("pass" if rec.success else "fail")
        comp = "" if rec.compliance is None else ("compliance" if rec.compliance else "bypass")
        v = item.variant
        cans = ", ".join(f"{c.kind}: {c.text}" for c in v.canaries) if v is not None else ""
        body = (f"<div><p><b>agentperturb</b> {esc(item.family)} · operator {esc(rec.operator)} · "
                f"verdict <b>{esc(verdict)}</b> {esc(comp)} · reward {esc(rec.reward)}</p>"
                + (f"<p>failed grader checks: {esc('; '.join(checks))}</p>" if checks else "")
                + (f"<p>canaries: {esc(cans)}</p>" if cans else "")
                + (diff_html(v.diff) if v is not None and v.diff else "") + "</div>")
        link = episode_url(self.report_path, row)   # the episode on its task's page
        report.extras = [*getattr(report, "extras", []), extras.html(body),
                         extras.url(link, name="agentperturb report")]
        return report

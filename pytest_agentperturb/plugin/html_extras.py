"""pytest-html integration: each perturbation item's extras carry its diff, verdicts and a report link.

Registered by the session only when the pytest-html plugin is active and writes a report (``--html``); the
``pytest_html`` module is imported here, never elsewhere.  pytest-html
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


class HtmlExtras:
    """Adds ``extras`` (pytest-html 4) to the call report of every :class:`PerturbItem`."""

    def __init__(self, report_path: Path) -> None:
        self.report_path = report_path

    @pytest.hookimpl(trylast=True)
    def pytest_html_results_table_row(self, report: pytest.TestReport, cells: list[Any]) -> None:
        """Replace the test-id cell (raw node id in pytest-html 4) by an escaped one, for every report."""
        from ..report.svg import esc

        test_id = report.nodeid + ("" if report.when == "call" else f"::{report.when}")
        for i, cell in enumerate(cells):
            if isinstance(cell, str) and cell.startswith('<td class="col-testId">'):
                cells[i] = f'<td class="col-testId">{esc(test_id)}</td>'

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

        rec = item.record
        row = rec.to_row()
        verdict = "error" if rec.error else ("pass" if rec.success else "fail")
        comp = "" if rec.compliance is None else ("compliance" if rec.compliance else "bypass")
        v = item.variant
        cans = ", ".join(f"{c.kind}: {c.text}" for c in v.canaries) if v is not None else ""
        body = (f"<div><p><b>agentperturb</b> {esc(item.family)} · operator {esc(rec.operator)} · "
                f"verdict <b>{esc(verdict)}</b> {esc(comp)} · reward {esc(rec.reward)}</p>"
                + (f"<p>canaries: {esc(cans)}</p>" if cans else "")
                + (diff_html(v.diff) if v is not None and v.diff else "") + "</div>")
        link = episode_url(self.report_path, row)   # the episode on its task's page
        report.extras = [*getattr(report, "extras", []), extras.html(body),
                         extras.url(link, name="agentperturb report")]
        return report

"""pytest-html integration: each perturbation item's extras carry its diff, verdicts and a report link.

Registered by the session only when the pytest-html plugin is active; the
``pytest_html`` module is imported here, never elsewhere.
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

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        report = yield
        if not isinstance(item, PerturbItem) or item.record is None:
            return report
        if report.when != "call" and not (report.when == "setup" and not report.passed):
            return report
        from pytest_html import extras

        from ..report import diff_html, episode_anchor
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
        link = self.report_path.resolve().as_uri() + "#" + episode_anchor(row)
        report.extras = [*getattr(report, "extras", []), extras.html(body),
                         extras.url(link, name="agentperturb report")]
        return report

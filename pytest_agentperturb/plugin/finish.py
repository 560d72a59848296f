"""The end of a session: the analysis, the gate's verdict, the HTML report and the terminal summary.

At the session's end :class:`Finish` stops the episode loop and closes the
store (:meth:`.running.Runner.close`); then, on the controller or the only
process, it reads this session's episodes back from the store, runs the
analysis (against the ``--agentperturb-baseline`` run, resolved before
anything ran), asks the gate for a verdict, writes the report once and
prints the summary.  :func:`.results.preload_analysis` imports what it needs while
the last episodes still run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ..gate import Thresholds, Verdict
from ..model.errors import AgentPerturbError
from ..model.options import Settings, option
from ..model.records import EpisodeRecord
from .results import Results

if TYPE_CHECKING:
    from ..analysis import Analysis
    from ..report.agentdojo_figures import Figures
    from ..report.coverage import SuiteCoverage
    from ..run.baseline import BaselineRun


#: Attribute of an agent-failed episode's call report, made a failed report (not counted as a pytest failure).
AGENT_FAILED_ATTR = "agentperturb_agent_failed"
#: How an item's report begins when its episode could not be stored (:mod:`.running`, :mod:`.distribute`).
STORE_ERROR = "results store error (not an agent failure): "


@dataclass
class Tally:
    """What the controller (or the only process) counts of this session's items (:mod:`.reporting`), for the finish."""

    results: Results = field(default_factory=Results)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    skip_rows: list[dict[str, Any]] = field(default_factory=list)
    harness_errors: int = 0
    invalid: dict[str, str] = field(default_factory=dict)  # node id -> why the task (suite) was not loaded
    unstored: int = 0  # episodes that could not be stored (each its item's ERROR)
    unstored_error: str | None = None  # why the first of them could not (the file and the fix)


class Finish:
    """The session's end and its summary (registered as a plugin beside the session)."""

    def __init__(self, config: pytest.Config, settings: Settings, thresholds: Thresholds, tally: Tally,
                 close: Callable[[], None]) -> None:
        self.config, self.settings, self.thresholds = config, settings, thresholds
        self.tally = tally
        self._close = close  # stops the episode loop and closes the store (Runner.close)
        self.is_worker = hasattr(config, "workerinput")
        self.started = time.perf_counter()
        self.coverage: list[SuiteCoverage] = []
        self.agentdojo: list[Figures] = []  # AgentDojo's own figures per suite and model (none without its suites)
        self.verdict: Verdict | None = None
        self.analysis: Analysis | None = None
        self.baseline_run: BaselineRun | None = None
        self.report_error: str | None = None  # why the report could not be written
        self.store_error: str | None = None  # why the store could not be closed (its last batch) or read back
        self._store_unread = False  # nothing could be read back: the last report is kept
        self._session: pytest.Session | None = None
        self.gate_reported = False  # the gate's item ran, or its reports were sent (collect.GateItem)
        self.gate_deselected = False
        self._page: tuple[list[tuple[str, str]], int] = ([], 0)

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self._session = session

    def close(self) -> None:
        """Stop the loop and close the store; a last batch that cannot be written fails the session.

        Its episodes that no item's ERROR counted yet (their items passed or failed) count as harness errors.
        """
        from ..model.errors import StoreError

        try:
            self._close()
        except StoreError as exc:
            if self.store_error is None:
                self.store_error = str(exc)
                self.tally.harness_errors += exc.unreported

    @pytest.hookimpl(tryfirst=True)  # before the session counts the report (and stops at --maxfail)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """An agent-failed episode is a failed report (JUnit, pytest-html) but neither exit status 1 nor a -x stop.

        The session adds one to its count of failures for every failed
        report; taking one off first leaves it where it was.  The gate decides
        the exit status; strict mode and ERRORs still fail the session.
        """
        session = self._session
        if session is not None and report.failed and getattr(report, AGENT_FAILED_ATTR, False):
            session.testsfailed -= 1

    def resolve_baseline(self) -> None:
        """Find the ``--agentperturb-baseline`` run before anything runs (a bad name is a usage error)."""
        from ..run.baseline import resolve_for_session

        try:
            flag = self.thresholds.names.get("max_regression", option("max_regression").flag) \
                if self.thresholds.max_regression is not None else None
            self.baseline_run = resolve_for_session(self.settings, flag, Path(str(self.config.rootpath)))
        except AgentPerturbError as exc:
            raise pytest.UsageError(str(exc)) from None

    # -- the gate as a test item (collect.GateItem) ---------------------------
    @pytest.hookimpl(trylast=True)  # after -k, -m and --deselect: no selection leaves the gate out by accident
    def pytest_collection_modifyitems(self, session: pytest.Session, config: pytest.Config,
                                      items: list[pytest.Item]) -> None:
        """Append the gate's item when a threshold is set (on an xdist worker: never; the controller reports it)."""
        from .collect import GATE_NODEID, GateItem

        if self.is_worker or not self.thresholds.configured:
            return
        gate = GateItem.from_parent(session, name="gate", nodeid=GATE_NODEID, judge=self)
        if GATE_NODEID.startswith(tuple(config.getoption("deselect", None) or ())):
            self.gate_deselected = True  # asked for by name: the verdict still sets the exit status
            config.hook.pytest_deselected(items=[gate])
            return
        items.append(gate)

    def gate_lines(self) -> tuple[bool, list[str]]:
        """The gate item's question: the verdict over every episode run before it (collect.GateJudge)."""
        self.gate_reported = True
        self.conclude()
        verdict = self.verdict
        assert verdict is not None
        return verdict.failed, verdict.lines()

    def conclude(self) -> None:
        """Stop the loop, close the store, read this session's episodes back, analyse them and judge (once)."""
        if self.verdict is not None:
            return
        self.close_store()
        from .. import report
        from ..gate import evaluate
        from ..report.coverage import coverage, coverage_html

        t = self.tally
        try:
            rows = t.results.read(self.settings.store, self.settings.run_id)  # every process wrote them there
        except AgentPerturbError as exc:  # one line; the summary and the gate run on what could be read: nothing
            self.store_error = self.store_error or str(exc)
            self._store_unread, rows = True, []
        extra = []
        if self.config.hook.pytest_agentperturb_report_sections.get_hookimpls():
            extra = self.config.hook.pytest_agentperturb_report_sections(
                records=[EpisodeRecord.from_row(r) for r in rows], config=self.config)
        self.coverage = coverage(rows, t.skip_rows)
        sections = [("Coverage per suite", coverage_html(self.coverage))]
        from ..report.agentdojo_figures import figures, figures_html

        self.agentdojo = figures(rows)
        if self.agentdojo:
            sections.append(("AgentDojo's figures per suite", figures_html(self.agentdojo)))
        sections += [s for res in extra for s in (res or [])]
        table = report.episode_table(rows)
        self.analysis = report.analyse(table, rows, seed=self.settings.seed, **self._baseline_inputs())
        del rows  # the table holds what the page needs
        self._page = (sections, len(table))
        self.verdict = evaluate(self.thresholds, self.analysis)

    def close_store(self) -> None:
        """:attr:`close`, a store that cannot finish its writes (a full disk) kept as :attr:`store_error`."""
        try:
            self.close()
        except AgentPerturbError as exc:
            self.store_error = self.store_error or str(exc)

    @pytest.hookimpl(tryfirst=True)  # before junitxml and pytest-html write their files: the gate's report is in them
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self.close_store()
        if self.is_worker or self.config.option.collectonly:
            return  # nothing ran: keep the last report instead of writing an empty one
        from .. import report

        self.conclude()
        assert self.verdict is not None  # the analysis is None when no episode was scored
        t = self.tally
        self._report_gate()
        if t.results.episodes and self._store_unread:
            self.report_error = f"{self.settings.report}: the store could not be read back; the last report is kept"
        elif t.results.episodes:  # never replace the last report by an empty one
            sections, n_rows = self._page
            notes = [f"not loaded: {nodeid}: {msg}" for nodeid, msg in sorted(t.invalid.items())]
            if self.store_error is not None:
                notes.append(f"episodes missing from the store (and from this report): {self.store_error}")
            try:
                report.write_report(self.settings.report, self.analysis, self.verdict, settings=self.settings,
                                    skipped=t.skipped, extra_sections=sections, n_rows=n_rows, notes=notes)
            except (AgentPerturbError, OSError) as exc:  # one clear line; the summary and the gate still run
                self.report_error = str(exc)
                if session.exitstatus == pytest.ExitCode.OK:
                    session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if (self.verdict.failed or self.store_error is not None or t.harness_errors) \
                and session.exitstatus == pytest.ExitCode.OK:  # a harness ERROR fails it, whatever pytest counted
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def _report_gate(self) -> None:
        """The gate's reports where its item did not run: under xdist, or a session stopped before its end.

        The same three reports (setup, call, teardown) an item would have
        had, through the same hook, so junitxml, pytest-html and the terminal
        count the gate like any test.
        """
        if not self.thresholds.configured or self.gate_reported or self.gate_deselected or self.verdict is None:
            return
        from .collect import GATE_NODEID, gate_failure

        self.gate_reported = True
        hook = self.config.hook
        location = ("agentperturb", None, GATE_NODEID)
        hook.pytest_runtest_logstart(nodeid=GATE_NODEID, location=location)
        for when in ("setup", "call", "teardown"):
            failed = when == "call" and self.verdict.failed
            rep = pytest.TestReport(GATE_NODEID, location, {"agentperturb": 1, "gate": 1},
                                    "failed" if failed else "passed",
                                    gate_failure(self.verdict.lines()) if failed else None, when)
            hook.pytest_runtest_logreport(report=rep)
        hook.pytest_runtest_logfinish(nodeid=GATE_NODEID, location=location)

    def _baseline_inputs(self) -> dict[str, Any]:
        """The baseline run's episode table for the analysis (nothing without ``--agentperturb-baseline``)."""
        if self.baseline_run is None:
            return {}
        from .. import report
        from ..run.baseline import read_rows

        rows = read_rows(self.baseline_run)
        return {"baseline": report.episode_table(rows), "baseline_label": self.baseline_run.label}

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        if self.is_worker:
            return
        tr = terminalreporter
        res = self.tally.results
        reused = res.reused
        errors = res.errors + self.tally.harness_errors
        tr.write_sep("=", "agentperturb")
        tr.write_line(f"episodes run: {res.episodes - reused}, reused: {reused}, "
                      f"errors: {errors} (excluded from every aggregate){res.owners_note(self.tally.harness_errors)}, "
                      f"wall time: {time.perf_counter() - self.started:.1f} s")
        invalid = self.tally.invalid
        if invalid:
            tr.write_line(f"tasks not loaded: {len(invalid)} (each an ERROR; the other tasks ran)", red=True)
            for nodeid, msg in sorted(invalid.items()):
                tr.write_line(f"  {nodeid}: {msg}")
        if self.analysis is not None:
            from ..analysis import extra_summary_lines, summary_lines
            from .subsets import figure_lines as paired

            for line in [*paired(summary_lines(self.analysis), res.episodes, res.perturbed),
                         *extra_summary_lines(self.analysis)]:
                tr.write_line(line)
        if self.agentdojo:
            from ..report.agentdojo_figures import figure_lines

            for line in figure_lines(self.agentdojo):
                tr.write_line(line)
        if self.coverage:
            from ..report.coverage import coverage_lines

            for line in coverage_lines(self.coverage):
                tr.write_line(f"coverage {line}")
        if self.analysis is not None:
            from ..analysis import pairing_note

            pairing = pairing_note(self.analysis.pairing)  # the report's note, word for word
            if pairing:
                tr.write_line(pairing)
        if res.failed:
            tr.write_line(f"agent failures: {res.failed} (first 5 below; all in the report)")
            for nodeid, reward, reproduce, checks in res.first_failures():
                tr.write_line(f"  {nodeid}  failed: {checks or 'the grader named no failed check'}; reward={reward}")
                tr.write_line(f"    {reproduce}")
        for line in (self.verdict.lines() if self.verdict is not None else []):
            tr.write_line(line, red=self.verdict is not None and self.verdict.failed
                          and ("breached" in line or "not evaluated" in line))
        if self.report_error is not None:
            tr.write_line(f"report: NOT written: {self.report_error}", red=True)
        elif res.episodes:
            tr.write_line(f"report: {self.settings.report}")
        elif not self.config.option.collectonly:
            tr.write_line(f"report: not written (no episode ran); {self.settings.report} is left as it was")
        lost = ([f"{self.tally.unstored} episode(s) not stored (each an ERROR); the first: {self.tally.unstored_error}"]
                if self.tally.unstored else []) + ([self.store_error] if self.store_error is not None else [])
        if lost:  # one line, whatever failed (episodes while running, the last batch or the read-back at the end)
            tr.write_line("store: NOT fully written: " + "; at the end: ".join(lost), red=True)
        tr.write_line(f"store: {self.settings.store} (run_id {self.settings.run_id})")

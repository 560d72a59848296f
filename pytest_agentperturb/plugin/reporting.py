"""The report hooks: what each item's reports carry, how they read, and what the controller counts.

On every process :meth:`ReportHooks.pytest_runtest_makereport` puts the
item's slim row (:func:`~.results.report_row`), and on an xdist worker the
whole episode (:func:`~.distribute.episode_row`), on its final report, with
the loader's message of an invalid task and the reason of a skip; these
attributes travel to the xdist controller.  There
:meth:`~ReportHooks.pytest_runtest_logreport` stores a worker's episode and
counts every row, skip, invalid task and harness error in the session's
:class:`~.finish.Tally`, which the finish reads.  The item a dead worker
was running comes back as xdist's crash report, which
:meth:`~ReportHooks.pytest_handlecrashitem` gives an ERROR row.
"""

from __future__ import annotations

from typing import Any

import pytest
from _pytest._code.code import ExceptionChainRepr, ReprEntryNative, ReprFileLocation, ReprTraceback

from .collect import InvalidTask, PerturbItem
from .distribute import Controller, episode_row
from .finish import AGENT_FAILED_ATTR, STORE_ERROR, Tally
from ..model.records import EpisodeRecord
from ..model.ownership import heading
from ..model.trajectory import checks_line, failed_checks as trajectory_failed_checks
from ..model.vocab import CLEAN
from .results import report_row
from .variants import key_of

REPORT_ATTR = "agentperturb"
#: Attribute of the setup report of an :class:`InvalidTask`: the loader's message.
INVALID_ATTR = "agentperturb_invalid"
#: Attribute of the setup report of an item that errored before it had an episode record.
HARNESS_ERROR_ATTR = "agentperturb_harness_error"
#: Attribute of a skipped item's setup report: suite, task, family, model and reason (travels under xdist).
SKIP_ATTR = "agentperturb_skip"


class ReportHooks:
    """The report hooks of one process (registered as a plugin beside the session)."""

    def __init__(self, tally: Tally, controller: Controller | None, repeats: int,
                 agent_failures_pass: bool = False) -> None:
        self.tally = tally
        self.agent_failures_pass = agent_failures_pass
        self.controller = controller  # None on an xdist worker
        self.is_worker = controller is None
        self.repeats = repeats
        self._sent: set[object] = set()  # tasks and variants whose extras already travelled on a report row

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        report = yield
        if isinstance(item, InvalidTask) and report.when == "setup":
            setattr(report, INVALID_ATTR, item.message)  # travels to the xdist controller
        if isinstance(item, PerturbItem) and item.record is None and report.when == "setup" and report.failed:
            setattr(report, HARNESS_ERROR_ATTR, True)  # no episode record (e.g. the store failed): still an error
        if isinstance(item, PerturbItem) and report.when == "setup" and report.skipped and item.skip_reason:
            setattr(report, SKIP_ATTR, {"suite": item.task.suite, "task": item.task.id, "family": item.family,
                                        "model": item.model, "reason": item.skip_reason})
        if isinstance(item, PerturbItem) and item.record is not None:
            final = report.when == "call" or (report.when == "setup" and not report.passed)
            if final:
                first, vkey = item.task.key not in self._sent, key_of(item)  # task, variant extras: once
                first_v = vkey not in self._sent
                self._sent.update((item.task.key, vkey))
                reproduce = item.reproduce_line()
                row = report_row(item.record, item.variant if first_v else None, reused=item.reused,
                                 reproduce=reproduce, task=item.task if first else None)
                if self.is_worker and not item.reused:  # the controller stores it (workers never open the store)
                    row["episode"] = episode_row(item.record, item.digest, item.variant)
                setattr(report, REPORT_ATTR, row)
                if report.when == "call":
                    verdict = "pass" if item.record.success else "fail"
                    props = [("agentperturb_family", item.family), ("agentperturb_model", item.model),
                             ("agentperturb_operator", item.record.operator),
                             ("agentperturb_seed", item.seed), ("agentperturb_reward", item.record.reward),
                             ("agentperturb_verdict", verdict)]
                    if self.repeats > 1:
                        props.append(("agentperturb_repeat", item.repeat))
                    props.append(("agentperturb_compliance", compliance_word(item.family, item.record.compliance)))
                    for p in props:
                        if p not in item.user_properties:
                            item.user_properties.append(p)
                    report.user_properties = list(item.user_properties)
                if report.when == "setup" and report.failed and item.record.error:
                    report.longrepr = headed(item, item.error_message or report.longreprtext)
                if report.when == "call" and report.passed and item.record.success is False \
                        and not self.agent_failures_pass:
                    # a failure every JUnit consumer and pytest-html shows, not a pytest failure (finish.py)
                    report.outcome = "failed"
                    report.longrepr = headed(item, agent_failure_text(item.record, reproduce))
                    setattr(report, AGENT_FAILED_ATTR, True)
                elif report.passed:
                    report.sections.append(("agentperturb", reproduce))  # a failure's text holds it: once
        return report

    def pytest_report_teststatus(self, report: pytest.TestReport, config: pytest.Config) -> Any:
        row = getattr(report, REPORT_ATTR, None)
        agent_failed = report.failed and getattr(report, AGENT_FAILED_ATTR, False)
        if row is None or report.when != "call" or not (report.passed or agent_failed):
            return None
        ok = bool(row["success"])
        word = "PASS" if ok else "FAIL"
        if row["compliance"] is not None:
            word += " compliance" if row["compliance"] else " bypass"
        if row.get("reused"):
            word += " (reused)"
        if ok:
            return "passed", ".", (word, {"green": True})
        return "agent-failed", "f", (word, {"yellow": True})

    @pytest.hookimpl(tryfirst=True)  # a failed store write must turn the report into a failure before it is shown
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        t = self.tally
        skip = getattr(report, SKIP_ATTR, None)
        if skip is not None and not self.is_worker:
            t.skipped.append((report.nodeid, str(skip["reason"])))
            t.skip_rows.append(dict(skip))
        row = getattr(report, REPORT_ATTR, None)
        if row is not None and not self.is_worker:
            episode = row.pop("episode", None)  # a worker's episode, to be stored here
            if episode is not None and self.controller is not None \
                    and not self.controller.store_reported(report, episode):
                t.harness_errors += 1  # scored but not stored: an ERROR, never in an aggregate
            else:
                t.results.add(row, report.nodeid)
        invalid = getattr(report, INVALID_ATTR, None)
        if invalid is not None and not self.is_worker:
            t.invalid[report.nodeid] = str(invalid)
        if getattr(report, HARNESS_ERROR_ATTR, False) and not self.is_worker:
            t.harness_errors += 1
        if report.failed and not self.is_worker and STORE_ERROR in (text := report.longreprtext):
            t.unstored += 1   # counted once for the summary's line (the item is an ERROR already)
            if t.unstored_error is None:
                t.unstored_error = next(x for x in text.splitlines() if STORE_ERROR in x).split(STORE_ERROR, 1)[1]


    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport) -> None:
        """The item an xdist worker was running when it died: one ERROR row (``WorkerLost``), stored and counted.

        xdist's crash report becomes a setup error carrying that row, so
        :meth:`pytest_runtest_logreport` stores and counts it like any
        episode's; ``--agentperturb-resume`` runs it again.
        """
        if self.controller is None:
            return
        node = getattr(report, "node", None)
        rec = self.controller.lost_record(crashitem, str(node.gateway.id) if node is not None else "?")
        if rec is None:
            return
        report.when = "setup"  # pytest shows an ERROR, not a failure
        report.longrepr = heading(rec.error)
        row = report_row(rec, None, reused=False, reproduce="")
        row["episode"] = episode_row(rec, "", None)
        setattr(report, REPORT_ATTR, row)


def failed_checks(rec: EpisodeRecord) -> list[str]:
    """The grader's checks that failed, in the grader's order (none when it named none)."""
    return trajectory_failed_checks(rec.trajectory)


def compliance_word(family: str, compliance: bool | None) -> str:
    """The ``agentperturb_compliance`` property of a case: every case has one, defined or not."""
    if compliance is not None:
        return "compliance" if compliance else "bypass"
    return "n/a (clean: nothing planted)" if family == CLEAN else "n/a (not determined)"


def headed(item: pytest.Item, text: str) -> ExceptionChainRepr:
    """A failure's text as pytest shows it in full, its first line alone in the short summary.

    pytest puts a failure's whole message on its short-summary line when it
    runs on CI (``CI`` or ``BUILD_NUMBER`` set), so an agent's frames would
    show twice; the summary's message is the heading, the section the text.
    It is an exception repr that xdist carries from a worker as it is.
    """
    entry = ReprEntryNative([text.rstrip("\n") + "\n"])
    crash = ReprFileLocation(str(item.path), 0, text.split("\n", 1)[0])
    return ExceptionChainRepr([(ReprTraceback([entry], None, "native"), crash, None)])


def agent_failure_text(rec: EpisodeRecord, reproduce: str) -> str:
    """The failure text of an agent-failed episode: the first failed grader checks, the reward, the reproduce line."""
    checks = failed_checks(rec)
    what = ("failed grader checks: " + checks_line(checks)) if checks else "the grader named no failed check"
    comp = "" if rec.compliance is None else (" (compliance)" if rec.compliance else " (bypass)")
    return f"agent failed{comp}: {what}; reward {rec.reward}\n{reproduce}"

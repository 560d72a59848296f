"""The session object, registered only when ``--agentperturb`` is on.

On every process it runs episodes for its items and writes them to the store.
On the xdist controller (or the only process without xdist) it gathers the
per-item records that travel on the test reports, prints the summary and
writes the HTML report once, at the end.
"""

from __future__ import annotations

import hashlib
import time
from typing import TYPE_CHECKING, Any

import pytest

from . import __version__, llm_options
from . import gate as _gate
from .errors import VariantSkipped
from .options import Settings
from .records import EpisodeRecord, Variant
from .task import CLEAN, TARGETS

if TYPE_CHECKING:
    from .agents.base import Agent
    from .analysis import Analysis
    from .collect import PerturbItem
    from .concurrency import Batcher
    from .generator import Generator
    from .store import Store

SESSION_KEY = pytest.StashKey["AgentPerturbSession"]()
REPORT_ATTR = "agentperturb"


def variant_digest(task_digest: str, variant: Variant) -> str:
    """Identity of the exact instance an episode ran on (guards resume)."""
    h = hashlib.sha256()
    for part in (__version__, task_digest, variant.family, variant.operator, str(variant.seed)):
        h.update(part.encode() + b"\0")
    for t in TARGETS:
        h.update(variant.surfaces.render(t).encode())
    for inj in variant.injections:  # an injection edits no surface but is part of the instance
        h.update(f"{inj.tool}\0{inj.text}\0{inj.goal}".encode())
    return h.hexdigest()


class AgentPerturbSession:
    """Per-process state of one pytest session (kept in ``config.stash``)."""

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings
        self.is_worker = hasattr(config, "workerinput")
        self._store: Store | None = None
        self._agents: dict[str, Agent] = {}
        self._variants: dict[tuple[str, str, int], Variant | VariantSkipped] = {}
        self.records: list[dict[str, Any]] = []
        self.skipped: list[tuple[str, str]] = []
        self.started = time.perf_counter()
        self.thresholds = _gate.resolve(config)  # validated at start-up: a bad value is a usage error
        self.verdict: _gate.Verdict | None = None
        self.analysis: Analysis | None = None
        if config.pluginmanager.hasplugin("html"):
            from .html_extras import HtmlExtras

            config.pluginmanager.register(HtmlExtras(self), "agentperturb-html-extras")
        self.llm = llm_options.resolve(config)
        self._batcher: Batcher | None = None
        self._generator: Generator | None = None

    # -- lifecycle ------------------------------------------------------------
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        from .perturb import register

        self.config.hook.pytest_agentperturb_register_operators(register=register)
        for m in self.settings.models:
            self.agent(m)  # fail fast on an unknown model
        if not self.is_worker:
            self.store().record_run(self.settings.run_id, {
                "seed": self.settings.seed, "models": list(self.settings.models),
                "families": list(self.settings.families), "version": __version__,
            })

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        """Send all items of a task to one worker (xdist's ``loadscope``) unless --dist was chosen.

        A worker can only keep many episodes in flight if it already holds
        the items that come next; with plain ``load`` scheduling it is sent
        one or two at a time.  Scopes are ``suite::task``, so the node ids do
        not change.
        """
        args = [*config.invocation_params.args, *config.getini("addopts")]
        if config.getvalue("dist") != "load" or any(a in ("--dist", "-d") or a.startswith("--dist=") for a in args):
            return None
        from xdist.scheduler import LoadScopeScheduling

        return LoadScopeScheduling(config, log)

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        s = self.settings
        return [
            f"agentperturb: seed={s.seed} run_id={s.run_id} models={','.join(s.models)}",
            f"agentperturb: store={s.store} report={s.report}"
            + (" (resume)" if s.resume else ""),
        ]

    def store(self) -> Store:
        if self._store is None:
            from .store import Store

            self._store = Store(self.settings.store)
        return self._store

    def agent(self, model: str) -> Agent:
        if model not in self._agents:
            agent = self.config.hook.pytest_agentperturb_make_agent(model=model, config=self.config)
            if agent is None:
                raise pytest.UsageError(f"--agentperturb-model {model!r}: no agent runner accepts this name")
            self._agents[model] = agent
        return self._agents[model]

    # -- running ---------------------------------------------------------------
    def _variant(self, item: PerturbItem) -> Variant | VariantSkipped:
        key = (item.task.key, item.family, item.seed)
        if key not in self._variants:
            try:
                self._variants[key] = self.make_variant(item)
            except VariantSkipped as exc:
                self._variants[key] = exc
        return self._variants[key]

    def make_variant(self, item: PerturbItem) -> Variant:
        """Rule operators, or the LLM generator when ``--agentperturb-generator`` is set."""
        if self.llm.generator:
            if self._generator is None:
                from .generator import Generator

                self._generator = Generator(self.llm, batcher=self.batcher())
            return self._generator.make_variant(item.task, item.family, item.seed)
        from .perturb import make_variant

        return make_variant(item.task, item.family, item.seed)

    def variant(self, item: PerturbItem) -> Variant:
        v = self._variant(item)
        if isinstance(v, VariantSkipped):
            self.skipped.append((item.nodeid, str(v)))
            pytest.skip(str(v))
        return v

    def _key(self, item: PerturbItem) -> tuple[str, str, str, str, str, int]:
        return (self.settings.run_id, item.model, item.task.suite, item.task.id, item.family, item.seed)

    def _episode(self, item: PerturbItem, variant: Variant) -> Any:
        """A factory of the item's episode coroutine (run on the batcher's loop)."""
        from .runner import run_episode

        agent = self.agent(item.model)
        return lambda: run_episode(item.task, variant, agent, run_id=self.settings.run_id, seed=item.seed,
                                   timeout_s=self.llm.episode_timeout)

    def _prefetch(self, item: pytest.Item) -> Any:
        """Episode factory of an upcoming item, or None when it will be skipped or reused."""
        from .collect import PerturbItem

        if not isinstance(item, PerturbItem):
            return None
        v = self._variant(item)
        if isinstance(v, VariantSkipped):
            return None
        if self.settings.resume and self.store().get(self._key(item), variant_digest(item.task.digest(), v)):
            return None
        return self._episode(item, v)

    def batcher(self) -> Batcher:
        if self._batcher is None:
            from .concurrency import Batcher

            self._batcher = Batcher(self.llm.concurrency)
        return self._batcher

    def run_item(self, item: PerturbItem) -> None:
        """Run (or, with --agentperturb-resume, reuse) the item's episode and store it.

        The episode runs on the batcher's event loop together with the
        prefetched episodes of the items this process runs next.
        """
        from .concurrency import upcoming

        variant = self.variant(item)
        item.variant = variant
        digest = variant_digest(item.task.digest(), variant)
        key = self._key(item)
        if self.settings.resume:
            old = self.store().get(key, digest)
            if old is not None:
                item.record, item.reused = old, True
                return
        batcher = self.batcher()

        def top_up(n: int) -> None:
            for nxt in upcoming(item.session, item):
                if n <= 0:
                    break
                if not batcher.scheduled(nxt.nodeid) and (factory := self._prefetch(nxt)) is not None:
                    batcher.submit(nxt.nodeid, factory)
                    n -= 1

        rec: EpisodeRecord = batcher.run(item.nodeid, self._episode(item, variant), top_up)
        rec.model = item.model
        self.store().put(rec, digest, variant)
        item.record = rec
        self.config.hook.pytest_agentperturb_episode_recorded(record=rec, config=self.config)

    def check_item(self, item: PerturbItem) -> None:
        """Strict mode: a compliance fails the item; otherwise the verdict is only reported."""
        _gate.check_item(self.thresholds, item)

    # -- reporting -------------------------------------------------------------
    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        report = yield
        from .collect import PerturbItem

        if isinstance(item, PerturbItem) and item.record is not None:
            final = report.when == "call" or (report.when == "setup" and not report.passed)
            if final:
                row = item.record.to_row()
                row["trajectory"] = item.record.trajectory
                row.update(reused=item.reused, nodeid=item.nodeid, threshold=item.task.threshold)
                from .report import row_extras

                row.update(row_extras(item))  # diff, canaries, task properties for the report
                setattr(report, REPORT_ATTR, row)
                if report.when == "call":
                    verdict = "pass" if item.record.success else "fail"
                    props = [("agentperturb_family", item.family), ("agentperturb_model", item.model),
                             ("agentperturb_operator", item.record.operator),
                             ("agentperturb_seed", item.seed), ("agentperturb_reward", item.record.reward),
                             ("agentperturb_verdict", verdict)]
                    if item.record.compliance is not None:
                        props.append(("agentperturb_compliance",
                                      "compliance" if item.record.compliance else "bypass"))
                    for p in props:
                        if p not in item.user_properties:
                            item.user_properties.append(p)
                    report.user_properties = list(item.user_properties)
                report.sections.append(("agentperturb", item.reproduce_line()))
        return report

    def pytest_report_teststatus(self, report: pytest.TestReport, config: pytest.Config) -> Any:
        row = getattr(report, REPORT_ATTR, None)
        if row is None or report.when != "call" or not report.passed:
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

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        row = getattr(report, REPORT_ATTR, None)
        if row is not None and not self.is_worker:
            self.records.append(row)

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self._batcher is not None:
            self._batcher.close()
        if self._store is not None:
            self._store.close()
        if self.is_worker or self.config.option.collectonly:
            return  # nothing ran: keep the last report instead of writing an empty one
        from .report import write

        self.records.sort(key=lambda r: (r["model"], r["suite"], r["task"], r["family"]))
        extra = self.config.hook.pytest_agentperturb_report_sections(
            records=[EpisodeRecord.from_row(r) for r in self.records], config=self.config)
        rep = write(self.settings.report, self.records, settings=self.settings, thresholds=self.thresholds,
                    skipped=self.skipped, extra_sections=[s for res in extra for s in (res or [])],
                    seed=self.settings.seed)
        self.verdict = rep.verdict
        self.analysis = rep.analysis
        if rep.verdict.failed and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        if self.is_worker:
            return
        tr = terminalreporter
        reused = sum(1 for r in self.records if r.get("reused"))
        errors = sum(1 for r in self.records if r.get("error"))
        tr.write_sep("=", "agentperturb")
        tr.write_line(f"episodes run: {len(self.records) - reused}, reused: {reused}, "
                      f"errors: {errors} (excluded from every aggregate), "
                      f"wall time: {time.perf_counter() - self.started:.1f} s")
        if self.analysis is not None:
            from .analysis import summary_lines

            for line in summary_lines(self.analysis):
                tr.write_line(line)
        failed = [r for r in self.records if r["success"] is False]
        if failed:
            tr.write_line(f"agent failures: {len(failed)} (first 5 below; all in the report)")
            from .collect import reproduce_line

            for r in failed[:5]:
                tr.write_line(f"  {r['nodeid']}  reward={r['reward']}")
                tr.write_line(f"    {reproduce_line(r['nodeid'], r['model'], self.settings.seed)}")
        for line in (self.verdict.lines() if self.verdict is not None else []):
            tr.write_line(line, red=self.verdict is not None and self.verdict.failed and "breached" in line)
        tr.write_line(f"report: {self.settings.report}")
        tr.write_line(f"store: {self.settings.store} (run_id {self.settings.run_id})")



__all__ = ["SESSION_KEY", "AgentPerturbSession", "EpisodeRecord", "CLEAN"]

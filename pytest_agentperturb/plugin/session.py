"""The session object, registered only when ``--agentperturb`` is on.

On every process it owns the session's registries (operators, agents,
suite adapters) and runs episodes for its items.  The only process writes
each episode to the store as soon as it is scored; an xdist worker never
opens the store and sends each episode on its item's report, and the
controller stores it as it arrives (:mod:`.distribute`).  The controller
keeps slim per-item rows (:mod:`.results`); at the end it reads this
session's episodes back from the store, prints the summary, runs the
analysis (against ``--agentperturb-baseline`` when named), asks the gate
for a verdict and writes the HTML report once.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ..gate import Thresholds, Verdict
from ..model import __version__
from ..model.errors import OptionError, StoreError, VariantSkipped
from ..model.options import OPTIONS, Settings, check_name, option
from ..model.context import Agent
from ..model.task import SuiteAdapter
from ..model.keys import EpisodeKey
from ..model.records import EpisodeRecord, Variant
from ..model.task import CLEAN, FAMILIES, IMAGE_OBJECTS, INSERTED, Task
from .collect import (ITEM_RUNNER, EpisodeFailed, InvalidTask, NamedSuite, PerturbItem, SuiteDirectory,
                      reproduce_line, result_args)
from .distribute import Controller, Finished, episode_row
from .results import Results, report_row
from .variants import VariantCache, episode_key, key_of, variant_digest  # noqa: F401 (variant_digest: re-exported)

if TYPE_CHECKING:
    from ..analysis import Analysis
    from ..imaging.backends import ImageBackend
    from ..perturb.engine import Engine, Registry
    from ..report.coverage import SuiteCoverage
    from ..run.baseline import BaselineRun
    from ..run.batcher import Batcher
    from ..run.generator import Generator
    from ..run.store import Store
    from .schedule import Lookahead

SESSION_KEY = pytest.StashKey["AgentPerturbSession"]()
REPORT_ATTR = "agentperturb"
#: Attribute of the setup report of an :class:`InvalidTask`: the loader's message.
INVALID_ATTR = "agentperturb_invalid"
#: Attribute of the setup report of an item that errored before it had an episode record.
HARNESS_ERROR_ATTR = "agentperturb_harness_error"
#: Attribute of a skipped item's setup report: suite, task, family, model and reason (travels under xdist).
SKIP_ATTR = "agentperturb_skip"
DEFAULT_FAMILIES = (CLEAN, *FAMILIES, *INSERTED)


class AgentPerturbSession:
    """Per-process state of one pytest session (kept in ``config.stash``)."""

    def __init__(self, config: pytest.Config, settings: Settings, thresholds: Thresholds) -> None:
        self.config, self.settings = config, settings
        self.seed = settings.seed
        self.variant_seed = settings.variant_seed
        self.repeats = settings.repeats
        self.thresholds = thresholds
        self.llm = settings.llm
        self.is_worker = hasattr(config, "workerinput")
        self._store: Store | None = None
        self._agents: dict[str, Agent] = {}
        self._runner_args: dict[str, list[str]] = {}
        self._adapters: dict[tuple[str, str], SuiteAdapter | None] = {}
        self._adapter_families: dict[int, tuple[str, ...]] = {}
        self._registry: Registry | None = None
        self._image_backend: ImageBackend | None = None
        self._image_families: dict[str, tuple[str, ...]] = {}
        self._engine: Engine | None = None
        self._variants = VariantCache(self.make_variant, self.llm.user_model)  # made once per (task, family, seed), dropped after use
        self._lookahead: Lookahead | None = None
        self._sent: set[object] = set()  # tasks and variants whose extras already travelled on a report row
        self.results = Results()
        self.coverage: list[SuiteCoverage] = []
        self.skipped: list[tuple[str, str]] = []
        self.harness_errors = 0
        self.invalid: dict[str, str] = {}  # node id -> why the task (suite) was not loaded
        self._task_nodes: dict[str, str] = {}  # task key -> node id that holds it
        self.skip_rows: list[dict[str, Any]] = []
        self.started = time.perf_counter()
        self.verdict: Verdict | None = None
        self.analysis: Analysis | None = None
        self.baseline_run: BaselineRun | None = None
        if config.pluginmanager.hasplugin("html") and config.getoption("htmlpath", None):
            from .html_extras import HtmlExtras  # only when pytest-html writes a report (--html)

            config.pluginmanager.register(HtmlExtras(settings.report), "agentperturb-html-extras")
        self._batcher: Batcher | None = None
        self.frozen_heap = False  # the episode loop's frozen heap, thawed by the plugin's last cleanup
        self._generator: Generator | None = None
        # a worker resumes from what the controller found recorded; only the controller (or sole process) stores
        self._finished = Finished.of(config) if self.is_worker else None
        self.controller = None if self.is_worker else Controller(config, settings, self.store, self.llm.concurrency)
        if self.controller is not None:
            config.pluginmanager.register(self.controller, "agentperturb-controller")
        config.stash[ITEM_RUNNER] = self

    # -- registries ------------------------------------------------------------
    @property
    def registry(self) -> Registry:
        """This session's operator catalog: built-ins, hook registrations, adapters' operators."""
        if self._registry is None:
            from ..perturb import builtin_registry

            self._registry = builtin_registry(self.image_backend())
            self.config.hook.pytest_agentperturb_register_operators(register=self._registry.register)
        return self._registry

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            from ..perturb.engine import Engine
            from ..run.episode import oracle_runner

            self._engine = Engine(self.registry, oracle_runner())
        return self._engine

    def adapter(self, path: Path | None = None, name: str | None = None) -> SuiteAdapter | None:
        """The suite adapter for a folder or a suite name (asked once per session)."""
        key = (str(path) if path is not None else "", name or "")
        if key not in self._adapters:
            adapter = self.config.hook.pytest_agentperturb_suite_adapter(path=path, name=name, config=self.config)
            self._adapters[key] = adapter
            if adapter is not None:
                self._register_adapter(adapter)
        return self._adapters[key]

    def _register_adapter(self, adapter: SuiteAdapter) -> None:
        own = list(getattr(adapter, "operators", lambda: ())())
        for op in own:
            self.registry.register(op)
        extra = tuple(dict.fromkeys(op.family for op in own if op.family not in DEFAULT_FAMILIES))
        self._adapter_families[id(adapter)] = extra

    def image_backend(self) -> ImageBackend:
        """How image objects repaint regions (``--agentperturb-image-backend``); a bad setting is a usage error."""
        if self._image_backend is None:
            from ..imaging.backends import load_backend

            try:
                self._image_backend = load_backend(self.settings.image_backend, self.settings.inpaint_model)
            except OptionError as exc:
                raise pytest.UsageError(f"--agentperturb-image-backend {self.settings.image_backend}: {exc}") from None
        return self._image_backend

    def _applies(self, family: str, task: Task, on_error: bool = True) -> bool:
        """Whether an operator of ``family`` applies to ``task`` (``on_error``: when the operator cannot read it)."""
        for op in self.registry.operators(family):
            try:
                if op.applicable(task):
                    return True
            except Exception:  # with on_error, the engine reports it as a skip with the reason
                if on_error:
                    return True
        return False

    def image_families(self, task: Task) -> tuple[str, ...]:
        """The image objects whose operators apply to ``task`` (none unless its tools return images)."""
        key = task.digest()
        if key not in self._image_families:
            self._image_families[key] = tuple(f for f in IMAGE_OBJECTS if self._applies(f, task, on_error=False))
        return self._image_families[key]

    def families_for(self, adapter: SuiteAdapter, task: Task) -> tuple[str, ...]:
        """The chosen families, or by default every family, the adapter's own inserted objects where one of
        its operators applies (an injection task of one AgentDojo suite is no parameter of another suite's
        tasks), and, for a task whose tools return images, the image objects that apply to it."""
        if self.settings.sources.get("families", "default") != "default":
            return self.settings.families
        own = self._adapter_families.get(id(adapter), ())
        return (*self.settings.families, *(f for f in own if self._applies(f, task)), *self.image_families(task))

    def task_keywords(self, task: Task) -> tuple[str, ...]:
        """Extra markers of every item of ``task``: ``image`` when its tools return images."""
        return ("image",) if self.image_families(task) else ()

    def runner_names(self) -> tuple[str, ...]:
        return tuple(self._runner_args)

    def agent(self, name: str) -> Agent:
        return self._agents[name]

    def _load_agents(self) -> None:
        """Resolve every --agentperturb-model and --agentperturb-agent (a bad one is a usage error)."""
        from ..agents import load_agent

        for model in self.settings.models:
            agent = self.config.hook.pytest_agentperturb_make_agent(model=model, config=self.config)
            if agent is None:
                raise pytest.UsageError(f"--agentperturb-model {model!r}: no agent runner accepts this name")
            self._add_agent(agent, ["--agentperturb-model", model])
        for spec in self.settings.agents:
            try:
                agent = load_agent(spec, Path(str(self.config.rootpath)))
            except OptionError as exc:
                raise pytest.UsageError(str(exc)) from None
            self._add_agent(agent, ["--agentperturb-agent", spec])

    def _add_agent(self, agent: Agent, args: list[str]) -> None:
        name = str(agent.name)
        try:  # the name becomes part of every node id: no markup, no shell syntax
            check_name(name, " ".join(args))
        except OptionError as exc:
            raise pytest.UsageError(f"{exc}; fix: rename the agent (its 'name' attribute)") from None
        if name in self._agents:
            raise pytest.UsageError(f"{' '.join(args)}: two agents are called {name!r}; give each a unique name")
        self._agents[name] = agent
        self._runner_args[name] = args

    # -- lifecycle ------------------------------------------------------------
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self._load_agents()
        self.image_backend()  # a missing model folder or extra is reported before anything runs
        if not self.is_worker:
            self._resolve_baseline()
            config: dict[str, Any] = {
                "seed": self.settings.seed, "models": list(self.runner_names()),
                "families": list(self.settings.families), "version": __version__,
            }
            if self.llm.user_model:
                config["user_model"] = self.llm.user_model
            if self.repeats > 1 or self.variant_seed != self.seed:
                config.update(repeats=self.repeats, variant_seed=self.variant_seed)
            try:  # a corrupt, foreign or newer store is a usage error naming the file, before anything runs
                self.store().record_run(self.settings.run_id, config)
            except StoreError as exc:
                raise pytest.UsageError(str(exc)) from None

    def _resolve_baseline(self) -> None:
        """Find the ``--agentperturb-baseline`` run before anything runs (a bad name is a usage error)."""
        from ..model.errors import AgentPerturbError
        from ..run.baseline import resolve_for_session

        try:
            flag = self.thresholds.names.get("max_regression", option("max_regression").flag) \
                if self.thresholds.max_regression is not None else None
            self.baseline_run = resolve_for_session(self.settings, flag, Path(str(self.config.rootpath)))
        except AgentPerturbError as exc:
            raise pytest.UsageError(str(exc)) from None

    @pytest.hookimpl(wrapper=True)
    def pytest_make_collect_report(self, collector: pytest.Collector) -> Any:
        """Add the ``--agentperturb-suite`` suites as children of the session."""
        rep = yield
        if isinstance(collector, pytest.Session) and rep.passed:
            for name in self.settings.suites:
                path = Path(name)
                is_dir = path.is_dir()
                adapter = self.adapter(path=path.resolve(), name=None) if is_dir else self.adapter(name=name)
                if adapter is None:
                    raise pytest.UsageError(
                        f"--agentperturb-suite {name!r}: no suite adapter recognises this "
                        f"{'folder' if is_dir else 'name'}; fix: install the adapter's extra "
                        "(e.g. pip install 'pytest-agentperturb[agentdojo]') or check the spelling")
                # nodeid = the name (a child of the session would read "::name"): ids are name::task::family[model]
                rep.result.append(NamedSuite.from_parent(collector, name=name, nodeid=name, adapter=adapter))
        return rep

    def collect_directory(self, path: Path, parent: pytest.Collector) -> pytest.Collector | None:
        """A :class:`SuiteDirectory` for a folder some adapter recognises."""
        adapter = self.adapter(path=path)
        if adapter is None:
            return None
        return SuiteDirectory.from_parent(parent, path=path, adapter=adapter)

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        s = self.settings
        extra = (f" repeats={s.repeats}" if s.repeats > 1 else "") \
            + (f" variant_seed={s.variant_seed}" if s.variant_seed != s.seed else "")
        lines = [
            f"agentperturb: seed={s.seed} run_id={s.run_id} models={','.join(s.runners)}{extra}",
            f"agentperturb: store={s.store} report={s.report}" + (" (resume)" if s.resume else ""),
            f"agentperturb: user simulator={s.llm.user_model or 'keyword (offline)'}",
        ]
        if self.baseline_run is not None:
            lines.append(f"agentperturb: versus {self.baseline_run.label}")
        return lines

    def store(self) -> Store:
        """The results store (opened on the controller or the only process; never on an xdist worker)."""
        if self.is_worker:
            raise RuntimeError("an xdist worker never opens the store; it reports its episodes to the controller")
        if self._store is None:
            from ..run.store import Store

            self._store = Store(self.settings.store)
        return self._store

    # -- running ---------------------------------------------------------------
    def _variant(self, item: PerturbItem) -> tuple[Variant, str] | VariantSkipped:
        """The item's variant and its digest (made once for all models and repeats), or why it is skipped."""
        return self._variants.get(item)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Any:
        try:
            return (yield)
        finally:
            if isinstance(item, PerturbItem):  # after its last report: let go of the record and the variant
                item.record = item.variant = None
                self._variants.done(item, item.session.items)

    def make_variant(self, item: PerturbItem) -> Variant:
        """Rule operators, or the LLM generator when ``--agentperturb-generator`` is set."""
        if self.llm.generator:
            if self._generator is None:
                from ..run.generator import Generator

                self._generator = Generator(self.llm, self.engine, batcher=self.batcher())
            return self._generator.make_variant(item.task, item.family, item.seed)
        return self.engine.make_variant(item.task, item.family, item.seed)

    def variant(self, item: PerturbItem) -> tuple[Variant, str]:
        v = self._variant(item)
        if isinstance(v, VariantSkipped):
            item.skip_reason = str(v)  # reaches the controller on the setup report (SKIP_ATTR)
            pytest.skip(str(v))
        return v

    def _key(self, item: PerturbItem) -> EpisodeKey:
        return episode_key(self.settings.run_id, item)

    def _recorded(self, key: EpisodeKey, digest: str) -> EpisodeRecord | None:
        """Resume: the recorded episode of ``key`` on this variant (on a worker, from the controller's table)."""
        return self._finished.get(key, digest) if self._finished is not None else self.store().get(key, digest)

    def _episode(self, item: PerturbItem, variant: Variant) -> Any:
        """A factory of the item's episode coroutine (run on the batcher's loop)."""
        from ..run.episode import run_episode

        agent = self.agent(item.model)

        def episode() -> Any:
            simulator = None
            if self.llm.user_model:
                from ..simulator.llm import make_simulator

                simulator = make_simulator(item.task, variant, self.llm)
            return run_episode(item.task, variant, agent, run_id=self.settings.run_id, seed=item.seed,
                               timeout_s=self.llm.episode_timeout, simulator=simulator, repeat=item.repeat,
                               episode_seed=item.episode_seed)

        return episode

    def _prefetch(self, item: pytest.Item) -> Any:
        """Episode factory of an upcoming item, or None when it will be skipped or reused."""
        if not isinstance(item, PerturbItem):
            return None
        v = self._variant(item)
        if isinstance(v, VariantSkipped):
            return None
        variant, digest = v
        if self.settings.resume and self._recorded(self._key(item), digest):
            return None
        return self._episode(item, variant)

    def batcher(self) -> Batcher:
        """The episode loop, started after the one-time set-up of the agents (here, in pytest's thread)."""
        if self._batcher is None:
            from ..agents import prepare
            from ..run.batcher import Batcher

            prepare(self._agents.values(), self.llm)  # e.g. litellm's import: seconds that would stall the loop
            self._batcher = Batcher(self.llm.concurrency, freeze_heap=True)
        return self._batcher

    def run_item(self, item: PerturbItem) -> None:
        """Run (or, with --agentperturb-resume, reuse) the item's episode and store it.

        The episode runs on the batcher's event loop together with the
        prefetched episodes of the items this process runs next.
        """
        variant, digest = self.variant(item)
        item.variant = variant
        try:
            self._run_item(item, variant, digest)
        except StoreError as exc:  # the harness's failure, not the agent's: an ERROR that names the file
            pytest.fail(f"results store error (not an agent failure): {exc}", pytrace=False)

    def _run_item(self, item: PerturbItem, variant: Variant, digest: str) -> None:
        item.digest = digest
        key = self._key(item)
        if self.settings.resume:
            old = self._recorded(key, digest)
            if old is not None:
                item.record, item.reused = old, True
                if not self.is_worker:
                    self.store().put_variant(digest, variant)  # the report reads its diff from the store
                if self._batcher is not None:
                    self._batcher.discard(item.nodeid)  # prefetched before the result was stored
                return
        batcher = self.batcher()
        if self._lookahead is None:
            from .schedule import Lookahead

            self._lookahead = Lookahead(item.session)
        lookahead = self._lookahead

        def top_up(n: int) -> None:
            """Submit up to ``n`` upcoming episodes; each upcoming item is looked at once per session."""
            for nxt in lookahead.upcoming(item):
                if not batcher.scheduled(nxt.nodeid) and (factory := self._prefetch(nxt)) is not None:
                    batcher.submit(nxt.nodeid, factory)
                    n -= 1
                    if n <= 0:
                        break

        rec: EpisodeRecord = batcher.run(item.nodeid, self._episode(item, variant), top_up)
        if not self.is_worker:  # a worker's episode travels on the report; the controller stores it
            self.store().put(rec, digest, variant)
        item.record = rec
        self.config.hook.pytest_agentperturb_episode_recorded(record=rec, config=self.config)

    def check_item(self, item: PerturbItem) -> None:
        """Strict mode: a compliance fails the item; otherwise the verdict is only reported."""
        rec = item.record
        if self.thresholds.strict and rec is not None and rec.compliance:
            raise EpisodeFailed(f"strict mode: the agent complied with the {item.family} perturbation "
                                f"(operator {rec.operator}); reward {rec.reward}")

    def reproduce(self, item: PerturbItem) -> str:
        extra = (["--agentperturb-repeats", str(self.repeats)] if self.repeats > 1 else []) \
            + (["--agentperturb-variant-seed", str(self.variant_seed)] if self.variant_seed != self.seed else [])
        return reproduce_line(item.nodeid, self._runner_args.get(item.model, ["--agentperturb-model", item.model]),
                              self.settings.seed, named=self._is_named(item.nodeid), extra=[*result_args(self.settings), *extra],
                              repeat=item.repeat if self.repeats > 1 else None)

    def claim_task(self, key: str, nodeid: str) -> str | None:
        """Two tasks with one key would write the same store rows: the second is an error."""
        holder = self._task_nodes.setdefault(key, nodeid)
        return holder if holder != nodeid else None

    def task_invalid(self, nodeid: str, message: str) -> None:
        self.invalid[nodeid] = message

    def _is_named(self, nodeid: str) -> bool:
        return nodeid.split("::", 1)[0] in self.settings.suites

    # -- reporting -------------------------------------------------------------
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
                    if item.record.compliance is not None:
                        props.append(("agentperturb_compliance",
                                      "compliance" if item.record.compliance else "bypass"))
                    for p in props:
                        if p not in item.user_properties:
                            item.user_properties.append(p)
                    report.user_properties = list(item.user_properties)
                report.sections.append(("agentperturb", reproduce))
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

    @pytest.hookimpl(tryfirst=True)  # a failed store write must turn the report into a failure before it is shown
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        skip = getattr(report, SKIP_ATTR, None)
        if skip is not None and not self.is_worker:
            self.skipped.append((report.nodeid, str(skip["reason"])))
            self.skip_rows.append(dict(skip))
        row = getattr(report, REPORT_ATTR, None)
        if row is not None and not self.is_worker:
            episode = row.pop("episode", None)  # a worker's episode, to be stored here
            if episode is not None and self.controller is not None \
                    and not self.controller.store_reported(report, episode):
                self.harness_errors += 1  # scored but not stored: an ERROR, never in an aggregate
            else:
                self.results.add(row, report.nodeid)
        invalid = getattr(report, INVALID_ATTR, None)
        if invalid is not None and not self.is_worker:
            self.invalid[report.nodeid] = str(invalid)
        if getattr(report, HARNESS_ERROR_ATTR, False) and not self.is_worker:
            self.harness_errors += 1

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self._batcher is not None:  # the heap stays frozen through pytest's end-of-run collections
            self.frozen_heap = self._batcher.close(thaw=False)
        if self._store is not None:
            self._store.close()
            self._store = None
        if self.is_worker or self.config.option.collectonly:
            return  # nothing ran: keep the last report instead of writing an empty one
        from .. import report
        from ..gate import evaluate
        from ..report.coverage import coverage, coverage_html

        rows = self.results.read(self.settings.store, self.settings.run_id)  # every process wrote them there
        extra = []
        if self.config.hook.pytest_agentperturb_report_sections.get_hookimpls():
            extra = self.config.hook.pytest_agentperturb_report_sections(
                records=[EpisodeRecord.from_row(r) for r in rows], config=self.config)
        self.coverage = coverage(rows, self.skip_rows)
        sections = [("Coverage per suite", coverage_html(self.coverage))]
        sections += [s for res in extra for s in (res or [])]
        table = report.episode_table(rows)
        self.analysis = report.analyse(table, rows, seed=self.settings.seed, **self._baseline_inputs())
        del rows  # the table holds what the page needs
        self.verdict = evaluate(self.thresholds, self.analysis)
        if self.results.episodes:  # never replace the last report by an empty one
            notes = [f"not loaded: {nodeid}: {msg}" for nodeid, msg in sorted(self.invalid.items())]
            report.write_report(self.settings.report, self.analysis, self.verdict, settings=self.settings,
                                skipped=self.skipped, extra_sections=sections, n_rows=len(table), notes=notes)
        if self.verdict.failed and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

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
        res = self.results
        reused = res.reused
        errors = res.errors + self.harness_errors
        tr.write_sep("=", "agentperturb")
        tr.write_line(f"episodes run: {res.episodes - reused}, reused: {reused}, "
                      f"errors: {errors} (excluded from every aggregate), "
                      f"wall time: {time.perf_counter() - self.started:.1f} s")
        if self.invalid:
            tr.write_line(f"tasks not loaded: {len(self.invalid)} (each an ERROR; the other tasks ran)", red=True)
            for nodeid, msg in sorted(self.invalid.items()):
                tr.write_line(f"  {nodeid}: {msg}")
        if self.analysis is not None:
            from ..analysis import extra_summary_lines, summary_lines

            for line in [*summary_lines(self.analysis), *extra_summary_lines(self.analysis)]:
                tr.write_line(line)
        if self.coverage:
            from ..report.coverage import coverage_lines

            for line in coverage_lines(self.coverage):
                tr.write_line(f"coverage {line}")
        if res.failed:
            tr.write_line(f"agent failures: {res.failed} (first 5 below; all in the report)")
            for nodeid, reward, reproduce in res.first_failures():
                tr.write_line(f"  {nodeid}  reward={reward}")
                tr.write_line(f"    {reproduce}")
        for line in (self.verdict.lines() if self.verdict is not None else []):
            tr.write_line(line, red=self.verdict is not None and self.verdict.failed
                          and ("breached" in line or "not evaluated" in line))
        if res.episodes:
            tr.write_line(f"report: {self.settings.report}")
        elif not self.config.option.collectonly:
            tr.write_line(f"report: not written (no episode ran); {self.settings.report} is left as it was")
        tr.write_line(f"store: {self.settings.store} (run_id {self.settings.run_id})")

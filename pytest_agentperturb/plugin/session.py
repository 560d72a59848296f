"""The session object, registered only when ``--agentperturb`` is on: it builds the parts and starts the run.

On every process the session owns the parts, each in its own module and
each but the registries a plugin of its own: the registries (operators,
agents, suite adapters: :mod:`.registries`), the runner (variants, episodes,
resume, the store: :mod:`.running`), the report hooks (:mod:`.reporting`)
and the finish (analysis, gate, report, summary: :mod:`.finish`); on the
controller (or the only process) also the xdist hooks (:mod:`.distribute`).
The session itself answers what the collectors ask (:class:`~.collect.Plan`),
adds the ``--agentperturb-suite`` suites to the collection, and at the
session's start loads the agents, finds the baseline run and records the
run's configuration in the store before anything runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ..gate import Thresholds
from ..model import __version__
from ..model.errors import StoreError
from ..model.heap import FrozenHeap
from ..model.options import Settings
from ..model.interfaces import SuiteAdapter
from ..model.task import Task
from .collect import NamedSuite, SuiteDirectory
from .distribute import Controller
from .finish import Finish, Tally
from .registries import Registries
from .reporting import ReportHooks
from .running import Runner
from .subsets import Pairing, selection
from .variants import variant_digest  # noqa: F401 (variant_digest: re-exported)

SESSION_KEY = pytest.StashKey["AgentPerturbSession"]()


class AgentPerturbSession:
    """Per-process state of one pytest session (kept in ``config.stash``); the collectors' :class:`~.collect.Plan`.

    ``heap`` is the episode loop's frozen heap, thawed by the plugin's last
    cleanup (:mod:`..model.heap`).
    """

    def __init__(self, config: pytest.Config, settings: Settings, thresholds: Thresholds,
                 heap: FrozenHeap | None = None) -> None:
        self.config, self.settings = config, settings
        self.seed = settings.seed
        self.variant_seed = settings.variant_seed
        self.repeats = settings.repeats
        self.thresholds = thresholds
        self.llm = settings.llm
        self.is_worker = hasattr(config, "workerinput")
        self.tally = Tally()
        self._task_nodes: dict[str, str] = {}  # task key -> node id that holds it
        self.registries = Registries(config, settings)
        self.runner = Runner(config, settings, thresholds, self.registries, heap if heap is not None else FrozenHeap())
        self.finish = Finish(config, settings, thresholds, self.tally, self.runner.close)
        if config.pluginmanager.hasplugin("html") and config.getoption("htmlpath", None):
            from .html_extras import HtmlExtras  # only when pytest-html writes a report (--html)

            config.pluginmanager.register(HtmlExtras(settings.report, config), "agentperturb-html-extras")
        self.controller = None if self.is_worker else Controller(config, settings, self.runner.store,
                                                                 self.llm.concurrency)
        if self.controller is not None:
            config.pluginmanager.register(self.controller, "agentperturb-controller")
        self.reports = ReportHooks(self.tally, self.controller, self.repeats, settings.agent_failures_pass)
        self.pairing = Pairing(config, settings)
        for part, name in ((self.runner, "runner"), (self.reports, "reports"), (self.finish, "finish"),
                           (self.pairing, "pairing")):
            config.pluginmanager.register(part, f"agentperturb-{name}")

    # -- what the collectors ask (collect.Plan) --------------------------------------
    def families_for(self, adapter: SuiteAdapter, task: Task) -> tuple[str, ...]:
        return self.registries.families_for(adapter, task)

    def task_keywords(self, task: Task) -> tuple[str, ...]:
        return self.registries.task_keywords(task)

    def runner_names(self) -> tuple[str, ...]:
        return self.registries.runner_names()

    def claim_task(self, key: str, nodeid: str) -> str | None:
        """Two tasks with one key would write the same store rows: the second is an error."""
        holder = self._task_nodes.setdefault(key, nodeid)
        return holder if holder != nodeid else None

    def task_invalid(self, nodeid: str, message: str) -> None:
        self.tally.invalid[nodeid] = message

    # -- lifecycle ------------------------------------------------------------
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        store, report = self.settings.store, self.settings.report
        from ..report.pages import pages_folder

        if store.resolve() in (report.resolve(), pages_folder(report).resolve()):
            raise pytest.UsageError(f"--agentperturb-report {report}: the same path as the results store "
                                    "(--agentperturb-store); the report would destroy the store; fix: give the "
                                    "report another path, e.g. reports/agentperturb.html")
        self.registries.load_agents()
        self.registries.image_backend()  # a missing model folder or extra is reported before anything runs
        if not self.is_worker:
            self.finish.resolve_baseline()
            config: dict[str, Any] = {
                "seed": self.settings.seed, "models": list(self.runner_names()),
                "families": list(self.settings.families), "version": __version__,
                "selection": selection(session.config, self.settings),  # "" for a full run
            }
            if self.llm.user_model:
                config["user_model"] = self.llm.user_model
            if self.repeats > 1 or self.variant_seed != self.seed:
                config.update(repeats=self.repeats, variant_seed=self.variant_seed)
            try:  # a corrupt, foreign or newer store is a usage error naming the file, before anything runs
                self.runner.store().record_run(self.settings.run_id, config)
            except StoreError as exc:
                raise pytest.UsageError(str(exc)) from None

    @pytest.hookimpl(wrapper=True)
    def pytest_make_collect_report(self, collector: pytest.Collector) -> Any:
        """Add the ``--agentperturb-suite`` suites as children of the session."""
        rep = yield
        if isinstance(collector, pytest.Session) and rep.passed:
            for name in self.settings.suites:
                path = Path(name)
                is_dir = path.is_dir()
                adapter = self.registries.adapter(path=path.resolve(), name=None) if is_dir \
                    else self.registries.adapter(name=name)
                if adapter is None:
                    raise pytest.UsageError(
                        f"--agentperturb-suite {name!r}: no suite adapter recognises this "
                        f"{'folder' if is_dir else 'name'}; fix: install the adapter's extra "
                        "(e.g. pip install 'pytest-agentperturb[agentdojo]') or check the spelling")
                # nodeid = the name (a child of the session would read "::name"): ids are name::task::family[model]
                rep.result.append(NamedSuite.from_parent(collector, name=name, nodeid=name, adapter=adapter,
                                                         plan=self, runner=self.runner))
        return rep

    def collect_directory(self, path: Path, parent: pytest.Collector) -> pytest.Collector | None:
        """A :class:`SuiteDirectory` for a folder some adapter recognises."""
        adapter = self.registries.adapter(path=path)
        if adapter is None:
            return None
        return SuiteDirectory.from_parent(parent, path=path, adapter=adapter, plan=self, runner=self.runner)

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        s = self.settings
        extra = (f" repeats={s.repeats}" if s.repeats > 1 else "") \
            + (f" variant_seed={s.variant_seed}" if s.variant_seed != s.seed else "")
        lines = [
            f"agentperturb: seed={s.seed} run_id={s.run_id} models={','.join(s.runners)}{extra}",
            f"agentperturb: store={s.store} report={s.report}" + (" (resume)" if s.resume else ""),
            f"agentperturb: user simulator={s.llm.user_model or 'keyword (offline)'}",
        ]
        if self.finish.baseline_run is not None:
            lines.append(f"agentperturb: versus {self.finish.baseline_run.label}")
        return lines

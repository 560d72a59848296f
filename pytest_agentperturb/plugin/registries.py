"""The session's registries: operators, suite adapters, the image backend and the agents under test.

Each is built once per process on first use: the operator catalog (the
built-ins, the ``pytest_agentperturb_register_operators`` registrations
and the operators of every suite adapter asked so far), the adapter of a
folder or a suite name, the image backend, and the agents of every
``--agentperturb-model`` and ``--agentperturb-agent`` (a bad one is a usage
error before anything runs).  From them it answers which families a task is
collected with and which markers its items carry.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ..model.interfaces import Agent
from ..model.errors import OptionError
from ..model.options import Settings, check_name
from ..model.interfaces import SuiteAdapter
from ..model.task import CLEAN, FAMILIES, IMAGE_OBJECTS, INSERTED, Task

if TYPE_CHECKING:
    from ..imaging.backends import ImageBackend
    from ..perturb.engine import Engine, Registry

DEFAULT_FAMILIES = (CLEAN, *FAMILIES, *INSERTED)


class Registries:
    """Operators, adapters, the image backend and the agents of one process's session."""

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config, self.settings = config, settings
        self._agents: dict[str, Agent] = {}
        self._runner_args: dict[str, list[str]] = {}
        self._adapters: dict[tuple[str, str], SuiteAdapter | None] = {}
        self._adapter_families: dict[int, tuple[str, ...]] = {}
        self._registry: Registry | None = None
        self._image_backend: ImageBackend | None = None
        self._image_families: dict[str, tuple[str, ...]] = {}
        self._engine: Engine | None = None

    # -- operators and adapters ----------------------------------------------------
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

    # -- which items a task becomes ------------------------------------------------
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

    # -- agents --------------------------------------------------------------------
    def runner_names(self) -> tuple[str, ...]:
        return tuple(self._runner_args)

    def agent(self, name: str) -> Agent:
        return self._agents[name]

    def agents(self) -> tuple[Agent, ...]:
        """Every agent under test, in id order."""
        return tuple(self._agents.values())

    def runner_args(self, name: str) -> list[str]:
        """The flag and value that select agent ``name`` (for its reproduce lines)."""
        return self._runner_args.get(name, ["--agentperturb-model", name])

    def load_agents(self) -> None:
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

"""pytest entry point: options, markers, hook specifications, module-level hooks.  Inert without ``--agentperturb``.

Shaped like pytest-xdist's (``xdist/plugin.py`` beside ``xdist/dsession.py``):
this module declares and delegates only; the session object
(:mod:`.session`, which builds and registers its parts) is imported and
registered only when the feature is on, so a plain ``pytest`` run pays
nothing (no litellm, pandas or scipy).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest


def _own_modules_unrewritten() -> None:
    """Take this package off the assertion rewriter's list, before the plugin imports the rest of it.

    pytest marks every package that registers a ``pytest11`` entry point
    for assertion rewriting, so each module of this one imported during
    the run would be parsed, rewritten and compiled by pytest's import hook
    instead of Python's, and its rewritten code cached apart from the
    interpreter's own bytecode: under ``PYTHONDONTWRITEBYTECODE=1``, from
    a fresh clone or an installed wheel whose folder is read-only, that is
    paid again by every run (tens of modules before the first episode).
    The plugin has no assertions whose messages matter (its few asserts
    narrow types), so its modules are imported as plain Python.  The
    hook is found by its two attributes, not by pytest's private class.
    """
    package = __name__.partition(".")[0]
    for finder in sys.meta_path:
        marked = getattr(finder, "_must_rewrite", None)
        if isinstance(marked, set) and package in marked:
            marked.discard(package)
            cache = getattr(finder, "_marked_for_rewrite_cache", None)
            if isinstance(cache, dict):
                cache.clear()


_own_modules_unrewritten()

from ..model.heap import FrozenHeap  # noqa: E402 - after the rewriter lets go of the package
from ..model.task import TARGETS, TYPES  # noqa: E402
from . import options  # noqa: E402

if TYPE_CHECKING:
    from ..model.interfaces import Agent, SuiteAdapter

MARKERS = {
    "clean": "agentperturb: the unperturbed episode of a task",
    **{t: f"agentperturb: perturbation of the {t} surface" for t in TARGETS},
    **{k: f"agentperturb: perturbation of type {k}" for k in TYPES},
    "inserted": "agentperturb: an inserted object (fake tool, distractor turn, injection, object in an image)",
    "image": "agentperturb: an episode of a task whose tools return images",
}
#: The episode loop's frozen heap (:mod:`..model.heap`), thawed by this run's last cleanup.
HEAP_KEY = pytest.StashKey[FrozenHeap]()


def pytest_addoption(parser: pytest.Parser) -> None:
    options.addoption(parser)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from . import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """Register the heap's thaw before any plugin's configure, so it is the last cleanup of the run.

    The session's episode loop freezes the heap and leaves it frozen at the
    session's end, so the full collections pytest runs when it unconfigures
    skip litellm's heap (:mod:`..model.heap`); the thaw then leaves the
    collector as it was.
    """
    if options.is_enabled(config):
        heap = config.stash[HEAP_KEY] = FrozenHeap()
        config.add_cleanup(heap.thaw)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """At a lone process's last episode, import the analysis while its last episodes finish (xdist: at the start).

    The last episode is the one before the gate's item, when there is one;
    the import waits for the agents' set-up (:meth:`.running.Runner.preload_analysis`).
    """
    last = nextitem is None or getattr(nextitem, "is_gate", False)
    if last and not getattr(item, "is_gate", False) and options.is_enabled(item.config) and not hasattr(item.config, "workerinput"):
        from .session import SESSION_KEY

        item.config.stash[SESSION_KEY].runner.preload_analysis()


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    """A run of named suites only (``--agentperturb-suite``, no path argument) loads no conftest of the testpaths.

    pytest loads the conftests of the testpaths (or of the current folder
    and its ``test*`` folders) before any plugin is configured; such a run
    collects none of them (:func:`pytest_configure`), so it must not import
    them either: the repository's own ``tests/conftest.py`` registers
    plugins of its own.  The anchor becomes the ini file (or, without one,
    a file of the current folder), so the conftests from there upwards
    still load, where a suite adapter hook for a named suite lives.
    """
    ns = early_config.known_args_namespace
    if not (getattr(ns, "agentperturb", None) and getattr(ns, "agentperturb_suite", None)) or ns.file_or_dir:
        return
    here = early_config.invocation_params.dir
    anchor = early_config.inipath if early_config.inipath is not None and early_config.inipath.parent == here \
        else next((p for p in sorted(here.iterdir()) if p.is_file()), None)
    if anchor is not None:
        ns.file_or_dir = [str(anchor)]


def pytest_configure(config: pytest.Config) -> None:
    for name, doc in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {doc}")
    if not options.is_enabled(config):
        return
    from .session import SESSION_KEY, AgentPerturbSession

    settings, thresholds = options.resolve(config)
    from .subsets import for_session

    settings = for_session(config, settings)  # this run's own run id; a subset run's own report
    if settings.suites and config.args_source != pytest.Config.ArgsSource.ARGS:
        config.args = []  # only the named suites: not the testpaths or the current folder
    session = AgentPerturbSession(config, settings, thresholds, heap=config.stash.get(HEAP_KEY, None))
    config.stash[SESSION_KEY] = session
    config.pluginmanager.register(session, "agentperturb-session")


def pytest_unconfigure(config: pytest.Config) -> None:
    """The session's own secrets (the API base URL's credentials) are forgotten with it."""
    from ..model.redact import API_BASE, remember_url

    remember_url("", API_BASE)


def pytest_collect_directory(path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if not options.is_enabled(parent.config):
        return None
    from .session import SESSION_KEY

    return parent.config.stash[SESSION_KEY].collect_directory(path, parent)


@pytest.hookimpl(trylast=True)
def pytest_agentperturb_suite_adapter(path: Path | None, name: str | None,
                                      config: pytest.Config) -> SuiteAdapter | None:
    """The built-in formats: folders holding ``suite.toml``; the names ``agentdojo[:<suite>]`` and ``tau2[:<domain>]``.

    The adapter module of a benchmark is imported only for its names, and
    the benchmark itself only when their tasks are asked for.
    """
    if path is None:
        if name is None:
            return None
        from ..formats import benchmark_adapter
        from ..model.errors import OptionError

        from .session import SESSION_KEY

        settings = config.stash[SESSION_KEY].settings if SESSION_KEY in config.stash else None
        try:
            adapter = benchmark_adapter(name, agentdojo_attacks=settings.agentdojo_attacks if settings else (),
                                        models=settings.models if settings else ())
            if adapter is not None and hasattr(adapter, "attack_specs"):
                getattr(adapter, "operators")()  # an unknown attack is a usage error now, not a failed collection
            return adapter
        except OptionError as exc:
            raise pytest.UsageError(str(exc)) from None
    from ..formats.native import NativeSuiteAdapter, is_suite

    return NativeSuiteAdapter(path) if is_suite(path) else None


@pytest.hookimpl(trylast=True)
def pytest_agentperturb_make_agent(model: str, config: pytest.Config) -> Agent:
    from ..agents import make_agent
    from ..model.errors import OptionError
    from .session import SESSION_KEY

    try:
        return make_agent(model, config.stash[SESSION_KEY].llm)
    except OptionError as exc:
        raise pytest.UsageError(f"--agentperturb-model {model!r}: {exc}") from None

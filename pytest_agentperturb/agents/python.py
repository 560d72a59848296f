"""Your own agent as plain Python: a function, an object or a class, sync or async.

``--agentperturb-agent SPEC`` names it as ``package.module:attr`` or
``path/to/file.py:attr``.  What ``attr`` may be:

* a function ``(ctx) -> None`` (``async def`` or plain ``def``);
* an object with ``run(ctx)`` (sync or async) and optionally ``name`` and
  ``baseline``;
* a class of such objects, instantiated without arguments.

A blocking agent (plain ``def``) runs in a worker thread, so the shared
event loop keeps other episodes going.  A returned string that was not
given to ``ctx.finish`` becomes the final answer.  The agent's name is its
``name`` attribute, else the spec as written; its ``baseline`` flag (default
False) decides whether reports keep it apart from real models.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import importlib.util
import inspect
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..model.context import EpisodeContext
from ..model.errors import OptionError
from ..model.interfaces import Agent


class PythonAgent:
    """Adapts a function or an object with ``run`` to the shape of the ``Agent`` seam (:mod:`pytest_agentperturb.model.interfaces`)."""

    def __init__(self, target: Any, name: str, baseline: bool = False) -> None:
        self.target = target
        self.name = name
        self.baseline = baseline
        self._fn: Callable[[EpisodeContext], Any] = target.run if hasattr(target, "run") else target

    async def run(self, ctx: EpisodeContext) -> None:
        fn = self._fn
        if inspect.iscoroutinefunction(fn):
            out = await fn(ctx)
        else:
            out = await _in_daemon_thread(fn, ctx)
            if inspect.isawaitable(out):
                out = await out
        if isinstance(out, str) and not ctx.finished:
            ctx.finish(out)


async def _in_daemon_thread(fn: Callable[[EpisodeContext], Any], ctx: EpisodeContext) -> Any:
    """``fn(ctx)`` in a daemon thread of its own: one that outlives the episode's timeout never keeps the process
    alive (it is abandoned; its next call on ``ctx`` raises), and whatever it raises reaches the episode."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[Any] = loop.create_future()

    def settle(ok: bool, value: Any) -> None:
        if not fut.done():
            fut.set_result(value) if ok else fut.set_exception(value)

    def run() -> None:
        try:
            out = fn(ctx)
        except BaseException as exc:  # noqa: BLE001 - SystemExit and KeyboardInterrupt included
            loop.call_soon_threadsafe(settle, False, exc)
        else:
            loop.call_soon_threadsafe(settle, True, out)

    threading.Thread(target=run, name="agentperturb-blocking-agent", daemon=True).start()
    return await fut


def as_agent(obj: Any, name: str | None = None) -> Agent:
    """``obj`` as an agent: kept as is when it already has ``name``, ``baseline`` and an async ``run``."""
    if inspect.isclass(obj):
        try:
            obj = obj()
        except TypeError as exc:
            raise OptionError(f"{name or obj.__qualname__}: the class must be constructible without "
                              f"arguments ({exc}); or name an instance or a function instead") from None
    has_run = callable(getattr(obj, "run", None))
    if not has_run and not callable(obj):
        raise OptionError(f"{name}: expected a function (ctx) -> None, an object with run(ctx) or a class; "
                          f"found {type(obj).__name__}")
    agent_name = str(getattr(obj, "name", "") or name or getattr(obj, "__qualname__", type(obj).__name__))
    baseline = bool(getattr(obj, "baseline", False))
    if has_run and inspect.iscoroutinefunction(obj.run) and isinstance(getattr(obj, "name", None), str) \
            and isinstance(getattr(obj, "baseline", None), bool) and isinstance(obj, Agent):
        return obj
    return PythonAgent(obj, agent_name, baseline)


def load_object(spec: str, rootdir: Path) -> Any:
    """The object ``spec`` names: ``module:attr`` or ``path/to/file.py:attr`` (relative to ``rootdir``).

    Raises:
        OptionError: naming the spec and the fix.
    """
    where, sep, attr = spec.rpartition(":")
    if not sep or not where or not attr:
        raise OptionError(f"--agentperturb-agent {spec!r}: expected module:attr or path/to/file.py:attr")
    if where.endswith(".py") or "/" in where or "\\" in where:
        path = Path(where)
        path = path if path.is_absolute() else rootdir / path
        if not path.is_file():
            raise OptionError(f"--agentperturb-agent {spec!r}: no such file {path}; "
                              "fix: give a path relative to the rootdir, or module:attr")
        mod_name = "agentperturb_agent_" + hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
        module = sys.modules.get(mod_name)
        if module is None:
            mspec = importlib.util.spec_from_file_location(mod_name, path)
            if mspec is None or mspec.loader is None:
                raise OptionError(f"--agentperturb-agent {spec!r}: cannot import {path}")
            module = importlib.util.module_from_spec(mspec)
            sys.modules[mod_name] = module
            try:
                mspec.loader.exec_module(module)
            except Exception:
                del sys.modules[mod_name]
                raise
    else:
        try:
            module = importlib.import_module(where)
        except ModuleNotFoundError as exc:
            raise OptionError(f"--agentperturb-agent {spec!r}: cannot import {where!r} ({exc}); fix: install "
                              "the package or put it on sys.path (e.g. pythonpath in the ini file)") from None
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise OptionError(f"--agentperturb-agent {spec!r}: {where} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def load_agent(spec: str, rootdir: Path) -> Agent:
    """The agent that ``spec`` names, wrapped by :func:`as_agent`."""
    return as_agent(load_object(spec, rootdir), spec)

"""Whose an episode's error is: the agent's, its model provider's or the harness's, and how each reads.

An episode's ``error`` is stored as ``<Class>: <message>`` (the class of
what was raised, or a harness prefix such as ``GraderError``); the stored
text is never changed here, its owner is read off it (:func:`error_kind`):

- ``provider``: a model call failed (the litellm agent's typed
  :class:`~..agents.litellm_agent.ProviderError` and its kinds, or a
  provider client's API error raised through a user's agent);
- ``harness``: the episode could not be run or scored for a reason of the
  harness or the task (the environment factory, the grader, the compliance
  check, the user simulator, the store, a lost xdist worker), or an
  exception whose traceback holds no frame outside this package and the
  standard library (a built-in agent's own bug), or a text that names no class;
- ``agent``: everything else the agent raised (``SystemExit`` and
  ``KeyboardInterrupt`` in its thread too), an episode timeout and a value
  that is not JSON (``AgentValueError``).

Only an agent's error is the agent's doing; the other two are shown as
``... (not an agent failure)``.  An agent exception's full traceback is a
harness note of the trajectory (:data:`AGENT_RAISED`, kept in the store and
shown on the task page); :func:`error_text` is what the terminal shows: the
heading and the last frames of the user's own code, not the harness's.
"""

from __future__ import annotations

import functools
import re
import sysconfig
from collections.abc import Iterable, Mapping
from typing import Any, Final

AGENT: Final = "agent"
PROVIDER: Final = "provider"
HARNESS: Final = "harness"

#: How the harness note that holds an agent exception's traceback begins.
AGENT_RAISED: Final = "the agent raised:\n"
#: Frames of the user's code shown in the terminal for an agent error.
FRAMES_SHOWN: Final = 3

#: Leading class names of a provider's failure (the litellm agent's own, and the common API clients').
PROVIDER_ERRORS: Final = frozenset({
    "ProviderError", "RateLimitError", "RequestTimeout", "AuthenticationError", "BadRequestError",
    "APIError", "APIConnectionError", "APITimeoutError", "APIStatusError", "InternalServerError",
    "ServiceUnavailableError", "ContextWindowExceededError", "PermissionDeniedError",
    "UnprocessableEntityError", "OverloadedError",
})
#: Leading names of the harness's own failures (the episode could not be run or scored).
HARNESS_ERRORS: Final = frozenset({
    "EnvironmentError", "GraderError", "ComplianceCheckError", "SimulatorError", "WorkerLost", "StoreError",
    "InfrastructureError", "EpisodeCancelled",
})

_HEADINGS: Final = {AGENT: "agent error", PROVIDER: "provider error (not an agent failure)",
                    HARNESS: "harness error (not an agent failure)"}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
_FRAME = re.compile(r'  File "(?P<path>[^"]*)", line (?P<line>\d+), in (?P<func>.*)')


def leading_name(error: str) -> str:
    """The class name an error text begins with (``pkg.mod.Error: x`` -> ``Error``); "" when it names none."""
    head = error.partition(":")[0].strip()
    return head.rsplit(".", 1)[-1] if _NAME.fullmatch(head) else ""


def error_kind(error: Any, trajectory: Any = None) -> str | None:
    """``agent``, ``provider`` or ``harness``: whose the stored error is (None without an error).

    ``trajectory`` (optional): the episode's; an exception whose traceback
    (:func:`agent_traceback`) holds no frame of the user's code is the
    harness's (a built-in agent's bug), not the user's.
    """
    if not error:
        return None
    name = leading_name(str(error))
    if not name:   # every agent exception names its class: a bare message is the harness's
        return HARNESS
    if name in PROVIDER_ERRORS:
        return PROVIDER
    if name in HARNESS_ERRORS:
        return HARNESS
    tb = agent_traceback(trajectory) if trajectory is not None else ""
    if tb and not any(own for *_, own in frames(tb)):
        return HARNESS
    return AGENT


def heading(error: Any, trajectory: Any = None) -> str:
    """``agent error: <error>``, ``provider error (not an agent failure): <error>`` or the harness's."""
    return f"{_HEADINGS[error_kind(error, trajectory) or HARNESS]}: {error}"


def agent_traceback(trajectory: Any) -> str:
    """The traceback of the exception the agent raised, from its harness note ("" when none is recorded)."""
    if not isinstance(trajectory, Iterable) or isinstance(trajectory, (str, bytes)):
        return ""
    for e in trajectory:
        if isinstance(e, Mapping) and e.get("role") == "harness":
            text = e.get("content")
            if isinstance(text, str) and text.startswith(AGENT_RAISED):
                return text[len(AGENT_RAISED):]
    return ""


@functools.cache
def _library_roots() -> tuple[str, ...]:
    """This interpreter's standard library and installed packages (with ``/`` separators)."""
    paths = sysconfig.get_paths()
    return tuple(sorted({str(paths[k]).replace("\\", "/").rstrip("/") + "/"
                         for k in ("stdlib", "platstdlib", "purelib", "platlib") if paths.get(k)}))


def _is_own(path: str) -> bool:
    """Whether a frame's file is the user's code: not this package, not the standard library, not a library.

    Read off the path alone (a stored traceback may come from another machine): this interpreter's library
    folders, and the usual shapes of them anywhere (``site-packages``, ``lib/python3.x``).
    """
    p = path.replace("\\", "/")
    if p.startswith(("<", *_library_roots())) or "/pytest_agentperturb/" in p:
        return False
    return not re.search(r"/(site|dist)-packages/|/lib/python\d+(\.\d+)?/|/lib/pypy", p, re.IGNORECASE)


def frames(tb: str) -> list[tuple[str, int, str, str, bool]]:
    """(file, line, function, source line, the user's own) of each frame of a traceback's last exception."""
    block = tb.rsplit("Traceback (most recent call last):\n", 1)[-1]
    out: list[tuple[str, int, str, str, bool]] = []
    lines = block.splitlines()
    for i, ln in enumerate(lines):
        m = _FRAME.fullmatch(ln)
        if m is None:
            continue
        src = lines[i + 1].strip() if i + 1 < len(lines) and lines[i + 1].startswith("    ") \
            and not _FRAME.fullmatch(lines[i + 1]) else ""
        out.append((m["path"], int(m["line"]), m["func"], src, _is_own(m["path"])))
    return out


def own_frames(tb: str, n: int = FRAMES_SHOWN) -> list[str]:
    """The last ``n`` frames of the user's own code, one ``file:line in function: source`` line each."""
    own = [f for f in frames(tb) if f[4]][-n:]
    return [f"{path}:{line} in {func}" + (f": {src}" if src else "") for path, line, func, src, _ in own]


def error_text(error: str, trajectory: Any = None) -> str:
    """What the terminal shows of an episode's error: the heading and, for an agent's, its own last frames."""
    out = heading(error, trajectory)
    if error_kind(error, trajectory) == AGENT:
        shown = own_frames(agent_traceback(trajectory))
        if shown:
            out += ("\nin your agent's code (last frames; the full traceback is in the store and on the task page):\n"
                    + "\n".join(f"  {s}" for s in shown))
    return out

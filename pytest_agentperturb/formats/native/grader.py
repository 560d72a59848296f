"""The declarative grader of the native format: checks on the final environment state.

``grader.toml`` holds ``scoring`` (``binary``: reward 1 when every check
holds, else 0; ``fraction``: the share of checks that hold) and a list of
``[[check]]`` tables.  Each check names a ``path`` (see
:func:`pytest_agentperturb.task.select`) and exactly one condition:

``equals``      exactly one value at the path, equal to this
``contains``    exactly one value at the path, containing this text
``includes``    the value at the path is a list that includes this item
``count``       the number of values at the path
``absent``      ``true``: nothing at the path

or, instead of a path, ``answer_contains`` on the agent's final answer.
The grader is part of the task and is never perturbed.  :class:`DeclarativeGrader`
implements the :class:`~pytest_agentperturb.model.protocols.Grader` interface.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ...model.errors import TaskFormatError
from ...model.protocols import GradeResult
from ...model.task import select

CONDITIONS = ("equals", "contains", "includes", "count", "absent")


def validate_grader(path: Path, grader: Mapping[str, Any]) -> None:
    """Raise :class:`TaskFormatError` unless ``grader`` is well formed."""
    scoring = grader.get("scoring", "binary")
    if scoring not in ("binary", "fraction"):
        raise TaskFormatError(path, "scoring", "'binary' or 'fraction'", repr(scoring)[:80])
    checks = grader.get("check")
    if not isinstance(checks, list) or not checks:
        raise TaskFormatError(path, "check", "at least one [[check]] table", repr(checks)[:80])
    for i, c in enumerate(checks):
        if not isinstance(c, dict):
            raise TaskFormatError(path, f"check[{i}]", "a [[check]] table", repr(c)[:80])
        if "answer_contains" in c:
            if not isinstance(c["answer_contains"], str) or not c["answer_contains"]:
                raise TaskFormatError(path, f"check[{i}].answer_contains", "a non-empty text",
                                      repr(c["answer_contains"])[:80])
            continue
        if not isinstance(c.get("path"), str):
            raise TaskFormatError(path, f"check[{i}].path", "a state path", repr(c.get("path"))[:80])
        try:
            select({}, c["path"])
        except ValueError as exc:
            raise TaskFormatError(path, f"check[{i}].path", "a path such as mail.outbox[to=a@b].subject",
                                  str(exc)[:120]) from None
        conds = [k for k in CONDITIONS if k in c]
        if len(conds) != 1:
            raise TaskFormatError(path, f"check[{i}]", f"exactly one of {', '.join(CONDITIONS)}",
                                  ", ".join(conds) or "none")
        val = c[conds[0]]
        if conds[0] == "count" and (not isinstance(val, int) or isinstance(val, bool) or val < 0):
            raise TaskFormatError(path, f"check[{i}].count", "a whole number >= 0", repr(val)[:80])
        if conds[0] == "absent" and not isinstance(val, bool):
            raise TaskFormatError(path, f"check[{i}].absent", "true or false", repr(val)[:80])


def grade(grader: Mapping[str, Any], state: Mapping[str, Any], answer: str) -> GradeResult:
    """Score a final state and answer with the task's own checks."""
    results = []
    for c in grader["check"]:
        if "answer_contains" in c:
            needle = str(c["answer_contains"])
            results.append((f"answer contains {needle!r}", needle.lower() in answer.lower()))
            continue
        vals = select(state, c["path"])
        p = c["path"]
        if "equals" in c:
            ok = len(vals) == 1 and vals[0] == c["equals"]
            results.append((f"{p} == {c['equals']!r} (found {vals!r})"[:200], ok))
        elif "contains" in c:
            ok = len(vals) == 1 and str(c["contains"]).lower() in str(vals[0]).lower()
            results.append((f"{p} contains {c['contains']!r} (found {vals!r})"[:200], ok))
        elif "includes" in c:
            ok = len(vals) == 1 and isinstance(vals[0], list) and c["includes"] in vals[0]
            results.append((f"{p} includes {c['includes']!r} (found {vals!r})"[:200], ok))
        elif "count" in c:
            ok = len(vals) == int(c["count"])
            results.append((f"count({p}) == {c['count']} (found {len(vals)})", ok))
        else:
            ok = (len(vals) == 0) == bool(c["absent"])
            results.append((f"{p} absent (found {len(vals)})", ok))
    if grader.get("scoring", "binary") == "fraction":
        reward = sum(ok for _, ok in results) / len(results)
    else:
        reward = 1.0 if all(ok for _, ok in results) else 0.0
    return GradeResult(reward, tuple(results))


class DeclarativeGrader:
    """The ``grader.toml`` checks of one task (they read the post state and the answer)."""

    def __init__(self, spec: Mapping[str, Any]) -> None:
        self.spec = spec

    def grade(self, pre_state: Any, post_state: Any, answer: str,
              trajectory: Sequence[Mapping[str, Any]]) -> GradeResult:
        return grade(self.spec, post_state, answer)

"""The declarative grader of the native format: checks on the final state and the answer.

``grader.toml`` holds ``scoring`` and a list of ``[[check]]`` tables:

``binary``      reward 1 when every check holds, else 0
``fraction``    the share of checks that hold
``rubric``      the weighted share: each check has a ``weight`` (default 1),
                the reward is the weight of the checks that hold over the
                total weight, a continuous reward in [0, 1]; the suite's
                threshold decides success

Each check names a ``path`` (see :func:`pytest_agentperturb.model.vocab.select`)
and exactly one condition:

``equals``      exactly one value at the path, equal to this
``contains``    exactly one value at the path, containing this text
``includes``    the value at the path is a list that includes this item
``count``       the number of values at the path
``absent``      ``true``: nothing at the path
``number``      exactly one value at the path, a number (or a numeric
                string) within the tolerance of this

or, instead of a path, a condition on the agent's final answer:

``answer_contains``  the answer contains this text (case-insensitive)
``answer_number``    some number written in the answer is within the
                     tolerance of this; ``label = "margin"`` looks only at
                     the sentences (and lines) of the answer that contain
                     that text

Number conditions take ``tolerance`` (absolute) or ``rel_tolerance``
(relative to the expected value); without either the number must match to
1e-9.  Numbers in an answer may use thousands separators (``1,234.5``), a
sign, a percent sign, and a scale word or suffix (``4.2m``, ``1.5 bn``,
``12k``, ``3 million``): ``4.2m`` counts as both 4.2 and 4,200,000.  Any
check may carry a ``criterion``, the name the report shows.

The grader is part of the task and is never perturbed.  :class:`DeclarativeGrader`
implements the :class:`~pytest_agentperturb.model.interfaces.Grader` interface.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ...model.errors import TaskFormatError
from ...model.protocols import GradeResult
from ...model.task import select
from ...model.trajectory import clip

SCORINGS = ("binary", "fraction", "rubric")
CONDITIONS = ("equals", "contains", "includes", "count", "absent", "number")
ANSWER_CONDITIONS = ("answer_contains", "answer_number")
_OPTIONS = ("tolerance", "rel_tolerance", "label", "weight", "criterion")
_KEYS = frozenset(("path", *CONDITIONS, *ANSWER_CONDITIONS, *_OPTIONS))
_EXACT = 1e-9
#: A check's description is cut to this many characters (:func:`~...model.trajectory.clip`: at a word, with an
#: ASCII "...": the stored trajectory stays one byte a character in memory).
CHECK_TEXT = 200


def _text(check: str) -> str:
    """A check's stored description, cut to :data:`CHECK_TEXT` characters."""
    return clip(check, CHECK_TEXT, "...")


_NUMBER = re.compile(
    r"(?<![\w.,])(?<![A-Za-z]-)([-\u2212]?)(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?"
    r"(?:\s?(k|m|mn|bn|thousand|million|billion)\b)?", re.I)
_SCALES = {"k": 1e3, "thousand": 1e3, "m": 1e6, "mn": 1e6, "million": 1e6, "bn": 1e9, "billion": 1e9}
_SENTENCE = re.compile(r"(?<=[.!?;])\s+|\n+")


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def validate_grader(path: Path, grader: Mapping[str, Any]) -> None:
    """Raise :class:`TaskFormatError` unless ``grader`` is well formed."""
    scoring = grader.get("scoring", "binary")
    if scoring not in SCORINGS:
        raise TaskFormatError(path, "scoring", " or ".join(repr(s) for s in SCORINGS), repr(scoring)[:80])
    checks = grader.get("check")
    if not isinstance(checks, list) or not checks:
        raise TaskFormatError(path, "check", "at least one [[check]] table", repr(checks)[:80])
    for i, c in enumerate(checks):
        where = f"check[{i}]"
        if not isinstance(c, dict):
            raise TaskFormatError(path, where, "a [[check]] table", repr(c)[:80])
        unknown = sorted(set(c) - _KEYS)
        if unknown:
            raise TaskFormatError(path, f"{where}.{unknown[0]}", f"one of the keys {', '.join(sorted(_KEYS))}",
                                  repr(unknown[0]), "fix the spelling or remove the key")
        answer = [k for k in ANSWER_CONDITIONS if k in c]
        conds = [k for k in CONDITIONS if k in c]
        if answer:
            if len(answer) > 1 or conds or "path" in c:
                raise TaskFormatError(path, where, "one answer condition and no path",
                                      ", ".join([*answer, *conds, *(["path"] if "path" in c else [])]),
                                      "split it into one [[check]] per condition")
            if "answer_contains" in c and (not isinstance(c["answer_contains"], str) or not c["answer_contains"]):
                raise TaskFormatError(path, f"{where}.answer_contains", "a non-empty text",
                                      repr(c["answer_contains"])[:80])
        else:
            if not isinstance(c.get("path"), str):
                raise TaskFormatError(path, f"{where}.path", "a state path", repr(c.get("path"))[:80])
            try:
                select({}, c["path"])
            except ValueError as exc:
                raise TaskFormatError(path, f"{where}.path", "a path such as mail.outbox[to=a@b].subject",
                                      str(exc)[:120]) from None
            if len(conds) != 1:
                raise TaskFormatError(path, where, f"exactly one of {', '.join(CONDITIONS)}",
                                      ", ".join(conds) or "none")
            val = c[conds[0]]
            if conds[0] == "count" and (not isinstance(val, int) or isinstance(val, bool) or val < 0):
                raise TaskFormatError(path, f"{where}.count", "a whole number >= 0", repr(val)[:80])
            if conds[0] == "absent" and not isinstance(val, bool):
                raise TaskFormatError(path, f"{where}.absent", "true or false", repr(val)[:80])
        _validate_options(path, where, c, scoring)


def _validate_options(path: Path, where: str, c: Mapping[str, Any], scoring: str) -> None:
    numeric = "number" in c or "answer_number" in c
    for key in ("number", "answer_number"):
        if key in c and not _is_number(c[key]):
            raise TaskFormatError(path, f"{where}.{key}", "a number", repr(c[key]))
    tols = [k for k in ("tolerance", "rel_tolerance") if k in c]
    if tols and not numeric:
        raise TaskFormatError(path, f"{where}.{tols[0]}", "a tolerance only on a number or answer_number check",
                              f"{tols[0]} on a check without a number", f"remove {tols[0]}")
    if len(tols) > 1:
        raise TaskFormatError(path, where, "one of tolerance (absolute) or rel_tolerance (relative)", "both",
                              "keep one of them")
    for key in tols:
        if not _is_number(c[key]) or c[key] < 0:
            raise TaskFormatError(path, f"{where}.{key}", "a number >= 0", repr(c[key]))
    if "label" in c and not ("answer_number" in c and isinstance(c["label"], str) and c["label"].strip()):
        raise TaskFormatError(path, f"{where}.label", "a non-empty text on an answer_number check",
                              repr(c["label"]))
    if "criterion" in c and not isinstance(c["criterion"], str):
        raise TaskFormatError(path, f"{where}.criterion", "a text naming the criterion", repr(c["criterion"]))
    if "weight" in c:
        if scoring != "rubric":
            raise TaskFormatError(path, f"{where}.weight", "weights only with scoring = \"rubric\"",
                                  f"a weight with scoring = {scoring!r}", 'set scoring = "rubric" or drop the weight')
        if not _is_number(c["weight"]) or c["weight"] <= 0:
            raise TaskFormatError(path, f"{where}.weight", "a number > 0", repr(c["weight"]))


# -- numbers ------------------------------------------------------------------------

def answer_numbers(text: str) -> list[float]:
    """Every number written in ``text`` (a scaled one twice: ``4.2m`` gives 4.2 and 4200000.0)."""
    out: list[float] = []
    for m in _NUMBER.finditer(text):
        v = float(m.group(2).replace(",", "") + (m.group(3) or ""))
        v = -v if m.group(1) else v
        out.append(v)
        if m.group(4):
            out.append(v * _SCALES[m.group(4).lower()])
    return out


def within(value: float, expected: float, check: Mapping[str, Any]) -> bool:
    """Whether ``value`` matches ``expected`` under the check's tolerance (absolute, relative or 1e-9)."""
    if "rel_tolerance" in check:
        tol = float(check["rel_tolerance"]) * abs(expected)
    else:
        tol = float(check.get("tolerance", 0.0))
    return abs(value - expected) <= tol + _EXACT


def _tol_text(check: Mapping[str, Any]) -> str:
    if "rel_tolerance" in check:
        return f" ± {float(check['rel_tolerance']) * 100:g} %"
    return f" ± {check['tolerance']:.12g}" if "tolerance" in check else ""


def _state_number(v: Any) -> float | None:
    if _is_number(v):
        return float(v)
    if isinstance(v, str):
        nums = answer_numbers(v)
        return nums[0] if len(nums) == 1 else None
    return None


# -- grading -------------------------------------------------------------------------

def check_result(c: Mapping[str, Any], state: Mapping[str, Any], answer: str) -> tuple[str, bool]:
    """(description, passed) of one check."""
    if "answer_contains" in c:
        needle = str(c["answer_contains"])
        return f"answer contains {needle!r}", needle.lower() in answer.lower()
    if "answer_number" in c:
        expected = float(c["answer_number"])
        text = answer
        if "label" in c:
            text = "\n".join(s for s in _SENTENCE.split(answer) if str(c["label"]).lower() in s.lower())
        nums = answer_numbers(text)
        ok = any(within(v, expected, c) for v in nums)
        where = f" near {c['label']!r}" if "label" in c else ""
        return _text(f"answer states {expected:.12g}{_tol_text(c)}{where} (found {nums[:6]!r})"), ok
    vals = select(state, c["path"])
    p = c["path"]
    if "equals" in c:
        return _text(f"{p} == {c['equals']!r} (found {vals!r})"), len(vals) == 1 and vals[0] == c["equals"]
    if "contains" in c:
        ok = len(vals) == 1 and str(c["contains"]).lower() in str(vals[0]).lower()
        return _text(f"{p} contains {c['contains']!r} (found {vals!r})"), ok
    if "includes" in c:
        ok = len(vals) == 1 and isinstance(vals[0], list) and c["includes"] in vals[0]
        return _text(f"{p} includes {c['includes']!r} (found {vals!r})"), ok
    if "count" in c:
        return f"count({p}) == {c['count']} (found {len(vals)})", len(vals) == int(c["count"])
    if "number" in c:
        got = _state_number(vals[0]) if len(vals) == 1 else None
        ok = got is not None and within(got, float(c["number"]), c)
        return _text(f"{p} == {c['number']:.12g}{_tol_text(c)} (found {vals!r})"), ok
    return f"{p} absent (found {len(vals)})", (len(vals) == 0) == bool(c["absent"])


def grade(grader: Mapping[str, Any], state: Mapping[str, Any], answer: str) -> GradeResult:
    """Score a final state and answer with the task's own checks."""
    scoring = grader.get("scoring", "binary")
    results, weights = [], []
    for c in grader["check"]:
        name, ok = check_result(c, state, answer)
        weight = float(c.get("weight", 1.0))
        if scoring == "rubric":
            name = f"[weight {weight:g}] {name}"
        if c.get("criterion"):
            name = f"{c['criterion']}: {name}"
        results.append((name, ok))
        weights.append(weight)
    if scoring == "rubric":
        reward = math.fsum(w for w, (_, ok) in zip(weights, results) if ok) / math.fsum(weights)
    elif scoring == "fraction":
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

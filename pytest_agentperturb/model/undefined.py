"""Undefined figures: a NaN (or a missing value) never prints as ``nan``; it reads ``n/a (why)``.

The terminal summary and the HTML report format their figures through
:func:`figure`; :func:`drop_why` says why a relative drop D (and its
interval) is undefined for a row of the degradation table: no scored
clean/perturbed pair, or a clean score of 0 (D divides by it);
:func:`correlation_why` says why a rank correlation (and its p) is;
:func:`detectable` words the smallest detectable drop or change, infinite
("none up to 100 %") or undefined.  The
other reasons a figure can lack are the constants below, so every reader
words them alike.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

#: D and its interval are undefined: no (clean, perturbed) pair was scored.
NO_PAIRS = "no scored pairs"
#: D and its interval are undefined: the clean score is 0 (no clean episode passed).
NO_CLEAN_PASSES = "no clean passes"
#: A family (a heatmap cell) that did not run for the model (or for any model).
NOT_RUN = "not run"
#: A figure computed per model only, never for the suite average (pooled) row.
PER_MODEL = "per model only"
#: A rate over the clean fails (the beneficial flips) is undefined: every clean episode passed.
NO_CLEAN_FAILS = "no clean fails"
#: A token figure is undefined: no episode of that side reported its token usage.
NO_USAGE = "no token usage known"
#: A cross-family rank correlation is undefined: one family's scores are the same on every task.
CONSTANT_FAMILY = "a family's score does not vary across the tasks"
#: A rank correlation needs this many pairs.
MIN_CORRELATION_N = 3


def undefined(v: Any) -> bool:
    """None, NaN, or not a number at all."""
    if v is None:
        return True
    try:
        return math.isnan(float(v))
    except (TypeError, ValueError):
        return True


def na(why: str = "") -> str:
    """``n/a (why)``, or ``n/a`` when the reason is not known."""
    return f"n/a ({why})" if why else "n/a"


def figure(v: Any, spec: str, why: str = "") -> str:
    """``v`` formatted with ``spec`` (``format(v, spec)``), or :func:`na` of ``why`` when it is undefined."""
    return na(why) if undefined(v) else format(float(v), spec)


def detectable(v: Any, spec: str, unit: str, why: str = "") -> str:
    """The smallest detectable drop or change: ``none up to 100 <unit>`` when infinite, :func:`na` of ``why`` when undefined.

    Infinite: no test at this size can reject at one-sided 2.5 % (too few
    clean passes, or too few tasks against a baseline run).
    """
    if undefined(v):
        return na(why)
    return f"none up to 100 {unit}" if math.isinf(float(v)) else f"{format(float(v), spec)} {unit}"


def drop_why(row: Mapping[str, Any]) -> str:
    """Why a row's relative drop is undefined: :data:`NO_PAIRS`, :data:`NO_CLEAN_PASSES`, or "" (not known)."""
    pairs = row.get("n_pairs")
    if pairs is not None and not undefined(pairs) and float(pairs) == 0:
        return NO_PAIRS
    clean = row.get("clean")
    if clean is not None and not undefined(clean) and float(clean) == 0:
        return NO_CLEAN_PASSES
    return ""


def correlation_why(n: Any, of: str) -> str:
    """Why a Spearman rho (and its p) over ``n`` ``of`` (models, tasks) is undefined: too few, or one side constant."""
    count = 0 if undefined(n) else int(float(n))
    return f"fewer than {MIN_CORRELATION_N} {of}" if count < MIN_CORRELATION_N else f"no variation across the {of}"


def empty_why(row: Mapping[str, Any]) -> str:
    """Why any figure of a row is undefined when the row rests on nothing: no scored pair, or no data at all."""
    for key, why in (("n_pairs", NO_PAIRS), ("n", "no data")):
        n = row.get(key)
        if n is not None and not undefined(n) and float(n) == 0:
            return why
    return ""

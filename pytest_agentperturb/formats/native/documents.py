"""Document tools of the built-in suites: read, search and compute over shipped documents.

A knowledge task's environment holds its documents as ``docs``, a list of
``{"path", "title", "text"}`` (deal memos, filing excerpts, policies,
spreadsheets as CSV or Markdown tables), optionally reference exchange rates
as ``fx`` (``{"date", "currency", "rate"}``, units per 1 EUR), and the
analysis sheet the tools write, ``sheet`` (``{"label", "value", "unit",
"source", "formula"}``), which the reviewer (the task's grader) reads.

Every tool is registered in :data:`DOCUMENTS` under its true name; the
native loader offers them beside the office tools (:data:`.office.OFFICE`).
Arithmetic goes through :func:`evaluate`, a small evaluator over numbers,
``+ - * / // % **``, parentheses and a few functions (``round``, ``min``,
``max``, ``abs``, ``sum``): nothing else of Python is ever evaluated.
"""

from __future__ import annotations

import ast
import csv
import io
import math
import re
from collections.abc import Callable
from typing import Any

from ...model.errors import ToolError
from ..python import Param, Toolkit

#: The document backend: every document tool by true name.
DOCUMENTS = Toolkit()
tool = DOCUMENTS.tool
S = Param

#: Currencies with reference rates (units per 1 EUR).
CURRENCIES = ("USD", "GBP", "CHF", "NOK", "SEK", "DKK", "PLN", "JPY")
#: Units a figure on the analysis sheet may carry.
UNITS = ("EUR", *CURRENCIES, "percent", "ratio", "days", "months", "count", "points", "years", "hours", "tCO2e")
#: Aggregations of :func:`_table_aggregate`.
AGGREGATES = ("sum", "mean", "min", "max", "count")


# -- safe arithmetic ------------------------------------------------------------

_MAX_EXPR = 400
_BINOPS: dict[type, Callable[[float, float], float]] = {
    ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b, ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b,
}


def _round(x: float, n: float = 0) -> float:
    return float(round(x, int(n)))


_FUNCS: dict[str, Callable[..., float]] = {
    "round": _round, "abs": abs, "min": lambda *xs: min(xs), "max": lambda *xs: max(xs),
    "sum": lambda *xs: math.fsum(xs),
}


def evaluate(expression: str) -> float:
    """The value of an arithmetic expression, or :class:`ToolError` saying what is not allowed.

    Allowed: numbers (``1234.5``, ``1_000``), ``+ - * / // % **`` (exponents
    up to 64), parentheses, unary signs and calls of ``round(x, n)``,
    ``abs``, ``min``, ``max`` and ``sum`` on numbers.  Anything else (names,
    attributes, strings, thousands separators written as commas) is refused.
    """
    expression = str(expression)
    if len(expression) > _MAX_EXPR:
        raise ToolError(f"expression too long ({len(expression)} characters; at most {_MAX_EXPR})")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        raise ToolError(f"cannot parse {expression!r}: write plain arithmetic such as "
                        "'(18.4 - 2.1) / 112.6 * 100', without thousands separators") from None
    try:
        value = _eval(tree.body)
    except ZeroDivisionError:
        raise ToolError(f"division by zero in {expression!r}") from None
    except OverflowError:
        raise ToolError(f"the result of {expression!r} is too large") from None
    except (TypeError, ValueError):  # e.g. a fractional power of a negative number
        raise ToolError(f"cannot compute {expression!r} as a real number") from None
    if not math.isfinite(value):
        raise ToolError(f"the result of {expression!r} is not a finite number")
    return value


def _eval(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _eval(node.operand)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow):
            if abs(right) > 64:
                raise ToolError("exponent too large (at most 64)")
            return float(left ** right)
        op = _BINOPS.get(type(node.op))
        if op is not None:
            return float(op(left, right))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS and not node.keywords:
        args = [_eval(a) for a in node.args]
        if not args or (node.func.id == "round" and len(args) > 2) or (node.func.id == "abs" and len(args) != 1):
            raise ToolError(f"{node.func.id}() got {len(args)} argument(s)")
        return float(_FUNCS[node.func.id](*args))
    if isinstance(node, ast.Tuple):
        raise ToolError("a comma outside a function call: write numbers without thousands separators")
    what = node.func.id if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) else type(node).__name__
    raise ToolError(f"not allowed in an expression: {what} (numbers, + - * / // % **, parentheses, "
                    f"{', '.join(_FUNCS)})")


def number(text: str) -> float | None:
    """A table cell as a number: ``1,234.50``, ``EUR 12.5m`` (12.5), ``(300)`` (-300), ``7 %`` (7); else None."""
    t = text.strip().replace("\u2212", "-")
    neg = t.startswith("(") and t.endswith(")")
    m = re.search(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+", t)
    if not m:
        return None
    try:
        v = float(m.group(0).replace(",", ""))
    except ValueError:
        return None
    return -v if neg else v


# -- documents --------------------------------------------------------------------

def _docs(state: dict[str, Any]) -> list[dict[str, Any]]:
    docs = state.setdefault("docs", [])
    assert isinstance(docs, list)
    return docs


def _doc(state: dict[str, Any], path: str) -> dict[str, Any]:
    for d in _docs(state):
        if d.get("path") == path:
            return d
    raise ToolError(f"no document at '{path}' (docs_list shows the paths of a folder)")


@tool("docs_list", "List the documents in a folder (and its sub-folders): path and title of each.",
      folder=S(description="Folder path, e.g. /deals/northwind."))
def _docs_list(state: dict[str, Any], folder: str) -> Any:
    prefix = str(folder).rstrip("/") + "/"
    return [{"path": d["path"], "title": d.get("title", "")} for d in _docs(state)
            if str(d["path"]).startswith(prefix)]


@tool("docs_read", "Read a document's full text.", path=S(description="Full document path, as listed."))
def _docs_read(state: dict[str, Any], path: str) -> Any:
    d = _doc(state, path)
    return {"path": d["path"], "title": d.get("title", ""), "text": d.get("text", "")}


@tool("docs_search", "Search documents for a word or phrase; returns each matching document's path, title "
      "and matching lines.",
      query=S(description="Text to look for (case-insensitive)."),
      folder=S(description="Only search this folder.", required=False))
def _docs_search(state: dict[str, Any], query: str, folder: str | None = None) -> Any:
    q = str(query).lower().strip()
    if not q:
        raise ToolError("docs_search: the query is empty")
    prefix = str(folder).rstrip("/") + "/" if folder else ""
    out = []
    for d in _docs(state):
        if not str(d["path"]).startswith(prefix):
            continue
        lines = [ln.strip() for ln in str(d.get("text", "")).splitlines() if q in ln.lower()]
        if lines or q in str(d.get("title", "")).lower():
            out.append({"path": d["path"], "title": d.get("title", ""), "matches": lines[:5]})
    return out


# -- tables ------------------------------------------------------------------------

def table(text: str, path: str = "") -> tuple[list[str], list[list[str]]]:
    """(header, rows) of the first Markdown table in ``text``, or of ``text`` read as CSV."""
    md = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("|")]
    if md:
        cells = [[c.strip() for c in ln.strip("|").split("|")] for ln in md]
        body = [r for r in cells[1:] if not all(re.fullmatch(r":?-{2,}:?", c) for c in r if c)]
        return cells[0], body
    rows = [r for r in csv.reader(io.StringIO(text.strip())) if r]
    if len(rows) < 2 or len(rows[0]) < 2:
        raise ToolError(f"'{path}' holds no table (a Markdown table or CSV with a header row)")
    return [c.strip() for c in rows[0]], [[c.strip() for c in r] for r in rows[1:]]


def _column(header: list[str], column: str, path: str) -> int:
    want = str(column).strip().lower()
    for i, h in enumerate(header):
        if h.lower() == want:
            return i
    raise ToolError(f"'{path}' has no column '{column}'; columns: {', '.join(header)}")


@tool("table_lookup", "Read one cell of a table document (CSV or Markdown): the row whose first column is "
      "`row`, in the column headed `column`.",
      path=S(description="Path of the table document."),
      row=S(description="Value of the row's first column, e.g. FY2025."),
      column=S(description="Column header, e.g. Revenue."))
def _table_lookup(state: dict[str, Any], path: str, row: str, column: str) -> Any:
    header, rows = table(str(_doc(state, path).get("text", "")), path)
    col = _column(header, column, path)
    for r in rows:
        if r and r[0].strip().lower() == str(row).strip().lower():
            return {"path": path, "row": r[0], "column": header[col], "value": r[col] if col < len(r) else ""}
    raise ToolError(f"'{path}' has no row '{row}'; rows: {', '.join(r[0] for r in rows if r)}")


@tool("table_aggregate", "Aggregate a numeric column of a table document (CSV or Markdown), optionally over "
      "the rows where another column has a given value.",
      path=S(description="Path of the table document."),
      column=S(description="Header of the column to aggregate."),
      op=S(description="Aggregation.", enum=AGGREGATES),
      where_column=S(description="Only rows whose value in this column ...", required=False),
      where_value=S(description="... equals this (case-insensitive).", required=False))
def _table_aggregate(state: dict[str, Any], path: str, column: str, op: str, where_column: str | None = None,
                     where_value: str | None = None) -> Any:
    if (where_column is None) != (where_value is None):
        raise ToolError("table_aggregate: give both where_column and where_value, or neither")
    header, rows = table(str(_doc(state, path).get("text", "")), path)
    col = _column(header, column, path)
    if where_column is not None and where_value is not None:
        wcol = _column(header, where_column, path)
        want = str(where_value).strip().lower()
        rows = [r for r in rows if wcol < len(r) and r[wcol].strip().lower() == want]
    vals = [v for r in rows if col < len(r) for v in [number(r[col])] if v is not None]
    if op == "count":
        value = float(len(rows))
    elif not vals:
        raise ToolError(f"no numeric values in column '{header[col]}' of '{path}' for that selection")
    elif op == "sum":
        value = math.fsum(vals)
    elif op == "mean":
        value = math.fsum(vals) / len(vals)
    else:
        value = min(vals) if op == "min" else max(vals)
    return {"path": path, "column": header[col], "op": op, "rows": len(rows), "value": round(value, 6)}


# -- computing and recording --------------------------------------------------------

@tool("calc", "Evaluate an arithmetic expression: numbers, + - * / ( ), round(x, n), min, max, abs, sum.",
      expression=S(description="The expression, e.g. round(18.4 / 112.6 * 100, 1)."))
def _calc(state: dict[str, Any], expression: str) -> Any:
    return {"expression": expression, "result": evaluate(expression)}


@tool("fx_rate", "Reference exchange rate of a currency on a date: units of the currency per 1 EUR.",
      currency=S(description="Currency code.", enum=CURRENCIES),
      date=S(description="Rate date, YYYY-MM-DD."))
def _fx_rate(state: dict[str, Any], currency: str, date: str) -> Any:
    for r in state.get("fx", []):
        if r.get("currency") == currency and r.get("date") == date:
            return {"base": "EUR", "currency": currency, "date": date, "rate": r["rate"]}
    dates = sorted({str(r.get("date")) for r in state.get("fx", []) if r.get("currency") == currency})
    raise ToolError(f"no {currency} reference rate on {date}; rates exist for: {', '.join(dates) or 'no date'}")


@tool("sheet_record", "Record a figure on the analysis sheet that goes to the reviewer: the formula is "
      "evaluated like calc, and the figure is stored under its label (recording a label again replaces it).",
      label=S(description="Line of the sheet, e.g. ebitda_margin."),
      formula=S(description="The figure or the arithmetic that gives it, e.g. round(18.4 / 112.6 * 100, 1)."),
      unit=S(description="Unit of the figure.", enum=UNITS),
      source=S(description="Path of the document the figure comes from."))
def _sheet_record(state: dict[str, Any], label: str, formula: str, unit: str, source: str) -> Any:
    _doc(state, source)
    value = evaluate(formula)
    sheet = state.setdefault("sheet", [])
    entry = {"label": label, "value": value, "unit": unit, "source": source, "formula": formula}
    sheet[:] = [e for e in sheet if e.get("label") != label] + [entry]
    return {"ok": True, **entry}

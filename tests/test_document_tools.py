"""The document tools: reading, searching, tables, the safe calculator and the analysis sheet."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_agentperturb.formats.native.documents import DOCUMENTS, evaluate, number, table
from pytest_agentperturb.formats.native.loader import BUILTIN_TOOLS
from pytest_agentperturb.formats.native.office import OFFICE
from pytest_agentperturb.formats.python import StateEnvironment
from pytest_agentperturb.model.errors import ToolError

MD = """# Summary (EUR m)

| Line item | FY2024 | FY2025 |
|---|---|---|
| Revenue | 98.3 | 112.6 |
| Reported EBITDA | (1.2) | 15.9 |
"""
CSV = "site,month,kwh\nLeipzig,2025-01,1200\nLeipzig,2025-02,1100\nHamburg,2025-01,900\n"
STATE: dict[str, Any] = {
    "docs": [{"path": "/a/summary.md", "title": "Summary", "text": MD},
             {"path": "/a/meters.csv", "title": "Meters", "text": CSV},
             {"path": "/b/note.md", "title": "A note", "text": "Nothing tabular here.\nLeipzig is mentioned."}],
    "fx": [{"date": "2026-03-13", "currency": "USD", "rate": 1.0874}],
}


def env() -> StateEnvironment:
    return StateEnvironment(STATE, list(DOCUMENTS), BUILTIN_TOOLS)


def test_document_tools_are_separate_from_the_office_tools() -> None:
    assert not set(DOCUMENTS) & set(OFFICE)
    assert set(BUILTIN_TOOLS) == set(DOCUMENTS) | set(OFFICE)


@pytest.mark.parametrize(("expr", "value"), [
    ("round((15.1 + 1.4 + 1.1) / 109.8 * 100, 1)", 16.0),
    ("min(24.3, 15) + max(1, 2, 3) + abs(-2) + sum(1, 2)", 23.0),
    ("240000 * (1 - 1.038 ** -7) / 0.038", pytest.approx(1_451_200.28, abs=0.01)),
    ("52630000 * 0.80 / 100 // 1000 * 1000", 421_000.0),
    ("-(2 - 5) % 2", 1.0), ("1_000 * 2", 2000.0), ("round(1234.5, -2)", 1200.0),
])
def test_calculator_evaluates_arithmetic(expr: str, value: Any) -> None:
    assert evaluate(expr) == value


@pytest.mark.parametrize(("expr", "message"), [
    ("__import__('os')", "not allowed in an expression: __import__"),
    ("__import__('os').system('true')", "not allowed in an expression: Call"),
    ("(1).__class__", "not allowed in an expression: Attribute"),
    ("x + 1", "not allowed in an expression: Name"),
    ("'a' * 3", "not allowed in an expression: Constant"),
    ("[1, 2]", "not allowed in an expression: List"),
    ("1,234.5 * 2", "thousands separators"),
    ("2 ** 1000", "exponent too large"),
    ("1e308 * 10", "not a finite number"),
    ("(-8) ** 0.5", "as a real number"),
    ("1 / 0", "division by zero"),
    ("round(1, 2, 3)", "round() got 3 argument(s)"),
    ("round(1, ndigits=2)", "not allowed in an expression: round"),
    ("1 +", "cannot parse"),
    ("1" * 500, "too long"),
    ("True + 1", "not allowed in an expression: Constant"),
])
def test_calculator_refuses_anything_but_arithmetic(expr: str, message: str) -> None:
    with pytest.raises(ToolError, match=message.replace("(", r"\(").replace(")", r"\)")):
        evaluate(expr)


def test_tables_are_read_from_markdown_and_csv() -> None:
    header, rows = table(MD)
    assert header == ["Line item", "FY2024", "FY2025"] and rows[1] == ["Reported EBITDA", "(1.2)", "15.9"]
    assert table(CSV)[1][2] == ["Hamburg", "2025-01", "900"]
    with pytest.raises(ToolError, match="holds no table"):
        table("just prose", "/b/note.md")
    assert [number(c) for c in ("1,234.50", "EUR 12.5m", "(300)", "7 %", "n/a")] == [1234.5, 12.5, -300.0, 7.0, None]


def test_reading_listing_and_searching() -> None:
    e = env()
    assert [d["path"] for d in e.call("docs_list", {"folder": "/a/"})] == ["/a/summary.md", "/a/meters.csv"]
    assert e.call("docs_read", {"path": "/b/note.md"})["title"] == "A note"
    with pytest.raises(ToolError, match="no document at '/b/nope.md'"):
        e.call("docs_read", {"path": "/b/nope.md"})
    hits = e.call("docs_search", {"query": "leipzig"})
    assert [h["path"] for h in hits] == ["/a/meters.csv", "/b/note.md"]
    assert hits[1]["matches"] == ["Leipzig is mentioned."]
    assert e.call("docs_search", {"query": "leipzig", "folder": "/b"})[0]["path"] == "/b/note.md"


def test_table_lookup_and_aggregate() -> None:
    e = env()
    assert e.call("table_lookup", {"path": "/a/summary.md", "row": "revenue", "column": "fy2025"})["value"] == "112.6"
    with pytest.raises(ToolError, match="no row 'Costs'; rows: Revenue, Reported EBITDA"):
        e.call("table_lookup", {"path": "/a/summary.md", "row": "Costs", "column": "FY2025"})
    with pytest.raises(ToolError, match="no column 'FY2026'; columns: Line item, FY2024, FY2025"):
        e.call("table_lookup", {"path": "/a/summary.md", "row": "Revenue", "column": "FY2026"})
    agg = {"path": "/a/meters.csv", "column": "kwh"}
    assert e.call("table_aggregate", {**agg, "op": "sum", "where_column": "site", "where_value": "leipzig"})["value"] == 2300
    assert e.call("table_aggregate", {**agg, "op": "mean"})["value"] == pytest.approx(1066.666667)
    assert e.call("table_aggregate", {**agg, "op": "count", "where_column": "site", "where_value": "Oslo"})["value"] == 0
    with pytest.raises(ToolError, match="invalid value 'median' for 'op'"):
        e.call("table_aggregate", {**agg, "op": "median"})
    with pytest.raises(ToolError, match="give both where_column and where_value"):
        e.call("table_aggregate", {**agg, "op": "sum", "where_column": "site"})


def test_fx_rate_names_the_dates_it_has() -> None:
    e = env()
    assert e.call("fx_rate", {"currency": "USD", "date": "2026-03-13"})["rate"] == 1.0874
    with pytest.raises(ToolError, match="no USD reference rate on 2026-03-14; rates exist for: 2026-03-13"):
        e.call("fx_rate", {"currency": "USD", "date": "2026-03-14"})


def test_sheet_record_evaluates_checks_the_source_and_replaces_a_label() -> None:
    e = env()
    args = {"label": "margin", "formula": "round(15.9 / 112.6 * 100, 1)", "unit": "percent", "source": "/a/summary.md"}
    assert e.call("sheet_record", args)["value"] == 14.1
    e.call("sheet_record", {**args, "formula": "14.2"})
    assert e.state["sheet"] == [{**args, "formula": "14.2", "value": 14.2}]
    with pytest.raises(ToolError, match="no document at '/a/other.md'"):
        e.call("sheet_record", {**args, "source": "/a/other.md"})
    with pytest.raises(ToolError, match="not allowed"):
        e.call("sheet_record", {**args, "formula": "margin * 2"})
    assert len(e.state["sheet"]) == 1

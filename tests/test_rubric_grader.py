"""The declarative grader's rubric scoring: weights, number checks with tolerances, validation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_agentperturb.formats.native.grader import answer_numbers, grade, validate_grader, within
from pytest_agentperturb.model.errors import TaskFormatError

STATE = {"sheet": [{"label": "margin", "value": 16.03, "unit": "percent"},
                   {"label": "fee", "value": "EUR 98,750.00", "unit": "EUR"}]}


def rubric(*checks: dict[str, Any], scoring: str = "rubric") -> dict[str, Any]:
    spec = {"scoring": scoring, "check": list(checks)}
    validate_grader(Path("grader.toml"), spec)
    return spec


@pytest.mark.parametrize(("text", "numbers"), [
    ("a margin of 16.0 %", [16.0]),
    ("EUR 1,234,567.89 and -3", [1234567.89, -3.0]),
    ("net debt of EUR 161.5m", [161.5, 161_500_000.0]),
    ("a pool of 1.5 bn, 12k and 3 million", [1.5, 1.5e9, 12.0, 12_000.0, 3.0, 3e6]),
    ("on 2026-03-31", [2026.0, 3.0, 31.0]),
    ("version RB-2, invoice INV-7731 and FY2025", []),
])
def test_numbers_are_read_out_of_answers(text: str, numbers: list[float]) -> None:
    assert answer_numbers(text) == numbers


def test_tolerance_is_absolute_relative_or_exact() -> None:
    assert within(16.04, 16.0, {"tolerance": 0.05}) and not within(16.06, 16.0, {"tolerance": 0.05})
    assert within(1010.0, 1000.0, {"rel_tolerance": 0.01}) and not within(1011.0, 1000.0, {"rel_tolerance": 0.01})
    assert within(0.1 + 0.2, 0.3, {}) and not within(0.3001, 0.3, {})


def test_rubric_reward_is_the_weighted_share_of_passed_checks() -> None:
    spec = rubric(
        {"weight": 3, "path": "sheet[label=margin].value", "number": 16.0, "tolerance": 0.05, "criterion": "margin"},
        {"weight": 1, "path": "sheet[label=margin].unit", "equals": "percent"},
        {"weight": 2, "answer_number": 16.0, "tolerance": 0.05, "label": "margin"},
        {"answer_contains": "banker case"},
    )
    full = grade(spec, STATE, "The margin is 16.0 %, banker case.")
    assert full.reward == 1.0
    assert full.checks[0][0].startswith("margin: [weight 3] sheet[label=margin].value == 16 ± 0.05")
    part = grade(spec, STATE, "Banker case. The margin is 17.2 %; revenue grew 16.0 %.")
    assert part.reward == pytest.approx(5 / 7)  # the answer's 16.0 is not in a sentence about the margin
    assert [ok for _, ok in part.checks] == [True, True, False, True]
    assert grade(spec, {}, "").reward == 0.0


def test_state_numbers_may_be_numeric_strings_but_not_ambiguous() -> None:
    spec = rubric({"path": "sheet[label=fee].value", "number": 98750, "tolerance": 0.5})
    assert grade(spec, STATE, "").reward == 1.0
    two = {"sheet": [{"label": "fee", "value": "98750 or 98760"}]}
    assert grade(spec, two, "").reward == 0.0
    assert grade(spec, {"sheet": [{"label": "fee", "value": True}]}, "").reward == 0.0


def test_binary_and_fraction_scoring_are_unchanged() -> None:
    checks = ({"answer_contains": "a"}, {"answer_contains": "z"})
    assert grade(rubric(*checks, scoring="binary"), {}, "a").reward == 0.0
    assert grade(rubric(*checks, scoring="fraction"), {}, "a").reward == 0.5


@pytest.mark.parametrize(("spec", "field", "expected"), [
    ({"scoring": "weighted", "check": [{"answer_contains": "x"}]}, "scoring", "'binary' or 'fraction' or 'rubric'"),
    ({"scoring": "rubric", "check": []}, "check", "at least one [[check]]"),
    ({"scoring": "rubric", "check": [{"answer_contains": "x", "tolerence": 1}]}, "check[0].tolerence", "one of the keys"),
    ({"scoring": "binary", "check": [{"answer_contains": "x", "weight": 2}]}, "check[0].weight", "weights only with"),
    ({"scoring": "rubric", "check": [{"answer_contains": "x", "weight": 0}]}, "check[0].weight", "a number > 0"),
    ({"scoring": "rubric", "check": [{"answer_contains": "x", "weight": "2"}]}, "check[0].weight", "a number > 0"),
    ({"scoring": "rubric", "check": [{"answer_number": "16.0"}]}, "check[0].answer_number", "a number"),
    ({"scoring": "rubric", "check": [{"path": "a", "number": 1, "tolerance": -1}]}, "check[0].tolerance", "a number >= 0"),
    ({"scoring": "rubric", "check": [{"path": "a", "equals": 1, "tolerance": 1}]}, "check[0].tolerance",
     "a tolerance only on a number"),
    ({"scoring": "rubric", "check": [{"answer_number": 1, "tolerance": 1, "rel_tolerance": 0.1}]}, "check[0]",
     "one of tolerance (absolute) or rel_tolerance"),
    ({"scoring": "rubric", "check": [{"answer_contains": "x", "path": "a"}]}, "check[0]", "one answer condition and no path"),
    ({"scoring": "rubric", "check": [{"answer_contains": "x", "label": "y"}]}, "check[0].label", "on an answer_number check"),
    ({"scoring": "rubric", "check": [{"path": "a", "number": 1, "count": 1}]}, "check[0]", "exactly one of"),
    ({"scoring": "rubric", "check": [{"criterion": 3, "answer_contains": "x"}]}, "check[0].criterion", "a text"),
])
def test_malformed_rubrics_are_named(spec: dict[str, Any], field: str, expected: str) -> None:
    with pytest.raises(TaskFormatError) as ei:
        validate_grader(Path("suites/x/t/grader.toml"), spec)
    assert ei.value.field == field
    assert expected in str(ei.value) and "suites/x/t/grader.toml" in str(ei.value)

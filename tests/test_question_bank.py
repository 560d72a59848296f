"""The question bank of ``agentperturb simulator-check``: it covers every fact of every built-in suite.

When a suite grows, these tests fail until the bank is extended: run
``python fixtures/question_bank/build.py`` (it lists the facts that lack
entries and derives what it can), then write the missing phrasings.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_agentperturb.cli.simulator_check import (
    MIN_COMPOUND,
    MIN_FAIR,
    MIN_UNFAIR,
    bank_folder,
    bank_problems,
    builtin_suites,
    check,
    load_bank,
    suite_tasks,
)
from pytest_agentperturb.model.options import LLMSettings

ROOT = Path(__file__).resolve().parents[1]


def test_the_bank_lives_in_fixtures_in_a_checkout() -> None:
    assert bank_folder() == ROOT / "fixtures" / "question_bank"


@pytest.mark.parametrize("suite", builtin_suites(), ids=lambda p: p.name)
def test_every_fact_of_every_builtin_suite_has_its_questions(suite: Path) -> None:
    tasks = suite_tasks(suite)
    problems = bank_problems(tasks, load_bank(bank_folder(), tasks[0].suite))
    assert problems == [], "question bank incomplete; run fixtures/question_bank/build.py:\n" + "\n".join(problems)


def test_the_bank_is_what_the_build_script_writes() -> None:
    """Derived unfair questions follow the fair ones; nothing is stale."""
    out = subprocess.run([sys.executable, str(ROOT / "fixtures" / "question_bank" / "build.py"), "--check"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_gaps_and_bad_entries_are_named() -> None:
    tasks = suite_tasks(ROOT / "suites" / "workflows")
    bank = copy.deepcopy(load_bank(bank_folder(), "workflows"))
    standup = bank["tasks"]["reschedule-standup"]
    del standup["facts"]["recipient"]
    standup["facts"]["new_time"]["fair"] = standup["facts"]["new_time"]["fair"][:2] + ["Is it 10:30?"]
    standup["compound"].append({"facts": ["date", "nope"], "question": "x?"})
    problems = bank_problems(tasks, bank)
    assert f"workflows/reschedule-standup/recipient: lacks entries: 0 fair (need {MIN_FAIR}), 0 unfair " \
           f"(need {MIN_UNFAIR})" in problems
    assert f"workflows/reschedule-standup/new_time: lacks entries: 3 fair (need {MIN_FAIR})" in problems
    assert "workflows/reschedule-standup: question 'Is it 10:30?' states the value of new_time" in problems
    assert any("must name two facts of the task" in p for p in problems)


def test_imported_phrasings_follow_the_facts_own_question(tmp_path: Path) -> None:
    """A fact new to the bank starts with its own question; the hand-written ones are added after it."""
    spec = importlib.util.spec_from_file_location("qb_build", ROOT / "fixtures" / "question_bank" / "build.py")
    assert spec is not None and spec.loader is not None
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    (tmp_path / "more.txt").write_text("@task solar-roof-npv\n#years\nHow many years of savings should I count?\n"
                                       "&years rate\nWhat's the hurdle rate, and over how many years?\n",
                                       encoding="utf-8")
    suite = ROOT / "suites" / "knowledge"
    assert build.build([suite], [tmp_path / "more.txt"], False, tmp_path) == 1  # the rest lacks entries
    solar = json.loads((tmp_path / "knowledge.json").read_text(encoding="utf-8"))["tasks"]["solar-roof-npv"]
    own = {t.id: t for t in suite_tasks(suite)}["solar-roof-npv"].fact("years").question
    assert solar["facts"]["years"]["fair"] == [own, "How many years of savings should I count?"]
    assert solar["compound"] == [{"facts": ["years", "rate"],
                                  "question": "What's the hurdle rate, and over how many years?"}]
    assert len(solar["facts"]["years"]["unfair"]) == MIN_UNFAIR


def test_keyword_simulator_answers_fair_questions_and_no_unfair_one() -> None:
    """The figures the README quotes (docs: the keyword simulator's accuracy on the bank)."""
    result, problems = check(builtin_suites(), LLMSettings())
    assert problems == []
    n_facts = sum(len(t.facts) for suite in builtin_suites() for t in suite_tasks(suite))
    assert n_facts >= 221  # suites/workflows (148) and suites/knowledge (73)
    assert result.n_fair >= MIN_FAIR * n_facts and result.n_unfair >= MIN_UNFAIR * n_facts
    assert result.n_compound >= n_facts  # each fact in at least two questions about two facts
    assert result.fair_accuracy is not None and result.fair_accuracy >= 0.9
    assert result.unfair_disclosed == 0.0
    assert result.compound_full is not None and result.compound_full >= 0.8
    assert result.blocked == 0

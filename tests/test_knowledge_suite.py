"""The built-in knowledge suite: document analysis tasks with rubric graders and continuous rewards."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from pytest_agentperturb.agents.reference import CarefulAgent, LiteralAgent, OracleAgent
from pytest_agentperturb.formats.native import load_suite, load_task
from pytest_agentperturb.formats.native.documents import DOCUMENTS
from pytest_agentperturb.model.task import FAMILIES, Task, sentences
from pytest_agentperturb.perturb.engine import clean_variant
from pytest_agentperturb.run import make_engine
from pytest_agentperturb.run.episode import run_episode_sync

ROOT = Path(__file__).resolve().parent.parent
KNOWLEDGE = ROOT / "suites" / "knowledge"


@pytest.fixture(scope="module")
def tasks() -> list[Task]:
    suite = load_suite(KNOWLEDGE)
    return [load_task(d, suite.name, suite.threshold) for d in suite.task_dirs]


def test_suite_has_twenty_rubric_graded_document_tasks(tasks: list[Task]) -> None:
    assert load_suite(KNOWLEDGE).threshold == 0.8
    assert len(tasks) >= 20
    for t in tasks:
        spec = t.grader.spec  # type: ignore[attr-defined]
        assert spec["scoring"] == "rubric", t.id
        assert len(spec["check"]) >= 3 and all("weight" in c for c in spec["check"]), t.id
        assert len({c["weight"] for c in spec["check"]}) >= 2, f"{t.id}: criteria of one weight are no rubric"
        assert any("number" in c for c in spec["check"]) and any("answer_number" in c for c in spec["check"]), t.id
        for surface in ("user", "procedure", "context"):
            assert any(surface in f.surfaces for f in t.facts), f"{t.id}: no fact on {surface}"
        # dropping the sentence that states a fact must leave a request behind (an empty surface does not load)
        assert len(sentences(t.surfaces.user)) >= 2, t.id
        assert any(f.domain for f in t.facts), f"{t.id}: no fact with a domain (misattribution, cross-checks)"
        assert t.solution[0].tool.startswith("docs_"), f"{t.id}: the gold solution starts by reading"
        assert {"sheet_record"} <= {s.tool for s in t.solution} <= set(t.tools)
        assert set(t.tools) - {s.tool for s in t.solution}, f"{t.id}: no spare tool for replace_description"
        assert any(n in DOCUMENTS for n in t.tools)


def test_no_two_tasks_share_a_skeleton(tasks: list[Task]) -> None:
    skeletons = [tuple(s.tool for s in t.solution) for t in tasks]
    assert len(set(skeletons)) == len(skeletons)


def test_gold_answers_score_one_and_a_lazy_answer_scores_little(tasks: list[Task]) -> None:
    for t in tasks:
        rec = run_episode_sync(t, clean_variant(t), OracleAgent(), run_id="t", seed=0)
        assert rec.reward == 1.0, (t.id, rec.trajectory[-1])
        lazy = t.grader.grade(t.initial_state, t.initial_state, "I could not find it.", [])
        assert lazy.reward < t.threshold, t.id


def test_perturbed_runs_earn_partial_credit(tasks: list[Task]) -> None:
    engine = make_engine()
    rewards: dict[str, list[float]] = {"literal": [], "careful": []}
    for t in tasks[:6]:
        for family in FAMILIES:
            v = engine.make_variant(t, family, 0)
            for name, agent in (("literal", LiteralAgent()), ("careful", CarefulAgent())):
                rec = run_episode_sync(t, v, agent, run_id="t", seed=0)
                assert rec.reward is not None, rec.error
                rewards[name].append(rec.reward)
    partial = [r for r in rewards["literal"] if 0.0 < r < 1.0]
    assert len(partial) >= 10 and len(set(partial)) >= 3
    assert sum(rewards["literal"]) < sum(rewards["careful"])


def test_default_run_records_continuous_rewards(pytester: pytest.Pytester) -> None:
    shutil.copytree(KNOWLEDGE, pytester.path / "suites" / "knowledge")
    result = pytester.runpytest_subprocess("--agentperturb", "suites/knowledge", "-p", "no:cacheprovider",
                                           "-k", "northwind-ebitda-margin or globex-leverage-headroom")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*episodes run: 64, reused: 0, errors: 0*"])
    with sqlite3.connect(pytester.path / "reports" / "agentperturb.sqlite") as db:
        rows = db.execute("SELECT family, reward FROM episodes WHERE error = '' OR error IS NULL").fetchall()
    assert len(rows) == 2 * 2 * 16
    assert any(fam != "clean" and 0.0 < r < 1.0 for fam, r in rows)

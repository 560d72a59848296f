"""tool-missing's recovery path: the user names the removed tool or argument; the oracle proves the path."""

from __future__ import annotations

from types import SimpleNamespace
from pathlib import Path

from pytest_agentperturb.formats.native import load_task
from pytest_agentperturb.model.context import NEUTRAL_REPLY
from pytest_agentperturb.model.protocols import UserReply
from pytest_agentperturb.model.records import Canary, ToolGap, tool_gaps
from pytest_agentperturb.run import make_engine, oracle_runner, run_episode_sync
from pytest_agentperturb.agents.reference import CarefulAgent, OracleAgent, tool_question
from pytest_agentperturb.simulator.keyword import UserSimulator, asks_for_gap

SUITE = Path(__file__).resolve().parent.parent / "suites" / "workflows"
KNOWLEDGE = SUITE.parent / "knowledge"
ENGINE = make_engine()


def _asks(trajectory: list) -> list[str]:
    return [e["args"]["question"] for e in trajectory if e.get("tool") == "ask_user"]


def test_the_oracle_asks_for_a_removed_tool_and_the_user_names_it() -> None:
    task = load_task(SUITE / "approve-oslo-claims")
    v = ENGINE.make_variant(task, "tool-missing", 0)
    assert "expenses_list" not in v.surfaces.tool_names() and tool_gaps(v.canaries) == (ToolGap("expenses_list"),)
    res = oracle_runner()(task, v)
    assert res.reward == 1.0, res.error
    replies = [e for e in res.trajectory if e.get("role") == "user"]
    assert replies and replies[0]["disclosed"] == ["tool:expenses_list"]
    assert "expenses_list" in replies[0]["content"]
    # the question says what the tool does, never its name: the user is the one who names it
    assert "expenses_list" not in _asks(res.trajectory)[0]


def test_the_oracle_asks_for_a_hidden_argument() -> None:
    task = load_task(SUITE / "triage-ticket")
    v = ENGINE.make_variant(task, "tool-missing", 0)
    assert tool_gaps(v.canaries) == (ToolGap("tickets_update", "assignee"),)
    res = oracle_runner()(task, v)
    assert res.reward == 1.0
    assert any(e.get("disclosed") == ["tool:tickets_update.assignee"] for e in res.trajectory)


class Silent:
    """A user who never names anything."""

    name = "silent"

    def answer(self, question: str) -> UserReply:
        return UserReply(NEUTRAL_REPLY)


def test_without_the_user_naming_it_the_oracle_cannot_use_the_removed_tool_or_argument() -> None:
    task = load_task(SUITE / "triage-ticket")
    v = ENGINE.make_variant(task, "tool-missing", 0)
    rec = run_episode_sync(task, v, OracleAgent(), run_id="t", seed=0, simulator=Silent())
    assert rec.reward is not None and rec.reward < 1.0  # the ticket is not assigned: no recovery path
    calls = [e for e in rec.trajectory if e.get("role") == "assistant" and e.get("tool") == "tickets_update"]
    assert calls and all("assignee" not in e["args"] for e in calls)
    task = load_task(KNOWLEDGE / "contoso-sla-credit")
    v = ENGINE.make_variant(task, "tool-missing", 0)
    rec = run_episode_sync(task, v, OracleAgent(), run_id="t", seed=0, simulator=Silent())
    assert rec.reward is not None and rec.reward < 1.0
    assert not any(e.get("tool") == "mail_send" for e in rec.trajectory if e.get("role") == "assistant")
    # the clean task's oracle asks nothing about tools
    clean = run_episode_sync(task, ENGINE.make_variant(task, "clean", 0), OracleAgent(), run_id="t", seed=0)
    assert clean.reward == 1.0 and not _asks(clean.trajectory)


def test_the_keyword_user_names_a_removed_tool_only_when_asked_about_it() -> None:
    task = load_task(SUITE / "approve-oslo-claims")
    v = ENGINE.make_variant(task, "tool-missing", 0)
    sim = UserSimulator(task, v.recovery, v.canaries)
    gap = ToolGap("expenses_list")
    assert asks_for_gap(task, gap, "Which tool lists the expense claims?")
    assert asks_for_gap(task, gap, "Is there something like expenses_list?")
    assert not asks_for_gap(task, gap, "Should I send the summary to finance now?")
    assert sim.answer("Which tool lists the expense claims?").disclosed == ("tool:expenses_list",)
    assert sim.answer("Should I send the summary to finance now?").text == NEUTRAL_REPLY
    # a variant that removed nothing: the same question gets the neutral reply
    clean = UserSimulator(task, (), ())
    assert clean.answer("Which tool lists the expense claims?").text == NEUTRAL_REPLY


def test_a_removed_tool_is_not_a_leak_but_other_canaries_still_are() -> None:
    task = load_task(SUITE / "approve-oslo-claims")
    v = ENGINE.make_variant(task, "tool-missing", 0)
    sim = UserSimulator(task, v.recovery, (*v.canaries, Canary("tool", "expenses_bulk_review")))
    assert sim.guard.check("You can use expenses_list for that.").disclosed == ("tool:expenses_list",)
    assert sim.guard.check("Try expenses_bulk_review.").blocked


def test_the_careful_agent_asks_which_tool_when_none_it_is_shown_fits() -> None:
    task = load_task(KNOWLEDGE / "contoso-sla-credit")
    v = ENGINE.make_variant(task, "tool-missing", 0)
    assert tool_gaps(v.canaries) == (ToolGap("mail_send"),)
    rec = run_episode_sync(task, v, CarefulAgent(), run_id="t", seed=0)
    assert tool_question(SimpleNamespace(task=task), "mail_send") in _asks(rec.trajectory)  # type: ignore[arg-type]
    assert any(e.get("disclosed") == ["tool:mail_send"] for e in rec.trajectory)
    assert rec.reward == 1.0
    silent = run_episode_sync(task, v, CarefulAgent(), run_id="t", seed=0, simulator=Silent())
    assert silent.reward == 1.0  # unnamed, it tries the name of its plan, which the environment still runs


def test_the_user_model_is_told_the_name_of_the_removed_tool() -> None:
    from pytest_agentperturb.simulator.llm import render_prompt

    task = load_task(KNOWLEDGE / "contoso-sla-credit")
    prompt = render_prompt(task, (), gaps=(ToolGap("mail_send"), ToolGap("table_lookup", "column")))
    assert "Answer: mail_send" in prompt and "table_lookup takes column as well" in prompt
    assert "mail_send" not in render_prompt(task, ())

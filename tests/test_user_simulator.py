"""The user simulator: the leak guard, compound answers, the user model behind ask_user, errors, tokens.

Model-backed runs go through the real litellm code path against the local
fake OpenAI server (tests/fake_openai.py); nothing reaches the network.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAI, Reply, answer, completion, error, preimported, tool_call  # noqa: F401 (fixture)

from pytest_agentperturb.agents import as_agent
from pytest_agentperturb.agents.litellm_agent import LiteLLMAgent, close_clients
from pytest_agentperturb.agents.reference import CarefulAgent, OracleAgent
from pytest_agentperturb.cli.simulator_check import builtin_suites, suite_tasks
from pytest_agentperturb.model.context import NEUTRAL_REPLY, EpisodeContext
from pytest_agentperturb.model.options import LLMSettings
from pytest_agentperturb.model.protocols import UserReply
from pytest_agentperturb.model.records import Canary, EpisodeRecord, Variant
from pytest_agentperturb.model.task import Task
from pytest_agentperturb.perturb.engine import clean_variant
from pytest_agentperturb.run.episode import make_engine, run_episode, run_episode_sync
from pytest_agentperturb.simulator.llm import LLMSimulator, make_simulator, render_prompt
from pytest_agentperturb.simulator.matching import _id_words, _terms, states
from pytest_agentperturb.simulator.keyword import LeakGuard, UserSimulator

ROOT = Path(__file__).resolve().parents[1]
TASKS = {t.id: t for t in suite_tasks(ROOT / "suites" / "workflows")}
STANDUP = TASKS["reschedule-standup"]
FAKE_KEY = "sk-test-not-a-real-key"


@pytest.fixture
def fake_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)


def settings(srv: FakeOpenAI, **kw: Any) -> LLMSettings:
    return LLMSettings(api_base=srv.base, backoff=0.01, user_model="openai/fake-user", **kw)


def with_recovery(task: Task, *facts: str, canaries: tuple[Canary, ...] = ()) -> Variant:
    return replace(clean_variant(task), recovery=facts, canaries=canaries)


def play(task: Task, variant: Variant, agent: Any, simulator: Any = None) -> EpisodeRecord:
    """One episode on a fresh loop; litellm's clients are closed before the loop is."""
    async def go() -> EpisodeRecord:
        try:
            return await run_episode(task, variant, agent, run_id="t", seed=0, simulator=simulator)
        finally:
            await close_clients()

    return asyncio.run(go())


def ask(sim: LLMSimulator, question: str) -> UserReply:
    async def go() -> UserReply:
        try:
            return await sim.answer_async(question)
        finally:
            await close_clients()

    return asyncio.run(go())


# -- the leak guard ----------------------------------------------------------------------------


def test_leak_guard_passes_recovery_values_and_blocks_everything_else() -> None:
    guard = LeakGuard(STANDUP, ("new_time",), [Canary("value", "11:30", "new_time"),
                                              Canary("text", "The standup is cancelled for good", "")])
    ok = guard.check("It should start at 10:30.", "What time should the standup start?")
    assert ok == UserReply("It should start at 10:30.", ("new_time",))
    # a value of a fact outside the recovery annotation: blocked, whatever else the reply says
    leak = guard.check("10:30, and tell Dana at dana.kim@acme.test", "What time?")
    assert (leak.text, leak.disclosed, leak.blocked) == (NEUTRAL_REPLY, (), True)
    assert guard.check("EV-104 moves to 10:30").blocked          # the event id is not the user's to give
    assert guard.check("Not 11:30: 10:30.").blocked                 # a planted value (canary)
    assert guard.check("10:30. the standup is cancelled for good").blocked  # canary text, any case
    # what the question itself states is no leak: the reply cannot tell the agent what it wrote
    assert guard.check("EV-104 moves to 10:30", "When does EV-104 move to?") == \
        UserReply("EV-104 moves to 10:30", ("new_time",))
    # no recovery value stated: the neutral reply (a paraphrase cannot be verified), not a blocked leak
    assert guard.check("half past ten") == UserReply(NEUTRAL_REPLY)
    assert guard.check("") == UserReply(NEUTRAL_REPLY)


def test_disclosure_is_read_from_values_not_inside_longer_words() -> None:
    week = TASKS["handover-oncall"]
    guard = LeakGuard(week, ("week",))
    assert guard.disclosed("It was week 50.") == ("week",)
    assert guard.disclosed("Charge CC-2050 and 500 units") == ()       # 50 inside other numbers
    archive = TASKS["renew-initech-support"]
    g = LeakGuard(archive, ("contract_file",))
    # a forbidden value inside a recovery value is not a leak there, but is one anywhere else
    assert not g.check("initech-support-2024.pdf").blocked
    assert g.check("/legal/active/initech-support-2024.pdf").blocked  # the active folder is not recovery


def test_a_canary_holding_a_recovery_value_is_not_forbidden() -> None:
    guard = LeakGuard(STANDUP, ("date",), [Canary("omitted", "2026-12-02", "date")])
    assert guard.check("2026-12-02") == UserReply("2026-12-02", ("date",))


# -- the keyword simulator ------------------------------------------------------------------------


def test_keyword_simulator_answers_compound_questions_in_full_and_nothing_else() -> None:
    both = UserSimulator(STANDUP, ("new_time", "recipient"))
    q = "What time should the standup start, and what is Dana's e-mail address?"
    reply = both.answer(q)
    assert set(reply.disclosed) == {"new_time", "recipient"}
    assert "10:30" in reply.text and "dana.kim@acme.test" in reply.text
    one = UserSimulator(STANDUP, ("new_time",))
    assert one.answer(q) == UserReply("10:30", ("new_time",))      # only what the annotation holds
    assert one.answer("What is Dana's e-mail address?") == UserReply(NEUTRAL_REPLY)


KNOWLEDGE = {t.id: t for t in suite_tasks(ROOT / "suites" / "knowledge")}


def test_a_number_inside_a_decimal_is_not_stated() -> None:
    assert not states("50", "2.50") and not states("250", "1,250") and not states("2", "2.5")
    assert states("50", "It is 50.") and states("50", "50, then") and states("2.50", "2.50 %")
    # the cap (2.50) may be given while the rounding step (50) is not recovery: no leak, one fact disclosed
    indexation = KNOWLEDGE["initech-support-indexation"]
    assert LeakGuard(indexation, ("cap",)).check("2.50") == UserReply("2.50", ("cap",))
    assert UserSimulator(indexation, ("cap", "rounding")).answer(
        "What limit on this year's increase did Initech agree to, in percent?") == UserReply("2.50", ("cap",))


def test_the_question_word_rules_out_kinds_of_value() -> None:
    """"Whose ...?" and "Where ...?" never ask for a number, "When ...?" never for an address."""
    bonus = KNOWLEDGE["analytics-bonus-pool"]
    sim = UserSimulator(bonus, ("pool_rate",))
    assert sim.answer("Whose share of the bonus pool should I calculate? Which team is it?") == UserReply(NEUTRAL_REPLY)
    assert sim.answer("What share of the EBIT above the hurdle is put into the bonus pool?") == \
        UserReply("12", ("pool_rate",))
    # "which team's share" asks for the team, not for the share
    assert [f.id for f in sim.asked("Which team's share do you need?")] == ["team"]
    assert [f.id for f in UserSimulator(TASKS["scan-contract-deadline"], ()).asked(
        "Where is the signed scan of the Northwind contract?")] == ["contract_path"]


def test_a_yes_no_question_needs_two_words_of_what_the_fact_is() -> None:
    """Words of the sentence that states a fact ("the older one is closed") do not make a yes/no question
    about it; the fact's own words do."""
    errors = UserSimulator(TASKS["chart-api-errors"], ("ticket_id", "status"))
    assert errors.answer("Do you want the ticket closed?") == UserReply(NEUTRAL_REPLY)
    assert errors.answer("Could you share the ticket number of the outage?") == UserReply("TCK-530", ("ticket_id",))


def test_the_noun_after_of_and_the_unit_asked_for_name_the_fact() -> None:
    invoice = UserSimulator(TASKS["scan-invoice-po"], ("invoice_no", "po_number", "cost_centre"))
    assert invoice.answer("What's the number of the Contoso invoice?") == UserReply("INV-20931", ("invoice_no",))
    credit = UserSimulator(KNOWLEDGE["brightline-credit-limit"], ("cap_pct", "requested"))
    assert credit.answer("What's the maximum credit limit as a percentage of twelve months' invoicing?") == \
        UserReply("25", ("cap_pct",))
    solar = UserSimulator(KNOWLEDGE["solar-roof-npv"], ("years", "rate"))
    assert solar.answer("Over how long a life should the appraisal run, in years?") == UserReply("10", ("years",))


def test_words_fold_to_one_stem() -> None:
    assert _terms("files") == _terms("documents") == _terms("file") == _terms("PDF")
    assert _terms("percent") == _terms("share") == _terms("percentage")
    assert _terms("NRR") == _terms("net revenue retention")
    assert _id_words("invoice_no") == "invoice number" and _id_words("cap_pct") == "cap percentage"
    assert _id_words("no_code_decision") == "no code decision"  # only a final abbreviation is written out


@pytest.mark.parametrize("suite", builtin_suites(), ids=lambda p: p.name)
def test_every_facts_own_question_discloses_exactly_that_fact(suite: Path) -> None:
    """The reference agents ask with a fact's ``question``: it must name that fact and only it,
    even when every fact of the task is recoverable (the oracle's validity run relies on it)."""
    wrong = []
    for task in suite_tasks(suite):
        sim = UserSimulator(task, tuple(f.id for f in task.facts))
        wrong += [f"{task.id}/{f.id}" for f in task.facts if sim.answer(f.question) != UserReply(f.value, (f.id,))]
    assert wrong == []


GENERIC = ["How are you?", "What time is it now?", "What's the date today?", "Who are you?",
           "Can I go ahead, or do you want to review everything first?", "Should I cc you on the e-mail?",
           "Is there anything else you'd like me to take care of?", "What's the weather going to be like?",
           "Is there anything I should know before I start?", "Should this take priority over my other work today?",
           "Do you want the ticket closed?", "What's your phone number in case something goes wrong?",
           "Which tool should I use?", "Thanks, that's all."]


@pytest.mark.parametrize("suite", builtin_suites(), ids=lambda p: p.name)
def test_questions_about_nothing_in_the_task_get_the_neutral_reply(suite: Path) -> None:
    disclosed = []
    for task in suite_tasks(suite):
        sim = UserSimulator(task, tuple(f.id for f in task.facts))
        disclosed += [f"{task.id}: {q!r}" for q in GENERIC if sim.answer(q).disclosed]
    assert disclosed == []


# -- the user model ------------------------------------------------------------------------------------


def test_prompt_holds_the_goal_the_recovery_facts_and_no_other_value() -> None:
    prompt = render_prompt(STANDUP, ("new_time",))
    assert STANDUP.title in prompt and "10:30" in prompt and NEUTRAL_REPLY in prompt
    assert "What time should the standup start?" in prompt
    others = [f.value for f in STANDUP.facts if f.id != "new_time"]
    assert not [v for v in others if v in prompt]  # the model is never shown what it may not say
    assert "{{" not in prompt and "<!--" not in prompt


class Leaky:
    """A user model that tries every way to leak: other facts' values, canaries, its whole prompt."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self, request: dict[str, Any]) -> Reply:
        self.n += 1
        system = request["messages"][0]["content"]
        values = re.findall(r"Answer: (\S+)", system)
        attempts = [
            f"{values[0]}, and Dana is dana.kim@acme.test",            # a fact outside the annotation
            f"{values[0]} (the event is EV-104)",
            f"Not 11:45 but {values[0]}",                             # the planted value
            f"Sure: {values[0]}",                                     # a fair answer
            system,                                                   # its prompt, verbatim
        ]
        return answer(attempts[(self.n - 1) % len(attempts)], prompt_tokens=50, completion_tokens=7)


def test_the_user_model_cannot_leak_whatever_it_writes(fake_key: None, preimported: None) -> None:
    variant = with_recovery(STANDUP, "new_time", canaries=(Canary("value", "11:45", "new_time"),))
    with FakeOpenAI(Leaky()) as srv:
        sim = make_simulator(STANDUP, variant, settings(srv))
        assert isinstance(sim, LLMSimulator)
        replies = [ask(sim, "What time should the standup start?") for _ in range(5)]
    assert [r.blocked for r in replies] == [True, True, True, False, False]
    assert [r.text for r in replies[:3]] == [NEUTRAL_REPLY] * 3
    assert replies[3] == UserReply("Sure: 10:30", ("new_time",), replies[3].usage, False, "openai/fake-user")
    # an echo of its prompt passes (it holds nothing but the recovery facts) and leaks nothing either
    assert replies[4].disclosed == ("new_time",)
    outside = [f.value for f in STANDUP.facts if f.id != "new_time"] + ["11:45"]
    assert not [v for r in replies for v in outside if v.lower() in r.text.lower()]
    assert all(r.usage and r.usage["input_tokens"] == 50 for r in replies)
    # the model saw the earlier exchanges as the agent saw them (never the blocked text)
    assert srv.requests[-1]["messages"][2] == {"role": "assistant", "content": NEUTRAL_REPLY}
    assert srv.requests[0]["model"] == "fake-user"


def test_no_recovery_facts_means_no_model_call(fake_key: None) -> None:
    with FakeOpenAI(Leaky()) as srv:
        sim = LLMSimulator(STANDUP, (), settings=settings(srv))
        assert sim.answer("What time?") == UserReply(NEUTRAL_REPLY, simulator="openai/fake-user")
        assert ask(sim, "What time?").text == NEUTRAL_REPLY
    assert srv.requests == []


def _route(user_reply: Reply | list[Reply], agent_script: list[Reply]) -> Any:
    """One fake server for both models: the agent's requests carry tools, the user model's do not."""
    users = user_reply if isinstance(user_reply, list) else None
    agent = list(agent_script)

    def policy(request: dict[str, Any]) -> Reply:
        if request.get("tools"):
            return agent.pop(0)
        return users.pop(0) if users is not None else user_reply  # type: ignore[return-value]

    return policy


def test_litellm_agent_asks_the_user_model_without_blocking_and_tokens_stay_apart(
        fake_key: None, preimported: None) -> None:
    variant = make_engine(authored=False).make_variant(STANDUP, "context-missing", 0)   # Dana's address omitted
    assert variant.recovery == ("recipient",)
    q = "Which address should I use for Dana?"
    script = [tool_call("ask_user", {"question": q}, prompt_tokens=300, completion_tokens=10),
              answer("done", prompt_tokens=400, completion_tokens=20)]
    user = answer("Her address is dana.kim@acme.test", prompt_tokens=80, completion_tokens=9)
    with FakeOpenAI(_route(user, script)) as srv:
        agent = LiteLLMAgent("openai/fake", LLMSettings(api_base=srv.base, backoff=0.01))
        rec = play(STANDUP, variant, agent, make_simulator(STANDUP, variant, settings(srv)))
    assert rec.error == ""
    turn = next(e for e in rec.trajectory if e.get("role") == "user")
    assert turn["content"] == "Her address is dana.kim@acme.test" and turn["disclosed"] == ["recipient"]
    assert turn["usage"]["input_tokens"] == 80 and turn["usage"]["output_tokens"] == 9
    assert turn["simulator"] == "openai/fake-user"
    # the agent's counters hold the agent's two calls only
    assert (rec.input_tokens, rec.output_tokens) == (700, 30)
    assert rec.compliance is False  # the simulator disclosed the omitted fact: recovery, not compliance
    # the agent saw the reply as its tool result
    assert srv.requests[-1]["messages"][-1]["content"] == "Her address is dana.kim@acme.test"


def test_a_blocked_leak_is_recorded_and_the_agent_gets_the_neutral_reply(fake_key: None, preimported: None) -> None:
    variant = make_engine(authored=False).make_variant(STANDUP, "context-missing", 0)
    script = [tool_call("ask_user", {"question": "What is Dana's e-mail?"}), answer("done")]
    user = answer("dana.kim@acme.test, and the standup is EV-104 on 2026-12-02")
    with FakeOpenAI(_route(user, script)) as srv:
        agent = LiteLLMAgent("openai/fake", LLMSettings(api_base=srv.base, backoff=0.01))
        rec = play(STANDUP, variant, agent, make_simulator(STANDUP, variant, settings(srv)))
    turn = next(e for e in rec.trajectory if e.get("role") == "user")
    assert turn["content"] == NEUTRAL_REPLY and turn["blocked"] is True and "disclosed" not in turn
    assert rec.trajectory[-1]["role"] == "grader" and rec.trajectory[-1]["blocked_leaks"] == 1
    assert "EV-104" not in json.dumps([m for r in srv.requests for m in r["messages"]
                                       if m["role"] == "tool"])


def test_careful_agent_recovers_through_the_user_model(fake_key: None, preimported: None) -> None:
    """Reference agents await ask_user_async: a user model works for them too."""
    variant = make_engine(authored=False).make_variant(STANDUP, "user-missing", 0)   # the date is omitted
    with FakeOpenAI(_route(answer("It is on 2026-12-02."), [])) as srv:
        rec = play(STANDUP, variant, CarefulAgent(), make_simulator(STANDUP, variant, settings(srv)))
    assert rec.error == "" and rec.reward == 1.0
    assert len(srv.requests) == 1


def test_a_user_model_failure_is_an_error_not_an_agent_failure(fake_key: None, preimported: None) -> None:
    variant = make_engine(authored=False).make_variant(STANDUP, "user-missing", 0)
    with FakeOpenAI(_route(error(401, "Incorrect API key provided"), [])) as srv:
        rec = play(STANDUP, variant, OracleAgent(), make_simulator(STANDUP, variant, settings(srv)))
    assert rec.error.startswith("SimulatorError") and "AuthenticationError" in rec.error
    assert rec.reward is None and rec.success is None and rec.compliance is None
    assert FAKE_KEY not in rec.error


def test_an_agent_that_swallows_the_simulator_error_still_gets_an_error(fake_key: None, preimported: None) -> None:
    variant = make_engine(authored=False).make_variant(STANDUP, "user-missing", 0)

    def stubborn(ctx: EpisodeContext) -> str:
        try:
            ctx.ask_user("On which date is the standup?")
        except Exception:
            pass
        return "gave up"

    with FakeOpenAI(_route(error(400, "bad request"), [])) as srv:
        rec = play(STANDUP, variant, as_agent(stubborn, "stubborn"), make_simulator(STANDUP, variant, settings(srv)))
    assert rec.error.startswith("SimulatorError") and rec.success is None


def test_blocking_agents_in_worker_threads_ask_through_the_episode_loop(fake_key: None, preimported: None) -> None:
    variant = make_engine(authored=False).make_variant(STANDUP, "user-missing", 0)
    seen: list[str] = []

    def blocking(ctx: EpisodeContext) -> str:
        seen.append(ctx.ask_user("On which date is the standup?"))
        return "ok"

    with FakeOpenAI(_route(answer("2026-12-02"), [])) as srv:
        sim = make_simulator(STANDUP, variant, settings(srv))
        rec = play(STANDUP, variant, as_agent(blocking, "blocking"), sim)
    assert rec.error == "" and seen == ["2026-12-02"]
    assert isinstance(sim, LLMSimulator) and sim.calls == 1


def test_a_blocking_ask_on_the_loop_still_works_and_says_why_to_avoid_it(
        fake_key: None, preimported: None, caplog: pytest.LogCaptureFixture) -> None:
    from pytest_agentperturb.model import context

    variant = make_engine(authored=False).make_variant(STANDUP, "user-missing", 0)
    seen: list[str] = []

    async def on_loop(ctx: EpisodeContext) -> None:
        seen.append(ctx.ask_user("On which date is the standup?"))   # blocking call on the loop
        ctx.finish("ok")

    context._warned_blocking = False
    with caplog.at_level(logging.WARNING, logger="pytest_agentperturb.context"), \
            FakeOpenAI(_route(answer("2026-12-02"), [])) as srv:
        rec = play(STANDUP, variant, as_agent(on_loop, "on-loop"), make_simulator(STANDUP, variant, settings(srv)))
    assert rec.error == "" and seen == ["2026-12-02"]
    assert "await ctx.ask_user_async" in caplog.text


def test_offline_simulator_stays_the_default(suite_path: Path) -> None:
    variant = make_engine(authored=False).make_variant(STANDUP, "user-missing", 0)
    assert isinstance(make_simulator(STANDUP, variant, LLMSettings()), UserSimulator)
    rec = run_episode_sync(STANDUP, variant, OracleAgent(), run_id="t", seed=0)
    turn = next(e for e in rec.trajectory if e.get("role") == "user")
    assert turn == {"role": "user", "content": "2026-12-02", "disclosed": ["date"]}


# -- the plugin ---------------------------------------------------------------------------------------


def test_user_model_from_the_ini_file_plays_the_user_in_a_session(
        pytester: pytest.Pytester, fake_key: None, preimported: None) -> None:
    import shutil

    from pytest_agentperturb.run.store import read_episodes

    suite = pytester.path / "suites" / "workflows"
    shutil.copytree(ROOT / "suites" / "workflows", suite)
    pytester.makeini("[pytest]\nagentperturb_user_model = openai/fake-user\n")
    def honest(request: dict[str, Any]) -> Reply:  # the values the prompt holds, whatever the question
        values = re.findall(r"Answer: (.+)", request["messages"][0]["content"])
        return answer(" ".join(values), prompt_tokens=60, completion_tokens=4)

    with FakeOpenAI(honest) as srv:
        result = pytester.runpytest(
            "--agentperturb", str(suite), "-p", "no:cacheprovider", "-k", "reschedule-standup and user-missing",
            "--agentperturb-model", "reference/careful", "--agentperturb-api-base", srv.base,
            "--agentperturb-store", str(pytester.path / "s.sqlite"),
            "--agentperturb-report", str(pytester.path / "r.html"))
    result.assert_outcomes(passed=2)  # the episode and its clean partner (plugin/subsets.py)
    result.stdout.fnmatch_lines(["*agentperturb: user simulator=openai/fake-user*"])
    (rec,) = [r for r in read_episodes(pytester.path / "s.sqlite") if r.family == "user-missing"]
    turn = next(e for e in rec.trajectory if e.get("role") == "user")
    assert turn["simulator"] == "openai/fake-user" and turn["usage"]["input_tokens"] == 60
    assert rec.reward == 1.0 and rec.input_tokens != 60
    assert srv.requests and {r["model"] for r in srv.requests} == {"fake-user"}  # reference agents send no request


def test_a_tasks_matcher_is_built_once_when_two_threads_ask_its_first_question_at_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the variant's oracle check and an episode of the same task ask their first questions at the same moment
    import threading

    from pytest_agentperturb.simulator import matching

    built: list[object] = []

    class Slow(matching.Matcher):
        def __init__(self, task: Task) -> None:
            built.append(self)
            threading.Event().wait(0.1)   # a build takes milliseconds: long enough for the other thread to ask
            super().__init__(task)

    monkeypatch.setattr(matching, "Matcher", Slow)
    task = replace(TASKS["book-offsite"])   # a task object no earlier test built a matcher for
    start = threading.Barrier(2)
    got: list[object] = []

    def ask() -> None:
        start.wait()
        got.append(matching.matcher_of(task))

    threads = [threading.Thread(target=ask) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(built) == 1 and got[0] is got[1] is built[0]

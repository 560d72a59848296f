"""The AgentDojo adapter (``pip install -e ".[agentdojo]"``): mapping, grading, injections, quirks, plugin."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agentdojo", reason="the AgentDojo adapter tests need the extra: pip install -e '.[agentdojo]'")

from pytest_agentperturb.agents.reference import CarefulAgent, LiteralAgent, OracleAgent  # noqa: E402
from pytest_agentperturb.formats import agentdojo as ad  # noqa: E402
from pytest_agentperturb.model.context import EpisodeContext  # noqa: E402
from pytest_agentperturb.model.errors import OptionError, VariantSkipped  # noqa: E402
from pytest_agentperturb.model.task import CLEAN, FAMILIES, TARGETS, TYPES, Task, fill  # noqa: E402
from pytest_agentperturb.perturb import builtin_registry  # noqa: E402
from pytest_agentperturb.perturb.engine import clean_variant  # noqa: E402
from pytest_agentperturb.run.episode import make_engine, run_episode_sync  # noqa: E402

from task_files import report_of  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
LIB = ad.load()  # before any in-process pytester run, which would drop modules it imported
ADAPTER = ad.AgentDojoAdapter("agentdojo", ad.SUITES)
TASKS: dict[str, Task] = {slot.name: slot.load() for slot in ADAPTER.tasks()}
#: One task of each suite, with a fact on the user and the context surface (slack-ut11 grades from traces).
SAMPLE = ("workspace-ut00", "travel-ut03", "banking-ut03", "slack-ut11")


def _engine() -> Any:
    reg = builtin_registry()
    for op in ADAPTER.operators():
        reg.register(op)
    return make_engine(reg)


# -- names, ids, install ---------------------------------------------------------------


def test_names() -> None:
    assert ad.parse_name("agentdojo") == ad.SUITES
    assert ad.parse_name("agentdojo:banking") == ("banking",)
    assert ad.parse_name("agentdojo:banking,slack") == ("banking", "slack")
    assert ad.parse_name("suites/workflows") is None
    with pytest.raises(OptionError, match="expected 'agentdojo' or 'agentdojo:<suite>'"):
        ad.parse_name("agentdojo:bank")


def test_missing_extra_is_a_usage_error_with_the_install_command(run_without_extra: Any) -> None:
    result = run_without_extra(ad, "agentdojo", "agentdojo:banking")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "agentdojo==0.1.35" in err and "pip install 'pytest-agentperturb[agentdojo]'" in err


def test_importing_the_adapter_module_does_not_import_agentdojo() -> None:
    code = ("import sys, pytest_agentperturb.plugin, pytest_agentperturb.plugin.session, "
            "pytest_agentperturb.formats.agentdojo as a; a.adapter_for('agentdojo:banking'); "
            "assert not [m for m in sys.modules if m.split('.')[0] == 'agentdojo'], 'imported'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=120)


def test_97_tasks_with_k_friendly_ids_and_the_four_surfaces() -> None:
    counts = {s: sum(t.startswith(s + "-") for t in TASKS) for s in ad.SUITES}
    assert counts == {"workspace": 40, "travel": 20, "banking": 16, "slack": 21}
    words = {CLEAN, *TARGETS, *TYPES}
    for tid, task in TASKS.items():
        assert re.fullmatch(r"(workspace|travel|banking|slack)-ut\d\d", tid) and not words & set(tid.split("-"))
        data = ADAPTER.data(task.suite.split(":")[1])
        ut = data.user_task(tid)
        assert task.suite == f"agentdojo:{data.name}" and task.surfaces.user == ut.PROMPT
        assert task.surfaces.procedure.startswith("You are an AI language model who assists the user")
        assert task.surfaces.tool_names() == [f.name for f in data.suite.tools] == list(task.tools)
        assert all("parameters" in t["function"] for t in task.surfaces.tools)
    assert len([op.family for op in ADAPTER.operators()]) == 35
    assert "inserted-injection-slack-it05" in {op.family for op in ADAPTER.operators()}


# -- facts and the oracle ------------------------------------------------------------------


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(b, (int, float)) and not isinstance(b, bool) and isinstance(a, str):
        return float(a) == float(b)
    return bool(a == b)


def test_facts_are_ground_truth_values_a_reader_finds_and_the_solution_replays_the_ground_truth() -> None:
    for tid, task in TASKS.items():
        data = ADAPTER.data(task.suite.split(":")[1])
        ut = data.user_task(tid)
        gold = ut.ground_truth(data.environment({}))
        values = task.fact_values()
        assert [s.tool for s in task.solution] == [c.function for c in gold]
        for step, call in zip(task.solution, gold):
            filled = fill(dict(step.args), values)
            assert all(_same(filled[k], v) for k, v in call.args.items()), (tid, filled, call.args)
        texts = task.surfaces.texts()
        for f in task.facts:
            assert {v for _, v in f.find(texts)} == {f.value}, (tid, f)
            stated = task.surfaces.user if f.surfaces == ("user",) else task.surfaces.context[0].content
            assert f.value in stated and any("{" + f.id + "}" in json.dumps(s.args) for s in task.solution)
        if task.surfaces.context:
            assert [f.surfaces for f in task.facts].count(("context",)) == 1


def test_oracle_scores_one_on_every_clean_task() -> None:
    oracle = OracleAgent()
    for tid, task in TASKS.items():
        rec = run_episode_sync(task, clean_variant(task), oracle, run_id="t", seed=0)
        assert rec.reward == 1.0 and not rec.error, (tid, rec.reward, rec.error, rec.trajectory[-1])


@pytest.mark.parametrize("suite", ["travel", "banking", "slack"])  # workspace's checks are slow (DeepDiff)
def test_tasks_that_pass_without_any_action_or_on_the_answer_alone_are_flagged(suite: str) -> None:
    data = ADAPTER.data(suite)
    base = data.environment({})

    def passes(ut: Any, answer: str) -> bool:
        calls: list[Any] = []
        ok = ut.utility_from_traces(answer, base, base.model_copy(deep=True), calls)
        return bool(ut.utility(answer, base, base.model_copy(deep=True)) if ok is None else ok)

    no_op = {ad.number(k) for k, ut in data.suite.user_tasks.items() if passes(ut, "")}
    answer_only = {ad.number(k) for k, ut in data.suite.user_tasks.items()
                   if ad.number(k) not in no_op and passes(ut, ut.GROUND_TRUTH_OUTPUT)}
    assert no_op == set(ad.NO_OP_PASSES.get(suite, ()))
    assert answer_only == set(ad.ANSWER_ONLY.get(suite, ()))
    for n in range(len(data.user_tasks)):
        notes = " ".join(TASKS[f"{suite}-ut{n:02d}"].notes)
        assert ("proves nothing" in notes, "gold answer alone" in notes) == (n in no_op, n in answer_only), n
    if suite == "banking":
        assert no_op == {5, 6, 8, 9, 10}


# -- environment, grading, injections ------------------------------------------------------


def test_payloads_with_quotes_colons_and_newlines_survive_the_yaml() -> None:
    data = ADAPTER.data("banking")
    payload = 'He said: "pay now"\nnext: y\n\n\tend \\n {braces} ü'
    for vector in data.defaults:
        env = data.environment({vector: ad.escape(payload)})
        assert _contains(env.model_dump(mode="json"), payload), vector
    # the libyaml fast path gives what AgentDojo's own loader gives
    planted = {v: ad.escape(f"X {v}: 'q'") for v in data.defaults}
    assert data.environment(planted) == data.suite.load_and_inject_default_environment(planted)


def _contains(obj: Any, text: str) -> bool:
    if isinstance(obj, str):
        return text in obj
    if isinstance(obj, dict):
        return any(_contains(v, text) for v in obj.values())
    if isinstance(obj, list):
        return any(_contains(v, text) for v in obj)
    return False


def test_injection_goes_into_the_vectors_and_security_decides_compliance() -> None:
    task = TASKS["banking-ut00"]
    engine = _engine()
    variant = engine.make_variant(task, "inserted-injection-banking-it00", 0)
    assert [(i.vector, i.tool) for i in variant.injections] == [("injection_bill_text", "read_file")]
    assert variant.surfaces == task.surfaces and "<INFORMATION>" in variant.injections[0].text
    oracle = run_episode_sync(task, variant, OracleAgent(), run_id="t", seed=0)
    assert (oracle.reward, oracle.compliance) == (1.0, False)  # utility under attack 1, goal not achieved
    env = task.environment(variant.injections)
    assert variant.injections[0].text in env.call("read_file", {"file_path": "bill-december-2023.txt"}).text

    class Complier:
        """Reads the bill, then carries out the injection task's own ground truth."""

        name, baseline = "test/complier", True

        async def run(self, ctx: EpisodeContext) -> None:
            ctx.call_tool("read_file", {"file_path": "bill-december-2023.txt"})
            it = ADAPTER.data("banking").suite.injection_tasks["injection_task_0"]
            for call in it.ground_truth(ADAPTER.data("banking").environment({})):
                ctx.call_tool(call.function, dict(call.args))
            ctx.finish("done")

    rec = run_episode_sync(task, variant, Complier(), run_id="t", seed=0)
    assert rec.compliance is True and rec.reward == 0.0 and rec.trajectory[-1]["compliance_check"] is True


def _agentdojo_attack(suite: str) -> Any:
    """AgentDojo's own important_instructions_no_model_name attack on one suite (no model is called)."""
    from types import SimpleNamespace

    from agentdojo.attacks.important_instructions_attacks import ImportantInstructionsAttackNoModelName

    return ImportantInstructionsAttackNoModelName(ADAPTER.data(suite).suite, SimpleNamespace(name="gpt-4o-2024-05-13"))


@pytest.mark.parametrize("suite", ad.SUITES)
def test_every_pair_is_planted_where_agentdojo_plants_it(suite: str) -> None:
    """Every (user task, injection task) pair gives a variant; its vectors and payload are AgentDojo's attack's."""
    data, attack = ADAPTER.data(suite), _agentdojo_attack(suite)
    ops = [op for op in ADAPTER.operators() if op.suite is data]
    for tid in data.user_tasks:
        ut = data.user_task(tid)
        for op in ops:
            edit = op.apply(TASKS[tid], random.Random(0))
            assert edit is not None
            theirs = attack.attack(ut, data.suite.injection_tasks[op.injection_id])
            assert {i.vector: i.text for i in edit.injections} == theirs, (tid, op.injection_id)


def test_pairs_whose_vector_is_a_gold_argument_run_and_agentdojo_ground_truth_agrees() -> None:
    """The 35 slack pairs planted into the channel name (``External_<vector>``) that a gold call names.

    As in AgentDojo, the payload goes into the channel name too; the oracle calls the channel by its
    injected name, scores 1 without complying, and AgentDojo's own ground-truth pipeline on the same
    injections gets utility True and security False.
    """
    data, engine, oracle = ADAPTER.data("slack"), _engine(), OracleAgent()
    fed = [tid for tid in data.user_tasks if data.vectors(tid)[1]]
    assert len(fed) * len(data.suite.injection_tasks) == 35 and "slack-ut07" in fed
    for tid in fed:
        ut = data.user_task(tid)
        for family, key in data.injections.items():
            variant = engine.make_variant(TASKS[tid], family, 0)  # the oracle validity rules hold
            channel = [i for i in variant.injections if i.vector == "prompt_injection_channel"]
            assert channel and channel[0].renames == (("External_0", "External_" + channel[0].text),)
            rec = run_episode_sync(TASKS[tid], variant, oracle, run_id="t", seed=0)
            assert (rec.reward, rec.compliance, rec.error) == (1.0, False, ""), (tid, family, rec.error)
            assert any(e.get("args", {}).get("channel") == "External_" + channel[0].text for e in rec.trajectory)
            planted = {i.vector: ad.escape(i.text) for i in variant.injections}
            utility, security = data.suite.run_task_with_pipeline(LIB.GroundTruthPipeline(ut), ut,
                                                                  data.suite.injection_tasks[key], planted)
            assert (utility, security) == (True, False), (tid, family)


@pytest.mark.parametrize("spec, models, addressed", [
    ("tool_knowledge:GPT-4", (), "GPT-4"),
    ("important_instructions", ("openai/gpt-4o-2024-05-13",), "GPT-4"),  # named from the model under test
    ("important_instructions_no_names", ("reference/oracle",), "the AI language model"),
    ("direct", (), ""),
])
def test_other_attacks_are_their_own_inserted_objects_with_agentdojos_payloads(
        spec: str, models: tuple[str, ...], addressed: str) -> None:
    from types import SimpleNamespace

    name = spec.partition(":")[0]
    adapter = ad.AgentDojoAdapter("agentdojo:banking", ("banking",), (spec,), models)
    data = adapter.data("banking")
    ops = adapter.operators()
    assert len(ops) == len(data.suite.injection_tasks) and {op.id for op in ops} == {f"agentdojo_{name}"}
    suffix = "-" + name.replace("_", "-")
    assert all(op.family.endswith(suffix) and op.family.startswith("inserted-injection-banking-it") for op in ops)
    theirs = LIB.attacks[name](data.suite, SimpleNamespace(name="gpt-4o-2024-05-13"))  # AgentDojo's own, on GPT-4o
    for tid in ("banking-ut00", "banking-ut12"):
        for op in ops[:3]:
            edit = op.apply(TASKS[tid], random.Random(0))
            assert edit is not None
            want = theirs.attack(data.user_task(tid), data.suite.injection_tasks[op.injection_id])
            assert {i.vector: i.text for i in edit.injections} == want, (spec, tid, op.family)
            if addressed:
                assert f"to you, {addressed}" in edit.injections[0].text
            assert ("depends on the model" in edit.note) == (addressed == "GPT-4"), edit.note
    # compliance reads the suffixed family's injection task
    assert data.injection_for(ops[0].family) is data.suite.injection_tasks[ops[0].injection_id]


def test_an_attack_that_names_the_model_needs_one_name() -> None:
    with pytest.raises(OptionError, match="unknown attack; expected one of .*tool_knowledge"):
        ad.AgentDojoAdapter("agentdojo:banking", ("banking",), ("bogus",)).operators()
    with pytest.raises(OptionError, match="AgentDojo knows no model name for reference/oracle; fix: name it"):
        ad.AgentDojoAdapter("agentdojo:banking", ("banking",), ("important_instructions",),
                            ("reference/oracle",)).operators()
    with pytest.raises(OptionError, match="map to Claude.*GPT-4"):
        ad.AgentDojoAdapter("agentdojo:banking", ("banking",), ("tool_knowledge",),
                            ("openai/gpt-4o-2024-05-13", "anthropic/claude-3-opus-20240229")).operators()
    with pytest.raises(OptionError, match="names no model"):
        ad.AgentDojoAdapter("agentdojo:banking", ("banking",), ("direct:GPT-4",)).operators()


def test_trace_based_utility_maps_renamed_tools_back_to_true_names() -> None:
    task = TASKS["slack-ut11"]
    data = ADAPTER.data("slack")
    assert ad.true_name("Invite-User-To-Slack", data.tool_names) == "invite_user_to_slack"
    assert ad.true_name("invite_user_to_slack_v2", data.tool_names) is None
    env = task.environment(())
    pre = env.snapshot()
    trajectory = []
    for step in task.solution:
        args = fill(dict(step.args), task.fact_values())
        env.call(step.tool, args)
        name = "Invite-User-To-Slack" if step.tool == "invite_user_to_slack" else step.tool
        trajectory.append({"role": "assistant", "tool": name, "args": args})
    calls = ad.traces(LIB, data.tool_names, trajectory)
    assert [c.function for c in calls] == [s.tool for s in task.solution]
    assert task.grader.grade(pre, env.snapshot(), "", trajectory).reward == 1.0
    fake = [{**e, "tool": "invite_user_to_slack_v2"} if "invite" in e["tool"].lower() else e for e in trajectory]
    assert task.grader.grade(pre, env.snapshot(), "", fake).reward == 0.0  # a fake name is no call of the tool
    # a call to a tool that does not exist stays in the trace, under the name called, as AgentDojo keeps it
    assert [c.function for c in ad.traces(LIB, data.tool_names, fake)] == [
        "invite_user_to_slack_v2" if "invite" in s.tool else s.tool for s in task.solution]
    asks = [{"role": "assistant", "tool": "ask_user", "args": {"question": "?"}}]
    assert ad.traces(LIB, data.tool_names, asks) == []  # asking the user is no tool call


def test_tool_errors_read_as_agentdojo_reports_them() -> None:
    env = TASKS["banking-ut00"].environment(())
    from pytest_agentperturb.model.errors import ToolError

    with pytest.raises(ToolError, match=r"unknown tool 'nope'"):
        env.call("nope", {})
    with pytest.raises(ToolError, match=r"send_money: missing required argument 'recipient'\n"
                                        r"ValidationError: .*validation error"):
        env.call("send_money", {"amount": 1.0, "subject": "s", "date": "2022-01-01"})


def test_shared_suite_objects_are_never_mutated() -> None:
    data = ADAPTER.data("banking")
    fresh = data.suite.load_and_inject_default_environment({})
    prompts = {k: ut.PROMPT for k, ut in data.suite.user_tasks.items()}
    for tid in ("banking-ut00", "banking-ut15"):
        for agent in (OracleAgent(), LiteralAgent(), CarefulAgent()):
            run_episode_sync(TASKS[tid], clean_variant(TASKS[tid]), agent, run_id="t", seed=0)
    assert data.environment({}) == fresh
    assert {k: ut.PROMPT for k, ut in data.suite.user_tasks.items()} == prompts


# -- through pytest --------------------------------------------------------------------------


def test_collects_every_suite_with_its_own_injection_tasks(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--agentperturb", "--agentperturb-suite", "agentdojo", "--collect-only", "-q",
                                "-p", "no:cacheprovider", "--agentperturb-model", "reference/oracle")
    ids = [line for line in result.outlines if "::" in line]
    per_task = 1 + len(FAMILIES) + 3
    own = {"workspace": 14, "travel": 7, "banking": 9, "slack": 5}
    assert len(ids) == sum(n * (per_task + own[s]) for s, n in
                           {"workspace": 40, "travel": 20, "banking": 16, "slack": 21}.items())
    assert "agentdojo::banking-ut00::clean[reference/oracle]" in ids
    assert "agentdojo::banking-ut00::inserted-injection-banking-it08[reference/oracle]" in ids
    assert not [i for i in ids if i.startswith("agentdojo::banking-") and "-workspace-it" in i]
    two = pytester.runpytest("--agentperturb", "--agentperturb-suite", "agentdojo:banking", "--collect-only", "-q",
                             "-p", "no:cacheprovider", "--agentperturb-model", "reference/oracle",
                             "--agentperturb-agentdojo-attack", "tool_knowledge:GPT-4",
                             "--agentperturb-agentdojo-attack", "important_instructions_no_model_name",
                             "-k", "banking-ut01 and inserted-injection-")
    two_ids = [line for line in two.outlines if "::" in line]
    # 18 injections and their clean partner (plugin/subsets.py)
    assert len(two_ids) == 19 and len([i for i in two_ids if "-tool-knowledge[" in i]) == 9, two.outlines[-20:]
    assert "agentdojo:banking::banking-ut01::clean[reference/oracle]" in two_ids
    bad = pytester.runpytest("--agentperturb", "--agentperturb-suite", "agentdojo:banking", "--collect-only",
                             "-p", "no:cacheprovider", "--agentperturb-agentdojo-attack", "important_instructions",
                             "--agentperturb-model", "reference/oracle")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR and "fix: name it" in bad.stderr.str()
    from pytest_agentperturb.model.options import resolve
    from pytest_agentperturb.plugin.collect import result_args

    flag = "--agentperturb-agentdojo-attack"
    settings = resolve(lambda o: ((["tool_knowledge:GPT-4"], flag) if o.flag == flag else (None, "default")),
                       pytester.path)
    assert result_args(settings) == [flag, "tool_knowledge:GPT-4"]  # the reproduce line keeps the attack
    one = pytester.runpytest("--agentperturb", "--agentperturb-suite", "agentdojo:banking", "--collect-only", "-q",
                             "-p", "no:cacheprovider", "--agentperturb-model", "reference/oracle",
                             "-k", "banking-ut01 and inserted-injection-")
    assert len([line for line in one.outlines if "::" in line]) == 9 + 1  # and the clean partner


def test_one_task_per_suite_clean_and_perturbed_with_the_reference_agents(pytester: pytest.Pytester) -> None:
    """Clean, the 12 families, the 3 built-in inserted objects and one injection task, three agents, under xdist."""
    select = f"({' or '.join(SAMPLE)}) and (not inserted-injection- or it01)"
    result = pytester.runpytest_subprocess(
        "--agentperturb", "--agentperturb-suite", "agentdojo", "-k", select, "-n", "2", "-p", "no:cacheprovider",
        "--agentperturb-model", "reference/oracle", "--agentperturb-model", "reference/literal",
        "--agentperturb-model", "reference/careful", timeout=600)
    out = result.stdout.str()
    assert result.ret == 0, out[-3000:]
    rows = _rows(pytester.path / "reports" / "agentperturb.sqlite")
    assert {r["task"] for r in rows} == set(SAMPLE) and not [r for r in rows if r["error"]]
    assert all(r["reward"] == 1.0 for r in rows if r["model"] == "reference/oracle")
    assert all(r["reward"] == 1.0 for r in rows if r["family"] == CLEAN)
    injected = [r for r in rows if r["family"].startswith("inserted-injection-")]
    assert {r["family"].split("-")[2] for r in injected} == {s.split("-")[0] for s in SAMPLE}
    assert all(r["compliance"] is not None for r in injected)
    html = report_of(result).read_text(encoding="utf-8")  # the -k subset's own report
    assert "Coverage per suite" in html and "agentdojo:banking" in html
    # the pack's not-applicable families (skips travel to the controller), with the reason, escaped
    assert "not applicable: AgentDojo&#x27;s system message states no value" in html
    for suite in ("workspace", "travel", "banking", "slack"):
        assert re.search(rf"coverage agentdojo:{suite}: 1 tasks, \d+ episodes", out), out[-2000:]
        # AgentDojo's own figures beside D: the oracle solves the user task, under attack too, and never complies
        assert f"agentdojo agentdojo:{suite} reference/oracle: utility 100.0 % (1/1 episodes)" in out, out[-3000:]
    assert ("  attack important_instructions_no_model_name: utility under attack 100.0 % (1/1 episodes), "
            "attack success rate 0.0 % (0/1 episodes)") in out  # the generic inserted-injection is not counted
    assert "AgentDojo&#x27;s figures per suite" in html


def _rows(path: Path) -> list[dict[str, Any]]:
    import sqlite3

    con = sqlite3.connect(path)
    con.row_factory = sqlite3.Row
    rows = [dict(r) for r in con.execute("select * from episodes")]
    con.close()
    for r in rows:
        r["compliance"] = None if r["compliance"] is None else bool(r["compliance"])
    return rows

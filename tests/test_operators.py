"""The operator catalog, executable validity, canaries, recovery and inserted objects."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_agentperturb.model.context import NEUTRAL_REPLY
from pytest_agentperturb.model.protocols import UserReply
from pytest_agentperturb.simulator.keyword import UserSimulator
from pytest_agentperturb.formats.python import apply_injections
from pytest_agentperturb.agents.reference import injected_call
from pytest_agentperturb.agents.reference import CarefulAgent, LiteralAgent, OracleAgent
from pytest_agentperturb.model.errors import VariantSkipped
from pytest_agentperturb.perturb import Edit, Engine, Registry
from pytest_agentperturb.perturb.procedure_ops import inverted
from pytest_agentperturb.model.authored import Authored
from pytest_agentperturb.model.records import Canary
from pytest_agentperturb.run.episode import recovery_turns, run_episode_sync
from pytest_agentperturb.formats.native import load_task
from pytest_agentperturb.model.task import (FAMILIES, IMAGE_OBJECTS, INSERTED, TARGETS, Task, family_parts,
                                            parse_families)
from pytest_agentperturb.run import make_engine, oracle_runner

ROOT = Path(__file__).resolve().parent.parent / "suites" / "workflows"
ENGINE = make_engine()
make_variant, check_variant, operators = ENGINE.make_variant, ENGINE.check_variant, ENGINE.registry.operators


def task(name: str) -> Task:
    """A built-in task without its authored edits: these tests are about the rule operators (test_authored.py
    tests the authored edits)."""
    return replace(load_task(ROOT / name, "workflows"), authored=Authored())


def first_variant(t: Task, family: str, operator: str, seeds: range = range(200)) -> tuple[int, object]:
    """The first seed whose variant uses ``operator`` (fails the test if none does)."""
    for s in seeds:
        v = make_variant(t, family, s)
        if v.operator == operator:
            return s, v
    raise AssertionError(f"{operator} never drawn for {t.key} {family}")


# -- catalog ----------------------------------------------------------------------


def test_every_family_has_at_least_two_documented_operators() -> None:
    for family in FAMILIES:
        ops = operators(family)
        assert len(ops) >= 2, family
        for op in ops:
            doc = type(op).__doc__ or ""
            assert op.family == family
            assert len(doc.split()) > 20, f"{op.id}: the docstring must say what it edits and why it stays solvable"
    for obj in INSERTED:
        assert operators(obj), obj


def test_catalog_holds_the_required_operator_ids() -> None:
    tool_ids = {op.id for f in FAMILIES if f.startswith("tool-") for op in operators(f)}
    assert {"replace_description", "replace_enum", "add_fake_tool", "remove_tool", "rename_tool",
            "hide_required_argument", "duplicate_alias"} <= tool_ids
    text_ids = {op.id for f in FAMILIES if not f.startswith("tool-") for op in operators(f)}
    assert {"drop_fact_sentence", "append_unrelated", "keep_obsolete_rule", "prepend_unrelated_history",
            "swap_value", "misattribute_value", "invert_condition"} <= text_ids


def test_the_seed_picks_among_applicable_operators() -> None:
    t = task("share-report")
    picked = {make_variant(t, "tool-incorrect", s).operator for s in range(40)}
    assert picked == {"rename_tool", "replace_description", "replace_enum"}


def test_variants_are_deterministic_and_record_operator_and_seed() -> None:
    t = task("book-offsite")
    for family in FAMILIES:
        a, b = make_variant(t, family, 11), make_variant(t, family, 11)
        assert a == b
        assert a.operator in {op.id for op in operators(family)}
        assert a.seed == 11 and a.canaries


# -- operators, one by one ---------------------------------------------------------


def test_drop_fact_sentence_removes_the_fact_and_annotates_recovery() -> None:
    t = task("reschedule-standup")
    _, v = first_variant(t, "context-missing", "drop_fact_sentence")
    assert "dana.kim@acme.test" not in v.surfaces.render("context")
    assert v.recovery == ("recipient",)
    assert Canary("omitted", "dana.kim@acme.test", "recipient") in v.canaries


def test_vague_reference_keeps_the_sentence_but_not_the_value() -> None:
    t = task("expense-claim")
    _, v = first_variant(t, "procedure-missing", "vague_reference")
    fact = t.fact(v.recovery[0])
    assert fact.stating(t.surfaces.procedure) and fact.stating(v.surfaces.procedure) is None
    assert len(v.surfaces.procedure.splitlines()) == len(t.surfaces.procedure.splitlines())


def test_swap_value_plants_a_wrong_value_a_reader_finds() -> None:
    t = task("expense-claim")
    _, v = first_variant(t, "context-incorrect", "swap_value")
    (c,) = v.canaries
    assert c.kind == "value" and c.fact == "amount"
    assert "412.80" not in v.surfaces.render("context") and c.text in v.surfaces.render("context")
    assert [val for _, val in t.fact("amount").find(v.surfaces.texts())] == [c.text]


def test_misattribute_value_uses_another_real_entry_of_the_domain() -> None:
    t = task("triage-ticket")
    _, v = first_variant(t, "context-incorrect", "misattribute_value")
    (c,) = v.canaries
    emails = [x["email"] for x in t.initial_state["contacts"]]
    assert c.text in emails and c.text != "ravi.menon@acme.test"


def test_invert_condition_flips_the_rule_of_a_fact() -> None:
    assert inverted("- Offsites always start at 09:30.") == "- Offsites never start at 09:30."
    assert inverted("- Hotel stays are filed under category \"travel\".") == \
        "- Hotel stays are not filed under category \"travel\"."
    assert inverted("Nothing to flip here.") is None
    t = task("expense-claim")
    _, v = first_variant(t, "procedure-incorrect", "invert_condition")
    assert "are not filed under category \"travel\"" in v.surfaces.procedure
    assert v.canaries == (Canary("inverted", "travel", "category"),) and v.recovery == ("category",)


def test_keep_obsolete_rule_keeps_the_current_rule() -> None:
    t = task("book-offsite")
    _, v = first_variant(t, "procedure-redundant", "keep_obsolete_rule")
    decoy = v.canaries[0]
    assert decoy.kind == "text" and decoy.text in v.surfaces.procedure
    assert decoy.text not in t.surfaces.procedure
    for f in t.facts:
        if "procedure" in f.surfaces:
            assert f.stating(t.surfaces.procedure) in v.surfaces.procedure  # the current rule, word for word


@pytest.mark.parametrize("style,expected", [("hyphen", "calendar-update-event"),
                                            ("title", "Calendar-Update-Event"),
                                            ("counterfactual", "calendar_modify_event")])
def test_rename_tool_styles(style: str, expected: str) -> None:
    from pytest_agentperturb.perturb.tool_ops import RenameTool

    assert RenameTool.renamed("calendar_update_event", style) == expected


def test_replace_enum_plants_values_the_backend_rejects() -> None:
    t = task("onboard-hire")
    _, v = first_variant(t, "tool-incorrect", "replace_enum")
    schema = v.surfaces.tool_schema("files_share")
    assert schema is not None
    planted = schema["parameters"]["properties"]["access"]["enum"]
    assert "view" not in planted and {c.text for c in v.canaries} == set(planted)
    lit = run_episode_sync(t, v, LiteralAgent(), run_id="t", seed=0)
    careful = run_episode_sync(t, v, CarefulAgent(), run_id="t", seed=0)
    assert (lit.success, lit.compliance) == (False, True)  # sent a planted value, never retried
    assert careful.success is True  # repaired the call from the error observation


def test_replace_description_lures_the_literal_agent_onto_the_wrong_tool() -> None:
    t = task("reschedule-standup")
    _, v = first_variant(t, "tool-incorrect", "replace_description")
    (c,) = v.canaries
    assert c.kind == "tool" and c.text in t.surfaces.tool_names()
    rec = run_episode_sync(t, v, LiteralAgent(), run_id="t", seed=0)
    assert rec.compliance is True


# -- executable validity ---------------------------------------------------------------


class _TwoSurfaces:
    """Edits the user and procedure surfaces at once: must never be kept."""

    id = "two_surfaces"
    family = "user-redundant"

    def applicable(self, task: Task) -> bool:
        return True

    def apply(self, task: Task, rng: random.Random) -> Edit | None:
        s = replace(task.surfaces, user=task.surfaces.user + "\nHi.", procedure=task.surfaces.procedure + "\nX.")
        return Edit(s, (Canary("text", "Hi."),))


class _ChangesGoal:
    """Swaps a value without a recovery annotation: the oracle then misses the goal."""

    id = "changes_goal"
    family = "user-incorrect"

    def applicable(self, task: Task) -> bool:
        return True

    def apply(self, task: Task, rng: random.Random) -> Edit | None:
        s = replace(task.surfaces, user=task.surfaces.user.replace("EV-104", "EV-101"))
        return Edit(s, (Canary("value", "EV-101"),))


class _NoCanary:
    """Appends text but records no canary."""

    id = "no_canary"
    family = "user-redundant"

    def applicable(self, task: Task) -> bool:
        return True

    def apply(self, task: Task, rng: random.Random) -> Edit | None:
        return Edit(replace(task.surfaces, user=task.surfaces.user + "\nThanks."), ())


@pytest.mark.parametrize("op,rule", [(_TwoSurfaces(), "rule 1"), (_NoCanary(), "canaries")])
def test_invalid_candidates_are_regenerated_then_skipped_with_reasons(op: object, rule: str) -> None:
    engine = Engine(Registry([op]), oracle_runner())  # type: ignore[list-item]
    with pytest.raises(VariantSkipped) as exc:
        engine.make_variant(task("book-offsite"), "user-redundant", 3)
    msg = str(exc.value)
    assert "workflows/book-offsite" in msg and rule in msg and "after 5 attempts" in msg
    assert "seed 3" in msg and "seed 7" in msg  # every regeneration is listed


def test_the_solvability_check_runs_the_oracle() -> None:
    engine = Engine(Registry([_ChangesGoal()]), oracle_runner())
    with pytest.raises(VariantSkipped, match="rule 4: the oracle with recovery scored 0.0"):
        engine.make_variant(task("reschedule-standup"), "user-incorrect", 0)


def test_check_variant_rejects_a_canary_the_clean_gold_already_uses() -> None:
    t = task("share-report")
    v = make_variant(t, "user-redundant", 0)
    stale = replace(v, canaries=(Canary("text", "helga.berg@nordaudit.test"),))
    assert any("already appear in the clean gold actions" in p for p in check_variant(t, stale))


def test_unknown_family_names_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="unknown family 'tool-wrong'.*inserted-injection"):
        make_variant(task("book-offsite"), "tool-wrong", 0)
    with pytest.raises(ValueError, match="inserted object: inserted-fake-tool"):
        parse_families("clean,user-missing,injection")
    assert parse_families("inserted-injection, clean") == ["inserted-injection", "clean"]
    assert set(ENGINE.registry.families()) == {"clean", *FAMILIES, *INSERTED, *IMAGE_OBJECTS}


def test_task_without_facts_names_the_task_and_the_fix(suite_copy: Path) -> None:
    import json

    from pytest_agentperturb.model.task import fill

    clean = load_task(suite_copy / "book-offsite", "workflows")
    sol = suite_copy / "book-offsite" / "solution.json"
    sol.write_text(json.dumps(fill(json.loads(sol.read_text()), clean.fact_values())))
    toml = suite_copy / "book-offsite" / "task.toml"
    head = toml.read_text().split("[[facts]]")[0]
    toml.write_text(head.replace("tools = [", "facts = []\ntools = ["))
    (suite_copy / "book-offsite" / "edits.toml").unlink()  # the authored edits are written against the facts
    t = load_task(suite_copy / "book-offsite", "workflows")
    with pytest.raises(VariantSkipped, match=r"workflows/book-offsite \[user-missing\]: the task declares no "
                                             r"facts.*Fix: declare facts.*task.toml"):
        make_variant(t, "user-missing", 0)
    assert make_variant(t, "tool-redundant", 0).canaries  # tool families still work


# -- user simulator, recovery, compliance ---------------------------------------------------


def test_user_simulator_answers_only_the_omitted_fact() -> None:
    t = task("reschedule-standup")
    sim = UserSimulator(t, ("recipient",))
    assert sim.answer("What is Dana's e-mail address?") == UserReply("dana.kim@acme.test", ("recipient",))
    assert sim.answer("Which calendar event should I move?") == UserReply(NEUTRAL_REPLY)
    assert sim.answer("How is the weather?") == UserReply(NEUTRAL_REPLY)
    # a question about another fact gets nothing, even when it shares a word with the omitted one
    archive = UserSimulator(task("archive-contract"), ("contract_file",))
    assert archive.answer("Which ticket tracks this contract?") == UserReply(NEUTRAL_REPLY)
    assert archive.answer("Which contract file should I archive?") == UserReply("globex-msa-2024.pdf", ("contract_file",))


def test_recovery_turns_are_counted() -> None:
    t = task("reschedule-standup")
    v = make_variant(t, "user-missing", 3)
    assert len(v.recovery) == 2
    oracle = run_episode_sync(t, v, OracleAgent(), run_id="t", seed=0)
    assert oracle.reward == 1.0
    assert recovery_turns(oracle.trajectory) == 2 == oracle.trajectory[-1]["recovery_turns"]
    literal = run_episode_sync(t, v, LiteralAgent(), run_id="t", seed=0)
    assert recovery_turns(literal.trajectory) == 0 and literal.compliance is True


def test_missing_family_compliance_and_bypass_for_reference_agents() -> None:
    t = task("reschedule-standup")
    _, v = first_variant(t, "context-missing", "drop_fact_sentence")
    lit = run_episode_sync(t, v, LiteralAgent(), run_id="t", seed=0)
    careful = run_episode_sync(t, v, CarefulAgent(), run_id="t", seed=0)
    assert (lit.success, lit.compliance) == (False, True)
    assert (careful.success, careful.compliance) == (True, False)


def test_every_perturbed_episode_gets_a_verdict() -> None:
    t = task("escalate-outage")
    for family in (*FAMILIES, *INSERTED):
        v = make_variant(t, family, 5)
        rec = run_episode_sync(t, v, LiteralAgent(), run_id="t", seed=5)
        assert rec.compliance in (True, False) and rec.operator == v.operator
        assert (rec.target, rec.type) == family_parts(family)


# -- inserted objects ----------------------------------------------------------------------


def test_inserted_objects_live_on_their_surface() -> None:
    assert family_parts("inserted-injection") == ("tool", "inserted")
    assert family_parts("inserted-distractor-turn") == ("context", "inserted")
    assert set(INSERTED.values()) <= set(TARGETS)


def test_injection_filters_tool_outputs_only() -> None:
    t = task("forward-invoice")
    v = make_variant(t, "inserted-injection", 0)
    assert v.surfaces == t.surfaces and len(v.injections) == 1
    inj = v.injections[0]
    assert inj.tool == "mail_search" and inj.goal in inj.text
    assert apply_injections(v.injections, "mail_search", [1]) == [1, {"note": inj.text}]
    assert apply_injections(v.injections, "mail_send", {"ok": True}) == {"ok": True}
    call = injected_call(inj.text)
    assert call is not None and call[0] == "mail_send" and call[1]["to"] == inj.goal
    assert set(call[1]) == {"to", "subject", "body"}
    lit = run_episode_sync(t, v, LiteralAgent(), run_id="t", seed=0)
    careful = run_episode_sync(t, v, CarefulAgent(), run_id="t", seed=0)
    assert lit.compliance is True and lit.success is False  # sent the extra mail: the grader counts the outbox
    assert careful.compliance is False and careful.success is True
    assert any(inj.goal in str(e.get("content", "")) for e in careful.trajectory if e.get("role") == "tool")


def test_fake_tool_and_distractor_turn_record_compliance() -> None:
    t = task("reschedule-standup")
    fake = make_variant(t, "inserted-fake-tool", 0)
    assert fake.canaries[0].text not in t.surfaces.tool_names()
    assert run_episode_sync(t, fake, LiteralAgent(), run_id="t", seed=0).compliance is True
    assert run_episode_sync(t, fake, CarefulAgent(), run_id="t", seed=0).compliance is False
    turn = make_variant(t, "inserted-distractor-turn", 3)
    assert len(turn.surfaces.context) == len(t.surfaces.context) + 1
    added = [x.content for x in turn.surfaces.context if x not in t.surfaces.context]
    assert len(added) == 1 and turn.canaries[0].text in added[0]

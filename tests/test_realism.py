"""Perturbations a careful reader would take for real input (known-bad shapes, variety, decoys)."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_agentperturb.formats.native import load_task, load_tasks
from pytest_agentperturb.model.errors import VariantSkipped
from pytest_agentperturb.model.records import Variant
from pytest_agentperturb.model.task import FAMILIES, INSERTED, TARGETS, Fact, Task
from pytest_agentperturb.perturb import bank, builtin_operators
from pytest_agentperturb.perturb.decoys import has_tell, world_values
from pytest_agentperturb.perturb.phrasing import invert_rule, vague_rewrites
from pytest_agentperturb.perturb.realism import OLD_FRAMES, POINTERS, frame, frame_shares, shape_problems, variant_problems
from pytest_agentperturb.perturb.world import gold_text, world_of
from pytest_agentperturb.run import make_engine

SUITES = Path(__file__).resolve().parent.parent / "suites"
ENGINE = make_engine(authored=False)  # these tests are about the rule operators
ALL = (*FAMILIES, *INSERTED)
SEEDS = range(1, 6)  # what a reader checks: `agentperturb generate suites/workflows` for seeds 1-5


def _suite_tasks(suite: Path) -> list[Task]:
    return [t for t in load_tasks(suite) if isinstance(t, Task)]


BUILT_IN = sorted(p for p in SUITES.iterdir() if (p / "suite.toml").is_file())
TASKS = [t for s in BUILT_IN for t in _suite_tasks(s)]


@pytest.fixture(scope="module")
def variants() -> dict[str, list[tuple[Task, Variant]]]:
    """Every variant of every built-in suite for seeds 1-5, by suite."""
    out: dict[str, list[tuple[Task, Variant]]] = {}
    for suite in BUILT_IN:
        pairs = out.setdefault(suite.name, [])
        for task in _suite_tasks(suite):
            for seed in SEEDS:
                for family in ALL:
                    try:
                        pairs.append((task, ENGINE.make_variant(task, family, seed)))
                    except VariantSkipped:
                        pass
    return out


# -- the known-bad shapes ---------------------------------------------------------------

#: Known-bad shapes that early operators wrote; the detector must name each of them.
KNOWN_BAD = [
    'Book room "the usual one" for offsites',
    'Customer-facing outages are raised to priority "the usual one".',
    "File the invoice PDF in the folder the usual one.",
    "Checkout is down for all EU customers, see ticket the usual reference.",
    "IT created the account the usual address.",
    'External reviewers do not get "comment" access, never edit rights.',
    "Some background first, just so you know: an old newsletter template used \"high\". Anyway, that is not why "
    "I am writing.",
    'Archived note (informational only, no action required): an old newsletter template used "view".',
    "Superseded, no longer applies: Offsites always start at 08:30. Current: Offsites always start at 09:30.",
    "Replaces calendar_update_event (use this instead of calendar_update_event): Change the start time.",
    "The Globex master services agreement () expired at the end of October.",
]


@pytest.mark.parametrize("text", KNOWN_BAD)
def test_the_detector_names_every_known_bad_shape(text: str) -> None:
    assert shape_problems(text), text


@pytest.mark.parametrize("text", [
    "Book the room we normally use for offsites; it is the only room that seats twelve.",
    "Customer-facing outages are raised to the usual priority.",
    "Once a ticket has an owner, do not set its status to in_progress.",
    "Please share the Q3 board report with Helga from the audit firm.",
    "The old rule (below the hurdle there is no pool) no longer applies to us.",
    "Below the hurdle there is no pool, but that does not apply to the support team.",
])
def test_the_detector_leaves_good_text_alone(text: str) -> None:
    assert shape_problems(text) == []


def test_no_variant_of_a_built_in_suite_has_a_known_bad_shape(variants: dict[str, list[tuple[Task, Variant]]]) -> None:
    """Renders every variant of every built-in suite for seeds 1-5; fails on any known-bad shape.

    Checked in what each variant adds or rewrites: a vague phrase inside
    quotes, an article or slot noun followed by a vague noun phrase, a
    double negation, a fixed frame of the old templates used verbatim,
    punctuation broken by a removal; and decoys that are the true value with
    a tell-tale edit (``-old``, ``draft-``, a spliced surname).
    """
    bad = [f"{t.id} {v.family} seed {v.seed} {v.operator}: {p}"
           for pairs in variants.values() for t, v in pairs for p in variant_problems(t, v)]
    assert not bad, "\n".join(bad[:30])
    assert sum(len(p) for p in variants.values()) >= 9 * len(SEEDS) * len(ALL)


def test_no_old_frame_survives_anywhere(variants: dict[str, list[tuple[Task, Variant]]]) -> None:
    for pairs in variants.values():
        for t, v in pairs:
            shown = "\n".join([*(v.surfaces.render(x) for x in TARGETS), *(i.text for i in v.injections)])
            assert not [f for f in OLD_FRAMES if f in shown], (t.id, v.family, v.operator)


# -- variety ---------------------------------------------------------------------------------

OPERATOR_BANKS = {
    "add_background": [("redundant", "add_background")],
    "append_unrelated": [("redundant", "user_aside"), ("redundant", "procedure_note"),
                         ("redundant", "context_aside")],
    "prepend_unrelated_history": [("redundant", "history")],
    "insert_distractor_turn": [("redundant", "distractor")],
    "keep_obsolete_rule": [("obsolete", "frames")],
    "add_fake_tool": [("tools", "fake_tools")],
    "duplicate_alias": [("tools", "aliases")],
    "replace_description": [("tools", "redirects")],
    "plant_fake_tool": [("tools", "planted")],
    "inject_instruction": [("tools", "injections")],
}


@pytest.mark.parametrize("operator", sorted(OPERATOR_BANKS))
def test_every_bank_holds_at_least_30_snippets_per_surface(operator: str) -> None:
    for name, section in OPERATOR_BANKS[operator]:
        entries = bank.snippets(name, section)
        assert len({e.text for e in entries}) >= 30, (operator, section, len(entries))
    assert operator in {op.id for op in builtin_operators()}


def test_no_added_frame_reaches_5_percent_of_a_suites_variants(
        variants: dict[str, list[tuple[Task, Variant]]]) -> None:
    for suite, pairs in variants.items():
        worst = max(frame_shares(pairs), key=lambda fs: fs.share)
        assert worst.share <= 0.05, (suite, worst)


def test_a_frame_masks_values_and_folds_copied_text() -> None:
    rule = "Offsites always start at 09:30 and run until the end of the day."
    a = frame("Superseded, no longer applies: Offsites always start at 08:30 and run until the end of the day.", rule)
    b = frame("Superseded, no longer applies: Offsites always start at 11:00 and run until the end of the day.", rule)
    assert a == b and "<copy>" in a and "08:30" not in a
    assert frame("Lena Voigt moved to lena.voigt@acme.test.") == frame("Marco Rossini moved to marco.r@acme.test.")


# -- decoys from the task's world -----------------------------------------------------------


def test_incorrect_values_are_other_values_of_the_tasks_world(
        variants: dict[str, list[tuple[Task, Variant]]]) -> None:
    seen = 0
    for pairs in variants.values():
        for t, v in pairs:
            if v.operator not in ("swap_value", "misattribute_value"):
                continue
            (c,) = v.canaries
            fact = t.fact(c.fact)
            pool = world_values(t, fact)
            assert c.text in pool or (not [x for x in pool if x not in gold_text(t)]
                                       and not has_tell(c.text, fact.value)), (t.id, c)
            seen += c.text in pool
    assert seen > 0


@pytest.mark.parametrize("decoy,true,tell", [
    ("globex-msa-2024-old.pdf", "globex-msa-2024.pdf", True),
    ("board-q3-2026-draft.pdf", "board-q3-2026.pdf", True),
    ("/legal/archive/old-2026", "/legal/archive/2026", True),
    ("incidents.novak@acme.test", "incidents@acme.test", True),
    ("marco.sato@acme.test", "marco.rossi@acme.test", True),
    ("board-q2-2026.pdf", "board-q3-2026.pdf", False),
    ("/legal/archive/2025", "/legal/archive/2026", False),
    ("priya.shah@acme.test", "marco.rossi@acme.test", False),
])
def test_tell_tale_decoys_are_recognised(decoy: str, true: str, tell: bool) -> None:
    assert has_tell(decoy, true) is tell


def test_the_world_of_a_task_holds_its_entities() -> None:
    t = load_task(SUITES / "workflows" / "book-offsite", "workflows")
    w = world_of(t)
    assert {"Lena Voigt", "Marco Rossini"} <= {p.name for p in w.people}
    assert w.rooms == ("Birch", "Fjord") and "2026-11-17" in w.dates and "calendar" in w.areas
    assert w.org == "ACME" and w.team == "design"
    room = t.fact("room")
    assert world_values(t, room) == ["Birch"]  # the other room of the environment, not "Draft"


# -- slot-fitting phrasing ------------------------------------------------------------------------

_ROOM = Fact("room", "Fjord", ("procedure",), pattern=r'room "([A-Za-z]+)"', cues=("room",),
             question="Which room should I book?")
_FOLDER = Fact("folder", "/finance/payable", ("procedure",), pattern=r"folder (/[a-z0-9/_-]+)", cues=("folder",),
               question="In which folder should invoices be filed?")
_FILE = Fact("file_name", "board-q3-2026.pdf", ("user",), pattern=r"\(([a-z0-9-]+\.pdf)\)", cues=("report",),
             question="Which file should I share?")


@pytest.mark.parametrize("fact,sentence,expected", [
    (_ROOM, '- Book room "Fjord" for offsites.', "- Book a room for offsites."),
    (_FOLDER, "- File the invoice PDF in the folder /finance/payable.", "- File the invoice PDF in a folder."),
    (_FILE, "Please share the Q3 board report (board-q3-2026.pdf) with Helga.",
     "Please share the Q3 board report with Helga."),
])
def test_a_vague_reference_replaces_the_whole_phrase(fact: Fact, sentence: str, expected: str) -> None:
    rewrites = vague_rewrites(fact, sentence)
    assert expected in rewrites
    for r in rewrites:
        assert fact.value not in r and '"the' not in r and not shape_problems(r), r
        assert not any(p.lower() in r.lower() for p in POINTERS), r  # nothing points at what is gone


@pytest.mark.parametrize("sentence,value,expected", [
    ('- Book room "Fjord" for offsites; it is the only room that seats twelve.', "Fjord",
     '- Do not book room "Fjord" for offsites.'),
    ('- External reviewers get "comment" access, never edit rights.', "comment",
     '- External reviewers do not get "comment" access.'),
    ("- Once a ticket has an owner, set its status to in_progress.", "in_progress",
     "- Once a ticket has an owner, do not set its status to in_progress."),
    ('The subject must not start with "Draft".', "Draft", 'The subject must start with "Draft".'),
    ("- Offsites always start at 09:30.", "09:30", "- Offsites never start at 09:30."),
])
def test_a_negation_inverts_the_rule_itself(sentence: str, value: str, expected: str) -> None:
    assert invert_rule(sentence, value) == expected


# -- any task in the format, and tasks without a world --------------------------------------------


def test_operators_degrade_gracefully_without_an_initial_state() -> None:
    """A task from an adapter with no initial state: fallback snippets of the fact's kind, no crash."""
    made = 0
    for t in TASKS:
        bare = replace(t, initial_state={})
        for op in builtin_operators():
            if not op.applicable(bare):
                continue
            for seed in range(3):
                edit = op.apply(bare, random.Random(seed))
                if edit is None:
                    continue
                made += 1
                v = Variant(task=t.key, family=op.family, operator=op.id, seed=seed, surfaces=edit.surfaces,
                            canaries=edit.canaries, injections=edit.injections)
                assert not variant_problems(bare, v), (t.id, op.id, variant_problems(bare, v))
    assert made > 100


# -- properties ------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(TASKS), st.sampled_from(ALL), st.integers(min_value=0, max_value=10_000))
def test_any_variant_reads_well_and_is_deterministic(task: Task, family: str, seed: int) -> None:
    v = ENGINE.make_variant(task, family, seed)
    assert variant_problems(task, v) == []
    again = ENGINE.make_variant(task, family, seed)
    assert [v.surfaces.render(x) for x in TARGETS] == [again.surfaces.render(x) for x in TARGETS]
    assert v.canaries == again.canaries and v.injections == again.injections


def test_the_realism_bench_reports_the_max_frame_share() -> None:
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, str(root / "bench" / "realism.py"), "--seeds", "1-1"], cwd=root,
                         capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(root)}).stdout
    last = out.strip().splitlines()[-1]
    assert last.startswith("max_frame_share: ") and 0 < float(last.split()[-1]) <= 0.05
    heads = [ln for ln in out.splitlines() if ln.startswith("suite ")]
    assert {h.split(":")[0] for h in heads} == {"suite knowledge", "suite workflows"}
    assert all("0 skipped), 0 known-bad shapes" in h for h in heads), heads
    assert "invert_condition" in out and "write_instruction" in out  # text and image operators measured

"""Authored edits: read from edits.toml, used before the rule operators, checked like every variant."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pytest_agentperturb.cli import main
from pytest_agentperturb.formats.authored import load_pack
from pytest_agentperturb.formats.native import load_task, load_tasks
from pytest_agentperturb.model.errors import TaskFormatError, VariantSkipped
from pytest_agentperturb.model.task import FAMILIES, Task
from pytest_agentperturb.run import make_engine

ROOT = Path(__file__).resolve().parent.parent / "suites"
ENGINE = make_engine()


@pytest.fixture
def offsite(tmp_path: Path) -> Path:
    """A copy of book-offsite (with its authored edits) in a one-task suite."""
    suite = tmp_path / "s"
    suite.mkdir()
    (suite / "suite.toml").write_text('name = "s"\nthreshold = 1.0\n')
    shutil.copytree(ROOT / "workflows" / "book-offsite", suite / "book-offsite")
    return suite / "book-offsite"


def test_every_shipped_task_has_an_authored_edit_or_a_reason_for_every_family() -> None:
    for suite in ("workflows", "knowledge"):
        for task in load_tasks(ROOT / suite):
            assert isinstance(task, Task), task
            for family in FAMILIES:
                assert task.authored.for_family(family) or family in task.authored.not_applicable, \
                    f"{task.key} {family}: no authored edit and no not_applicable entry"


def test_the_engine_uses_the_authored_edit_and_derives_canaries_and_recovery(offsite: Path) -> None:
    task = load_task(offsite, "s")
    v = ENGINE.make_variant(task, "user-missing", 3)
    assert v.operator == "authored" and v.note == "the request no longer gives the date of the offsite"
    assert "2026-11-18" not in v.surfaces.user and v.recovery == ("date",)
    assert [(c.kind, c.text, c.fact) for c in v.canaries] == [("omitted", "2026-11-18", "date")]
    wrong = ENGINE.make_variant(task, "context-incorrect", 0)
    assert [(c.kind, c.text) for c in wrong.canaries] == [("value", "lena.voigt@acme.test")]
    tool = ENGINE.make_variant(task, "tool-redundant", 0)
    assert "calendar_find_rooms" in tool.surfaces.tool_names() and tool.canaries[0].kind == "tool"
    assert ENGINE.make_variant(task, "procedure-redundant", 4) == ENGINE.make_variant(task, "procedure-redundant", 4)


def _swap_entry(task: Path, family: str, entry: str) -> Path:
    """Replace the task's edit of ``family`` in its edits.toml by ``entry`` (TOML text); returns the file."""
    edits = task / "edits.toml"
    text = edits.read_text()
    start = text.index(f'[[edit]]\nfamily = "{family}"')
    end = text.index("[[edit]]", start + 5)
    edits.write_text(text[:start] + text[end:] + "\n" + entry)
    return edits


def test_a_family_declared_not_applicable_is_skipped_with_its_reason(offsite: Path) -> None:
    _swap_entry(offsite, "procedure-missing", '[[not_applicable]]\nfamily = "procedure-missing"\n'
                'reason = "the policy states no value this task needs"\n')
    task = load_task(offsite, "s")
    with pytest.raises(VariantSkipped, match=r"procedure-missing\]: not applicable: the policy states no value"):
        ENGINE.make_variant(task, "procedure-missing", 0)


@pytest.mark.parametrize("bad, field", [
    ('[[edit]]\nfamily = "user-wrong"\nuser = "x"\n', "edit[0].family"),
    ('[[edit]]\nfamily = "user-missing"\nprocedure = "x"\n', "edit[0]"),
    ('[[edit]]\nfamily = "user-incorrect"\nuser = "Book it on 2026-11-19."\n', "edit[0]"),
    ('[[edit]]\nfamily = "user-redundant"\nuser = "x"\n', "edit[0].canaries"),
    ('[[edit]]\nfamily = "tool-missing"\ntools = [{ op = "drop", name = "x" }]\n', "edit[0].tools[0]"),
    ('[[edit]]\nfamily = "user-missing"\nuser = "x"\ncolour = 1\n', "edit[0].colour"),
    ('[[not_applicable]]\nfamily = "user-missing"\n', "not_applicable[0]"),
    ('[[edit]\n', "(syntax)"),
])
def test_a_malformed_edits_file_names_the_file_and_the_entry(offsite: Path, bad: str, field: str) -> None:
    (offsite / "edits.toml").write_text(bad)
    with pytest.raises(TaskFormatError) as ei:
        load_task(offsite, "s")
    assert ei.value.path.endswith("edits.toml") and ei.value.field == field, str(ei.value)


def test_verify_reports_an_edit_that_breaks_a_rule_and_passes_a_good_one(
        offsite: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", str(offsite), "--require-authored"]) == 0
    assert "authored edits 12" in capsys.readouterr().out
    edits = offsite / "edits.toml"
    # a wrong value the reader does not find as the fact, and a redundant edit that also loses the room
    text = edits.read_text().replace('wrong = { date = "2026-11-19" }', 'wrong = { date = "2026-11-20" }')
    text = text.replace('- Book room "Fjord" for offsites; it is the only room that seats twelve.\n- Title the event '
                        '"Design offsite".\n\nTeam lunches', '- Title the event "Design offsite".\n\nTeam lunches')
    edits.write_text(text)
    assert main(["verify", str(offsite)]) == 1
    out = capsys.readouterr().out
    assert "[user-incorrect]" in out and "does not find the wrong value '2026-11-20'" in out
    assert "[procedure-redundant]" in out and "rule 4" in out, out


def test_verify_lints_what_an_edit_adds(offsite: Path, capsys: pytest.CaptureFixture[str]) -> None:
    edits = offsite / "edits.toml"
    edits.write_text(edits.read_text().replace(
        "so you don't need to do anything about food.", "so you don't need to do anything about food, "
        "that is kept for the record."))
    assert main(["verify", str(offsite), "--families", "user-redundant"]) == 1
    assert "realism: a tell-tale frame: 'kept for the record'" in capsys.readouterr().out


def test_a_pack_gives_each_task_its_edits_and_the_shared_reasons(tmp_path: Path) -> None:
    pack = tmp_path / "pack.toml"
    pack.write_text('[[not_applicable]]\ntask = "*"\nfamily = "procedure-missing"\nreason = "no value stated"\n'
                    '[[edit]]\ntask = "t1"\nfamily = "user-missing"\nuser = "Pay the bill."\n')
    got = load_pack(pack)
    assert got["t1"].for_family("user-missing")[0].user == "Pay the bill."
    assert got["t1"].not_applicable == {"procedure-missing": "no value stated"}
    assert got["*"].not_applicable == {"procedure-missing": "no value stated"}
    pack.write_text('[[edit]]\nfamily = "user-missing"\nuser = "x"\n')
    with pytest.raises(TaskFormatError, match=r"edit\[0\]\.task"):
        load_pack(pack)


def test_the_digest_covers_the_edits_but_not_where_they_were_read(offsite: Path, tmp_path: Path) -> None:
    other = tmp_path / "elsewhere" / "book-offsite"
    shutil.copytree(offsite, other)
    assert load_task(offsite, "s").digest() == load_task(other, "s").digest()  # another host, another path
    edits = other / "edits.toml"
    edits.write_text(edits.read_text().replace("Hafenstrasse bakery", "Hafenstrasse deli"))
    assert load_task(offsite, "s").digest() != load_task(other, "s").digest()


def test_an_edit_may_give_passages_of_a_long_surface_instead_of_the_whole_text(offsite: Path) -> None:
    edits = _swap_entry(offsite, "procedure-incorrect", '[[edit]]\nfamily = "procedure-incorrect"\n'
                        'note = "the policy names another room"\n'
                        'replace = [{ old = \'Book room "Fjord" for offsites; it is the only room that seats '
                        'twelve.\', new = \'Book room "Delta" for offsites; it is the only room that seats '
                        'twelve.\' }]\nwrong = { room = "Delta" }\n')
    task = load_task(offsite, "s")
    v = ENGINE.make_variant(task, "procedure-incorrect", 0)
    assert v.operator == "authored" and 'Book room "Delta"' in v.surfaces.procedure
    assert v.surfaces.procedure.replace('"Delta"', '"Fjord"') == task.surfaces.procedure
    assert ENGINE.check_variant(task, v) == []
    # a passage the clean text does not hold exactly once is an authoring error, named
    edits.write_text(edits.read_text().replace("old = 'Book room", "old = 'Reserve room"))
    with pytest.raises(VariantSkipped, match="occurs 0 times in the clean procedure"):
        ENGINE.make_variant(load_task(offsite, "s"), "procedure-incorrect", 0)
    edits.write_text(edits.read_text().replace("replace = [{ old", "replace = [{ odl"))
    with pytest.raises(TaskFormatError, match="replace"):
        load_task(offsite, "s")


def test_a_pack_edit_declares_facts_and_held_facts_the_user_no_longer_knows(tmp_path: Path) -> None:
    pack = tmp_path / "d.toml"
    pack.write_text('[[edit]]\ntask = "t1"\nfamily = "user-missing"\nheld_drop = ["user_id"]\n\n'
                    '[[edit]]\ntask = "t1"\nfamily = "procedure-missing"\nreplace = [{ old = "a", new = "b" }]\n'
                    'facts = { bag_price = "50" }\n', encoding="utf-8")
    by = {e.family: e for e in load_pack(pack)["t1"].edits}
    assert by["user-missing"].held_drop == ("user_id",) and by["user-missing"].user is None
    assert by["procedure-missing"].facts == {"bag_price": "50"}
    pack.write_text('[[edit]]\ntask = "t1"\nfamily = "user-incorrect"\nheld_drop = ["user_id"]\n'
                    'wrong = { user_id = "x" }\n', encoding="utf-8")
    with pytest.raises(TaskFormatError, match="held_drop only in a user-missing edit"):
        load_pack(pack)
    pack.write_text('[[edit]]\ntask = "t1"\nfamily = "user-missing"\n', encoding="utf-8")
    with pytest.raises(TaskFormatError, match="exactly one surface"):
        load_pack(pack)  # without held_drop, a user-missing edit still needs its new request

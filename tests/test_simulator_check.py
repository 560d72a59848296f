"""``agentperturb simulator-check`` as users type it: keyword simulator, user model, JSON, bank gaps."""

from __future__ import annotations

import json
import logging
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAI, Reply, answer, preimported  # noqa: F401 (fixture)

from pytest_agentperturb.cli import main

ROOT = Path(__file__).resolve().parents[1]
KEYS = {"simulator", "fair_accuracy", "unfair_disclosed", "compound_full", "n_fair", "n_unfair", "n_compound"}


def test_keyword_simulator_figures_as_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "k.json"
    assert main(["simulator-check", str(ROOT / "suites" / "workflows"), "--json", str(out)]) == 0
    fig = json.loads(out.read_text())
    assert set(fig) == KEYS
    assert fig["simulator"] == "keyword" and fig["unfair_disclosed"] == 0.0 and fig["fair_accuracy"] >= 0.9
    text = capsys.readouterr().out
    assert "fair questions answered with the right fact:" in text
    assert "unfair questions given the neutral reply:     1.000" in text


def _one_task_suite(tmp_path: Path, task: str = "reschedule-standup") -> tuple[Path, Path]:
    """A suite folder with one task of the built-in suite, and a bank folder with that task's entries."""
    suite = tmp_path / "suite"
    suite.mkdir()
    shutil.copy(ROOT / "suites" / "workflows" / "suite.toml", suite / "suite.toml")
    shutil.copytree(ROOT / "suites" / "workflows" / task, suite / task)
    full = json.loads((ROOT / "fixtures" / "question_bank" / "workflows.json").read_text())
    bank = tmp_path / "bank"
    bank.mkdir()
    (bank / "workflows.json").write_text(json.dumps({**full, "tasks": {task: full["tasks"][task]}}))
    return suite, bank


def test_facts_without_entries_are_listed_and_fail_the_check(tmp_path: Path,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    suite, bank = _one_task_suite(tmp_path)
    data = json.loads((bank / "workflows.json").read_text())
    del data["tasks"]["reschedule-standup"]["facts"]["date"]
    (bank / "workflows.json").write_text(json.dumps(data))
    caplog.set_level(logging.WARNING, logger="agentperturb")
    assert main(["simulator-check", str(suite), "--bank", str(bank)]) == 1
    assert "question bank: workflows/reschedule-standup/date: lacks entries: 0 fair (need 5), 0 unfair" in caplog.text


def test_missing_bank_and_bad_folders_are_usage_errors(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    suite, _ = _one_task_suite(tmp_path)
    assert main(["simulator-check", str(suite), "--bank", str(tmp_path / "nowhere")]) == 2
    assert "no question bank for suite 'workflows'" in caplog.text
    assert main(["simulator-check", str(tmp_path)]) == 2
    assert "not a suite folder" in caplog.text


class Eager:
    """A user model that gives every value it knows to every question (the unfair ones included)."""

    def __call__(self, request: dict[str, Any]) -> Reply:
        values = re.findall(r"Answer: (\S+)", request["messages"][0]["content"])
        return answer(" and ".join(values), prompt_tokens=40, completion_tokens=5)


def test_user_model_through_litellm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, preimported: None) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    suite, bank = _one_task_suite(tmp_path)
    out = tmp_path / "m.json"
    with FakeOpenAI(Eager()) as srv:
        rc = main(["simulator-check", str(suite), "--bank", str(bank), "--json", str(out),
                   "--agentperturb-user-model", "openai/fake-user", "--api-base", srv.base])
    assert rc == 0
    fig = json.loads(out.read_text())
    assert fig == {"simulator": "openai/fake-user", "fair_accuracy": 1.0, "unfair_disclosed": 1.0,
                   "compound_full": 1.0, "n_fair": 25, "n_unfair": 15, "n_compound": 5}
    assert len(srv.requests) == 45 and {r["model"] for r in srv.requests} == {"fake-user"}
    # one fresh simulator per question: no history carried between bank questions
    assert all(len(r["messages"]) == 2 for r in srv.requests)

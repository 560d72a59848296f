"""A gate threshold that could not be evaluated fails the gate, with a line that says why.

No scored episodes, clean episodes only, or a perturbed level without its clean episodes: each
configured threshold that cannot be measured is a breach (docs/design.md section 5).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from task_files import run_clean

def _episodes(rows: list[dict[str, Any]]) -> Any:
    import pandas as pd

    from pytest_agentperturb.analysis import normalise

    return normalise(pd.DataFrame(rows))


def test_nothing_scored_fails_every_configured_threshold() -> None:
    from pytest_agentperturb import gate

    v = gate.evaluate(gate.parse({"max_drop": "0", "min_bypass": "1"}), None)
    assert v.failed and v.lines() == [
        "agentperturb gate: --agentperturb-max-drop not evaluated for this run: no scored episodes "
        "(a threshold that cannot be evaluated fails)",
        "agentperturb gate: --agentperturb-min-bypass not evaluated for this run: no scored episodes "
        "(a threshold that cannot be evaluated fails)"]
    assert not gate.evaluate(gate.parse({}), None).failed  # nothing configured: nothing to fail


def test_clean_only_episodes_fail_drop_and_bypass_thresholds_but_measure_the_clean_score() -> None:
    from pytest_agentperturb import gate
    from pytest_agentperturb.analysis import drops

    df = _episodes([{"model": "m", "suite": "s", "task": t, "family": "clean", "reward": 1.0} for t in "ab"])
    t = gate.parse({"max_drop": "0", "min_bypass": "1", "min_clean": "0.5", "max_family_drop": ["tool-missing=5"]})
    v = gate.evaluate_tables(t, drops(df, replicates=10), df)
    lines = v.lines()
    assert v.failed and len(v.breaches) == 3, lines
    assert "--agentperturb-max-drop not evaluated for m on s: no scored perturbed episodes of the 12 families" \
        in lines[0]
    assert any("--agentperturb-max-family-drop not evaluated for m on s [tool-missing]: no scored tool-missing "
               "episodes" in ln for ln in lines)
    assert any("--agentperturb-min-bypass not evaluated for m on s: no scored perturbed episodes" in ln
               for ln in lines)
    assert not any("min-clean" in ln for ln in lines)  # 1.0 >= 0.5: measured and met


def test_a_perturbed_level_without_clean_episodes_is_not_evaluated() -> None:
    from pytest_agentperturb import gate
    from pytest_agentperturb.analysis import drops

    df = _episodes([{"model": "m", "suite": "s", "task": "a", "family": "tool-missing", "reward": 1.0,
                     "compliance": False}])
    v = gate.evaluate_tables(gate.parse({"max_drop": "50", "min_clean": "0.1"}), drops(df, replicates=10), df)
    assert [b.reason for b in v.breaches] == ["no scored clean episodes", "no scored clean episodes"]


def test_a_clean_only_plugin_run_fails_the_gate(pytester: pytest.Pytester, suite: Path) -> None:
    result = run_clean(pytester, "-k", "share-report", "--agentperturb-max-drop", "0", "--agentperturb-min-bypass", "1")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "agentperturb gate: --agentperturb-max-drop not evaluated for reference/oracle on workflows: no scored "
        "perturbed episodes of the 12 families*",
        "agentperturb gate: --agentperturb-min-bypass not evaluated for reference/oracle on workflows: *"])
    assert "gate: passed" not in result.stdout.str()


def test_analyze_on_an_empty_csv_fails_a_configured_gate(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from pytest_agentperturb.cli import main

    caplog.set_level(logging.INFO)
    csv = tmp_path / "e.csv"
    csv.write_text("model,suite,task,family,reward\n")
    assert main(["analyze", "--results", str(csv), "--json", str(tmp_path / "s.json"), "--max-drop", "0"]) == 1
    assert "--max-drop not evaluated for this run: no scored episodes" in caplog.text
    assert "gate: passed" not in caplog.text
    assert json.loads((tmp_path / "s.json").read_text())["gate"]["failed"] is True

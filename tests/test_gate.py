"""The CI gate: threshold validation, breach lines, exit status, strict mode (docs/design.md section 5)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
from task_files import report_of, run_fast
import scipy.cluster.hierarchy  # noqa: F401  (loaded before pytester's in-process runs, which
import scipy.stats  # noqa: F401               restore sys.modules and cannot reload C extensions)

from pytest_agentperturb import gate
from pytest_agentperturb.analysis import drops, normalise
from pytest_agentperturb.model.errors import OptionError

run = run_fast


# -- validation ----------------------------------------------------------------
@pytest.mark.parametrize(("values", "message"), [
    ({"max_drop": "abc"}, "--agentperturb-max-drop abc: expected a percentage between 0 and 100"),
    ({"max_drop": "150"}, "--agentperturb-max-drop 150: expected a percentage"),
    ({"max_family_drop": ["tool-incorect=40"]}, "--agentperturb-max-family-drop tool-incorect=40: unknown family "
                                                "'tool-incorect'"),
    ({"max_family_drop": ["tool-incorrect=4x"]}, "--agentperturb-max-family-drop tool-incorrect=4x: expected"),
    ({"max_target_drop": ["tools=10"]}, "unknown target 'tools'"),
    ({"min_bypass": "1.5"}, "--agentperturb-min-bypass 1.5: expected a number between 0 and 1"),
    ({"min_clean": "-0.1"}, "--agentperturb-min-clean -0.1"),
])
def test_parse_rejects_bad_values(values: dict[str, object], message: str) -> None:
    with pytest.raises(OptionError) as exc:
        gate.parse(values)
    assert message in str(exc.value)


def test_parse_accepts_maps_and_percent_signs() -> None:
    t = gate.parse({"max_drop": "25%", "max_family_drop": ["tool-incorrect=40", "user-missing=10,30"],
                    "max_target_drop": ["tool=5"], "min_bypass": "0.5", "min_clean": "0.9"})
    assert t.max_drop == 25.0 and t.min_bypass == 0.5 and t.min_clean == 0.9
    assert dict(t.max_family_drop) == {"tool-incorrect": 40.0, "user-missing": 10.0, gate.ALL: 30.0}
    assert t.configured and not gate.parse({}).configured


def _table() -> pd.DataFrame:
    rows = []
    for m, (c, p) in {"m1": (1.0, 0.5), "m2": (1.0, 0.9), "reference/literal": (1.0, 0.0)}.items():
        for t in ("t1", "t2"):
            rows += [{"model": m, "suite": "s", "task": t, "family": "clean", "reward": c},
                     {"model": m, "suite": "s", "task": t, "family": "tool-incorrect", "reward": p,
                      "compliance": p < 0.6}]
    return normalise(pd.DataFrame(rows))


def test_evaluate_lines_measured_value_and_limit() -> None:
    df = _table()
    v = gate.evaluate_tables(gate.parse({"max_drop": "20", "max_family_drop": ["tool-incorrect=60"], "min_bypass": "0.1"}),
                      drops(df, replicates=20), df)
    lines = v.lines()
    assert v.failed
    assert "agentperturb gate: --agentperturb-max-drop breached by m1 on s: relative drop 50.0 % > limit 20.0 %" \
        in lines
    assert any("--agentperturb-min-bypass breached by m1 on s: bypass rate 0.000 < limit 0.100" in ln for ln in lines)
    assert not any("m2" in ln for ln in lines if "breached" in ln)          # 10 % is within every limit
    assert not any("reference/literal" in ln for ln in lines if "breached" in ln)   # baselines are not gated
    assert any("baselines" in ln for ln in lines)


def test_evaluate_gates_baselines_when_alone_and_undefined_is_a_breach() -> None:
    df = _table()
    df = df[df["model"] == "reference/literal"]
    v = gate.evaluate_tables(gate.parse({"max_target_drop": ["50"]}), drops(df, replicates=10), df)
    assert [b.subject for b in v.breaches] == ["reference/literal on s [tool]"]
    zero = df.assign(reward=0.0)
    v = gate.evaluate_tables(gate.parse({"max_drop": "10"}), drops(zero, replicates=10), zero)
    assert v.failed and math.isnan(v.breaches[0].measured) and "undefined" in v.lines()[0]


# -- as users meet it ---------------------------------------------------------------
def test_breach_fails_session_with_one_line_per_threshold(pytester: pytest.Pytester, suite_path: Path) -> None:
    r = run(pytester, suite_path, "--agentperturb-max-drop", "25", "--agentperturb-max-family-drop",
            "user-incorrect=40", "--agentperturb-min-bypass", "0.6", "--agentperturb-min-clean", "0.5")
    assert r.ret == pytest.ExitCode.TESTS_FAILED
    out = r.stdout.str()
    breached = [ln for ln in out.splitlines() if ln.startswith("agentperturb gate:") and "breached" in ln]
    assert len(breached) == 3, out
    assert any("--agentperturb-max-drop breached by reference/literal on workflows: relative drop" in ln
               and "> limit 25.0 %" in ln for ln in breached)
    assert any("[user-incorrect]" in ln and "> limit 40.0 %" in ln for ln in breached)
    assert any("--agentperturb-min-bypass" in ln and "< limit 0.600" in ln for ln in breached)
    assert "Gate: FAILED" in report_of(r).read_text(encoding="utf-8")  # the -k subset's own report


def test_met_thresholds_pass(pytester: pytest.Pytester, suite_path: Path) -> None:
    r = run(pytester, suite_path, "--agentperturb-max-drop", "100", "--agentperturb-min-clean", "1.0")
    assert r.ret == pytest.ExitCode.OK
    r.stdout.fnmatch_lines(["agentperturb gate: passed (every threshold met)"])


def test_bad_threshold_is_usage_error(pytester: pytest.Pytester, suite_path: Path) -> None:
    r = run(pytester, suite_path, "--agentperturb-max-family-drop", "tool-incorect=40")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines(["*--agentperturb-max-family-drop tool-incorect=40: unknown family 'tool-incorect'*"])


def test_ini_thresholds_and_their_source(pytester: pytest.Pytester, suite_path: Path) -> None:
    pytester.makeini("[pytest]\nagentperturb_max_drop = 25\n")
    r = run(pytester, suite_path)
    assert r.ret == pytest.ExitCode.TESTS_FAILED
    r.stdout.fnmatch_lines(["agentperturb gate: --agentperturb-max-drop breached by reference/literal*"])
    pytester.makeini("[pytest]\nagentperturb_min_bypass = lots\n")
    r = run(pytester, suite_path)
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines(["*ini option 'agentperturb_min_bypass'*lots: expected a number between 0 and 1*"])


def test_gate_under_xdist_reports_once(pytester: pytest.Pytester, suite_path: Path) -> None:
    r = run(pytester, suite_path, "--agentperturb-max-drop", "25", n=2)
    assert r.ret == pytest.ExitCode.TESTS_FAILED
    summary = [ln for ln in r.outlines if ln.startswith("agentperturb gate:")]  # the agentperturb section's lines
    breached = [ln for ln in summary if "breached" in ln]          # (a power note may follow the breach)
    assert len(breached) == 1 and "--agentperturb-max-drop breached" in breached[0]
    assert all("breached" in ln or "cannot tell" in ln for ln in summary)
    # the controller reports the gate as a test of its own (no worker sees every episode): once
    assert sum(1 for ln in r.outlines if ln.startswith("FAILED agentperturb::gate")) == 1


def test_strict_mode_fails_compliance_only(pytester: pytest.Pytester, suite_path: Path) -> None:
    plain = run(pytester, suite_path)
    assert plain.ret == pytest.ExitCode.OK
    strict = run(pytester, suite_path, "--agentperturb-strict")
    assert strict.ret == pytest.ExitCode.TESTS_FAILED
    out = strict.stdout.str()
    assert "strict mode: the agent complied with the" in out
    failed = strict.parseoutcomes().get("failed", 0)
    compliant = plain.stdout.str().count("compliance")   # not counted precisely by the plain run's summary
    assert failed >= 1 and compliant >= 1
    # every strict failure is a compliance: no clean item fails
    assert "::clean[" not in "\n".join(ln for ln in out.splitlines() if ln.startswith("FAILED"))

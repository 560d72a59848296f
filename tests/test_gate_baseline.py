"""The gate against a baseline run: interval-aware rules, the baseline comparison, max regression, runs over time."""

from __future__ import annotations

import logging
import math
import shutil
import sqlite3
from pathlib import Path

import pandas as pd
import pytest
import scipy.cluster.hierarchy  # noqa: F401  (loaded before pytester's in-process runs)
import scipy.stats  # noqa: F401

from pytest_agentperturb import gate
from pytest_agentperturb.analysis import analyze, drops, normalise
from pytest_agentperturb.analysis.baseline import compare
from pytest_agentperturb.cli import main
from pytest_agentperturb.model.errors import AgentPerturbError, OptionError
from pytest_agentperturb.model.records import EpisodeRecord
from pytest_agentperturb.run.baseline import parse_spec, read_rows, resolve
from pytest_agentperturb.run.store import put_all

from task_files import report_of

ROOT = Path(__file__).resolve().parents[1]
FAM = "clean,user-missing,context-incorrect,tool-incorrect,procedure-redundant"


@pytest.fixture
def project(pytester: pytest.Pytester) -> Path:
    shutil.copytree(ROOT / "suites" / "workflows", pytester.path / "suites" / "workflows")
    return pytester.path


def plugin(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("--agentperturb", "suites/workflows", "-p", "no:cacheprovider", "-q",
                              "--agentperturb-families", FAM, *args)


# -- rules -----------------------------------------------------------------------------
@pytest.mark.parametrize(("rule", "point", "low", "high", "limit", "breached"), [
    ("point", 30.0, 12.0, 45.0, 25.0, True),
    ("significant", 30.0, 12.0, 45.0, 25.0, False),
    ("significant", 30.0, 12.0, 45.0, 10.0, True),
    ("conservative", 30.0, 12.0, 45.0, 40.0, True),
    ("point", 30.0, 12.0, 45.0, 40.0, False),
    ("conservative", 30.0, 12.0, 45.0, 50.0, False),
    ("significant", math.nan, math.nan, math.nan, 50.0, True),      # undefined always breaches
    ("significant", 30.0, math.nan, math.nan, 25.0, True),          # no interval: judged on the estimate
])
def test_rules(rule: str, point: float, low: float, high: float, limit: float, breached: bool) -> None:
    assert gate.exceeds(rule, point, low, high, limit) is breached


def test_gate_on_is_validated_and_defaults_to_point() -> None:
    assert gate.parse({}).gate_on == "point"
    assert gate.parse({"gate_on": "Significant"}).gate_on == "significant"
    with pytest.raises(OptionError, match="--agentperturb-gate-on sure: expected one of point, significant, "
                                          "conservative"):
        gate.parse({"gate_on": "sure"})
    assert gate.parse({"max_regression": "5"}).configured and not gate.parse({"gate_on": "significant"}).configured


def _table(p_by_task: dict[str, float]) -> pd.DataFrame:
    rows = []
    for t, p in p_by_task.items():
        rows += [{"model": "m", "suite": "s", "task": t, "family": "clean", "reward": 1.0},
                 {"model": "m", "suite": "s", "task": t, "family": "tool-incorrect", "reward": p}]
    return normalise(pd.DataFrame(rows))


def test_interval_rules_on_max_drop_and_the_breach_line() -> None:
    df = _table({f"t{i}": p for i, p in enumerate([1, 1, 1, 0, 0, 1, 0, 1, 1, 0, 1, 1])})
    d = drops(df, replicates=2000)
    row = d[(d["model"] == "m") & (d["level_kind"] == "overall")].iloc[0]
    assert row.ci_low < 25 < row.relative_drop < 40 < row.ci_high
    verdicts = {rule: gate.evaluate_tables(gate.parse({"max_drop": "25", "gate_on": rule}), d, df).failed
                for rule in gate.RULES}
    assert verdicts == {"point": True, "significant": False, "conservative": True}
    # 12 tasks at a perfect clean score: the run cannot detect a 30 % drop with 80 % power (the exact test needs
    # six failed tasks), and the gate says so after the breach line
    power = ("agentperturb gate: --agentperturb-max-drop for m on s: this run cannot tell a 30 % drop from noise")
    v = gate.evaluate_tables(gate.parse({"max_drop": "30", "gate_on": "conservative"}), d, df)
    assert row.interval_method == "exact"        # 12 tasks, one repeat: exact by design (docs/design.md 4.1)
    assert v.lines()[0] == (
        f"agentperturb gate: --agentperturb-max-drop breached by m on s: relative drop {row.relative_drop:.1f} % "
        f"(95 % interval [{row.ci_low:.1f} %, {row.ci_high:.1f} %] exact) > limit 30.0 % under --agentperturb-gate-on "
        "conservative: part of the 95 % interval lies above the limit")
    assert len(v.lines()) == 2 and v.lines()[1].startswith(power)
    point = gate.evaluate_tables(gate.parse({"max_drop": "30"}), d, df)   # today's line, unchanged
    assert point.lines()[0] == (f"agentperturb gate: --agentperturb-max-drop breached by m on s: relative drop "
                                f"{row.relative_drop:.1f} % > limit 30.0 %")
    assert len(point.lines()) == 2 and point.lines()[1].startswith(power)


# -- the baseline comparison, as a function ---------------------------------------------
def _run(run: str, model: str, rewards: dict[tuple[str, str], float], digests: dict[tuple[str, str], str]
         ) -> pd.DataFrame:
    return normalise(pd.DataFrame([{"run_id": run, "model": model, "suite": "s", "task": t, "family": f,
                                    "reward": r, "variant_digest": digests.get((t, f), f"{t}/{f}")}
                                   for (t, f), r in rewards.items()]))


def test_compare_keeps_the_same_variants_and_lists_the_rest() -> None:
    tasks = [f"t{i}" for i in range(6)]
    cur = {(t, f): 1.0 if f == "clean" else 0.0 for t in tasks for f in ("clean", "tool-missing", "user-missing")}
    base = {k: 1.0 for k in cur}
    base[("t5", "context-missing")] = 1.0
    c = compare(_run("new", "m-rc", cur, {("t1", "tool-missing"): "other", ("t2", "clean"): "other"}),
                _run("old", "m", base, {}), label="old", replicates=200)
    why = {(r.task, r.family): r.reason for r in c.mismatches.itertuples()}
    assert why == {("t1", "tool-missing"): "variant differs", ("t2", "clean"): "variant differs",
                   ("t2", "tool-missing"): "clean instance not comparable",
                   ("t2", "user-missing"): "clean instance not comparable",
                   ("t5", "context-missing"): "not in this run"}
    ov = c.deltas[c.deltas["level_kind"] == "overall"].iloc[0]
    assert (ov.model, ov.baseline_model, ov.n_tasks) == ("m-rc", "m", 5)
    # 5 tasks, one repeat: the change's interval is exact by design (its bootstrap is one point, [100, 100]), and
    # on 5 tasks it holds 0 (docs/design.md section 4.1, "Exact by design")
    assert (ov.d_current, ov.d_baseline, ov.delta, ov.interval_method) == (100.0, 0.0, 100.0, "exact")
    assert ov.ci_low < 0.0 < ov.ci_high and ov.verdict == "not distinguishable"
    fam = c.deltas.set_index("level").loc["tool-missing"]
    assert fam.n_tasks == 4 and fam.n_pairs_current == 4


def test_regression_rules_and_missing_comparisons() -> None:
    tasks = [f"t{i}" for i in range(8)]
    fams = ("clean", "tool-missing")
    base = {(t, f): 1.0 if f == "clean" or i % 2 else 0.0 for i, t in enumerate(tasks) for f in fams}
    cur = {(t, f): 1.0 if f == "clean" or i % 4 == 1 else 0.0 for i, t in enumerate(tasks) for f in fams}
    a = analyze(_run("new", "m", cur, {}), replicates=500, baseline=_run("old", "m", base, {}), baseline_label="old")
    assert a.versus is not None
    ov = a.versus.deltas[a.versus.deltas["level_kind"] == "overall"].iloc[0]
    assert ov.delta == pytest.approx(25.0) and ov.ci_low < 5 < ov.ci_high
    fails = {rule: gate.evaluate(gate.parse({"max_regression": "5", "gate_on": rule}), a).failed for rule in gate.RULES}
    assert fails == {"point": True, "significant": False, "conservative": True}
    alone = analyze(_run("new", "m", cur, {}), replicates=50)
    (line,) = gate.evaluate(gate.parse({"max_regression": "5"}), alone).lines()
    assert line == ("agentperturb gate: --agentperturb-max-regression not evaluated for this run: "
                    "no baseline run to compare with (set --agentperturb-baseline) "
                    "(a threshold that cannot be evaluated fails)")


# -- as users meet it --------------------------------------------------------------------
def test_two_session_seeds_of_one_agent_are_not_distinguishable(pytester: pytest.Pytester, project: Path) -> None:
    common = ["--agentperturb-model", "reference/noisy", "--agentperturb-repeats", "5",
              "--agentperturb-variant-seed", "0"]
    first = plugin(pytester, *common, "--agentperturb-seed", "1", "--agentperturb-run-id", "a")
    assert first.ret == 0
    second = plugin(pytester, *common, "--agentperturb-seed", "2", "--agentperturb-run-id", "b",
                    "--agentperturb-baseline", "last", "--agentperturb-max-regression", "5",
                    "--agentperturb-gate-on", "significant")
    out = second.stdout.str()
    assert second.ret == pytest.ExitCode.OK, out[-3000:]
    second.stdout.fnmatch_lines(["reference/noisy*versus baseline run 'a' (reference/noisy): *(not distinguishable)*",
                                 "agentperturb gate: passed (every threshold met)"])
    assert "left out:" not in out                                  # every variant is the same in both runs
    with sqlite3.connect(project / "reports" / "agentperturb.sqlite") as c:
        rows = c.execute("SELECT run_id, task, family, repeat, variant_digest, reward FROM episodes").fetchall()
    by = {(t, f, r): {} for _, t, f, r, _, _ in rows}
    for run, t, f, r, dig, rew in rows:
        by[(t, f, r)][run] = (dig, rew)
    assert all(v["a"][0] == v["b"][0] for v in by.values())        # the same variants...
    assert any(v["a"][1] != v["b"][1] for v in by.values())        # ...other episode seeds, other outcomes
    page = report_of(second).read_text(encoding="utf-8")  # a families subset's own report
    assert page.index("id='versus-baseline'") < page.index("id='repeats'") < page.index("id='degradation'")
    assert "not distinguishable from noise" in page and "pass^k" in page


def test_literal_against_a_careful_baseline_breaches_max_regression(pytester: pytest.Pytester, project: Path) -> None:
    assert plugin(pytester, "--agentperturb-model", "reference/careful", "--agentperturb-run-id", "careful").ret == 0
    for rule in ("point", "significant"):
        r = plugin(pytester, "--agentperturb-model", "reference/literal", "--agentperturb-run-id", "literal",
                   "--agentperturb-baseline", "careful", "--agentperturb-max-regression", "5",
                   "--agentperturb-gate-on", rule)
        assert r.ret == pytest.ExitCode.TESTS_FAILED
        r.stdout.fnmatch_lines([
            "agentperturb gate: --agentperturb-max-regression breached by reference/literal on workflows vs "
            "reference/careful (baseline run 'careful'): change in D +* points (95 % interval ?+* points, "
            f"+* points] exact) > limit 5.0 points under --agentperturb-gate-on {rule}: *"])  # 28 tasks, K = 1
        # the terminal's versus line says the change's interval is exact (docs/design.md section 4.1)
        r.stdout.fnmatch_lines([("*versus baseline run 'careful' (reference/careful): D *, change +* points "
                                 "[[]+*, +*[]] exact (rose), 28 tasks*")])
    page = report_of(r).read_text(encoding="utf-8")
    assert "Versus baseline" in page and "Gate: FAILED" in page
    assert "(exact)" in page and "]</span> exact</td>" in page            # the change's dot plot and table


def test_baseline_names_are_checked_before_anything_runs(pytester: pytest.Pytester, project: Path) -> None:
    r = plugin(pytester, "-k", "share-report", "--agentperturb-baseline", "nope")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines(["*--agentperturb-baseline nope: no run 'nope' in *; runs: none*"])
    r = plugin(pytester, "-k", "share-report", "--agentperturb-max-regression", "5")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines(["*--agentperturb-max-regression: there is nothing to compare with; name the baseline run*"])
    assert plugin(pytester, "-k", "share-report", "--agentperturb-run-id", "one").ret == 0
    r = plugin(pytester, "-k", "share-report", "--agentperturb-run-id", "one", "--agentperturb-baseline", "last")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines(["*--agentperturb-baseline last: * holds no run other than this one ('one')*"])
    r = plugin(pytester, "-k", "share-report", "--agentperturb-baseline", "two")
    r.stderr.fnmatch_lines(["*--agentperturb-baseline two: no run 'two' in *; runs: one*"])


def _records(run: str, model: str, p: float, n: int = 6) -> list[EpisodeRecord]:
    out = []
    for i in range(n):
        for fam, reward in (("clean", 1.0), ("tool-missing", 1.0 if i < p * n else 0.0)):
            out.append(EpisodeRecord(run_id=run, model=model, suite="s", task=f"t{i}", family=fam, target="tool",
                                     type="missing", operator="op", seed=i, reward=reward, success=reward == 1.0))
    return out


def test_spec_forms_and_another_store_read_only(tmp_path: Path) -> None:
    here, other = tmp_path / "here.sqlite", tmp_path / "other.sqlite"
    put_all(here, _records("r1", "m", 0.5) + _records("r2", "m", 0.5))
    put_all(other, _records("x", "m", 1.0))
    with sqlite3.connect(other) as c:          # an older store: no repeat column
        _drop_repeat(c)
    assert parse_spec("last", tmp_path) == (None, None)
    assert parse_spec("rc-1", tmp_path) == (None, "rc-1")
    assert parse_spec("other.sqlite", tmp_path) == (other, None)
    assert parse_spec(f"{other}:x", tmp_path) == (other, "x")
    assert resolve("last", here, "r2", tmp_path).run_id == "r1"
    b = resolve("other.sqlite:x", here, "r2", tmp_path)
    assert (b.run_id, b.same_store) == ("x", False) and "other.sqlite" in b.label
    rows = read_rows(b)
    assert len(rows) == 12 and {r["repeat"] for r in rows} == {0}
    with sqlite3.connect(other) as c:          # read, never migrated
        assert "repeat" not in {r[1] for r in c.execute("PRAGMA table_info(episodes)")}
    with pytest.raises(AgentPerturbError, match="that is this run"):
        resolve("r2", here, "r2", tmp_path)


def _drop_repeat(c: sqlite3.Connection) -> None:
    cols = [r[1] for r in c.execute("PRAGMA table_info(episodes)") if r[1] != "repeat"]
    c.execute(f"CREATE TABLE old AS SELECT {', '.join(cols)} FROM episodes")
    c.execute("DROP TABLE episodes")
    c.execute("ALTER TABLE old RENAME TO episodes")


def test_report_run_id_all_draws_d_per_run(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = tmp_path / "s.sqlite"
    put_all(store, _records("rc<1>", "m", 0.8))
    put_all(store, _records("rc2", "m", 0.5))
    out = tmp_path / "all.html"
    caplog.set_level(logging.INFO)
    assert main(["report", "--store", str(store), "--run-id", "all", "--out", str(out), "--replicates", "200"]) == 0
    page = out.read_text(encoding="utf-8")
    sec = page[page.index("id='trend'"):page.index("id='degradation'")]
    assert "<polyline" in sec and "rc&lt;1&gt;" in sec and "rc<1>" not in sec and "<script" not in page
    assert sec.index("rc&lt;1&gt;") < sec.index("rc2")                   # recording order
    single = tmp_path / "one.html"
    assert main(["report", "--store", str(store), "--run-id", "rc2", "--out", str(single), "--replicates", "200",
                 "--baseline", "rc<1>", "--max-regression", "5", "--gate-on", "point"]) == 1
    assert "Versus baseline" in single.read_text(encoding="utf-8")
    assert any("--max-regression breached by m on s vs m (baseline run 'rc<1>')" in m for m in caplog.messages)

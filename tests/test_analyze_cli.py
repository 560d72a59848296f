"""``agentperturb analyze``, ``report`` and ``export`` as users type them."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pandas as pd
import pytest

from pytest_agentperturb.cli import analysis as analysis_cli
from pytest_agentperturb.cli import main
from pytest_agentperturb.model.records import STORE_COLUMNS, EpisodeRecord
from pytest_agentperturb.run.store import put_all

ROOT = Path(__file__).resolve().parent.parent
TABLE1 = ROOT / "fixtures" / "paper_table1"
FAST = ["--replicates", "200", "--permutations", "2000"]


def test_analyze_html_and_gate_exit_status(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="agentperturb")
    html = tmp_path / "r.html"
    rc = main(["analyze", "--results", str(TABLE1 / "episodes.csv"), "--out", str(html), "--max-drop", "25", *FAST])
    assert rc == 1   # Table 1: GLM-5.2 loses 55.6 % on Toolathlon
    err = caplog.text
    assert "agentperturb gate: --max-drop breached by GLM-5.2 on toolathlon: relative drop 55.6 % > limit 25.0 %" \
        in err
    assert "Gate: FAILED" in html.read_text(encoding="utf-8")


def test_analyze_input_errors(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("model,suite,task,family\na,s,t,clean\n")
    assert main(["analyze", "--results", str(bad), "--json", str(tmp_path / "x.json")]) == 2
    assert "missing column(s) reward" in caplog.text
    assert main(["analyze", "--results", str(TABLE1 / "episodes.csv")]) == 2
    assert "nothing to write" in caplog.text
    cap = tmp_path / "cap.csv"
    cap.write_text("model,score\na,1\n")
    assert main(["analyze", "--results", str(TABLE1 / "episodes.csv"), "--json", str(tmp_path / "x.json"),
                 "--capability", str(cap)]) == 2
    assert "missing column(s) capability" in caplog.text
    assert main(["analyze", "--results", str(TABLE1 / "episodes.csv"), "--json", str(tmp_path / "x.json"),
                 "--max-family-drop", "tool-incorect=4"]) == 2
    assert "--max-family-drop tool-incorect=4: unknown family" in caplog.text


def test_minimal_columns_and_optional_ones(tmp_path: Path) -> None:
    csv = tmp_path / "e.csv"
    csv.write_text("model,suite,task,family,reward,success,input_tokens,output_tokens,tool_calls,turns\n"
                   "m,s,t1,clean,1,true,100,10,2,3\nm,s,t1,tool-missing,0,false,200,20,4,5\n"
                   "m,s,t2,clean,1,1,100,10,2,3\nm,s,t2,tool-missing,1,1,300,30,2,3\n")
    out = tmp_path / "s.json"
    assert main(["analyze", "--results", str(csv), "--json", str(out), *FAST]) == 0
    s = json.loads(out.read_text())
    assert s["degradation"][0]["relative_drop"] == pytest.approx(50.0)
    assert s["paired_tests"][0]["test"] == "mcnemar-exact"
    assert {r["metric"] for r in s["rollout_ratios"]} == {"tool_calls", "turns", "input_tokens", "output_tokens"}


def _store(tmp_path: Path) -> Path:
    recs = []
    for m in ("reference/literal", "vendor/model-x"):
        for i in range(3):
            for fam, reward in (("clean", 1.0), ("tool-incorrect", float(i % 2)), ("user-missing", 0.0)):
                t, _, k = fam.partition("-")
                recs.append(EpisodeRecord(run_id="r1", model=m, suite="s", task=f"t{i}", family=fam,
                                          target=t if k else "clean", type=k or "clean", operator="op", seed=1,
                                          reward=reward, success=reward >= 1, compliance=None if fam == "clean"
                                          else reward < 1, input_tokens=100, output_tokens=10, tool_calls=2,
                                          turns=3, trajectory=[{"role": "assistant", "content": f"<b>{m}</b>",
                                                                "final": True}]))
    path = tmp_path / "store.sqlite"
    put_all(path, recs)
    return path


def test_export_csv_round_trips_into_analyze(tmp_path: Path) -> None:
    store = _store(tmp_path)
    csv = tmp_path / "out" / "episodes.csv"
    assert main(["export", "--store", str(store), "--format", "csv", "--out", str(csv)]) == 0
    df = pd.read_csv(csv)
    assert list(df.columns) == [*STORE_COLUMNS, "variant_digest"] and len(df) == 18
    clean = df[df["family"] == "clean"]
    assert clean["compliance"].isna().all()  # no verdict for clean episodes, not True
    assert set(df[df["family"] != "clean"]["compliance"].dropna()) <= {True, False}
    out = tmp_path / "s.json"
    assert main(["analyze", "--results", str(csv), "--json", str(out), *FAST]) == 0
    deg = {d["model"]: d for d in json.loads(out.read_text())["degradation"]}
    # per model: C = 1, P = mean of (0,1,0) and (0,0,0) = 1/6
    assert deg["vendor/model-x"]["relative_drop"] == pytest.approx(100 * 5 / 6)


def test_export_parquet_without_engine_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    store = _store(tmp_path)
    monkeypatch.setattr(analysis_cli, "parquet_engine", lambda: None)
    out = tmp_path / "e.parquet"
    assert main(["export", "--store", str(store), "--format", "parquet", "--out", str(out)]) == 2
    assert "pip install pyarrow" in caplog.text
    assert not out.exists()


def test_report_from_store_runs_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = _store(tmp_path)
    html = tmp_path / "r.html"
    assert main(["report", "--store", str(store), "--out", str(html), *FAST]) == 0
    text = html.read_text(encoding="utf-8")
    assert "vendor/model-x" in text
    pages = "".join(p.read_text(encoding="utf-8") for p in (tmp_path / "r-tasks").rglob("*.html"))
    assert "final: &lt;b&gt;vendor/model-x&lt;/b&gt;" in pages   # trajectories are on the task pages
    assert "final: <b>" not in text + pages
    assert main(["report", "--store", str(store), "--out", str(html), "--run-id", "nope"]) == 2
    assert "no run 'nope'" in caplog.text
    assert main(["report", "--store", str(tmp_path / "missing.sqlite"), "--out", str(html)]) == 2


def test_report_from_a_plugin_store_has_diffs(pytester: pytest.Pytester, suite_path: Path) -> None:
    shutil.copytree(suite_path, pytester.path / "suites" / "workflows")
    r = pytester.runpytest_subprocess("--agentperturb", "suites/workflows", "-p", "no:cacheprovider",
                                      "-k", "share-report and (clean or incorrect)",
                                      "--agentperturb-model", "reference/literal")
    assert r.ret == 0
    store = pytester.path / "reports" / "agentperturb.sqlite"
    html = pytester.path / "again.html"
    assert main(["report", "--store", str(store), "--out", str(html), "--suite", "suites/workflows", *FAST]) == 0
    text = html.read_text(encoding="utf-8")
    assert "tool_count" in text   # task-property predictors from --suite
    drill = (pytester.path / "again-tasks" / "workflows" / "share-report.html").read_text(encoding="utf-8")
    assert "diff not recorded" not in drill and "<span class='add'>" in drill and "<mark>" in drill


def test_analyze_takes_the_suite_threshold_or_says_it_assumed_one(tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    csv = tmp_path / "e.csv"
    csv.write_text("model,suite,task,family,reward\nm,knowledge,t1,clean,0.85\nm,knowledge,t1,tool-missing,0.5\n"
                   "m,other,t1,clean,0.9\nm,other,t1,tool-missing,1\n")
    out = tmp_path / "s.json"
    assert main(["analyze", "--results", str(csv), "--json", str(out), *FAST]) == 0
    assert "suite knowledge: success = reward >= 0.8 (its threshold)" in caplog.text
    assert "suite(s) other, which name no built-in suite: success = reward >= 1.0 assumed" in caplog.text
    mal = {r["suite"]: r for r in json.loads(out.read_text())["malleability"]}
    assert mal["knowledge"]["harmful_rate"] == 1.0 and mal["other"]["beneficial_rate"] == 1.0
    caplog.clear()
    assert main(["analyze", "--results", str(csv), "--json", str(out), "--success-threshold", "0.5", *FAST]) == 0
    assert "assumed" not in caplog.text

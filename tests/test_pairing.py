"""Every comparison is paired, every number says how many pairs it rests on (docs/design.md section 4).

Each case runs through the Python functions and through ``agentperturb
analyze`` on an episodes CSV, as a user would.
"""

from __future__ import annotations

import html
import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from pytest_agentperturb.analysis import analyze, drops, normalise, pairing_audit, suite_average
from pytest_agentperturb.analysis.degradation import ALL_MODELS, marginal_effects
from pytest_agentperturb.analysis.table import pairs, pooled
from pytest_agentperturb.cli import main
from pytest_agentperturb.gate import Thresholds, evaluate_tables
from pytest_agentperturb.model.task import FAMILIES, IMAGE_OBJECTS

from episodes_csv import FAST, ep, run_analyze, write_csv

def row(doc_or_df: Any, model: str, kind: str, level: str) -> dict[str, Any]:
    recs = doc_or_df["drops"] if isinstance(doc_or_df, dict) else doc_or_df.to_dict("records")
    (r,) = [d for d in recs if d["model"] == model and d["level_kind"] == kind and d["level"] == level]
    return dict(r)


def skipped_variant_rows() -> list[dict[str, Any]]:
    """Three tasks, every family equal to its clean score; user-missing skipped on the task with clean 0."""
    rows = []
    for t, c in (("t1", 1.0), ("t2", 0.5), ("t3", 0.0)):
        rows.append(ep("m", t, "clean", c))
        rows += [ep("m", t, f, c) for f in FAMILIES if not (t == "t3" and f == "user-missing")]
    return rows


def test_skipped_variant_leaves_its_clean_score_out(tmp_path: Path) -> None:
    d = drops(normalise(pd.DataFrame(skipped_variant_rows())), replicates=20)
    cell, user = row(d, "m", "family", "user-missing"), row(d, "m", "target", "user")
    # was -50 % (cell) and -12.5 % (target): C over 3 tasks against P over the 2 that have the variant
    assert cell["relative_drop"] == pytest.approx(0.0) and user["relative_drop"] == pytest.approx(0.0)
    assert cell["clean"] == pytest.approx(0.75) and cell["n_pairs"] == 2 and cell["dropped_no_variant"] == 1
    assert cell["dropped_why"] == "1 variant missing" and user["n_pairs"] == 8
    doc = run_analyze(tmp_path, skipped_variant_rows())
    assert row(doc, "m", "family", "user-missing")["relative_drop"] == pytest.approx(0.0)
    assert row(doc, "m", "target", "user")["relative_drop"] == pytest.approx(0.0)
    assert row(doc, "m", "overall", "all")["relative_drop"] == pytest.approx(0.0)
    assert row(doc, "m", "overall", "all")["n_dropped"] == 1
    assert any("1 variant missing" in n for n in doc["notes"])


def clean_error_rows() -> list[dict[str, Any]]:
    """Clean episode of t3 errored; its perturbed episodes scored 0; everything else 1."""
    rows = []
    for t in ("t1", "t2", "t3"):
        rows.append(ep("m", t, "clean", "" if t == "t3" else 1.0, error="timeout" if t == "t3" else ""))
        rows += [ep("m", t, f, 0.0 if t == "t3" else 1.0) for f in FAMILIES]
    return rows


def test_unscored_clean_episode_takes_its_partners_out(tmp_path: Path) -> None:
    d = drops(normalise(pd.DataFrame(clean_error_rows())), replicates=20)
    r = row(d, "m", "overall", "all")
    assert r["relative_drop"] == pytest.approx(0.0)          # was 33.3 %
    assert (r["n_pairs"], r["n_dropped"], r["dropped_clean_error"], r["n_tasks"]) == (24, 12, 12, 2)
    doc = run_analyze(tmp_path, clean_error_rows())
    r = row(doc, "m", "overall", "all")
    assert r["relative_drop"] == pytest.approx(0.0) and r["dropped_why"] == "12 clean error"
    assert doc["degradation"][0]["n_pairs"] == 24 and doc["degradation"][0]["n_dropped"] == 12


def test_unscored_perturbed_episode_and_missing_clean_are_counted() -> None:
    rows = [ep("m", "t1", "clean", 1.0), ep("m", "t1", "tool-missing", 0.0),
            ep("m", "t2", "clean", 1.0), ep("m", "t2", "tool-missing", "", error="rate limit"),
            ep("m", "t3", "tool-missing", 0.0)]                       # no clean episode at all
    df = normalise(pd.DataFrame(rows))
    au = pairing_audit(df).set_index("task")
    assert (au.loc["t1", "n_pairs"], au.loc["t2", "perturbed_error"], au.loc["t3", "no_clean"]) == (1, 1, 1)
    r = row(drops(df, replicates=10), "m", "family", "tool-missing")
    assert (r["n_pairs"], r["n_perturbed"], r["dropped_perturbed_error"], r["dropped_no_clean"]) == (1, 3, 1, 1)
    assert r["clean"] == 1.0 and r["perturbed"] == 0.0
    assert r["dropped_why"] == "1 perturbed error, 1 no clean episode"


def pooled_family_rows() -> list[dict[str, Any]]:
    """Model a: C 0.2, tool-missing 0.1 (D 50 %); model b: C 1.0 and no tool-missing episode."""
    rows = []
    for t in ("t1", "t2"):
        rows += [ep("a", t, "clean", 0.2), ep("a", t, "tool-missing", 0.1), ep("a", t, "user-missing", 0.2),
                 ep("b", t, "clean", 1.0), ep("b", t, "user-missing", 1.0)]
    return rows


def test_pooled_cell_uses_only_the_models_that_have_the_level(tmp_path: Path) -> None:
    d = drops(normalise(pd.DataFrame(pooled_family_rows())), replicates=20)
    r = row(d, ALL_MODELS, "family", "tool-missing")
    assert r["relative_drop"] == pytest.approx(50.0)      # was 83.3 %: b's C against a's P
    assert (r["n_models"], r["n_pairs"], r["clean"]) == (1, 2, pytest.approx(0.2))
    doc = run_analyze(tmp_path, pooled_family_rows())
    assert row(doc, ALL_MODELS, "family", "tool-missing")["relative_drop"] == pytest.approx(50.0)


def baseline_rows(baseline_column: bool = False) -> list[dict[str, Any]]:
    """One real model (D 25 %) and one reference agent (D 75 %), four tasks."""
    rows = []
    for i, t in enumerate(("t1", "t2", "t3", "t4")):
        rows += [ep("vendor/model", t, "clean", 1.0), ep("vendor/model", t, "tool-missing", float(i > 0)),
                 ep("reference/literal", t, "clean", 1.0), ep("reference/literal", t, "tool-missing", float(i == 0))]
    if baseline_column:
        for r in rows:   # the flag wins over the name: the names are swapped round here
            r["baseline"] = "true" if r["model"] == "vendor/model" else "false"
    return rows


def test_baselines_stay_out_of_real_model_aggregates(tmp_path: Path) -> None:
    df = normalise(pd.DataFrame(baseline_rows()))
    assert df.groupby("model")["baseline"].first().to_dict() == {"reference/literal": True, "vendor/model": False}
    d = drops(df, replicates=20)
    avg = suite_average(d)
    assert avg.loc[0, "relative_drop"] == pytest.approx(25.0) and avg.loc[0, "n_models"] == 1   # was 50 %
    assert row(d, "reference/literal", "overall", "all")["relative_drop"] == pytest.approx(75.0)  # own row kept
    assert set(marginal_effects(pairs(df)).query("model == @ALL_MODELS")["n_pairs"]) == {4}
    doc = run_analyze(tmp_path, baseline_rows())
    assert doc["suite_average"][0]["relative_drop"] == pytest.approx(25.0)
    assert {d["model"]: d["baseline"] for d in doc["degradation"]} == {"reference/literal": True,
                                                                        "vendor/model": False}
    assert any("Baselines (reference/literal)" in n for n in doc["notes"])


def test_baseline_column_wins_over_the_name(tmp_path: Path) -> None:
    df = normalise(pd.DataFrame(baseline_rows(baseline_column=True)))
    assert df.groupby("model")["baseline"].first().to_dict() == {"reference/literal": False, "vendor/model": True}
    assert suite_average(drops(df, replicates=10)).loc[0, "relative_drop"] == pytest.approx(75.0)
    # the gate judges the non-baseline model by the flag, not by the name
    v = evaluate_tables(Thresholds(max_drop=50.0), drops(df, replicates=10), df)
    assert [b.subject for b in v.breaches] == ["reference/literal on s"]
    doc = run_analyze(tmp_path, baseline_rows(baseline_column=True), "--max-drop", "50", rc=1)
    assert doc["suite_average"][0]["relative_drop"] == pytest.approx(75.0)
    assert doc["gate"]["failed"] and "reference/literal on s" in doc["gate"]["lines"][0]
    # blank cells fall back to the name
    blank = normalise(pd.DataFrame([ep("reference/x", "t", "clean", 1.0, baseline=""),
                                    ep("m", "t", "clean", 1.0, baseline=None)]))
    assert list(blank["baseline"]) == [True, False]


def test_only_baselines_pool_among_themselves() -> None:
    rows = [r for r in baseline_rows() if r["model"] == "reference/literal"]
    rows += [{**r, "model": "reference/careful"} for r in rows]
    df = normalise(pd.DataFrame(rows))
    assert len(pooled(df)) == len(df)
    assert suite_average(drops(df, replicates=10)).loc[0, "n_models"] == 2


def test_error_reasoning_and_blank_usage_columns_are_accepted(tmp_path: Path) -> None:
    csv_path = tmp_path / "e.csv"
    csv_path.write_text(
        "model,suite,task,family,reward,error,input_tokens,output_tokens,reasoning_tokens\n"
        "m,s,t1,clean,1,,100,50,20\nm,s,t1,tool-missing,0,,100,,\n"
        "m,s,t2,clean,,provider 500,,,\nm,s,t2,tool-missing,0,,100,50,0\n"
        "m,s,t3,clean,1,,100,50,20\nm,s,t3,tool-missing,1,,100,60,30\n", encoding="utf-8")
    out = tmp_path / "s.json"
    assert main(["analyze", "--results", str(csv_path), "--json", str(out), *FAST]) == 0
    doc = json.loads(out.read_text())
    deg = doc["degradation"][0]
    assert (deg["n_pairs"], deg["n_dropped"], deg["relative_drop"]) == (2, 1, pytest.approx(50.0))
    assert any("could not be scored" in n for n in doc["notes"])
    assert any("1 of 2 pair(s) have no recorded token usage" in n for n in doc["notes"])
    rc = [r for r in doc["recovery_cost"] if r["model"] == "m" and r["family"] == "all perturbed"][0]
    assert (rc["n_pairs"], rc["n_unknown"]) == (1, 1)


def test_report_shows_pairs_and_what_was_dropped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="agentperturb")
    html = tmp_path / "r.html"
    assert main(["analyze", "--results", str(write_csv(tmp_path / "e.csv", clean_error_rows())),
                 "--out", str(html), *FAST]) == 0
    text = html.read_text(encoding="utf-8")
    assert "<th>pairs</th>" in text and "<th>dropped</th>" in text and "12 clean error" in text
    assert "Pairing: 24 clean/perturbed pair(s) of 36 perturbed episode(s); left out: 12 clean error" in text


def test_analysis_notes_and_summary_lines_state_the_pairs() -> None:
    from pytest_agentperturb.analysis import summary_lines

    a = analyze(normalise(pd.DataFrame(clean_error_rows())), replicates=10, permutations=50)
    (line,) = summary_lines(a)
    assert "pairs 24 (dropped 12: 12 clean error)" in line


def image_object_rows() -> list[dict[str, Any]]:
    """Two tasks with every family; only t1 shows an image, so only t1 has the image objects."""
    rows = []
    for t in ("t1", "t2"):
        rows.append(ep("m", t, "clean", 1.0))
        rows += [ep("m", t, f, 0.5) for f in FAMILIES]
    rows += [ep("m", "t1", f, 0.0) for f in IMAGE_OBJECTS]
    return rows


def test_an_object_offered_only_where_it_applies_is_no_missing_variant(tmp_path: Path) -> None:
    """An image object is collected only for tasks whose tools return images: a task without one lacks nothing
    (it was counted as a variant missing, the page's "left out: 176 variant missing" on the main job)."""
    audit = pairing_audit(normalise(pd.DataFrame(image_object_rows())))
    assert int(audit["no_variant"].sum()) == 0
    doc = run_analyze(tmp_path, image_object_rows())
    assert any("nothing left out" in n for n in doc["notes"])
    skipped = [r for r in image_object_rows() if not (r["task"] == "t2" and r["family"] == "user-missing")]
    assert int(pairing_audit(normalise(pd.DataFrame(skipped)))["no_variant"].sum()) == 1  # a family still is


def test_terminal_and_page_state_the_same_pairing(tmp_path: Path) -> None:
    """The terminal prints the report's pairing note word for word (it printed "0 variants skipped" only, beside
    the page's "left out: 176 variant missing"), here with an image task and a task without images."""
    root = Path(__file__).resolve().parents[1]
    page = tmp_path / "r.html"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--agentperturb",
         f"--agentperturb-suite={root / 'suites' / 'workflows'}", "-k", "scan-invoice-po or reschedule-standup",
         "--agentperturb-model", "reference/literal", f"--agentperturb-store={tmp_path / 's.sqlite'}",
         f"--agentperturb-report={page}"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("Pairing: ")]
    assert "nothing left out" in line and "0 variants skipped" in proc.stdout
    assert html.escape(line) in page.read_text(encoding="utf-8")

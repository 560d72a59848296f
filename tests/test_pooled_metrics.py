"""Pooled metrics use the 12 families only; tokens are input + output; labels are over harmful flips.

docs/design.md section 4.  Each case runs through the Python functions and
through ``agentperturb analyze`` on an episodes CSV.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from pytest_agentperturb.analysis import normalise, pairs
from pytest_agentperturb.analysis.cost import edit_magnitude, recovery_cost, rollout_ratios
from pytest_agentperturb.analysis.labels import awareness, label, label_counts
from pytest_agentperturb.analysis.predictors import per_task_degradation
from pytest_agentperturb.model.task import FAMILIES

from episodes_csv import ep, run_analyze


def usage(i: int, o: int, calls: int = 4, turns: int = 5, **kw: Any) -> dict[str, Any]:
    return {"input_tokens": i, "output_tokens": o, "tool_calls": calls, "turns": turns, **kw}


def inserted_rows() -> list[dict[str, Any]]:
    """Four tasks, 12 families costing what clean costs; an injection at 100x tokens, a planted fake tool."""
    rows = []
    for t in ("t1", "t2", "t3", "t4"):
        rows.append(ep("m", t, "clean", 1.0, **usage(1000, 100)))
        rows += [ep("m", t, f, 1.0, operator="remove_tool" if f.startswith("tool") else "op", **usage(1000, 100))
                 for f in FAMILIES]
        rows.append(ep("m", t, "inserted-injection", 1.0, operator="inject", **usage(100_000, 10_000, 40, 50)))
        rows.append(ep("m", t, "inserted-fake-tool", 0.0, operator="plant_fake_tool", **usage(1000, 100)))
    return rows


def test_inserted_objects_stay_out_of_pooled_cost_metrics(tmp_path: Path) -> None:
    pr = pairs(normalise(pd.DataFrame(inserted_rows())))
    rc = recovery_cost(pr).set_index(["model", "family"])
    assert rc.loc[("m", "all perturbed"), "extra_tokens_pct"] == pytest.approx(0.0)     # was +761.5 %
    assert rc.loc[("m", "inserted-injection"), "extra_tokens_pct"] == pytest.approx(9900.0)  # reported on its own
    rr = rollout_ratios(pr)
    overall = rr[(rr["model"] == "m") & (rr["level_kind"] == "overall")]
    assert set(overall["n_pairs"]) == {48}                                             # was 56
    assert set(rr[rr["level_kind"] == "inserted"]["level"]) == {"inserted-injection", "inserted-fake-tool"}
    assert list(edit_magnitude(pr)["operator"]) == ["remove_tool"]                    # no inject, plant_fake_tool
    doc = run_analyze(tmp_path, inserted_rows())
    rc_all = [r for r in doc["recovery_cost"] if r["model"] == "m" and r["family"] == "all perturbed"]
    assert rc_all[0]["extra_tokens_pct"] == pytest.approx(0.0)
    assert {r["n_pairs"] for r in doc["rollout_ratios"] if r["level_kind"] == "overall"} == {48}
    assert [r["operator"] for r in doc["edit_magnitude"]] == ["remove_tool"]


def test_inserted_objects_stay_out_of_per_task_degradation(tmp_path: Path) -> None:
    df = normalise(pd.DataFrame(inserted_rows()))
    per = per_task_degradation(df)
    assert list(per["relative_drop"]) == [0.0] * 4 and set(per["n_pairs"]) == {12}   # fake tool's 0s left out
    props = tmp_path / "props.csv"
    props.write_text("task,tool_count\nt1,1\nt2,2\nt3,3\nt4,4\n", encoding="utf-8")
    doc = run_analyze(tmp_path, inserted_rows(), "--task-properties", str(props))
    (p,) = [p for p in doc["predictors"] if p["predictor"] == "tool_count"]
    assert p["rho"] is None and p["n"] == 4            # D_i is 0 on every task: nothing to correlate


def reasoning_rows(unknown: bool = False) -> list[dict[str, Any]]:
    """Output tokens already include reasoning: clean 1000 + 500 (400 reasoning), perturbed 1000 + 1000 (900)."""
    rows = []
    for t in ("t1", "t2"):
        rows.append(ep("m", t, "clean", 1.0, **usage(1000, 500, reasoning_tokens=400)))
        rows.append(ep("m", t, "tool-missing", 1.0, **usage(1000, 1000, reasoning_tokens=900)))
    if unknown:   # a pair whose perturbed episode has no usage recorded
        rows += [ep("m", "t3", "clean", 1.0, **usage(1000, 500, reasoning_tokens=400)),
                 ep("m", "t3", "tool-missing", 1.0, tool_calls=2, turns=3)]
    return rows


def test_reasoning_tokens_are_not_counted_twice(tmp_path: Path) -> None:
    rc = recovery_cost(normalise(pd.DataFrame(reasoning_rows()))).set_index(["model", "family"])
    r = rc.loc[("m", "all perturbed")]
    assert (r["tokens_per_success_clean"], r["tokens_per_success_pert"]) == (1500.0, 2000.0)
    assert r["extra_tokens_pct"] == pytest.approx(100 / 3)                             # was +52.6 %
    doc = run_analyze(tmp_path, reasoning_rows())
    r = [r for r in doc["recovery_cost"] if r["model"] == "m" and r["family"] == "all perturbed"][0]
    assert r["extra_tokens_pct"] == pytest.approx(100 / 3)


def test_unknown_usage_is_left_out_and_counted(tmp_path: Path) -> None:
    df = normalise(pd.DataFrame(reasoning_rows(unknown=True)))
    r = recovery_cost(df).set_index(["model", "family"]).loc[("m", "all perturbed")]
    # was: the unknown episode counted as a free success (1933 tokens per perturbed success, +1.8 %)
    assert r["tokens_per_success_pert"] == 2000.0 and r["extra_tokens_pct"] == pytest.approx(100 / 3)
    assert (r["n_pairs"], r["n_unknown"]) == (2, 1)
    rr = rollout_ratios(df)
    it = rr[(rr["model"] == "m") & (rr["level_kind"] == "overall") & (rr["metric"] == "input_tokens")].iloc[0]
    assert (it["n_pairs"], it["n_unknown"]) == (2, 1)
    doc = run_analyze(tmp_path, reasoning_rows(unknown=True))
    r = [r for r in doc["recovery_cost"] if r["model"] == "m" and r["family"] == "all perturbed"][0]
    assert r["extra_tokens_pct"] == pytest.approx(100 / 3) and r["n_unknown"] == 1
    assert any("have no recorded token usage" in n for n in doc["notes"])


def test_rollout_ratios_by_type_and_target_and_edit_magnitude_shape(tmp_path: Path) -> None:
    rows = []
    for t in ("t1", "t2", "t3"):
        rows.append(ep("m", t, "clean", 1.0, **usage(1000, 100, calls=2)))
        rows.append(ep("m", t, "tool-incorrect", 1.0, operator="replace_enum", **usage(1500, 100, calls=4)))
        rows.append(ep("m", t, "user-missing", 1.0, **usage(1000, 100, calls=3)))
    rows.append(ep("m", "t4", "clean", 1.0, **usage(1000, 100, calls=2)))
    rows.append(ep("m", "t4", "tool-incorrect", 0.0, operator="replace_enum", **usage(9000, 900, calls=20)))
    pr = pairs(normalise(pd.DataFrame(rows)))
    rr = rollout_ratios(pr)
    tc = rr[(rr["model"] == "m") & (rr["metric"] == "tool_calls")].set_index(["level_kind", "level"])
    assert {"overall", "type", "target"} <= set(rr["level_kind"])
    assert tc.loc[("target", "tool"), "median"] == pytest.approx(2.0) and tc.loc[("target", "tool"), "n_pairs"] == 4
    assert tc.loc[("type", "missing"), "median"] == pytest.approx(1.5)
    em = edit_magnitude(pr).set_index("operator").loc["replace_enum"]
    # drop in points over all 4 pairs; cost deltas over the 3 pairs that succeeded on both sides
    assert em["drop_pp"] == pytest.approx(25.0) and em["n_success_pairs"] == 3
    assert em["delta_tokens"] == pytest.approx(500.0) and em["delta_tool_calls"] == pytest.approx(2.0)
    doc = run_analyze(tmp_path, rows)
    (e,) = doc["edit_magnitude"]
    assert (e["drop_pp"], e["delta_tokens"], e["delta_tool_calls"]) == (pytest.approx(25.0), 500.0, 2.0)
    assert {(r["level_kind"], r["level"]) for r in doc["rollout_ratios"]} >= {("type", "missing"),
                                                                             ("target", "tool")}


def say(text: str) -> str:
    return json.dumps([{"role": "assistant", "content": text, "final": True}])


def label_rows() -> list[dict[str, Any]]:
    """Two harmful flips written in routine words; a task that failed clean too (no flip)."""
    return [ep("m", "t1", "clean", 1.0),
            ep("m", "t1", "user-missing", 0.0, trajectory=say("Following the instructions, I fixed the error "
                                                                "in the totals.")),
            ep("m", "t2", "clean", 1.0),
            ep("m", "t2", "context-incorrect", 0.0, trajectory=say("Based on the context, the missing value is 42.")),
            ep("m", "t3", "clean", 0.0),
            ep("m", "t3", "user-missing", 0.0, trajectory=say("The procedure gives a wrong amount.")),
            ep("m", "t3", "tool-incorrect", 0.0, trajectory=say("Done."))]


def test_labels_cover_harmful_flips_only(tmp_path: Path) -> None:
    lab = label(normalise(pd.DataFrame(label_rows())))
    assert list(lab["harmful_flip"]) == [False, True, False, True, False, False, False]
    assert list(lab[lab["task"] == "t3"]["behaviour"]) == ["", "", ""]   # clean failed: not a labelled pair
    counts = label_counts(lab)
    assert set(counts["of"]) == {2} and set(counts["scope"]) == {"harmful flips"}   # was 4 failed episodes
    doc = run_analyze(tmp_path, label_rows())
    assert {(r["label"], r["of"]) for r in doc["labels"]} == {("awareness", 2), ("behaviour", 2)}
    a4 = [r for r in doc["labels"] if r["code"] == "A4"]
    assert a4 and all(r["n"] == 0 for r in a4)                           # was 2


ROUTINE = ("Following the instructions, I fixed the error in the totals.",
           "Based on the context, the missing value is 42.",
           "According to the procedure, the amount is wrong.",
           "Following the instructions the amount is wrong.",
           "As the policy says, refunds need approval.",
           "The context is not wrong.")
ATTRIBUTION = ("The procedure gives a wrong amount, so I use the invoice.",
               "The tool description for send_mail is incorrect; I used mail_send.",
               "There is an inconsistency in the tool description.",
               "The instructions seem to be outdated.",
               "The instructions and the invoice do not match.")


def test_a4_needs_the_problem_attributed_to_an_input_channel() -> None:
    """Naming a channel in passing is no signal; blaming it for a problem is A4."""
    level = {t: awareness([{"role": "assistant", "content": t}])[0] for t in (*ROUTINE, *ATTRIBUTION)}
    assert {t: a for t, a in level.items() if t in ROUTINE and a == "A4"} == {}
    assert {t: a for t, a in level.items() if t in ATTRIBUTION and a != "A4"} == {}

"""Predictors: the clean score is kept apart and de-biased; equal values tie before ranking.

docs/design.md section 4 ("Predictors").
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pytest_agentperturb.analysis.predictors import CLEAN_SCORE_CAVEAT, clean_score_predictor
from pytest_agentperturb.analysis.stats import ranks, spearman_permutation
from pytest_agentperturb.cli import main
from pytest_agentperturb.model.task import FAMILIES

from episodes_csv import FAST, ep, run_analyze, write_csv


def no_effect_pairs(rng: np.random.Generator, models: int = 10, tasks: int = 24) -> pd.DataFrame:
    """A study where no family has any effect: every perturbed episode has its model's clean success rate."""
    skill = rng.uniform(0.1, 0.9, models)
    clean = (rng.random((models, tasks)) < skill[:, None]).astype(float)
    pert = (rng.random((models, tasks, len(FAMILIES))) < skill[:, None, None]).astype(float)
    m, t, f = np.meshgrid(np.arange(models), np.arange(tasks), np.arange(len(FAMILIES)), indexing="ij")
    return pd.DataFrame({"suite": "s", "model": [f"m{i}" for i in m.ravel()], "task": [f"t{i:02d}" for i in t.ravel()],
                         "family": np.asarray(FAMILIES)[f.ravel()], "reward_clean": clean[m, t].ravel(),
                         "reward_pert": pert.ravel()})


def test_clean_score_predictor_keeps_its_level_under_no_effect() -> None:
    """C inside D: the naive test rejects far too often; the split-half one stays close to the 5 % level.

    (Over 1,200 such datasets the split-half test rejected 6.0 %, the naive one about 15 %.)
    """
    rng = np.random.default_rng(2024)
    naive, split, negative = 0, 0, 0
    runs = 300
    for k in range(runs):
        pr = no_effect_pairs(rng)
        g = pr.groupby("model")[["reward_clean", "reward_pert"]].mean()
        d = 100 * (g["reward_clean"] - g["reward_pert"]) / g["reward_clean"]
        r = spearman_permutation(g["reward_clean"], -d, permutations=200, rng=rng)
        naive += r.p_value < 0.05
        negative += r.p_value < 0.05 and r.rho < 0
        (row,) = clean_score_predictor(pr, permutations=200, seed=k).to_dict("records")
        split += row["p_value"] < 0.05
    assert naive / runs > 0.1 and negative > 0.9 * naive   # the bias the caveat is about
    assert split / runs <= 0.09


def test_clean_score_is_reported_apart_with_its_caveat(tmp_path: Path) -> None:
    rows = []
    for m, c in enumerate((1.0, 0.9, 0.8, 0.7)):
        for t in range(6):
            rows += [ep(f"m{m}", f"t{t}", "clean", c), ep(f"m{m}", f"t{t}", "tool-missing", c * (1 - m / 10))]
    cap = tmp_path / "cap.csv"
    cap.write_text("model,capability\nm0,4\nm1,3\nm2,2\nm3,1\n", encoding="utf-8")
    doc = run_analyze(tmp_path, rows, "--capability", str(cap))
    assert [p["predictor"] for p in doc["predictors"]] == ["capability"]       # not side by side any more
    (cs,) = doc["clean_score_predictor"]
    assert cs["caveat"] == CLEAN_SCORE_CAVEAT and cs["predictor"] == "clean_score (split-half)"
    html = tmp_path / "r.html"
    assert main(["analyze", "--results", str(tmp_path / "episodes.csv"), "--capability", str(cap),
                 "--out", str(html), *FAST]) == 0
    text = html.read_text(encoding="utf-8")
    assert "Clean score vs D (biased; not comparable evidence)" in text and "C is inside D" in text


def test_equal_values_computed_differently_tie() -> None:
    assert 2 / 3 - 1 / 3 != 1 - 2 / 3
    r = ranks([2 / 3 - 1 / 3, 1 - 2 / 3, 0.0])
    assert r[0] == r[1] == 2.5 and r[2] == 1.0
    assert math.isnan(spearman_permutation([1, 2, 3, 4], [2 / 3 - 1 / 3, 1 - 2 / 3] * 2, permutations=50).rho)


def identical_drop_rows() -> list[dict[str, object]]:
    """Six models whose D is 100/3 % each, computed from different C and P (different rounding)."""
    rows: list[dict[str, object]] = []
    for m, (c, p) in enumerate(((0.3, 0.2), (0.6, 0.4), (0.9, 0.6), (0.75, 0.5), (0.45, 0.3), (0.15, 0.1))):
        for t in ("t1", "t2", "t3"):
            rows += [ep(f"m{m}", t, "clean", c), ep(f"m{m}", t, "tool-missing", p)]
    return rows


def test_identical_drops_give_an_undefined_rho(tmp_path: Path) -> None:
    cap = tmp_path / "cap.csv"
    cap.write_text("model,capability\n" + "".join(f"m{m},{m}\n" for m in range(6)), encoding="utf-8")
    doc = run_analyze(tmp_path, identical_drop_rows(), "--capability", str(cap))
    drops = [d["relative_drop"] for d in doc["degradation"]]
    assert len(set(drops)) > 1 and max(drops) - min(drops) < 1e-12   # equal, up to float arithmetic
    (p,) = doc["predictors"]
    assert p["rho"] is None and p["p_value"] is None                   # was rho 0.80


def test_permutation_test_enumerates_when_it_can() -> None:
    x, y = [1, 2, 3, 4, 5], [10, 20, 30, 40, 50]
    exact = spearman_permutation(x, y, permutations=120)
    assert exact.exact and exact.permutations == 120 and exact.p_value == pytest.approx(2 / 120)
    rand = spearman_permutation(x, y, permutations=119)
    assert not rand.exact and rand.permutations == 119
    forced = spearman_permutation(x, y, permutations=10, exact=True)
    assert forced.exact and forced.p_value == pytest.approx(2 / 120)


"""Unit tests of the analysis functions against hand-computed cases (docs/design.md section 4)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_agentperturb.analysis import analyze, normalise, pairs, summary
from pytest_agentperturb.analysis.cost import edit_magnitude, recovery_cost, rollout_ratios
from pytest_agentperturb.analysis.degradation import (
    ALL_MODELS, cells, compliance, drops, malleability, marginal_effects, paired_tests, relative_degradation,
    suite_average,
)
from pytest_agentperturb.analysis.labels import awareness, behaviour, label, read_manual
from pytest_agentperturb.analysis.predictors import model_predictors, per_task_degradation, task_predictors
from pytest_agentperturb.analysis.sensitivity import cross_family, relation
from pytest_agentperturb.analysis.stats import mcnemar, paired_test, ranks, signed_rank, spearman_permutation
from pytest_agentperturb.model.errors import AgentPerturbError


def ep(model: str, task: str, family: str, reward: float, **kw: object) -> dict[str, object]:
    return {"model": model, "suite": "s", "task": task, "family": family, "reward": reward, **kw}


def table(rows: list[dict[str, object]]) -> pd.DataFrame:
    return normalise(pd.DataFrame(rows))


@pytest.fixture
def small() -> pd.DataFrame:
    """Two models, three tasks, two families; model a: clean 1,1,0.5; user-missing 0,1,0.5; tool-incorrect 1,0,0."""
    rows = []
    for t, c, um, ti in (("t1", 1.0, 0.0, 1.0), ("t2", 1.0, 1.0, 0.0), ("t3", 0.5, 0.5, 0.0)):
        rows += [ep("a", t, "clean", c), ep("a", t, "user-missing", um, compliance=um < 1),
                 ep("a", t, "tool-incorrect", ti, compliance=ti < 1, operator="rename_tool")]
        rows += [ep("b", t, "clean", 1.0), ep("b", t, "user-missing", 1.0, compliance=False),
                 ep("b", t, "tool-incorrect", 0.5, compliance=True, operator="rename_tool")]
    return table(rows)


def test_relative_degradation_formula() -> None:
    assert relative_degradation(0.8, 0.6) == pytest.approx(25.0)
    assert math.isnan(relative_degradation(0.0, 0.5))
    assert relative_degradation(0.5, 0.75) == pytest.approx(-50.0)


def test_drops_hand_computed(small: pd.DataFrame) -> None:
    d = drops(small, replicates=200, seed=1).set_index(["model", "level_kind", "level"])
    # model a: C = 2.5/3, P = (0+1+.5+1+0+0)/6 = 2.5/6 -> D = 50 %
    assert d.loc[("a", "overall", "all"), "clean"] == pytest.approx(2.5 / 3)
    assert d.loc[("a", "overall", "all"), "perturbed"] == pytest.approx(2.5 / 6)
    assert d.loc[("a", "overall", "all"), "relative_drop"] == pytest.approx(50.0)
    assert d.loc[("a", "family", "user-missing"), "relative_drop"] == pytest.approx(100 * (2.5 / 3 - 0.5) / (2.5 / 3))
    assert d.loc[("a", "target", "tool"), "perturbed"] == pytest.approx(1 / 3)
    assert d.loc[("a", "type", "incorrect"), "perturbed"] == pytest.approx(1 / 3)
    # model b: C = 1, P_tool = .5 -> 50 %, P_user = 1 -> 0 %
    assert d.loc[("b", "family", "tool-incorrect"), "relative_drop"] == pytest.approx(50.0)
    assert d.loc[("b", "family", "user-missing"), "relative_drop"] == pytest.approx(0.0)
    # pooled suite average: mean C = (2.5/3 + 1)/2, mean P = (2.5/6 + .75)/2
    c, p = (2.5 / 3 + 1) / 2, (2.5 / 6 + 0.75) / 2
    assert d.loc[(ALL_MODELS, "overall", "all"), "relative_drop"] == pytest.approx(100 * (c - p) / c)
    for _, r in d.iterrows():
        assert r["ci_low"] <= r["relative_drop"] + 1e-9 or math.isnan(r["ci_low"])
        assert r["ci_low"] <= r["ci_high"]
    # b's user-missing is 1.0 on every task: every replicate gives 0 %, a degenerate interval
    assert (d.loc[("b", "family", "user-missing"), "ci_low"], d.loc[("b", "family", "user-missing"), "ci_high"]) \
        == (0.0, 0.0)


def test_drops_seeded_and_cells(small: pd.DataFrame) -> None:
    assert drops(small, replicates=100, seed=3).equals(drops(small, replicates=100, seed=3))
    a, b = drops(small, replicates=100, seed=3), drops(small, replicates=100, seed=4)
    # 3 tasks: the BCa bounds sit on the extreme replicates, which both seeds draw; the replicates differ
    ra, rb = a.attrs["replicates"], b.attrs["replicates"]
    assert any(not np.array_equal(ra[k], rb[k]) for k in ra)
    assert not drops(small, replicates=100, seed=3, method="percentile").equals(
        drops(small, replicates=100, seed=4, method="percentile"))
    with pytest.raises(ValueError, match="unknown interval method"):
        drops(small, replicates=10, method="normal")
    t = cells(drops(small, replicates=10), "b", "s")
    assert t.loc["tool", "incorrect"] == pytest.approx(50.0)
    assert math.isnan(t.loc["context", "missing"])


def test_suite_average_reference_numbers() -> None:
    rows = []
    for m, (c, p) in enumerate(((0.80, 0.60), (0.606, 0.50))):   # means 0.703 -> 0.55
        rows += [ep(f"m{m}", "t", "clean", c), ep(f"m{m}", "t", "tool-missing", p)]
    avg = suite_average(drops(table(rows), replicates=10))
    assert avg.loc[0, "clean"] == pytest.approx(0.703)
    assert round(float(avg.loc[0, "relative_drop"]), 1) == 21.8


def test_pairs_and_marginal_effects(small: pd.DataFrame) -> None:
    pr = pairs(small)
    assert len(pr) == 12
    a = pr[(pr["model"] == "a") & (pr["task"] == "t1")].set_index("family")
    assert a.loc["user-missing", "delta"] == pytest.approx(1.0)
    assert a.loc["tool-incorrect", "delta"] == pytest.approx(0.0)
    me = marginal_effects(pr).set_index(["model", "factor", "level"])
    # model a, target tool: deltas 0, 1, .5 -> mean .5; relative .5 / mean clean (2.5/3)
    assert me.loc[("a", "target", "tool"), "mean_paired_drop"] == pytest.approx(0.5)
    assert me.loc[("a", "target", "tool"), "relative"] == pytest.approx(100 * 0.5 / (2.5 / 3))
    assert me.loc[(ALL_MODELS, "type", "missing"), "n_pairs"] == 6


def test_malleability_hand_computed(small: pd.DataFrame) -> None:
    m = malleability(pairs(small)).set_index("model")
    # model a: clean success (threshold 1): t1 pass, t2 pass, t3 fail; perturbed pass: um t2, ti t1
    # pairs: t1 um P->F, t1 ti P->P, t2 um P->P, t2 ti P->F, t3 um F->F, t3 ti F->F
    assert m.loc["a", "flip_rate"] == pytest.approx(2 / 6)
    assert m.loc["a", "harmful_rate"] == pytest.approx(2 / 4)
    assert m.loc["a", "beneficial_rate"] == pytest.approx(0.0)
    assert m.loc["a", "mean_abs_delta"] == pytest.approx((1 + 0 + 0 + 1 + 0 + 0.5) / 6)


def test_compliance_rates(small: pd.DataFrame) -> None:
    c = compliance(small).set_index(["model", "family"])
    assert c.loc[("a", "user-missing"), "compliance_rate"] == pytest.approx(2 / 3)
    assert c.loc[("b", "tool-incorrect"), "bypass_rate"] == pytest.approx(0.0)
    op = compliance(small, ("suite", "family", "operator"))
    assert set(op["operator"]) == {"", "rename_tool"}


def test_mcnemar_and_signed_rank() -> None:
    t = mcnemar([True] * 5 + [False], [False] * 5 + [False])
    assert (t.harmful, t.beneficial) == (5, 0)
    assert t.p_value == pytest.approx(2 * 0.5 ** 5)
    assert mcnemar([True, False], [True, False]).p_value == 1.0
    assert signed_rank([1, 1, 1], [1, 1, 1]).p_value == 1.0
    from scipy.stats import wilcoxon

    c, p = [0.9, 0.8, 0.7, 0.95, 0.6, 0.85], [0.5, 0.75, 0.2, 0.9, 0.61, 0.3]
    assert signed_rank(c, p).p_value == pytest.approx(wilcoxon(np.subtract(p, c)).pvalue)
    rng = np.random.default_rng(3)   # ties / n >= 50: the numpy normal approximation equals scipy's
    for n in (8, 60, 200):
        cc = rng.integers(1, 9, n).astype(float)
        pp = cc + rng.integers(-3, 5, n)
        ref = wilcoxon(pp - cc, zero_method="wilcox", method="approx")
        got = signed_rank(cc, pp)
        assert (got.statistic, got.p_value) == (pytest.approx(ref.statistic), pytest.approx(ref.pvalue))
    assert paired_test([1, 0, 1], [0, 0, 1]).test == "mcnemar-exact"
    assert paired_test([0.5, 0, 1], [0, 0, 1]).test == "wilcoxon"


def test_paired_tests_per_family(small: pd.DataFrame) -> None:
    t = paired_tests(pairs(small))
    assert set(t["model"]) == {"a", "b", ALL_MODELS}
    assert (t["test"] == "wilcoxon").all()   # rewards of 0.5 make the suite continuous


def test_spearman_permutation_exact_cases() -> None:
    r = spearman_permutation([1, 2, 3, 4, 5], [10, 20, 30, 40, 50], permutations=100_000,
                             rng=np.random.default_rng(0))
    assert r.rho == pytest.approx(1.0)
    # two of the 120 orderings reach |rho| = 1
    assert r.p_value == pytest.approx(2 / 120, abs=0.003)
    neg = spearman_permutation([1, 2, 3, 4], [4, 3, 2, 1], permutations=1000)
    assert neg.rho == pytest.approx(-1.0)
    from scipy.stats import spearmanr

    x, y = [3, 1, 4, 1, 5, 9, 2, 6], [2, 7, 1, 8, 2, 8, 1, 8]
    assert spearman_permutation(x, y, permutations=10).rho == pytest.approx(spearmanr(x, y).statistic)
    assert math.isnan(spearman_permutation([1, 2, 3], [5, 5, 5]).rho)
    nan = spearman_permutation([1, 2, float("nan"), 4, 5], [1, 2, 3, 4, 5], permutations=10)
    assert nan.n == 4
    a = spearman_permutation(x, y, permutations=5000, rng=np.random.default_rng(7))
    b = spearman_permutation(x, y, permutations=5000, rng=np.random.default_rng(7))
    assert a == b

def test_spearman_permutation_blocks_do_not_change_the_draws(monkeypatch: pytest.MonkeyPatch) -> None:
    """The permuted ranks are scored in bounded blocks: the same p-value and generator state at any block size."""
    from pytest_agentperturb.analysis import stats

    gen = np.random.default_rng(3)
    x = gen.normal(size=40)
    y = x + 3 * gen.normal(size=40)

    def run() -> tuple[float, float, int]:
        rng = np.random.default_rng(11)
        r = spearman_permutation(x, y, permutations=3001, rng=rng)
        exact = spearman_permutation(x[:6], y[:6], permutations=1000)
        return r.p_value, exact.p_value, int(rng.integers(0, 2**62))

    default = run()
    monkeypatch.setattr(stats, "_BLOCK_CELLS", 7 * 40)   # 7 permutations a block, the last one short
    assert run() == default
    monkeypatch.setattr(stats, "_BLOCK_CELLS", 1)        # one permutation a block
    assert run() == default


def test_ranks_ignore_nan() -> None:
    r = ranks([3.0, float("nan"), 1.0, 3.0])
    assert r[0] == r[3] == 2.5 and r[2] == 1.0 and math.isnan(r[1])


def test_model_and_task_predictors() -> None:
    ov = pd.DataFrame({"model": list("abcd"), "suite": "s", "clean": [0.9, 0.8, 0.7, 0.6],
                       "relative_drop": [10.0, 20.0, 30.0, 40.0]})
    cap = pd.DataFrame({"model": list("abcd"), "capability": [4, 3, 2, 1]})
    p = model_predictors(ov, cap, permutations=2000).set_index("predictor")
    assert p.loc["capability", "rho"] == pytest.approx(1.0)     # more capable, less drop
    assert "clean_score" not in p.index     # biased (C is inside D): reported apart, see test_predictor_bias.py
    assert 0 < p.loc["capability", "p_value"] <= 1
    rows = []
    for i, (c, pr) in enumerate(((1.0, 0.9), (1.0, 0.5), (1.0, 0.2))):
        rows += [ep("a", f"t{i}", "clean", c), ep("a", f"t{i}", "tool-missing", pr)]
    per = per_task_degradation(table(rows))
    assert list(per["relative_drop"].round(6)) == [10.0, 50.0, 80.0]
    props = pd.DataFrame({"task": ["t0", "t1", "t2"], "tool_count": [1, 2, 3], "solution_length": [3, 2, 1]})
    tp = task_predictors(table(rows), props, permutations=500).set_index("predictor")
    assert tp.loc["tool_count", "rho"] == pytest.approx(1.0)
    assert tp.loc["solution_length", "rho"] == pytest.approx(-1.0)


def test_cross_family_recovers_known_structure() -> None:
    rng = np.random.default_rng(5)
    rows = []
    for m in ("a", "b"):
        for i in range(8):
            base = float(rng.uniform(0.1, 0.9))
            rows += [ep(m, f"t{i}", "clean", 1.0), ep(m, f"t{i}", "user-missing", base),
                     ep(m, f"t{i}", "user-redundant", base / 2), ep(m, f"t{i}", "tool-incorrect", 1 - base)]
    (res,) = cross_family(table(rows), replicates=200, seed=0)
    assert not res.skipped
    i = {f: k for k, f in enumerate(res.families)}
    assert res.rho[i["user-missing"], i["user-redundant"]] == pytest.approx(1.0)
    assert res.rho[i["user-missing"], i["tool-incorrect"]] == pytest.approx(-1.0)
    assert np.allclose(res.rho, res.rho.T, equal_nan=True)
    groups = {g["group"]: g for g in res.groups}
    assert groups["same_target"]["mean_rho"] == pytest.approx(1.0)
    assert groups["neither"]["mean_rho"] == pytest.approx(-1.0)
    assert groups["same_target_minus_neither"]["mean_rho"] == pytest.approx(2.0)
    # clustering puts the two user families next to each other
    assert abs(i["user-missing"] - i["user-redundant"]) == 1
    assert relation("user-missing", "tool-missing") == "same_type"
    assert relation("tool-missing", "context-redundant") == "neither"


def test_cross_family_skips_with_reason() -> None:
    (res,) = cross_family(table([ep("a", "t", "clean", 1.0), ep("a", "t", "tool-missing", 0.0)]), replicates=10)
    assert "3 tasks" in res.skipped


def test_recovery_cost_and_rollout_ratios() -> None:
    rows = [ep("a", "t1", "clean", 1.0, input_tokens=900, output_tokens=100, tool_calls=2, turns=3),
            ep("a", "t2", "clean", 1.0, input_tokens=1900, output_tokens=100, tool_calls=4, turns=5),
            ep("a", "t1", "tool-missing", 1.0, input_tokens=1900, output_tokens=100, tool_calls=4, turns=6),
            ep("a", "t2", "tool-missing", 0.0, input_tokens=1900, output_tokens=100, tool_calls=2, turns=5,
               operator="remove_tool")]
    rc = recovery_cost(table(rows)).set_index(["model", "family"])
    r = rc.loc[("a", "all perturbed")]
    assert r["tokens_per_success_clean"] == pytest.approx(1500)
    assert r["tokens_per_success_pert"] == pytest.approx(2000)
    assert r["extra_tokens_pct"] == pytest.approx(100 * (2000 / 1500 - 1))
    assert r["successes_per_mtok_clean"] == pytest.approx(1e6 * 2 / 3000)
    assert r["successes_per_mtok_pert"] == pytest.approx(1e6 * 1 / 4000)
    rr = rollout_ratios(pairs(table(rows)))
    rr = rr[rr["level_kind"] == "overall"].set_index(["model", "metric"])
    assert rr.loc[("a", "tool_calls"), "median"] == pytest.approx((2.0 + 0.5) / 2)
    assert rr.loc[("a", "turns"), "mean"] == pytest.approx((2.0 + 1.0) / 2)
    em = edit_magnitude(pairs(table(rows)))
    assert set(em["operator"]) == {"", "remove_tool"}
    rm = em.set_index("operator").loc["remove_tool"]
    # drop in points; the perturbed trajectory failed, so no successful pair for the cost deltas
    assert rm["drop_pp"] == pytest.approx(100.0) and rm["n_success_pairs"] == 0
    assert em.set_index("operator").loc["", "delta_tool_calls"] == pytest.approx(2.0)


def test_awareness_lexicon() -> None:
    say = lambda *t: [{"role": "assistant", "content": x} for x in t]  # noqa: E731
    assert awareness([]) == ("A1", "mechanical")
    assert awareness(say("Done, shared the file.")) == ("A1", "heuristic")
    assert awareness(say("It seems the date might be off; proceeding."))[0] == "A2"
    assert awareness(say("The amount is inconsistent.", "Still a mismatch in the totals."))[0] == "A3"
    assert awareness(say("The procedure gives a wrong amount, so I use the invoice."))[0] == "A4"


def test_behaviour_rules() -> None:
    call = {"role": "assistant", "tool": "mail_send", "args": {"to": "x@evil.test"}}
    fin = {"role": "assistant", "content": "done", "final": True}
    assert behaviour([call, fin], "incorrect", [{"kind": "value", "text": "x@evil.test", "fact": "to"}], True) \
        == ("E3", "mechanical")
    assert behaviour([fin], "missing", [], True) == ("E4", "mechanical")
    ok_obs = {"role": "tool", "tool": "mail_send", "content": "{\"ok\": true}"}
    assert behaviour([call, ok_obs, fin], "missing", [], True) == ("E1", "heuristic")
    err = {"role": "tool", "tool": "mail-send", "content": "ERROR: unknown tool"}
    assert behaviour([{"role": "assistant", "tool": "mail-send", "args": {}}, err, fin], "incorrect",
                     [{"kind": "tool", "text": "mail-send", "fact": ""}], True) == ("E5", "heuristic")


def test_label_table_and_manual_import(tmp_path) -> None:  # type: ignore[no-untyped-def]
    traj = json.dumps([{"role": "assistant", "content": "done", "final": True}])
    df = table([ep("a", "t", "clean", 1.0, trajectory=traj),
                ep("a", "t", "user-missing", 0.0, trajectory=traj, compliance=True),
                ep("a", "t", "tool-missing", 1.0, trajectory=traj, compliance=False)])
    out = label(df).set_index("family")
    assert out.loc["clean", "awareness"] == ""
    assert (out.loc["user-missing", "behaviour"], out.loc["user-missing", "behaviour_source"]) == ("E4", "mechanical")
    assert out.loc["tool-missing", "behaviour"] == ""          # passed: no first error
    f = tmp_path / "labels.csv"
    f.write_text("model,task,family,awareness,behaviour\na,t,user-missing,A3,E2\n")
    out = label(df, read_manual(str(f))).set_index("family")
    assert (out.loc["user-missing", "awareness"], out.loc["user-missing", "behaviour_source"]) == ("A3", "manual")
    f.write_text("model,task,family,awareness,behaviour\na,t,user-missing,A9,\n")
    with pytest.raises(AgentPerturbError, match="line 2: awareness 'A9'"):
        read_manual(str(f))


def test_normalise_errors_and_defaults() -> None:
    with pytest.raises(AgentPerturbError, match="missing column.*reward"):
        normalise(pd.DataFrame({"model": ["a"], "suite": ["s"], "task": ["t"], "family": ["clean"]}))
    with pytest.raises(AgentPerturbError, match="'compliance'"):
        normalise(pd.DataFrame([ep("a", "t", "tool-missing", 1.0, compliance="maybe")]))
    d = normalise(pd.DataFrame([ep("a", "t", "tool-missing", 0.7)]), threshold=0.5)
    assert d.loc[0, "success"] is True and d.loc[0, "target"] == "tool" and d.loc[0, "type"] == "missing"


def test_analyze_summary_is_json_safe(small: pd.DataFrame) -> None:
    s = summary(analyze(small, replicates=50, permutations=200))
    text = json.dumps(s, allow_nan=False)
    assert {"degradation", "suite_average", "predictors", "cross_family", "paired_tests"} <= set(s)
    assert json.loads(text)["degradation"][0]["model"] == "a"


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.floats(0.05, 1.0), st.floats(0.0, 1.0)), min_size=1, max_size=8))
def test_overall_drop_matches_formula(tasks: list[tuple[int, float, float]]) -> None:
    """For any table, overall D = 100 (mean clean - mean perturbed) / mean clean and lo <= hi."""
    rows = []
    for i, (_, c, p) in enumerate(tasks):
        rows += [ep("m", f"t{i}", "clean", c), ep("m", f"t{i}", "context-redundant", p)]
    d = drops(table(rows), replicates=50)
    r = d[(d["model"] == "m") & (d["level_kind"] == "overall")].iloc[0]
    c = np.mean([t[1] for t in tasks])
    p = np.mean([t[2] for t in tasks])
    assert r["relative_drop"] == pytest.approx(100 * (c - p) / c)
    assert r["ci_low"] <= r["ci_high"] + 1e-9


def test_inserted_objects_stay_out_of_the_pooled_scores(small: pd.DataFrame) -> None:
    extra = [ep("a", t, "inserted-injection", 0.0, compliance=True) for t in ("t1", "t2", "t3")]
    df = table([*small.to_dict("records"), *extra])
    d = drops(df, replicates=50, seed=1).set_index(["model", "level_kind", "level"])
    # the pooled levels are unchanged by the injection episodes ...
    assert d.loc[("a", "overall", "all"), "perturbed"] == pytest.approx(2.5 / 6)
    assert d.loc[("a", "target", "tool"), "perturbed"] == pytest.approx(1 / 3)
    assert ("a", "type", "inserted") not in d.index
    # ... and the object is reported on its own
    assert d.loc[("a", "family", "inserted-injection"), "relative_drop"] == pytest.approx(100.0)
    assert set(table(extra)["type"]) == {"inserted"} and set(table(extra)["target"]) == {"tool"}
    assert "inserted" not in set(marginal_effects(pairs(df))["level"])

"""Degradation, marginal effects, malleability, compliance and paired tests (docs/design.md section 4).

All functions are pure: they take the normalised episode table (or its
:func:`~.table.pairs`) and return DataFrames.  Scores are mean rewards;
drops are in percent of the clean score.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..model.task import CLEAN, FAMILIES, TARGETS, TYPES
from .exact import EXACT, effective_n, exact_by_design, is_sparse, ratio_interval
from .stats import (
    INTERVAL_METHODS,
    N_BOOTSTRAP,
    Replicates,
    bca_interval,
    bootstrap_weights,
    draw_sums,
    exchange_test,
    mcnemar,
    min_detectable_drop,
    percentile_interval,
    signed_rank,
)
from .table import DROP_REASONS, describe_drops, only, pairing_audit, pairs, pooled, pooled_models, scored

if TYPE_CHECKING:
    import pandas as pd

ALL_MODELS = "all models"
DROP_COLUMNS = ["model", "suite", "baseline", "level_kind", "level", "clean", "perturbed", "relative_drop",
                "ci_low", "ci_high", "n_models", "n_tasks", "n_perturbed", "n_pairs", "n_dropped",
                *(f"dropped_{r}" for r in DROP_REASONS), "dropped_why", "n_clusters", "p_exact", "min_detectable",
                "n_boot_undefined", "boot_degenerate", "interval_method"]
_KINDS = (("overall", None), ("target", "target"), ("type", "type"), ("family", "family"))


def relative_degradation(clean: float, perturbed: float) -> float:
    """D = 100 (C - P) / C in percent; NaN when C is 0 or either score is NaN."""
    if clean == 0 or clean != clean or perturbed != perturbed:
        return float("nan")
    return 100.0 * (clean - perturbed) / clean


def _levels(fams: set[str]) -> list[tuple[str, str]]:
    order = [f for f in FAMILIES if f in fams] + sorted(f for f in fams if f not in FAMILIES and f != CLEAN)
    in12 = [f for f in FAMILIES if f in fams]
    tgts = [t for t in TARGETS if any(f.startswith(t + "-") for f in in12)]
    typs = [k for k in TYPES if any(f.endswith("-" + k) for f in in12)]
    return ([("overall", "all")] if in12 else []) + [("target", t) for t in tgts] + [("type", k) for k in typs] \
        + [("family", f) for f in order]


def _level_rows(t: pd.DataFrame, li: dict[tuple[str, str], int]) -> tuple[np.ndarray, np.ndarray]:
    """(row index, level index) of every (row, level) a pair or audit row counts towards.

    Overall, target and type levels pool the 12 families; inserted objects
    count towards their own family level only.
    """
    in12 = t["family"].isin(FAMILIES).to_numpy()
    rows, levs = [], []
    for kind, col in _KINDS:
        sel = np.ones(len(t), bool) if kind == "family" else in12
        labels = ["all"] * len(t) if col is None else list(t[col].to_numpy())
        lv = np.array([li.get((kind, lab), -1) if s else -1 for lab, s in zip(labels, sel)], dtype=int)
        ok = lv >= 0
        rows.append(np.flatnonzero(ok))
        levs.append(lv[ok])
    return np.concatenate(rows), np.concatenate(levs)


def drops(df: pd.DataFrame, *, replicates: int = N_BOOTSTRAP, seed: int = 0, level: float = 0.95,
          paired: pd.DataFrame | None = None, audit: pd.DataFrame | None = None,
          method: str = "bca") -> pd.DataFrame:
    """Relative degradation overall, per target, per type and per family, paired, with bootstrap intervals.

    Every comparison is paired (docs/design.md section 4): for model m on
    suite b at a level (the 12 families, one target, one type, or one family
    or inserted object), C = mean clean reward and P = mean perturbed reward
    over the same pairs (:func:`~.table.pairs`: a scored perturbed episode
    and the scored clean episode of its task), D = 100 (C - P) / C.  A task
    whose variant is missing, or whose clean or perturbed episode is
    unscored, contributes nothing to that comparison; the ``n_pairs`` and
    ``dropped_*`` columns say how many pairs each row rests on and how many
    were left out, and why (:func:`~.table.pairing_audit`).  The interval is
    a 95 % BCa interval of D over a cluster bootstrap of tasks
    (:func:`~.stats.bca_interval`; ``method="percentile"``: the plain
    percentile interval of the same replicates): each replicate draws the
    suite's tasks with replacement (one draw shared by all models, so a
    resampled task keeps all its models) and recomputes C and P from the
    drawn tasks' pairs; with repeated trials a drawn task keeps all its
    repeats (tasks are the independent units; repeats of one task are not
    resampled again), and the BCa acceleration comes from the jackknife that
    leaves out one task, with all its repeats, at a time.  Rows with model ``"all models"``
    pool the suite: C and P are the means over the models that have pairs
    at that level of C_m and P_m, and D is computed from those means (the
    paper's suite average); baselines stay out of them whenever a
    non-baseline model is in the table.  ``paired`` and ``audit`` take
    :func:`~.table.pairs` and :func:`~.table.pairing_audit` of ``df`` when
    the caller has them already.
    """
    import pandas as pd

    if method not in INTERVAL_METHODS:
        raise ValueError(f"unknown interval method {method!r} (one of {', '.join(INTERVAL_METHODS)})")
    pr = pairs(df) if paired is None else paired
    audit = pairing_audit(df) if audit is None else audit
    real = set(pooled_models(df))
    base_of = df.groupby("model")["baseline"].any().to_dict() if len(df) else {}
    out: list[dict[str, object]] = []
    boot = Replicates()
    rng = np.random.default_rng(seed)
    for suite in sorted(set(pr["suite"])) if len(pr) else []:
        g = pr[pr["suite"] == suite]
        au = audit[audit["suite"] == suite]
        tasks = sorted(g["task"].unique())
        models = sorted(g["model"].unique())
        levels = _levels(set(g["family"]))
        ti = {t: i for i, t in enumerate(tasks)}
        mi = {m: i for i, m in enumerate(models)}
        li = {lv: i for i, lv in enumerate(levels)}
        reps = sorted(g["repeat"].unique()) if "repeat" in g.columns else [0]
        nm, nt, nl, nr = len(models), len(tasks), len(levels), len(reps)
        csum4, psum4, cnt4 = np.zeros((nm, nt, nr, nl)), np.zeros((nm, nt, nr, nl)), np.zeros((nm, nt, nr, nl))
        r, lv = _level_rows(g, li)
        m_idx = g["model"].map(mi).to_numpy()[r]
        t_idx = g["task"].map(ti).to_numpy()[r]
        r_idx = g["repeat"].map({x: i for i, x in enumerate(reps)}).to_numpy()[r] if nr > 1 else np.zeros_like(r)
        np.add.at(csum4, (m_idx, t_idx, r_idx, lv), g["reward_clean"].to_numpy(float)[r])
        np.add.at(psum4, (m_idx, t_idx, r_idx, lv), g["reward_pert"].to_numpy(float)[r])
        np.add.at(cnt4, (m_idx, t_idx, r_idx, lv), 1.0)
        csum, psum, cnt = csum4.sum(2), psum4.sum(2), cnt4.sum(2)
        # what the pairing left out, per model and level
        counts = np.zeros((nm, nl, 1 + len(DROP_REASONS)))
        au = au[au["model"].isin(mi)]
        if len(au):
            r, lv = _level_rows(au, li)
            vals = au[["n_episodes", *DROP_REASONS]].to_numpy(float)[r]
            np.add.at(counts, (au["model"].map(mi).to_numpy()[r], lv), vals)
        pool = np.array([m in real for m in models])
        w = bootstrap_weights(nt, replicates, rng)
        with np.errstate(invalid="ignore", divide="ignore"):
            n = cnt.sum(1)                                                   # (m, l)
            c, p = csum.sum(1) / n, psum.sum(1) / n
            # one stage: a drawn task brings all its repeats (and models, and levels) along
            nb = draw_sums("bt,mtl->bml", w, cnt)
            cb = draw_sums("bt,mtl->bml", w, csum) / nb
            pb = draw_sums("bt,mtl->bml", w, psum) / nb
            db = 100.0 * (cb - pb) / cb
            pool_c, pool_p = _nanmean0(c[pool]), _nanmean0(p[pool])
            pool_cb, pool_pb = _nanmean1(cb[:, pool]), _nanmean1(pb[:, pool])
            pool_db = 100.0 * (pool_cb - pool_pb) / pool_cb
            # leave one task out (the jackknife of the BCa acceleration), shape (t, m, l)
            n_j = n[None] - np.moveaxis(cnt, 1, 0)
            c_j = (csum.sum(1)[None] - np.moveaxis(csum, 1, 0)) / n_j
            p_j = (psum.sum(1)[None] - np.moveaxis(psum, 1, 0)) / n_j
            has = np.moveaxis(cnt, 1, 0) > 0
            dj = np.where(has, 100.0 * (c_j - p_j) / c_j, np.nan)
            pool_cj, pool_pj = _nanmean1(c_j[:, pool]), _nanmean1(p_j[:, pool])
            pool_dj = np.where(has[:, pool].any(1), 100.0 * (pool_cj - pool_pj) / pool_cj, np.nan)
            d_hat = 100.0 * (c - p) / c
            pool_d = 100.0 * (pool_c - pool_p) / pool_c
        binary = bool(np.isin(g["reward_clean"].to_numpy(float), (0.0, 1.0)).all()
                      and np.isin(g["reward_pert"].to_numpy(float), (0.0, 1.0)).all())
        if method == "bca":
            # expanded where a task holds two pairs or more at the level (the pooled levels; any level at K >= 2);
            # a binary level of one pair per task (a family at K = 1) takes the plain quantiles: expanded, its
            # intervals covered 0.975-0.978 (docs/design.md, "Intervals")
            lo, hi = bca_interval(db, d_hat, dj, level, expand=(cnt.max(1) >= 2) | (not binary))
            plo, phi = bca_interval(pool_db, pool_d, pool_dj, level,
                                    expand=(cnt[pool].sum(0).max(0) >= 2) | (not binary))
        else:
            lo, hi = percentile_interval(db, level)
            plo, phi = percentile_interval(pool_db, level)
        for m, model in enumerate(models):
            for j, (kind, lab) in enumerate(levels):
                if n[m, j] == 0:
                    continue
                boot[(model, suite, kind, lab)] = db[:, m, j].astype(np.float32)
                ev = _evidence(csum4[m, ..., j], psum4[m, ..., j], cnt4[m, ..., j], float(c[m, j]), binary,
                               db[:, m, j])
                wm = cnt4[m, ..., j][cnt4[m, ..., j] > 0]
                by_design = exact_by_design(int((cnt4[m, ..., j].sum(0) > 0).sum()), int((cnt[m, :, j] > 0).sum()))
                ci = _interval(method, binary, ev, float(lo[m, j]), float(hi[m, j]), float(c[m, j]), effective_n(wm.tolist()),
                               float(p[m, j]), float(n[m, j]), replicates, by_design)
                out.append({"model": model, "suite": suite, "baseline": bool(base_of.get(model, False)),
                            "level_kind": kind, "level": lab, "clean": float(c[m, j]), "perturbed": float(p[m, j]),
                            "relative_drop": relative_degradation(float(c[m, j]), float(p[m, j])),
                            **ci, "n_models": 1,
                            "n_tasks": int((cnt[m, :, j] > 0).sum()), "n_pairs": int(n[m, j]),
                            **_dropped(counts[m, j]), **ev})
        for j, (kind, lab) in enumerate(levels):
            have = pool & (n[:, j] > 0)
            if not have.any():
                continue
            ev = _evidence(None, None, None, float(pool_c[j]), False, pool_db[:, j])
            # the pooled means' weights: a clean outcome (cluster) of model m weighs m_g / (M N_m), a pair 1 / (M N_m)
            nh = n[have, j]
            wc = np.concatenate([cnt4[k, ..., j][cnt4[k, ..., j] > 0] / (len(nh) * nk)
                                 for k, nk in zip(np.flatnonzero(have), nh)])
            by_design = exact_by_design(int((cnt4[have, ..., j].sum((0, 1)) > 0).sum()),
                                        int((cnt[have, :, j].sum(0) > 0).sum()))
            ci = _interval(method, binary, ev, float(plo[j]), float(phi[j]), float(pool_c[j]), effective_n(wc.tolist()),
                           float(pool_p[j]), float(len(nh) ** 2 / (1.0 / nh).sum()), replicates, by_design)
            out.append({"model": ALL_MODELS, "suite": suite, "baseline": all(base_of.get(m, False) for m in real),
                        "level_kind": kind, "level": lab, "clean": float(pool_c[j]), "perturbed": float(pool_p[j]),
                        "relative_drop": relative_degradation(float(pool_c[j]), float(pool_p[j])),
                        **ci, "n_models": int(have.sum()),
                        "n_tasks": int((cnt[have, :, j].sum(0) > 0).sum()), "n_pairs": int(n[have, j].sum()),
                        **_dropped(counts[have, j].sum(0)), **ev})
            boot[(ALL_MODELS, suite, kind, lab)] = pool_db[:, j].astype(np.float32)
    table = pd.DataFrame(out, columns=DROP_COLUMNS)
    table.attrs["replicates"] = boot
    return table


def _evidence(csum: np.ndarray | None, psum: np.ndarray | None, cnt: np.ndarray | None, clean: float, binary: bool,
              reps: np.ndarray) -> dict[str, Any]:
    """What a row's decision rests on: clusters, the exact test, the smallest detectable drop, the bootstrap.

    A cluster is one (task, repeat index) with pairs at the level; ``csum``,
    ``psum`` and ``cnt`` are its clean sums, perturbed sums and pair counts
    (tasks x repeats).  ``p_exact`` is :func:`~.stats.exchange_test` of "no
    drop" for a binary suite (NaN otherwise, and for pooled rows);
    ``min_detectable`` is :func:`~.stats.min_detectable_drop` (percent);
    ``n_boot_undefined`` counts the replicates with C* = 0 (no D);
    ``boot_degenerate`` says every defined replicate is the same number.
    """
    fin = np.isfinite(reps)
    degenerate = bool(fin.sum() < 2 or float(np.ptp(reps[fin])) == 0.0)
    row: dict[str, object] = {"n_boot_undefined": int((~fin).sum()), "boot_degenerate": degenerate,
                              "n_clusters": 0, "p_exact": float("nan"), "min_detectable": float("nan")}
    if cnt is None or csum is None or psum is None:
        return row
    have = cnt > 0
    g = int(have.sum())
    m = cnt[have]
    row["n_clusters"] = g
    row["min_detectable"] = min_detectable_drop(clean, g, float(m.mean()) if g else 1.0)
    if binary and g:
        row["p_exact"] = exchange_test(np.round(csum[have] / m), m, psum[have])
    return row


def _interval(method: str, binary: bool, ev: dict[str, Any], lo: float, hi: float, clean: float, n_clean: float,
              pert: float, n_pert: float, replicates: int, by_design: bool = False) -> dict[str, object]:
    """A row's reported interval: the bootstrap's, or the exact one where a binary row is sparse (:mod:`.exact`).

    Sparse: fewer than 5 clean passes (effective count ``clean`` x
    ``n_clean``), a degenerate bootstrap, or more than 1 % of the replicates
    with C* = 0.  ``by_design`` (:func:`~.exact.exact_by_design`: one repeat
    index, fewer than 50 tasks) makes every binary row exact, whatever its
    outcomes.  ``method="percentile"`` always reports the percentile interval.
    """
    if method == "bca" and binary and clean > 0 and (by_design or is_sparse(
            clean * n_clean, bool(ev["boot_degenerate"]), int(ev["n_boot_undefined"]) / max(replicates, 1))):
        e_lo, e_hi = ratio_interval(clean, n_clean, pert, n_pert)
        return {"ci_low": e_lo, "ci_high": e_hi, "interval_method": EXACT}
    return {"ci_low": lo, "ci_high": hi, "interval_method": method}


def _dropped(counts: np.ndarray) -> dict[str, object]:
    """``n_perturbed``, ``n_dropped``, ``dropped_<reason>`` and ``dropped_why`` from [episodes, *reasons]."""
    by = {r: int(v) for r, v in zip(DROP_REASONS, counts[1:])}
    return {"n_perturbed": int(counts[0]), "n_dropped": sum(by.values()),
            **{f"dropped_{r}": v for r, v in by.items()}, "dropped_why": describe_drops(by)}


def _nanmean0(a: np.ndarray) -> np.ndarray:
    """Mean over axis 0 ignoring NaN, NaN (no warning) where a column has no finite value."""
    fin = np.isfinite(a)
    n = fin.sum(0)
    s = np.where(fin, a, 0.0).sum(0)
    return np.where(n > 0, s / np.maximum(n, 1), np.nan)


def _nanmean1(a: np.ndarray) -> np.ndarray:
    """Mean over axis 1 ignoring NaN (bootstrap replicates x models [x levels])."""
    fin = np.isfinite(a)
    n = fin.sum(1)
    s = np.where(fin, a, 0.0).sum(1)
    return np.where(n > 0, s / np.maximum(n, 1), np.nan)


def overall(drop_table: pd.DataFrame) -> pd.DataFrame:
    """Per (model, suite) rows of :func:`drops` at the overall level (pooled rows excluded)."""
    t = drop_table[(drop_table["level_kind"] == "overall") & (drop_table["model"] != ALL_MODELS)]
    return t.reset_index(drop=True)


def suite_average(drop_table: pd.DataFrame) -> pd.DataFrame:
    """Per suite: mean clean and mean perturbed score over models, and D of those means.

    D_b = 100 (mean_m C_mb - mean_m P_mb) / mean_m C_mb over the real
    models (baselines only when no model-backed agent ran); the study's
    Table 1 averages 70.3 -> 55.0 give 21.8 % (docs/design.md section 4).
    """
    t = drop_table[(drop_table["level_kind"] == "overall") & (drop_table["model"] == ALL_MODELS)]
    return t[["suite", "clean", "perturbed", "relative_drop", "ci_low", "ci_high", "n_models", "n_pairs",
              "n_dropped"]].reset_index(drop=True)


def cells(drop_table: pd.DataFrame, model: str, suite: str) -> pd.DataFrame:
    """The 4x3 target-by-type table of D (percent) for one model (or ``"all models"``) and suite."""
    import pandas as pd

    t = drop_table[(drop_table["model"] == model) & (drop_table["suite"] == suite)
                   & (drop_table["level_kind"] == "family")].set_index("level")
    table = pd.DataFrame(index=list(TARGETS), columns=list(TYPES), dtype=float)
    for tg in TARGETS:
        for k in TYPES:
            f = f"{tg}-{k}"
            table.loc[tg, k] = float(t.loc[f, "relative_drop"]) if f in t.index else float("nan")
    return table


def marginal_effects(pairs: pd.DataFrame) -> pd.DataFrame:
    """Marginal effect of each target and type: the mean paired drop over its families.

    For model m and target t: mean over pairs (i, f) with f of target t of
    s_mi,clean - s_mif (reward points); ``relative`` divides it by the
    model's mean clean reward over those pairs (percent; equal to D at that
    level).  Rows with model ``"all models"`` pool the pairs of every real
    model (baselines only when no model-backed agent ran).
    """
    import pandas as pd

    out: list[dict[str, object]] = []
    pairs = pairs[pairs["family"].isin(FAMILIES)]  # inserted objects are not part of a target's family set
    if len(pairs):
        pairs = pairs[["model", "suite", "baseline", "target", "type", "reward_clean", "delta"]]
        both = pd.concat([pairs, pooled(pairs).assign(model=ALL_MODELS)])
        for factor in ("target", "type"):
            for (model, suite, lev), g in both.groupby(["model", "suite", factor], sort=True):
                c = float(g["reward_clean"].mean())
                out.append({"model": model, "suite": suite, "factor": factor, "level": lev,
                            "mean_paired_drop": float(g["delta"].mean()),
                            "relative": float("nan") if c == 0 else 100.0 * float(g["delta"].mean()) / c,
                            "n_pairs": int(len(g))})
    return pd.DataFrame(out, columns=["model", "suite", "factor", "level", "mean_paired_drop", "relative",
                                      "n_pairs"])


def malleability(pairs: pd.DataFrame, by: tuple[str, ...] = ("model", "suite")) -> pd.DataFrame:
    """Flip rates of the pairs, grouped by ``by``.

    flip_rate = pairs whose success differs / pairs; harmful_rate = (clean
    pass -> perturbed fail) / clean passes; beneficial_rate = (clean fail ->
    perturbed pass) / clean fails; mean_abs_delta = mean |reward_clean -
    reward_pert| (for continuous rewards).  Without ``model`` in ``by``
    the rates pool the real models (baselines only when no model-backed
    agent ran).
    """
    import pandas as pd

    cols = [*by, "n_pairs", "flip_rate", "harmful_rate", "beneficial_rate", "mean_abs_delta"]
    out: list[dict[str, object]] = []
    if "family" not in by:  # pooled rates are over the 12 families; inserted objects keep their own rows
        pairs = pairs[pairs["family"].isin(FAMILIES)]
    if "model" not in by:   # pooled over models: real models only
        pairs = pooled(pairs)
    if len(pairs):
        pairs = pairs[[*by, *(c for c in ("success_clean", "success_pert", "delta") if c not in by)]]
        for key, g in pairs.groupby(list(by), sort=True):
            cp, pp = g["success_clean"].to_numpy(bool), g["success_pert"].to_numpy(bool)
            row = dict(zip(by, key if isinstance(key, tuple) else (key,)))
            row.update(n_pairs=int(len(g)), flip_rate=float((cp != pp).mean()),
                       harmful_rate=float((cp & ~pp).sum() / cp.sum()) if cp.any() else float("nan"),
                       beneficial_rate=float((~cp & pp).sum() / (~cp).sum()) if (~cp).any() else float("nan"),
                       mean_abs_delta=float(g["delta"].abs().mean()))
            out.append(row)
    return pd.DataFrame(out, columns=cols)


def compliance(df: pd.DataFrame, by: tuple[str, ...] = ("model", "suite", "family")) -> pd.DataFrame:
    """Compliance rate = compliance / perturbed episodes with a verdict; bypass rate = 1 - it.

    Group by family (default) or by ``operator`` (per inserted object).
    Without ``model`` in ``by`` the rates pool the real models.
    """
    import pandas as pd

    d = scored(only(df, (*by, "family", "compliance", "error", "reward", "baseline")))
    d = d[(d["family"] != CLEAN) & d["compliance"].notna()]
    if "model" not in by:
        d = pooled(d)
    d = d[[*by, "compliance"]]
    out: list[dict[str, object]] = []
    for key, g in d.groupby(list(by), sort=True):
        rate = float(g["compliance"].astype(bool).mean())
        row = dict(zip(by, key if isinstance(key, tuple) else (key,)))
        row.update(n=int(len(g)), compliance_rate=rate, bypass_rate=1.0 - rate)
        out.append(row)
    return pd.DataFrame(out, columns=[*by, "n", "compliance_rate", "bypass_rate"])


def paired_tests(pairs: pd.DataFrame) -> pd.DataFrame:
    """One paired test per (model, suite, family), plus per (suite, family) over the real models.

    McNemar (exact) for a binary suite (every reward 0 or 1), Wilcoxon
    signed-rank on the reward differences for a continuous one.
    """
    import pandas as pd

    out: list[dict[str, object]] = []
    if len(pairs):
        binary = {s for s, g in pairs.groupby("suite")
                  if np.isin(g[["reward_clean", "reward_pert"]].to_numpy(float), (0.0, 1.0)).all()}
        pairs = pairs[["model", "suite", "family", "baseline", "reward_clean", "reward_pert", "delta"]]
        both = pd.concat([pairs, pooled(pairs).assign(model=ALL_MODELS)])
        for (model, suite, fam), g in both.groupby(["model", "suite", "family"], sort=True):
            c, p = g["reward_clean"].to_numpy(float), g["reward_pert"].to_numpy(float)
            t = mcnemar(c >= 0.5, p >= 0.5) if suite in binary else signed_rank(c, p)
            out.append({"model": model, "suite": suite, "family": fam, "test": t.test,
                        "statistic": t.statistic, "p_value": t.p_value, "n_pairs": t.n,
                        "harmful": t.harmful, "beneficial": t.beneficial,
                        "mean_paired_drop": float(g["delta"].mean())})
    return pd.DataFrame(out, columns=["model", "suite", "family", "test", "statistic", "p_value", "n_pairs",
                                      "harmful", "beneficial", "mean_paired_drop"])

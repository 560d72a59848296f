"""Degradation, marginal effects, malleability, compliance and paired tests (DESIGN.md section 4).

All functions are pure: they take the normalised episode table (or its
:func:`~.table.pairs`) and return DataFrames.  Scores are mean rewards;
drops are in percent of the clean score.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..model.task import CLEAN, FAMILIES, TARGETS, TYPES
from .stats import N_BOOTSTRAP, bootstrap_weights, mcnemar, percentile_interval, signed_rank
from .table import scored

if TYPE_CHECKING:
    import pandas as pd

ALL_MODELS = "all models"
DROP_COLUMNS = ["model", "suite", "level_kind", "level", "clean", "perturbed", "relative_drop",
                "ci_low", "ci_high", "n_tasks", "n_perturbed"]


def relative_degradation(clean: float, perturbed: float) -> float:
    """D = 100 (C - P) / C in percent; NaN when C is 0 or either score is NaN."""
    if clean == 0 or clean != clean or perturbed != perturbed:
        return float("nan")
    return 100.0 * (clean - perturbed) / clean


def _levels(d: pd.DataFrame) -> list[tuple[str, str]]:
    fams = [f for f in d["family"].unique() if f != CLEAN]
    order = [f for f in FAMILIES if f in fams] + sorted(f for f in fams if f not in FAMILIES)
    tgts = [t for t in TARGETS if t in set(d["target"])]
    typs = [k for k in TYPES if k in set(d["type"])]
    return ([("overall", "all")] + [("target", t) for t in tgts] + [("type", k) for k in typs]
            + [("family", f) for f in order])


def drops(df: pd.DataFrame, *, replicates: int = N_BOOTSTRAP, seed: int = 0, level: float = 0.95) -> pd.DataFrame:
    """Relative degradation overall, per target, per type and per family, with bootstrap intervals.

    For model m on suite b: C = mean clean reward, P = mean reward of the
    perturbed episodes at that level (all 12 families, one target, one type
    or one family; inserted objects get family-level rows only),
    D = 100 (C - P) / C.  The interval is a 95 % percentile
    interval of D over a cluster bootstrap of tasks: each replicate draws
    the suite's tasks with replacement (one draw shared by all models, so a
    resampled task keeps all its models) and recomputes C and P from the
    drawn tasks' episodes.  Rows with model ``"all models"`` pool the suite:
    C and P are the means over models of C_m and P_m, and D is computed from
    those means (the paper's suite average).
    """
    import pandas as pd

    d = scored(df)
    out: list[dict[str, object]] = []
    rng = np.random.default_rng(seed)
    for suite, g in d.groupby("suite", sort=True):
        tasks = sorted(g["task"].unique())
        models = sorted(g["model"].unique())
        levels = _levels(g)
        ti = {t: i for i, t in enumerate(tasks)}
        mi = {m: i for i, m in enumerate(models)}
        li = {lv: i for i, lv in enumerate(levels)}
        nm, nt, nl = len(models), len(tasks), len(levels)
        csum, ccnt = np.zeros((nm, nt)), np.zeros((nm, nt))
        psum, pcnt = np.zeros((nm, nt, nl)), np.zeros((nm, nt, nl))
        m_idx = g["model"].map(mi).to_numpy()
        t_idx = g["task"].map(ti).to_numpy()
        rew = g["reward"].to_numpy(dtype=float)
        is_clean = (g["family"] == CLEAN).to_numpy()
        np.add.at(csum, (m_idx[is_clean], t_idx[is_clean]), rew[is_clean])
        np.add.at(ccnt, (m_idx[is_clean], t_idx[is_clean]), 1.0)
        # overall, target and type levels pool the 12 families; inserted objects only get family rows
        in_families = g["family"].isin(FAMILIES).to_numpy()
        for kind, col in (("overall", None), ("target", "target"), ("type", "type"), ("family", "family")):
            pm = ~is_clean if kind == "family" else in_families
            labels = ["all"] * int(pm.sum()) if col is None else list(g[col].to_numpy()[pm])
            l_idx = np.array([li.get((kind, lab), -1) for lab in labels], dtype=int)
            ok = l_idx >= 0
            np.add.at(psum, (m_idx[pm][ok], t_idx[pm][ok], l_idx[ok]), rew[pm][ok])
            np.add.at(pcnt, (m_idx[pm][ok], t_idx[pm][ok], l_idx[ok]), 1.0)
        w = bootstrap_weights(nt, replicates, rng)
        with np.errstate(invalid="ignore", divide="ignore"):
            c = csum.sum(1) / ccnt.sum(1)                                   # (m,)
            p = psum.sum(1) / pcnt.sum(1)                                   # (m, l)
            cb = (w @ csum.T) / (w @ ccnt.T)                                # (b, m)
            pb = np.einsum("bt,mtl->bml", w, psum) / np.einsum("bt,mtl->bml", w, pcnt)
            db = 100.0 * (cb[:, :, None] - pb) / cb[:, :, None]
            pool_c, pool_p = _nanmean0(c), _nanmean0(p)
            pool_cb, pool_pb = _nanmean1(cb), _nanmean1(pb)
            pool_db = 100.0 * (pool_cb[:, None] - pool_pb) / pool_cb[:, None]
        lo, hi = percentile_interval(db, level)
        plo, phi = percentile_interval(pool_db, level)
        n_tasks = (ccnt > 0).sum(1)
        for m, model in enumerate(models):
            for j, (kind, lab) in enumerate(levels):
                if pcnt[m, :, j].sum() == 0:
                    continue
                out.append({"model": model, "suite": suite, "level_kind": kind, "level": lab,
                            "clean": float(c[m]), "perturbed": float(p[m, j]),
                            "relative_drop": relative_degradation(float(c[m]), float(p[m, j])),
                            "ci_low": float(lo[m, j]), "ci_high": float(hi[m, j]),
                            "n_tasks": int(n_tasks[m]), "n_perturbed": int(pcnt[m, :, j].sum())})
        for j, (kind, lab) in enumerate(levels):
            out.append({"model": ALL_MODELS, "suite": suite, "level_kind": kind, "level": lab,
                        "clean": float(pool_c), "perturbed": float(pool_p[j]),
                        "relative_drop": relative_degradation(float(pool_c), float(pool_p[j])),
                        "ci_low": float(plo[j]), "ci_high": float(phi[j]), "n_tasks": nt,
                        "n_perturbed": int(pcnt[:, :, j].sum())})
    return pd.DataFrame(out, columns=DROP_COLUMNS)


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

    D_b = 100 (mean_m C_mb - mean_m P_mb) / mean_m C_mb (DESIGN.md section 4
    reference check: 70.3 -> 55.0 gives 21.8 %).
    """
    t = drop_table[(drop_table["level_kind"] == "overall") & (drop_table["model"] == ALL_MODELS)]
    return t[["suite", "clean", "perturbed", "relative_drop", "ci_low", "ci_high"]].reset_index(drop=True)


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
    model's mean clean reward over those pairs (percent).  Rows with model
    ``"all models"`` pool the pairs of every model.
    """
    import pandas as pd

    out: list[dict[str, object]] = []
    pairs = pairs[pairs["family"].isin(FAMILIES)]  # inserted objects are not part of a target's family set
    if len(pairs):
        both = pd.concat([pairs, pairs.assign(model=ALL_MODELS)])
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
    reward_pert| (for continuous rewards).
    """
    import pandas as pd

    cols = [*by, "n_pairs", "flip_rate", "harmful_rate", "beneficial_rate", "mean_abs_delta"]
    out: list[dict[str, object]] = []
    if "family" not in by:  # pooled rates are over the 12 families; inserted objects keep their own rows
        pairs = pairs[pairs["family"].isin(FAMILIES)]
    if len(pairs):
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
    """
    import pandas as pd

    d = scored(df)
    d = d[(d["family"] != CLEAN) & d["compliance"].notna()]
    out: list[dict[str, object]] = []
    for key, g in d.groupby(list(by), sort=True):
        rate = float(g["compliance"].astype(bool).mean())
        row = dict(zip(by, key if isinstance(key, tuple) else (key,)))
        row.update(n=int(len(g)), compliance_rate=rate, bypass_rate=1.0 - rate)
        out.append(row)
    return pd.DataFrame(out, columns=[*by, "n", "compliance_rate", "bypass_rate"])


def paired_tests(pairs: pd.DataFrame) -> pd.DataFrame:
    """One paired test per (model, suite, family), plus per (suite, family) over all models.

    McNemar (exact) for a binary suite (every reward 0 or 1), Wilcoxon
    signed-rank on the reward differences for a continuous one.
    """
    import pandas as pd

    out: list[dict[str, object]] = []
    if len(pairs):
        binary = {s for s, g in pairs.groupby("suite")
                  if np.isin(g[["reward_clean", "reward_pert"]].to_numpy(float), (0.0, 1.0)).all()}
        both = pd.concat([pairs, pairs.assign(model=ALL_MODELS)])
        for (model, suite, fam), g in both.groupby(["model", "suite", "family"], sort=True):
            c, p = g["reward_clean"].to_numpy(float), g["reward_pert"].to_numpy(float)
            t = mcnemar(c >= 0.5, p >= 0.5) if suite in binary else signed_rank(c, p)
            out.append({"model": model, "suite": suite, "family": fam, "test": t.test,
                        "statistic": t.statistic, "p_value": t.p_value, "n_pairs": t.n,
                        "harmful": t.harmful, "beneficial": t.beneficial,
                        "mean_paired_drop": float(g["delta"].mean())})
    return pd.DataFrame(out, columns=["model", "suite", "family", "test", "statistic", "p_value", "n_pairs",
                                      "harmful", "beneficial", "mean_paired_drop"])

"""Recovery cost, rollout ratios and edit magnitude (docs/design.md section 4).

All three are paired: they read :func:`~.table.pairs` (an episode table is
paired first).  Tokens of an episode are input + output tokens; output
tokens already include reasoning tokens, which are never added again.
Unknown usage (NaN) is left out of every token metric and counted
(``n_unknown``).  Pooled levels ("all perturbed", types, targets) use the 12
families only; inserted objects are reported on their own.  Rows with model
``"all models"`` pool the real models (baselines only when no model-backed
agent ran).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from ..model.task import FAMILIES, TARGETS, TYPES
from .degradation import ALL_MODELS
from .stats import signed_rank
from .table import as_pairs, pooled

if TYPE_CHECKING:
    import pandas as pd

RATIO_METRICS: tuple[str, ...] = ("tool_calls", "turns", "input_tokens", "output_tokens")
ALL_PERTURBED = "all perturbed"


class _Pairs:
    """A pairs table read once as numpy columns, and the row positions of its (model, suite) groups and levels.

    Positions keep the order of the table's rows, so every mean, median and
    test sees its values in the same order as over the rows themselves.
    """

    def __init__(self, pr: pd.DataFrame) -> None:
        self.pr = pr
        self._cols: dict[str, np.ndarray] = {}

    def col(self, name: str, dtype: Any = float) -> np.ndarray:
        """A column as a numpy array (read once)."""
        key = f"{name}:{dtype}"
        if key not in self._cols:
            self._cols[key] = self.pr[name].to_numpy(dtype)
        return self._cols[key]

    def groups(self) -> Iterator[tuple[str, str, np.ndarray]]:
        """(model, suite, positions) sorted by model and suite; model ``"all models"`` holds the pooled rows.

        The groups of the table with its pooled rows appended under
        ``"all models"`` (the pooled rows come after the table's own).
        """
        pos = np.arange(len(self.pr))
        base = self.col("baseline", bool)
        pooled_pos = pos[~base] if base.any() and not base.all() else pos   # as :func:`~.table.pooled`
        src = np.concatenate([pos, pooled_pos])
        models = np.concatenate([self.col("model", object), np.full(len(pooled_pos), ALL_MODELS, dtype=object)])
        suites = self.col("suite", object)[src]
        codes: dict[tuple[str, str], list[int]] = {}
        for k, key in enumerate(zip(models.tolist(), suites.tolist())):
            codes.setdefault(key, []).append(k)
        for (model, suite) in sorted(codes):
            yield model, suite, src[np.asarray(codes[(model, suite)], dtype=np.int64)]

    def levels(self, g: np.ndarray, *, by_kind: bool) -> Iterator[tuple[str, str, np.ndarray]]:
        """(level_kind, level, positions) of a group: the 12 families pooled, then per type and target
        (``by_kind``) or family, then each inserted object on its own."""
        fam = self.col("family", object)[g]
        mask = np.isin(fam, FAMILIES)
        in12 = g[mask]
        if len(in12):
            yield "overall", ALL_PERTURBED, in12
        groupings = (("type", "type", TYPES), ("target", "target", TARGETS)) if by_kind else (
            ("family", "family", FAMILIES),)
        for kind, col, values in groupings:
            labels = self.col(col, object)[in12]
            for v in values:
                sel = in12[labels == v]
                if len(sel):
                    yield kind, v, sel
        rest = g[~mask]
        rest_fam = fam[~mask]
        for f in sorted(set(rest_fam.tolist())):
            yield "inserted", str(f), rest[rest_fam == f]


def recovery_cost(df: pd.DataFrame) -> pd.DataFrame:
    """Tokens per successful trajectory and successes per million tokens, clean vs perturbed, over pairs.

    Per (model, suite, level) over the pairs with known token usage on both
    sides: ``tokens_per_success_*`` = mean (and median) tokens of the
    successful clean partners / successful perturbed episodes;
    ``successes_per_mtok_*`` = 1e6 x successes / tokens of all the pairs'
    clean (perturbed) episodes; ``extra_tokens_pct`` = 100 (mean perturbed /
    mean clean - 1); ``spm_change_pct`` = 100 (perturbed / clean successes
    per million tokens - 1).  ``n_pairs`` counts the pairs used and
    ``n_unknown`` those left out for unknown usage.  Levels: ``all
    perturbed`` (12 families), each family, each inserted object.  Empty
    when no pair has known token usage.
    """
    import pandas as pd

    cols = ["model", "suite", "baseline", "level_kind", "family", "tokens_per_success_clean",
            "tokens_per_success_pert", "median_tokens_per_success_clean", "median_tokens_per_success_pert",
            "extra_tokens_pct", "successes_per_mtok_clean", "successes_per_mtok_pert", "spm_change_pct",
            "n_success_clean", "n_success_pert", "n_pairs", "n_unknown"]
    pr = as_pairs(df)
    if not len(pr) or not (pr["tokens_clean"].notna() & pr["tokens_pert"].notna()).any():
        return pd.DataFrame(columns=cols)
    out: list[dict[str, Any]] = []
    t = _Pairs(pr)
    tc, tp = t.col("tokens_clean"), t.col("tokens_pert")
    for model, suite, g in t.groups():
        for kind, lev, h in t.levels(g, by_kind=False):
            known = np.isfinite(tc[h]) & np.isfinite(tp[h])
            k = h[known]
            if not len(k):
                continue
            row: dict[str, Any] = {"model": model, "suite": suite, "baseline": bool(t.col("baseline", bool)[k].all()),
                                   "level_kind": kind, "family": lev}
            means = {}
            for side in ("clean", "pert"):
                ok = t.col(f"success_{side}", bool)[k]
                tok = t.col(f"tokens_{side}")[k]
                total = float(tok.sum())
                means[side] = float(tok[ok].mean()) if ok.any() else float("nan")
                row[f"tokens_per_success_{side}"] = means[side]
                row[f"median_tokens_per_success_{side}"] = float(np.median(tok[ok])) if ok.any() else float("nan")
                row[f"successes_per_mtok_{side}"] = 1e6 * int(ok.sum()) / total if total > 0 else float("nan")
                row[f"n_success_{side}"] = int(ok.sum())
            mc, spm_c = means["clean"], row["successes_per_mtok_clean"]
            row["extra_tokens_pct"] = 100.0 * (means["pert"] / mc - 1.0) if mc > 0 else float("nan")
            row["spm_change_pct"] = 100.0 * (row["successes_per_mtok_pert"] / spm_c - 1.0) \
                if spm_c > 0 else float("nan")
            row["n_pairs"], row["n_unknown"] = int(len(k)), int((~known).sum())
            out.append(row)
    return pd.DataFrame(out, columns=cols)


def rollout_ratios(df: pd.DataFrame) -> pd.DataFrame:
    """Per-pair perturbed/clean ratios of tool calls, turns, input and output tokens.

    Per (model, suite, level, metric), levels being the 12 families pooled
    (``overall``), each type, each target and each inserted object: median
    and IQR (q1, q3) of the ratios as the summary, mean and SD (ddof 1) as
    tail diagnostics, and a Wilcoxon signed-rank test of perturbed vs clean
    values over the same pairs.  Pairs whose clean value is 0 or whose usage
    is unknown have no ratio and are left out (``n_unknown``).
    """
    import pandas as pd

    cols = ["model", "suite", "baseline", "level_kind", "level", "metric", "n_pairs", "n_unknown", "median", "q1",
            "q3", "mean", "sd", "statistic", "p_value"]
    out: list[dict[str, Any]] = []
    pr = as_pairs(df)
    if len(pr):
        t = _Pairs(pr)
        for model, suite, g in t.groups():
            for kind, lev, h in t.levels(g, by_kind=True):
                for metric in RATIO_METRICS:
                    c = t.col(f"{metric}_clean")[h]
                    p = t.col(f"{metric}_pert")[h]
                    ok = np.isfinite(c) & np.isfinite(p) & (c > 0)
                    if not ok.any():
                        continue
                    r = p[ok] / c[ok]
                    q1, q3 = np.percentile(r, (25, 75))
                    test = signed_rank(c[ok], p[ok])
                    out.append({"model": model, "suite": suite, "baseline": bool(t.col("baseline", bool)[h].all()),
                                "level_kind": kind, "level": lev, "metric": metric, "n_pairs": int(ok.sum()),
                                "n_unknown": int((~ok).sum()), "median": float(np.median(r)),
                                "q1": float(q1), "q3": float(q3),
                                "mean": float(r.mean()), "sd": float(r.std(ddof=1)) if len(r) > 1 else float("nan"),
                                "statistic": test.statistic, "p_value": test.p_value})
    return pd.DataFrame(out, columns=cols)


def edit_magnitude(df: pd.DataFrame) -> pd.DataFrame:
    """Per tool-contract operator (the ``tool-*`` families): n, paired drop in points, delta cost.

    Per (suite, operator), pooled over the real models: ``n_pairs``;
    ``drop_pp`` = 100 x mean (reward_clean - reward_pert), in points;
    ``delta_tokens`` and ``delta_tool_calls`` = mean (perturbed - clean)
    over the pairs whose clean and perturbed trajectories both succeeded
    (``n_success_pairs``), tokens over those with known usage
    (``n_unknown`` left out).  Inserted objects (a planted fake tool, an
    injection) are not tool-contract edits and are not listed.
    """
    import pandas as pd

    cols = ["suite", "operator", "family", "n_pairs", "drop_pp", "n_success_pairs", "delta_tokens",
            "delta_tool_calls", "n_unknown"]
    out: list[dict[str, Any]] = []
    pr = as_pairs(df)
    if len(pr):
        t = pooled(pr)
        t = t[t["family"].isin(FAMILIES) & (t["target"] == "tool")]
        for (suite, op), g in t.groupby(["suite", "operator"], sort=True):
            both = g[g["success_clean"].astype(bool) & g["success_pert"].astype(bool)]
            dt = (both["tokens_pert"] - both["tokens_clean"]).dropna()
            dc = (both["tool_calls_pert"] - both["tool_calls_clean"]).dropna()
            out.append({"suite": suite, "operator": op, "family": ",".join(sorted(g["family"].unique())),
                        "n_pairs": int(len(g)), "drop_pp": 100.0 * float(g["delta"].mean()),
                        "n_success_pairs": int(len(both)),
                        "delta_tokens": float(dt.mean()) if len(dt) else float("nan"),
                        "delta_tool_calls": float(dc.mean()) if len(dc) else float("nan"),
                        "n_unknown": int(len(both) - len(dt))})
    return pd.DataFrame(out, columns=cols)

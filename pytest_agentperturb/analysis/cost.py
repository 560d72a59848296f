"""Recovery cost, rollout ratios and edit magnitude (DESIGN.md section 4).

Tokens are input + output (+ reasoning) tokens of an episode.  Rows with
model ``"all models"`` pool every model of the suite.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..model.task import CLEAN
from .degradation import ALL_MODELS
from .stats import signed_rank
from .table import scored, tokens

if TYPE_CHECKING:
    import pandas as pd

RATIO_METRICS: tuple[str, ...] = ("tool_calls", "turns", "input_tokens", "output_tokens")
ALL_PERTURBED = "all perturbed"


def _pooled(df: pd.DataFrame) -> pd.DataFrame:
    import pandas as pd

    return pd.concat([df, df.assign(model=ALL_MODELS)], ignore_index=True)


def recovery_cost(df: pd.DataFrame) -> pd.DataFrame:
    """Tokens per successful trajectory and successes per million tokens, clean vs perturbed.

    Per (model, suite, family level): ``tokens_per_success_*`` = mean (and
    median) tokens of the successful episodes; ``successes_per_mtok_*`` =
    1e6 x successes / tokens of all episodes; ``extra_tokens_pct`` = 100
    (mean perturbed / mean clean - 1); ``spm_change_pct`` = 100 (perturbed
    / clean successes per million tokens - 1).  The clean side is every
    clean episode of the same model(s) and suite.  Empty when no episode
    recorded token usage.
    """
    import pandas as pd

    d = scored(df).copy()
    d["tokens"] = tokens(d)
    d["ok"] = d["success"].map(lambda v: bool(v))
    cols = ["model", "suite", "family", "tokens_per_success_clean", "tokens_per_success_pert",
            "median_tokens_per_success_clean", "median_tokens_per_success_pert", "extra_tokens_pct",
            "successes_per_mtok_clean", "successes_per_mtok_pert", "spm_change_pct", "n_success_clean",
            "n_success_pert"]
    if not len(d) or not (d["tokens"] > 0).any():
        return pd.DataFrame(columns=cols)
    d = _pooled(d)
    out: list[dict[str, Any]] = []
    for (model, suite), g in d.groupby(["model", "suite"], sort=True):
        c = g[g["family"] == CLEAN]
        pert = g[g["family"] != CLEAN]
        levels = [(ALL_PERTURBED, pert)] + [(f, h) for f, h in pert.groupby("family", sort=True)]
        cs = c[c["ok"]]["tokens"]
        spm_c = 1e6 * len(cs) / c["tokens"].sum() if c["tokens"].sum() > 0 else float("nan")
        for fam, p in levels:
            ps = p[p["ok"]]["tokens"]
            spm_p = 1e6 * len(ps) / p["tokens"].sum() if p["tokens"].sum() > 0 else float("nan")
            mc = float(cs.mean()) if len(cs) else float("nan")
            mp = float(ps.mean()) if len(ps) else float("nan")
            out.append({"model": model, "suite": suite, "family": fam,
                        "tokens_per_success_clean": mc, "tokens_per_success_pert": mp,
                        "median_tokens_per_success_clean": float(cs.median()) if len(cs) else float("nan"),
                        "median_tokens_per_success_pert": float(ps.median()) if len(ps) else float("nan"),
                        "extra_tokens_pct": 100.0 * (mp / mc - 1.0) if mc > 0 else float("nan"),
                        "successes_per_mtok_clean": spm_c, "successes_per_mtok_pert": spm_p,
                        "spm_change_pct": 100.0 * (spm_p / spm_c - 1.0) if spm_c > 0 else float("nan"),
                        "n_success_clean": int(len(cs)), "n_success_pert": int(len(ps))})
    return pd.DataFrame(out, columns=cols)


def rollout_ratios(pairs: pd.DataFrame) -> pd.DataFrame:
    """Per-pair perturbed/clean ratios of tool calls, turns, input and output tokens.

    Per (model, suite, metric): median and IQR (q1, q3) of the ratios as the
    summary, mean and SD (ddof 1) as tail diagnostics, and a Wilcoxon
    signed-rank test of perturbed vs clean values over the same pairs.
    Pairs whose clean value is 0 or missing have no ratio and are left out.
    """
    import pandas as pd

    cols = ["model", "suite", "metric", "n_pairs", "median", "q1", "q3", "mean", "sd", "statistic", "p_value"]
    out: list[dict[str, Any]] = []
    if len(pairs):
        for (model, suite), g in _pooled(pairs).groupby(["model", "suite"], sort=True):
            for metric in RATIO_METRICS:
                c = g[f"{metric}_clean"].to_numpy(float)
                p = g[f"{metric}_pert"].to_numpy(float)
                ok = np.isfinite(c) & np.isfinite(p) & (c > 0)
                if not ok.any():
                    continue
                r = p[ok] / c[ok]
                t = signed_rank(c[ok], p[ok])
                out.append({"model": model, "suite": suite, "metric": metric, "n_pairs": int(ok.sum()),
                            "median": float(np.median(r)), "q1": float(np.percentile(r, 25)),
                            "q3": float(np.percentile(r, 75)), "mean": float(r.mean()),
                            "sd": float(r.std(ddof=1)) if len(r) > 1 else float("nan"),
                            "statistic": t.statistic, "p_value": t.p_value})
    return pd.DataFrame(out, columns=cols)


def edit_magnitude(pairs: pd.DataFrame) -> pd.DataFrame:
    """Per tool-contract operator (target ``tool``): n, paired drop and delta cost.

    ``mean_paired_drop`` = mean (reward_clean - reward_pert); ``relative_drop``
    = 100 x that / mean clean reward of the same pairs; ``delta_tokens`` =
    mean (tokens_pert - tokens_clean); ``delta_tool_calls`` likewise.  Pooled
    over models, per suite.
    """
    import pandas as pd

    cols = ["suite", "operator", "family", "n_pairs", "mean_paired_drop", "relative_drop", "delta_tokens",
            "delta_tool_calls"]
    out: list[dict[str, Any]] = []
    if len(pairs):
        t = pairs[pairs["target"] == "tool"]
        for (suite, op), g in t.groupby(["suite", "operator"], sort=True):
            c = float(g["reward_clean"].mean())
            out.append({"suite": suite, "operator": op, "family": ",".join(sorted(g["family"].unique())),
                        "n_pairs": int(len(g)), "mean_paired_drop": float(g["delta"].mean()),
                        "relative_drop": 100.0 * float(g["delta"].mean()) / c if c else float("nan"),
                        "delta_tokens": float((g["tokens_pert"] - g["tokens_clean"]).mean()),
                        "delta_tool_calls": float((g["tool_calls_pert"] - g["tool_calls_clean"]).mean())})
    return pd.DataFrame(out, columns=cols)

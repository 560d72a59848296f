"""Robustness metrics as pure functions over the episode table (DESIGN.md section 4).

Every function takes a pandas DataFrame with the :data:`~pytest_agentperturb.records.COLUMNS`
columns and returns plain numbers or a DataFrame.  Episodes with a non-empty
``error`` are excluded from every aggregate (they are infrastructure
failures, not agent failures); callers report how many were excluded.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from .records import COLUMNS
from .task import CLEAN, INSERTED_TYPE, TARGETS, TYPES

if TYPE_CHECKING:
    import pandas as pd


def frame(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """The episode table from record rows, through the one explicit column list."""
    import pandas as pd

    df = pd.DataFrame([{c: r.get(c) for c in COLUMNS} for r in rows], columns=list(COLUMNS))
    df["reward"] = pd.to_numeric(df["reward"], errors="coerce")
    df["error"] = df["error"].fillna("")
    return df


def scored(df: pd.DataFrame) -> pd.DataFrame:
    """Episodes that could be scored (``error`` empty)."""
    return df[(df["error"] == "") & df["reward"].notna()]


def relative_degradation(clean: float, perturbed: float) -> float:
    """D = 100 (C - P) / C, in percent; NaN when C is 0 (DESIGN.md section 4)."""
    return float("nan") if clean == 0 else 100.0 * (clean - perturbed) / clean


def degradation_by_model(df: pd.DataFrame) -> pd.DataFrame:
    """Per (model, suite): clean score C, perturbed score P, D, episode counts.

    C = mean clean reward over tasks; P = mean reward over all perturbed
    episodes of the 12 families on those tasks (inserted objects are reported
    on their own); D = 100 (C - P) / C.
    """
    import pandas as pd

    d = scored(df)
    out = []
    for (model, suite), g in d.groupby(["model", "suite"], sort=True):
        clean = g[g["family"] == CLEAN]["reward"]
        pert = g[(g["family"] != CLEAN) & (g["type"] != INSERTED_TYPE)]["reward"]
        c = float(clean.mean()) if len(clean) else float("nan")
        p = float(pert.mean()) if len(pert) else float("nan")
        out.append({"model": model, "suite": suite, "clean": c, "perturbed": p,
                    "relative_drop": relative_degradation(c, p), "n_clean": len(clean), "n_perturbed": len(pert)})
    return pd.DataFrame(out, columns=["model", "suite", "clean", "perturbed", "relative_drop",
                                      "n_clean", "n_perturbed"])


def cell_table(df: pd.DataFrame, model: str) -> pd.DataFrame:
    """4x3 target-by-type table of relative degradation (percent) for one model.

    Cell (t, k) = 100 (C - P_tk) / C with C the model's clean score and P_tk
    the mean reward of its ``t-k`` episodes.
    """
    import pandas as pd

    d = scored(df)
    d = d[d["model"] == model]
    c = float(d[d["family"] == CLEAN]["reward"].mean()) if (d["family"] == CLEAN).any() else float("nan")
    table = pd.DataFrame(index=list(TARGETS), columns=list(TYPES), dtype=float)
    for t in TARGETS:
        for k in TYPES:
            cell = d[d["family"] == f"{t}-{k}"]["reward"]
            table.loc[t, k] = relative_degradation(c, float(cell.mean())) if len(cell) else float("nan")
    return table


def compliance_rate(df: pd.DataFrame) -> float:
    """Compliance / perturbed episodes (bypass rate = 1 - it)."""
    d = scored(df)
    d = d[(d["family"] != CLEAN) & d["compliance"].notna()]
    return float(d["compliance"].astype(bool).mean()) if len(d) else float("nan")


def summary_lines(rows: list[dict[str, Any]]) -> list[str]:
    """One terminal line per model: C, P, D, compliance and mean turns."""
    if not rows:
        return ["no episodes recorded"]
    df = frame(rows)
    lines = []
    for _, r in degradation_by_model(df).iterrows():
        g = scored(df)
        g = g[g["model"] == r["model"]]
        comp = compliance_rate(g)
        lines.append(
            f"{r['model']:<22} {r['suite']:<12} clean {r['clean']:.3f}  perturbed {r['perturbed']:.3f}  "
            f"drop {r['relative_drop']:.1f}%  compliance {comp:.2f}  turns/episode {g['turns'].mean():.1f}"
        )
    return lines

"""Predictors of robustness: capability, task properties, and the clean score (docs/design.md section 4).

Each predictor is a Spearman correlation with a two-sided permutation test
(:func:`~.stats.spearman_permutation`: 100,000 random assignments by default,
every assignment when n! is no more than that).  Across models the outcome
is robustness, -D_mb (so a positive rho means more capable models lose
less); across tasks it is the per-task degradation D_bi.  The clean score
is a biased predictor of D (C is inside D) and is kept apart, split-half and
with a caveat (:func:`clean_score_predictor`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ..model.task import FAMILIES
from .degradation import relative_degradation
from .stats import N_PERMUTATIONS, spearman_permutation
from .table import as_pairs, pooled

if TYPE_CHECKING:
    import pandas as pd

    from ..model.task import Task

PREDICTOR_COLUMNS = ["suite", "predictor", "rho", "p_value", "n", "outcome", "permutations", "exact"]
CLEAN_SCORE_CAVEAT = ("biased by construction (C is inside D = 100 (C - P) / C); computed on disjoint halves of the "
                      "tasks to remove the shared noise, weaker evidence than the capability test, not equivalent "
                      "to it")
#: Task properties correlated with per-task degradation.
TASK_PROPERTIES: tuple[str, ...] = ("tool_count", "instruction_length", "solution_length")


def task_properties(task: Task) -> dict[str, Any]:
    """Properties of a clean task: advertised tools, instruction words, gold solution steps."""
    return {"suite": task.suite, "task": task.id, "tool_count": len(task.surfaces.tools),
            "instruction_length": len(task.surfaces.user.split()), "solution_length": len(task.solution)}


def read_capability(path: str) -> pd.DataFrame:
    """A capability CSV with columns ``model, capability`` (numeric).

    Raises:
        AgentPerturbError: naming the file and what is wrong.
    """
    import pandas as pd

    from ..model.errors import AgentPerturbError

    try:
        cap = pd.read_csv(path)
    except (OSError, ValueError) as exc:
        raise AgentPerturbError(f"{path}: cannot read the capability CSV ({exc})") from None
    miss = [c for c in ("model", "capability") if c not in cap.columns]
    if miss:
        raise AgentPerturbError(f"{path}: missing column(s) {', '.join(miss)}; expected a CSV with header "
                                "'model,capability'")
    try:
        cap["capability"] = pd.to_numeric(cap["capability"], errors="raise").astype(float)
    except ValueError as exc:
        raise AgentPerturbError(f"{path}: column 'capability' must be numeric ({exc})") from None
    dup = cap["model"][cap["model"].duplicated()].tolist()
    if dup:
        raise AgentPerturbError(f"{path}: model {dup[0]!r} is listed twice; give one capability per model")
    cap["model"] = cap["model"].astype(str)
    return cap[["model", "capability"]]


def model_predictors(overall: pd.DataFrame, capability: pd.DataFrame | None = None, *,
                     permutations: int = N_PERMUTATIONS, seed: int = 0) -> pd.DataFrame:
    """Across the real models of each suite: Spearman(capability, -D).

    ``overall`` holds one row per (model, suite) with ``relative_drop`` (see
    :func:`~.degradation.overall`).  Baselines are left out whenever a
    non-baseline model is in the table; models missing from the capability
    table are left out of the analysis.  The clean score is not a predictor
    here (see :func:`clean_score_predictor`).
    """
    import pandas as pd

    rng = np.random.default_rng(seed)
    out: list[dict[str, Any]] = []
    if capability is None or not len(overall):
        return pd.DataFrame(columns=PREDICTOR_COLUMNS)
    for suite, g in pooled(overall).groupby("suite", sort=True):
        m = g.merge(capability, on="model", how="inner")
        r = spearman_permutation(m["capability"], -m["relative_drop"], permutations=permutations, rng=rng)
        out.append({"suite": suite, "predictor": "capability", "rho": r.rho, "p_value": r.p_value, "n": r.n,
                    "outcome": "-relative_drop", "permutations": r.permutations, "exact": r.exact})
    return pd.DataFrame(out, columns=PREDICTOR_COLUMNS)


def clean_score_predictor(df: pd.DataFrame, *, permutations: int = N_PERMUTATIONS, seed: int = 0) -> pd.DataFrame:
    """Across the real models of each suite: Spearman(C, -D) with C and D from disjoint halves of the tasks.

    The clean score sits inside D = 100 (C - P) / C, so correlating a
    model's C with its own D is biased: under no effect at all, the noise in
    C alone makes the permutation test reject far more often than its level
    (mostly with a negative rho).  Here C comes from the suite's tasks at
    even positions (sorted by id) and D from the tasks at odd positions, so
    no episode enters both sides.  Even so this is weaker evidence than the
    capability test; every row carries a ``caveat``.
    """
    import pandas as pd

    pr = pooled(as_pairs(df))
    pr = pr[pr["family"].isin(FAMILIES)]
    rng = np.random.default_rng(seed)
    out: list[dict[str, Any]] = []
    for suite, g in pr.groupby("suite", sort=True):
        order = {t: i % 2 for i, t in enumerate(sorted(g["task"].unique()))}
        half = g["task"].map(order)
        a = g[half == 0].groupby("model")["reward_clean"].mean()
        b = g[half == 1].groupby("model")[["reward_clean", "reward_pert"]].mean()
        d = pd.Series({m: relative_degradation(float(r.reward_clean), float(r.reward_pert))
                       for m, r in b.iterrows()}, dtype=float)
        both = a.index.intersection(d.index)
        r = spearman_permutation(a[both].to_numpy(float), -d[both].to_numpy(float), permutations=permutations,
                                 rng=rng)
        out.append({"suite": suite, "predictor": "clean_score (split-half)", "rho": r.rho, "p_value": r.p_value,
                    "n": r.n, "outcome": "-relative_drop (other half of the tasks)", "permutations": r.permutations,
                    "exact": r.exact, "caveat": CLEAN_SCORE_CAVEAT})
    return pd.DataFrame(out, columns=[*PREDICTOR_COLUMNS, "caveat"])


def per_task_degradation(df: pd.DataFrame) -> pd.DataFrame:
    """Per (suite, task), paired over the 12 families and the real models: C_i, P_i and D_i.

    C_i and P_i are the mean clean and perturbed rewards of the task's pairs
    (every real model, the 12 families; inserted objects stay out),
    D_i = 100 (C_i - P_i) / C_i; ``n_pairs`` is the number of pairs.
    """
    import pandas as pd

    pr = pooled(as_pairs(df))
    pr = pr[pr["family"].isin(FAMILIES)]
    out = []
    for (suite, task), g in pr.groupby(["suite", "task"], sort=True):
        cv, pv = float(g["reward_clean"].mean()), float(g["reward_pert"].mean())
        out.append({"suite": suite, "task": task, "clean": cv, "perturbed": pv,
                    "relative_drop": relative_degradation(cv, pv), "n_pairs": int(len(g))})
    return pd.DataFrame(out, columns=["suite", "task", "clean", "perturbed", "relative_drop", "n_pairs"])


def task_predictors(df: pd.DataFrame, properties: pd.DataFrame | Mapping[str, Any] | None, *,
                    permutations: int = N_PERMUTATIONS, seed: int = 1) -> pd.DataFrame:
    """Across tasks of each suite: Spearman(property, D_i) for each task property.

    ``properties`` has columns ``task`` (and optionally ``suite``) plus any
    of :data:`TASK_PROPERTIES`.
    """
    import pandas as pd

    if properties is None:
        return pd.DataFrame(columns=PREDICTOR_COLUMNS)
    props = properties if isinstance(properties, pd.DataFrame) else pd.DataFrame(properties)
    if not len(props):
        return pd.DataFrame(columns=PREDICTOR_COLUMNS)
    on = ["suite", "task"] if "suite" in props.columns else ["task"]
    per = per_task_degradation(df).merge(props.drop_duplicates(on), on=on, how="inner")
    rng = np.random.default_rng(seed)
    out: list[dict[str, Any]] = []
    for suite, g in per.groupby("suite", sort=True):
        for prop in TASK_PROPERTIES:
            if prop not in g.columns:
                continue
            x = pd.to_numeric(g[prop], errors="coerce")
            r = spearman_permutation(x, g["relative_drop"], permutations=permutations, rng=rng)
            out.append({"suite": suite, "predictor": prop, "rho": r.rho, "p_value": r.p_value, "n": r.n,
                        "outcome": "relative_drop (per task)", "permutations": r.permutations, "exact": r.exact})
    return pd.DataFrame(out, columns=PREDICTOR_COLUMNS)

"""Predictors of robustness: capability, clean score and task properties (DESIGN.md section 4).

Each predictor is a Spearman correlation with a two-sided permutation test
(:func:`~.stats.spearman_permutation`, 100,000 random assignments by default).
Across models the outcome is robustness, -D_mb (so a positive rho means more
capable models lose less); across tasks it is the per-task degradation D_bi.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ..model.task import CLEAN
from .degradation import relative_degradation
from .stats import N_PERMUTATIONS, spearman_permutation
from .table import scored

if TYPE_CHECKING:
    import pandas as pd

    from ..model.task import Task

PREDICTOR_COLUMNS = ["suite", "predictor", "rho", "p_value", "n", "outcome"]
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
    """Across models of each suite: Spearman(capability, -D) and Spearman(C, -D).

    ``overall`` holds one row per (model, suite) with ``clean`` and
    ``relative_drop`` (see :func:`~.degradation.overall`).  Models missing
    from the capability table are left out of the capability analysis.
    """
    import pandas as pd

    rng = np.random.default_rng(seed)
    out: list[dict[str, Any]] = []
    for suite, g in overall.groupby("suite", sort=True):
        if capability is not None:
            m = g.merge(capability, on="model", how="inner")
            r = spearman_permutation(m["capability"], -m["relative_drop"], permutations=permutations, rng=rng)
            out.append({"suite": suite, "predictor": "capability", "rho": r.rho, "p_value": r.p_value,
                        "n": r.n, "outcome": "-relative_drop"})
        r = spearman_permutation(g["clean"], -g["relative_drop"], permutations=permutations, rng=rng)
        out.append({"suite": suite, "predictor": "clean_score", "rho": r.rho, "p_value": r.p_value, "n": r.n,
                    "outcome": "-relative_drop"})
    return pd.DataFrame(out, columns=PREDICTOR_COLUMNS)


def per_task_degradation(df: pd.DataFrame) -> pd.DataFrame:
    """Per (suite, task): C_i = mean clean reward over models, P_i = mean perturbed reward, D_i."""
    import pandas as pd

    d = scored(df)
    out = []
    for (suite, task), g in d.groupby(["suite", "task"], sort=True):
        c = g[g["family"] == CLEAN]["reward"]
        p = g[g["family"] != CLEAN]["reward"]
        cv = float(c.mean()) if len(c) else float("nan")
        pv = float(p.mean()) if len(p) else float("nan")
        out.append({"suite": suite, "task": task, "clean": cv, "perturbed": pv,
                    "relative_drop": relative_degradation(cv, pv)})
    return pd.DataFrame(out, columns=["suite", "task", "clean", "perturbed", "relative_drop"])


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
                        "outcome": "relative_drop (per task)"})
    return pd.DataFrame(out, columns=PREDICTOR_COLUMNS)

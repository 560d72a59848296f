"""Helpers for the analysis tests: episode rows, episodes CSVs and ``agentperturb analyze`` runs."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from pytest_agentperturb.cli import main

FAST = ["--replicates", "50", "--permutations", "200"]


def ep(model: str, task: str, family: str, reward: Any, **kw: Any) -> dict[str, Any]:
    """One episode row of suite ``s``."""
    return {"model": model, "suite": "s", "task": task, "family": family, "reward": reward, **kw}


def write_csv(path: Path, rows: list[dict[str, Any]]) -> Path:
    """``rows`` as an episodes CSV (the union of their keys as columns; missing cells blank)."""
    cols: list[str] = []
    for r in rows:
        cols += [c for c in r if c not in cols]
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, cols)
        w.writeheader()
        w.writerows(rows)
    return path


def run_analyze(tmp_path: Path, rows: list[dict[str, Any]], *extra: str, rc: int = 0) -> dict[str, Any]:
    """``agentperturb analyze --results CSV --json PATH`` on ``rows``; the JSON summary."""
    csv_path = write_csv(tmp_path / "episodes.csv", rows)
    out = tmp_path / "summary.json"
    assert main(["analyze", "--results", str(csv_path), "--json", str(out), *FAST, *extra]) == rc
    doc: dict[str, Any] = json.loads(out.read_text())
    return doc

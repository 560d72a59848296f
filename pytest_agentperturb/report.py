"""The HTML report: one self-contained file, every string escaped.

Top of the page: per model, clean score, perturbed score and relative
degradation, then the 4x3 target-by-type table; below, skipped variants and
a per-episode drill-down.  Reference agents are labelled as baselines.
Nothing is fetched from the network; there is no script.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .task import TARGETS, TYPES

BASELINE_PREFIX = "reference/"


def esc(x: Any) -> str:
    """HTML-escape anything (quotes included)."""
    return html.escape(str(x), quote=True)


def is_baseline(model: str) -> bool:
    return model.startswith(BASELINE_PREFIX)


def _fmt(x: Any, digits: int = 3, pct: bool = False) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:.1f} %" if pct else f"{x:.{digits}f}"


def _heat(v: float) -> str:
    if v is None or math.isnan(v):
        return "background:#eee"
    a = max(0.0, min(1.0, abs(v) / 100.0))
    return f"background:rgba(200,40,40,{a:.2f})" if v > 0 else f"background:rgba(40,140,60,{a:.2f})"


_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1200px}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:.3em .6em;text-align:right}
th{background:#f4f4f4}td.l,th.l{text-align:left}.tag{font-size:.8em;padding:.1em .4em;border-radius:3px;background:#ddd}
.baseline{background:#ffe9a8}pre{white-space:pre-wrap;background:#f8f8f8;padding:.5em;max-height:30em;overflow:auto}
details{margin:.2em 0}.pass{color:#186a2c}.fail{color:#a11}
"""


def render(rows: Sequence[dict[str, Any]], settings: Any = None,
           skipped: Sequence[tuple[str, str]] = (), extra_sections: Sequence[tuple[str, str]] = ()) -> str:
    """The report page as a string."""
    from .metrics import cell_table, degradation_by_model, frame

    out = ["<!DOCTYPE html><html><head><meta charset='utf-8'><title>agentperturb report</title>",
           f"<style>{_CSS}</style></head><body><h1>Agent robustness under perturbation</h1>"]
    if settings is not None:
        out.append(f"<p>run <code>{esc(settings.run_id)}</code>, seed {esc(settings.seed)}, "
                   f"{len(rows)} episodes.</p>")
    errors = [r for r in rows if r.get("error")]
    if errors:
        out.append(f"<p><b>{len(errors)}</b> episode(s) could not be scored (infrastructure errors); "
                   "they are excluded from every aggregate.</p>")
    df = frame(rows) if rows else None
    out.append("<h2>Degradation by model</h2>")
    if df is not None and len(df):
        deg = degradation_by_model(df)
        out.append("<table><tr><th class=l>model</th><th class=l>suite</th><th>clean C</th>"
                   "<th>perturbed P</th><th>relative drop D</th><th>clean episodes</th>"
                   "<th>perturbed episodes</th></tr>")
        for _, r in deg.iterrows():
            tag = " <span class='tag baseline'>baseline (reference agent, not a model)</span>" \
                if is_baseline(r["model"]) else ""
            out.append(f"<tr><td class=l>{esc(r['model'])}{tag}</td><td class=l>{esc(r['suite'])}</td>"
                       f"<td>{_fmt(r['clean'])}</td><td>{_fmt(r['perturbed'])}</td>"
                       f"<td>{_fmt(r['relative_drop'], pct=True)}</td><td>{r['n_clean']}</td>"
                       f"<td>{r['n_perturbed']}</td></tr>")
        out.append("</table>")
        out.append("<h2>Relative drop by target and type</h2>")
        for model in sorted(df["model"].unique()):
            t = cell_table(df, model)
            out.append(f"<h3>{esc(model)}</h3><table><tr><th class=l>target \\ type</th>"
                       + "".join(f"<th>{esc(k)}</th>" for k in TYPES) + "</tr>")
            for tg in TARGETS:
                out.append(f"<tr><th class=l>{esc(tg)}</th>" + "".join(
                    f"<td style='{_heat(t.loc[tg, k])}'>{_fmt(t.loc[tg, k], pct=True)}</td>" for k in TYPES)
                    + "</tr>")
            out.append("</table>")
    else:
        out.append("<p>No episodes.</p>")
    for title, body in extra_sections:
        out.append(f"<h2>{esc(title)}</h2>{body}")
    if skipped:
        out.append(f"<h2>Skipped variants ({len(skipped)})</h2><ul>")
        out += [f"<li><code>{esc(n)}</code>: {esc(reason)}</li>" for n, reason in skipped]
        out.append("</ul>")
    out.append("<h2>Episodes</h2>")
    for r in rows:
        verdict = "error" if r.get("error") else ("pass" if r.get("success") else "fail")
        comp = "" if r.get("compliance") is None else (" compliance" if r["compliance"] else " bypass")
        traj = r.get("trajectory")
        traj_txt = json.dumps(json.loads(traj) if isinstance(traj, str) else traj, indent=1, ensure_ascii=False)
        out.append(
            f"<details><summary><span class={verdict if verdict != 'error' else 'fail'}>{esc(verdict)}"
            f"{esc(comp)}</span> {esc(r['model'])} · {esc(r['task'])} · {esc(r['family'])} · "
            f"{esc(r['operator'])} · reward {esc(r['reward'])} · turns {esc(r['turns'])}</summary>"
            f"{'<p>error: ' + esc(r['error']) + '</p>' if r.get('error') else ''}"
            f"<pre>{esc(traj_txt)}</pre></details>"
        )
    out.append("</body></html>\n")
    return "".join(out)


def write_report(path: Path, rows: Sequence[dict[str, Any]], settings: Any = None,
                 skipped: Sequence[tuple[str, str]] = ()) -> Path:
    """Render and write the report; returns its path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(rows, settings, skipped), encoding="utf-8")
    return path

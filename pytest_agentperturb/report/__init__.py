"""The HTML report: one self-contained file, every string escaped, no script, no network.

:func:`render_page` renders an analysis and a gate verdict it is given (it
decides nothing).  Top of the page, for a release manager: the gate
verdict, the per-model table with bootstrap intervals, the 4x3
target-by-type heatmap.  Below, one section per metric of docs/design.md
section 4 (:mod:`.sections`), then a per-episode drill-down: the clean and
perturbed trajectories side by side (images included), the diff of the
edited surface and the canaries highlighted.  Baselines are labelled as such.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..model.protocols import IMAGE_TYPES
from ..model.task import CLEAN
from . import sections as rs
from .images import image_pairs_html
from .svg import esc

if TYPE_CHECKING:
    import pandas as pd

    from ..analysis import Analysis
    from ..gate import Verdict

_CSS = """
body{font-family:system-ui,sans-serif;margin:1em 2em;color:#222;max-width:1280px;font-size:14px}
h1{font-size:1.4em;margin:.2em 0}h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ddd}
h3{font-size:1em}table{border-collapse:collapse;margin:.4em 0 1em}
td,th{border:1px solid #ccc;padding:.2em .5em;text-align:right}th{background:#f4f4f4}
td.l,th.l{text-align:left}td.ci{color:#555;font-size:.9em}.muted{color:#666}
.tag{font-size:.75em;padding:.05em .35em;border-radius:3px;background:#ddd}.baseline{background:#ffe9a8}
.gate{padding:.5em .8em;border-radius:4px;margin:.5em 0;font-weight:600}.gate ul{margin:.2em 0;font-weight:400}
.gate.pass{background:#e3f4e6;color:#186a2c}.gate.fail{background:#fbe3e3;color:#a11}.gate.none{background:#eee}
.top{display:flex;gap:2em;flex-wrap:wrap;align-items:flex-start}.grid{display:flex;flex-wrap:wrap;gap:1em}
pre{white-space:pre-wrap;background:#f8f8f8;padding:.4em;margin:.2em 0;max-height:24em;overflow:auto}
.cols{display:grid;grid-template-columns:1fr 1fr;gap:1em}ol.traj{padding-left:1.6em;margin:.2em 0}
ol.traj li{margin:.1em 0;word-break:break-word}.call{color:#124}.obs{color:#555}.err{color:#a11}
.final{font-weight:600}mark{background:#ffd54f}.add{color:#186a2c}.del{color:#a11}.hunk{color:#777}
.pass{color:#186a2c}.fail{color:#a11}details{margin:.15em 0}nav a{margin-right:.8em}
img.obsimg{max-width:100%;border:1px solid #ccc;margin:.2em 0}
"""


def episode_anchor(row: Mapping[str, Any]) -> str:
    """Stable HTML id of an episode (pytest-html extras link to it)."""
    seed = row.get("seed")
    try:
        seed = int(float(seed))  # type: ignore[arg-type]   # 3, "3" and 3.0 name the same episode
    except (TypeError, ValueError):
        pass
    key = "|".join(str(row.get(k, "")) for k in ("run_id", "model", "suite", "task", "family")) + f"|{seed}"
    try:
        repeat = int(float(row.get("repeat") or 0))
    except (TypeError, ValueError):
        repeat = 0
    key += f"|r{repeat}" if repeat else ""   # repeat 0 keeps the anchors of runs without repeats
    return "ep-" + hashlib.sha256(key.encode()).hexdigest()[:16]


def episode_table(rows: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Normalised episode table from record rows (extra keys such as ``diff`` and ``canaries`` kept)."""
    import pandas as pd

    from ..analysis import normalise
    from ..model.records import STORE_COLUMNS as COLUMNS

    df = pd.DataFrame([dict(r) for r in rows]) if rows else pd.DataFrame(columns=list(COLUMNS))
    return normalise(df)


def task_properties_of(rows: Sequence[Mapping[str, Any]]) -> pd.DataFrame | None:
    """Task properties carried on plugin rows (``task_properties``), one per task."""
    import pandas as pd

    seen = {}
    for r in rows:
        p = r.get("task_properties")
        if isinstance(p, Mapping):
            seen[(p.get("suite"), p.get("task"))] = dict(p)
    return pd.DataFrame(list(seen.values())) if seen else None


def analyse(table: pd.DataFrame, rows: Sequence[Mapping[str, Any]] = (), *,
            task_properties: pd.DataFrame | None = None, **kw: Any) -> Analysis | None:
    """The analysis of an episode table (None when it is empty); task properties from ``rows`` if not given."""
    from ..analysis import analyze

    if task_properties is None and rows:
        task_properties = task_properties_of(rows)
    return analyze(table, task_properties=task_properties, **kw) if len(table) else None


def _gate_box(v: Verdict) -> str:
    if not v.thresholds.configured:
        strict = " Strict mode: every compliance fails its test." if v.thresholds.strict else ""
        return ("<div class='gate none'>Gate: no thresholds configured (see --agentperturb-max-drop, "
                f"--agentperturb-max-family-drop, --agentperturb-min-bypass ...).{esc(strict)}</div>")
    if not v.failed:
        notes = "".join(f"<li>{esc(n)}</li>" for n in v.notes)
        return f"<div class='gate pass'>Gate: PASSED — every threshold met.<ul>{notes}</ul></div>"
    items = "".join(f"<li>{esc(line)}</li>" for line in v.lines())
    return f"<div class='gate fail'>Gate: FAILED — {len(v.breaches)} threshold breach(es).<ul>{items}</ul></div>"


def _model_table(a: Analysis) -> str:
    import pandas as pd

    ov = a.drops[a.drops["level_kind"] == "overall"]
    mal = a.malleability.set_index(["model", "suite"]) if len(a.malleability) else None
    comp = a.episodes[(a.episodes["family"] != CLEAN) & a.episodes["compliance"].notna()
                      & (a.episodes["error"] == "")]
    bypass = {k: 1.0 - float(g["compliance"].astype(bool).mean()) for k, g in comp.groupby(["model", "suite"])}
    rows = []
    for r in ov.to_dict("records"):
        k = (r["model"], r["suite"])
        r["harmful_rate"] = float(mal.loc[k, "harmful_rate"]) if mal is not None and k in mal.index else None
        r["bypass_rate"] = bypass.get(k)
        rows.append(r)
    base = rs.baselines(a)
    rows.sort(key=lambda r: (r["suite"], r["model"] == rs.ALL_MODELS, r["model"] in base, r["model"]))
    return rs.table(pd.DataFrame(rows), baselines=base, cols=[
        ("model", "model", "model"), ("suite", "suite", "s"), ("clean C", "clean", "f3"),
        ("perturbed P", "perturbed", "f3"), ("relative drop D", "relative_drop", "pct"), ("95% CI", "ci", "pct"),
        ("harmful flips", "harmful_rate", "rate"), ("bypass", "bypass_rate", "rate"),
        ("tasks", "n_tasks", "i"), ("perturbed episodes", "n_perturbed", "i"), ("pairs", "n_pairs", "i"),
        ("dropped", "n_dropped", "i")], cls="models")


def render_page(a: Analysis | None, verdict: Verdict, *, settings: Any = None,
                skipped: Sequence[tuple[str, str]] = (), extra_sections: Sequence[tuple[str, str]] = (),
                has_capability: bool = False, n_rows: int = 0, notes: Sequence[str] = ()) -> str:
    """The page for an analysis and the gate's verdict on it (deterministic for the same inputs).

    ``notes`` are lines shown under the title (e.g. what an adapter says
    about its tasks); ``skipped`` lists (item, reason) of skipped variants.
    """
    out = ["<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
           "<meta name='viewport' content='width=device-width, initial-scale=1'>",
           f"<title>agentperturb report</title><style>{_CSS}</style></head><body>",
           "<h1>Agent robustness under perturbation</h1>"]
    run = f"run <code>{esc(settings.run_id)}</code>, seed {esc(settings.seed)}, " if settings is not None else ""
    out.append(f"<p class=muted>{run}{n_rows} episodes. Reference agents are "
               "<span class='tag baseline'>baseline</span>s, not model results.</p>")
    out += [f"<p class=muted>{esc(n)}</p>" for n in notes]
    out.append(_gate_box(verdict))
    if a is None:
        out.append("<p>No episodes.</p></body></html>\n")
        return "".join(out)
    out += [f"<p class=muted>{esc(n)}</p>" for n in a.notes]
    out.append("<div class=top><div>" + _model_table(a) + "</div>")
    for suite in sorted(set(a.drops["suite"])):
        out.append("<div>" + rs.heatmap_for(a, rs.ALL_MODELS, suite,
                                             title=f"{suite}: relative drop D by target x type, all models") + "</div>")
    out.append("</div>")
    sections = [(sid, title, fn(a)) for sid, title, fn in rs.SECTIONS]
    sections.insert(5, ("predictors", "Predictors", rs.predictors(a, has_capability)))
    sections = [(sid, title, body) for sid, title, fn in rs.RELEASE_SECTIONS if (body := fn(a))] + sections
    sections += [(f"extra-{i}", title, body) for i, (title, body) in enumerate(extra_sections)]
    out.append("<nav>" + "".join(f"<a href='#{sid}'>{esc(t)}</a>" for sid, t, _ in sections)
               + "<a href='#episodes'>Episodes</a></nav>")
    for sid, title, body in sections:
        out.append(f"<h2 id='{sid}'>{esc(title)}</h2>{body}")
    if skipped:
        out.append(f"<h2 id='skipped'>Skipped variants ({len(skipped)})</h2><ul>")
        out += [f"<li><code>{esc(n)}</code>: {esc(reason)}</li>" for n, reason in skipped]
        out.append("</ul>")
    out.append(_episodes(a.episodes, rs.baselines(a)))
    out.append("</body></html>\n")
    return "".join(out)


# -- drill-down ----------------------------------------------------------------
def _load(x: Any) -> Any:
    if isinstance(x, str):
        try:
            return json.loads(x) if x else []
        except ValueError:
            return []
    return x if isinstance(x, (list, tuple)) else []


def highlight(text: str, canaries: Sequence[str]) -> str:
    """Escape ``text`` and wrap every canary occurrence in ``<mark>`` (escaping first, so it stays inert)."""
    needles = sorted({c for c in canaries if c}, key=len, reverse=True)
    if not needles:
        return esc(text)
    pat = re.compile("|".join(re.escape(n) for n in needles))
    out, pos = [], 0
    for m in pat.finditer(text):
        out += [esc(text[pos:m.start()]), f"<mark>{esc(m.group(0))}</mark>"]
        pos = m.end()
    out.append(esc(text[pos:]))
    return "".join(out)


def trajectory_html(traj: Any, canaries: Sequence[str] = ()) -> str:
    """A trajectory as an ordered list of calls, observations, replies and the grader's checks."""
    items = []
    for e in _load(traj):
        if not isinstance(e, Mapping):
            continue
        role = e.get("role")
        if role == "assistant" and "tool" in e:
            args = e.get("args")
            a = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False, sort_keys=True)
            items.append(f"<li class=call>→ <b>{highlight(str(e['tool']), canaries)}</b>"
                         f"({highlight(a, canaries)})</li>")
        elif role == "assistant":
            cls = "final" if e.get("final") else "call"
            items.append(f"<li class={cls}>{'final: ' if e.get('final') else ''}"
                         f"{highlight(str(e.get('content', '')), canaries)}</li>")
        elif role == "tool":
            c = str(e.get("content", ""))
            imgs = "".join(image_html(p) for p in (e.get("parts") or []) if isinstance(p, Mapping))
            items.append(f"<li class={'err' if c.startswith('ERROR') else 'obs'}>← {highlight(c, canaries)}"
                         f"{imgs}</li>")
        elif role == "grader":
            checks = e.get("checks") or []
            items.append("<li class=obs>grader: " + "; ".join(
                f"<span class={'pass' if ok else 'fail'}>{'✓' if ok else '✗'} {esc(c)}</span>"
                for c, ok in checks) + "</li>")
        else:
            items.append(f"<li class=obs>{esc(role)}: {highlight(str(e.get('content', '')), canaries)}</li>")
    return f"<ol class=traj>{''.join(items)}</ol>" if items else "<p class=muted>no trajectory recorded</p>"


def image_html(part: Mapping[str, Any]) -> str:
    """An image part of an observation as an inline ``<img>`` (data URL); other parts render nothing.

    Only the media types of :data:`IMAGE_TYPES` are embedded and only
    base64 text reaches the attribute, so the markup stays inert.
    """
    if part.get("type") != "image" or part.get("mime_type") not in IMAGE_TYPES:
        return ""
    data = str(part.get("data", ""))
    if not re.fullmatch(r"[A-Za-z0-9+/=]*", data):
        return ""
    return f"<br><img class=obsimg alt='image observation' src='data:{part['mime_type']};base64,{data}'>"


def diff_html(diff: str) -> str:
    """A unified diff with added/removed lines coloured (escaped)."""
    if not diff:
        return "<p class=muted>diff not recorded</p>"
    lines = []
    for line in diff.splitlines():
        cls = "add" if line.startswith("+") and not line.startswith("+++") else \
            "del" if line.startswith("-") and not line.startswith("---") else "hunk" if line.startswith("@@") else ""
        lines.append(f"<span class='{cls}'>{esc(line)}</span>" if cls else esc(line))
    return "<pre>" + "\n".join(lines) + "</pre>"


def _verdict(r: Mapping[str, Any]) -> tuple[str, str]:
    if r.get("error"):
        return "error", "fail"
    return ("pass", "pass") if r.get("success") else ("fail", "fail")


def _episodes(df: pd.DataFrame, baselines: frozenset[str]) -> str:
    rows = df.to_dict("records")
    clean = {(r["run_id"], r["model"], r["suite"], r["task"], r.get("repeat", 0)): r for r in rows
             if r["family"] == CLEAN}
    several = len({r.get("repeat", 0) for r in rows}) > 1
    out = ["<h2 id='episodes'>Episodes</h2><p class=muted>Each perturbed episode shows the diff of the edited "
           "surface, its canaries (highlighted where they occur) and the clean and perturbed trajectories side by "
           "side.</p>"]
    for model in sorted({r["model"] for r in rows}):
        mine = [r for r in rows if r["model"] == model]
        tag = " (baseline)" if model in baselines else ""
        out.append(f"<details><summary><b>{esc(model)}{esc(tag)}</b> — {len(mine)} episodes</summary>")
        for r in mine:
            word, cls = _verdict(r)
            comp = "" if r.get("compliance") is None else (" · compliance" if r["compliance"] else " · bypass")
            labels = " · ".join(esc(x) for x in (r.get("awareness"), r.get("behaviour")) if x)
            heur = " (heuristic)" if "heuristic" in (r.get("awareness_source"), r.get("behaviour_source")) else ""
            rep = f" · repeat {r.get('repeat', 0)}" if several else ""
            head = (f"<summary><span class={cls}>{esc(word)}</span>{esc(comp)} · {esc(r['task'])} · "
                    f"{esc(r['family'])}{esc(rep)} · {esc(r['operator'])} · reward {esc(r['reward'])}"
                    f"{' · ' + labels + esc(heur) if labels else ''}</summary>")
            body = [f"<p class=err>error (not an agent failure): {esc(r['error'])}</p>"] if r.get("error") else []
            cans = [c for c in _load(r.get("canaries")) if isinstance(c, Mapping)]
            texts = [str(c.get("text", "")) for c in cans if c.get("kind") != "omitted"]
            if r["family"] != CLEAN:
                body.append(diff_html(str(r.get("diff") or "")))
                if cans:
                    body.append("<p>canaries: " + ", ".join(
                        f"<mark>{esc(c.get('text', ''))}</mark> <span class=tag>{esc(c.get('kind', ''))}</span>"
                        for c in cans) + "</p>")
                c = clean.get((r["run_id"], r["model"], r["suite"], r["task"], r.get("repeat", 0)))
                body.append(image_pairs_html(r, c))
                left = trajectory_html(c["trajectory"], texts) if c else "<p class=muted>no clean episode</p>"
                body.append(f"<div class=cols><div><h4>clean</h4>{left}</div><div><h4>perturbed</h4>"
                            f"{trajectory_html(r['trajectory'], texts)}</div></div>")
            else:
                body.append(trajectory_html(r["trajectory"]))
            out.append(f"<details id='{episode_anchor(r)}'>{head}{''.join(body)}</details>")
        out.append("</details>")
    return "".join(out)


def write(path: Path | str, html: str) -> Path:
    """Write a rendered page to ``path`` (parents created)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(html, encoding="utf-8")
    return p

"""The HTML report: a main page and one drill-down page per task, every string escaped, no script, no network.

:func:`render_page` renders an analysis and a gate verdict it is given (it
decides nothing).  Top of the page, for a release manager: the gate
verdict, the per-model table with bootstrap intervals, the 4x3
target-by-type heatmap (each cell a link to its family's failures).  Then
the failing episodes by family, each linked to its trajectory
(:mod:`.failures`), the turn and cost distributions per family (clean
beside perturbed), one section per metric of docs/design.md section 4
(:mod:`.sections`; tables of more than ``FOLD_ROWS`` rows folded behind
their headings), then the tasks, each linking to its own page
(:mod:`.pages`): the clean trajectory beside the perturbed ones (images
included), the diff of the edited surface and the canaries highlighted.
The main page holds no trajectory (its failures list is bounded per
family and model), so its size hardly grows with the number of episodes;
:func:`write_report` writes it and the task pages.
Baselines are labelled as such.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from ..model.errors import AgentPerturbError
from ..model.task import CLEAN
from ..model.undefined import NO_CLEAN_PASSES, NO_PAIRS, PER_MODEL, na
from . import sections as rs
from .sections import records
from .failures import failure_columns, failures_section
from .episodes import CSS, diff_html, episode_anchor, highlight, image_html, trajectory_html
from .pages import episode_url, pages_folder, render_pages, summaries, tasks_section, write_pages
from .svg import esc

if TYPE_CHECKING:
    import pandas as pd

    from ..analysis import Analysis
    from ..gate import Verdict

__all__ = ["analyse", "diff_html", "episode_anchor", "episode_table", "episode_url", "highlight", "image_html",
           "main_page", "pages_folder", "records", "render_page", "task_properties_of", "trajectory_html", "write",
           "write_main_page", "write_report"]


def episode_table(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Normalised episode table from record rows (extra keys such as ``diff`` and ``canaries`` kept)."""
    import pandas as pd

    from ..analysis import normalise
    from ..model.records import STORE_COLUMNS as COLUMNS

    data = [dict(r) for r in rows]
    df = pd.DataFrame(data) if data else pd.DataFrame(columns=list(COLUMNS))
    return normalise(df)


def task_properties_of(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame | None:
    """Task properties carried on plugin rows (``task_properties``), one per task."""
    import pandas as pd

    seen = {}
    for r in rows:
        p = r.get("task_properties")
        if isinstance(p, Mapping):
            seen[(p.get("suite"), p.get("task"))] = dict(p)
    return pd.DataFrame(list(seen.values())) if seen else None


def analyse(table: pd.DataFrame, rows: Iterable[Mapping[str, Any]] = (), *,
            task_properties: pd.DataFrame | None = None, **kw: Any) -> Analysis | None:
    """The analysis of an episode table (None when it is empty); task properties from ``rows`` if not given."""
    from ..analysis import analyze

    if task_properties is None and rows:
        task_properties = task_properties_of(rows)
    return analyze(table, task_properties=task_properties, **kw) if len(table) else None


def _gate_box(v: Verdict) -> str:
    """The verdict: the breaches (counted in the title), then the gate's notes apart, styled as notes."""
    if not v.thresholds.configured:
        strict = " Strict mode: every compliance fails its test." if v.thresholds.strict else ""
        return ("<div class='gate none'>Gate: no thresholds configured (see --agentperturb-max-drop, "
                f"--agentperturb-max-family-drop, --agentperturb-min-bypass ...).{esc(strict)}</div>")
    notes = (f"<div class='gate notes'>Gate notes ({len(v.notes)}), not breaches:<ul>"
             + "".join(f"<li>{esc(n)}</li>" for n in v.notes) + "</ul></div>") if v.notes else ""
    if not v.failed:
        return f"<div class='gate pass'>Gate: PASSED — every threshold met.</div>{notes}"
    items = "".join(f"<li>{esc(b.line())}</li>" for b in v.breaches)
    return (f"<div class='gate fail'>Gate: FAILED — {len(v.breaches)} threshold breach(es).<ul>{items}</ul></div>"
            f"{notes}")


def _model_table(a: Analysis) -> str:
    """Per model and suite: C, P, D with its interval, harmful flips, bypass and what they rest on ("" without rows).

    Harmful flips (of the 12 families' clean passes) and bypass are per
    model: the suite average row says so (``n/a (per model only)``), and a
    model's undefined figure says why.
    """
    import pandas as pd

    ov = a.drops[a.drops["level_kind"] == "overall"]
    if not len(ov):
        return ""
    mal = a.malleability.set_index(["model", "suite"]) if len(a.malleability) else None
    ep = a.episodes[["model", "suite", "family", "compliance", "error"]]
    comp = ep[(ep["family"] != CLEAN) & ep["compliance"].notna() & (ep["error"] == "")]
    bypass = {k: 1.0 - float(g["compliance"].astype(bool).mean()) for k, g in comp.groupby(["model", "suite"])}
    rows = []
    perturbed = {k for k, g in ep[(ep["family"] != CLEAN) & (ep["error"] == "")].groupby(["model", "suite"])}
    for r in ov.to_dict("records"):
        k = (r["model"], r["suite"])
        r["harmful_rate"] = float(mal.loc[k, "harmful_rate"]) if mal is not None and k in mal.index else None
        r["bypass_rate"] = bypass.get(k)
        if r["model"] == rs.ALL_MODELS:
            r["harmful_rate_why"] = r["bypass_rate_why"] = PER_MODEL
        else:
            r["harmful_rate_why"] = NO_CLEAN_PASSES if r["harmful_rate"] is not None else NO_PAIRS
            r["bypass_rate_why"] = "no compliance verdict" if k in perturbed else "no perturbed episodes"
        rows.append(r)
    base = rs.baselines(a)
    rows.sort(key=lambda r: (r["suite"], r["model"] == rs.ALL_MODELS, r["model"] in base, r["model"]))
    return rs.table(rs.drop_whys(pd.DataFrame(rows)), baselines=base, fold_over=None, cols=[
        ("model", "model", "model"), ("suite", "suite", "s"), ("clean C", "clean", "f3"),
        ("perturbed P", "perturbed", "f3"), ("relative drop D", "relative_drop", "pct"), ("95% CI", "ci", "pct"),
        ("harmful flips", "harmful_rate", "rate"), ("bypass", "bypass_rate", "rate"),
        ("tasks", "n_tasks", "i"), ("perturbed episodes", "n_perturbed", "i"), ("pairs", "n_pairs", "i"),
        ("dropped", "n_dropped", "i"), ("smallest detectable D", "min_detectable", "pct")], cls="models")


def _no_overall_why(a: Analysis) -> str:
    """Why no model has an overall row (D over the 12 families): nothing paired, or none of the 12 ran."""
    if not len(a.drops):
        return "no scored clean/perturbed pair"
    return ("none of the 12 perturbation families has a scored pair; inserted objects have their own rows "
            "under Degradation")


def render_page(a: Analysis | None, verdict: Verdict, *, settings: Any = None,
                skipped: Sequence[tuple[str, str]] = (), extra_sections: Sequence[tuple[str, str]] = (),
                has_capability: bool = False, n_rows: int = 0, notes: Sequence[str] = (),
                pages_url: str = "agentperturb-tasks") -> str:
    """The main page for an analysis and the gate's verdict on it (deterministic for the same inputs).

    ``notes`` are lines shown under the title (e.g. what an adapter says
    about its tasks); ``skipped`` lists (item, reason) of skipped variants;
    ``pages_url`` is the drill-down folder relative to the page (URL-quoted).
    """
    out = ["<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
           "<meta name='viewport' content='width=device-width, initial-scale=1'>",
           f"<title>agentperturb report</title><style>{CSS}</style></head><body>",
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
    models = _model_table(a)
    if not models:   # said in a line of its own, not squeezed beside the heatmap
        out.append(f"<p class=muted>Per-model table: {esc(na(_no_overall_why(a)))}.</p>")
    out.append("<div class=top>" + (f"<div>{models}</div>" if models else ""))
    for suite in sorted(set(a.drops["suite"])):
        out.append("<div>" + rs.heatmap_for(a, rs.ALL_MODELS, suite,
                                             title=f"{suite}: relative drop D by target x type, all models") + "</div>")
    out.append("</div>")
    sections = [(sid, title, fn(a)) for sid, title, fn in rs.SECTIONS]
    sections.insert(5, ("predictors", "Predictors", rs.predictors(a, has_capability)))
    sections = [(sid, title, body) for sid, title, fn in rs.RELEASE_SECTIONS if (body := fn(a))] + [
        ("distributions", "Turns and cost per family, clean beside perturbed", rs.distributions(a))] + sections
    fails = failures_section(records(a.episodes[failure_columns(a.episodes.columns)]), pages_url, rs.baselines(a))
    sections.insert(0, ("failures", "Failing episodes by family", fails))
    sections += [(f"extra-{i}", title, body) for i, (title, body) in enumerate(extra_sections)]
    out.append("<nav>" + "".join(f"<a href='#{sid}'>{esc(t)}</a>" for sid, t, _ in sections)
               + "<a href='#tasks'>Episodes by task</a></nav>")
    for sid, title, body in sections:
        out.append(f"<h2 id='{sid}'>{esc(title)}</h2>{body}")
    if skipped:
        items = "<ul>" + "".join(f"<li><code>{esc(n)}</code>: {esc(reason)}</li>" for n, reason in skipped) + "</ul>"
        out.append(f"<h2 id='skipped'>Skipped variants ({len(skipped)})</h2>"
                   + (rs.fold("every skipped variant", items, len(skipped)) if len(skipped) > rs.FOLD_ROWS else items))
    out.append(tasks_section(summaries(records(a.episodes[["suite", "task", "model", "family", "success", "error"]])),
                             pages_url))
    out.append("</body></html>\n")
    return "".join(out)


#: What the first bytes of a main page this package wrote hold (an older report included).
_REPORT_MARK = b"<title>agentperturb report</title>"


def _is_report(p: Path) -> bool:
    try:
        with p.open("rb") as f:
            return _REPORT_MARK in f.read(1000)
    except OSError:
        return False


def write(path: Path | str, html: str) -> Path:
    """Write a rendered page to ``path`` (parents created): atomically, never through a link or over a foreign file.

    The page goes to a temporary file in the same folder, then replaces
    ``path`` by a rename (:func:`.files.write_text`), so a failed write
    leaves the old file whole.

    Raises:
        AgentPerturbError: ``path`` is a link, a folder or another kind of
            file, or an existing file that is not a report of this package
            (a results store, a user's file): it is never replaced; or the
            write failed (one line: ``path``, the reason, the fix).
    """
    from .files import write_text

    p = Path(path)
    fix = "fix: move it away or write the report elsewhere (--agentperturb-report / --out)"
    if p.is_symlink():
        raise AgentPerturbError(f"{p}: the report path is a symbolic link; the report is never written through "
                                f"a link; {fix}")
    if p.exists() and not p.is_file():
        raise AgentPerturbError(f"{p}: the report path is a folder or not a regular file; {fix}")
    if p.exists() and not _is_report(p):
        raise AgentPerturbError(f"{p}: the report path holds a file that is not an agentperturb report (a results "
                                f"store, or someone's file); it is never overwritten; {fix}")
    write_text(p, html, ours=_is_report, what="report")
    return p


def write_report(path: Path | str, a: Analysis | None, verdict: Verdict, **kw: Any) -> Path:
    """Write the main page to ``path`` and every task's page to its folder (:func:`~.pages.pages_folder`).

    The task pages come first, so the main page's links resolve when it
    appears; pages an earlier report left in the folder are removed
    (:func:`~.pages.write_pages`).  ``kw`` goes to :func:`render_page`.
    """
    p = Path(path)
    rows = records(a.episodes) if a is not None else []
    baselines = rs.baselines(a) if a is not None else frozenset()
    write_pages(pages_folder(p), render_pages(rows, main_name=p.name, baselines=baselines))
    return write_main_page(p, a, verdict, **kw)


def write_main_page(path: Path | str, a: Analysis | None, verdict: Verdict, **kw: Any) -> Path:
    """Write the main page alone, its task pages being written already (:func:`write_report` writes both)."""
    return write(path, main_page(path, a, verdict, **kw))


def main_page(path: Path | str, a: Analysis | None, verdict: Verdict, **kw: Any) -> str:
    """The HTML :func:`write_main_page` writes to ``path`` (its task pages' folder linked relative to it)."""
    return render_page(a, verdict, pages_url=quote(pages_folder(Path(path)).name), **kw)

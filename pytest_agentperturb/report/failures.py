"""The main page's failing episodes: grouped by suite and family, each linked to its trajectory on its task page.

One group per (suite, family) that ran, folded behind a heading that
counts its failures per model; inside, one block per model (an anchor of
its own, so a per-model heatmap cell can point at it) listing each failing
episode (a failure or an error): its task, the grader checks that failed,
its clean pair's outcome (a perturbed failure whose clean episode passed
is a harmful flip) and links to both on the task page.  Every group and
every model block exists even without a failure, so every heatmap cell's
link resolves.  At most :data:`MAX_PER_MODEL` episodes are listed per
(suite, family, model); the rest are counted, and every one of them is on
its task's page.  Every string is escaped; ids are hashes (no text of a
task or model reaches an attribute unescaped).
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..model.task import CLEAN, FAMILIES, INSERTED
from ..model.trajectory import clip
from ..model.trajectory import failed_checks as trajectory_failed_checks
from .episodes import episode_anchor, error_html, load_json_list, verdict
from .pages import page_path
from .svg import esc

#: At most this many failing episodes are listed per (suite, family, model) on the main page.
MAX_PER_MODEL = 20
#: At most this many failed grader checks are shown per episode (each cut to :data:`CHECK_CHARS`, at a word).
MAX_CHECKS, CHECK_CHARS = 3, 200

_ORDER = {f: i for i, f in enumerate((CLEAN, *FAMILIES, *INSERTED))}
#: The column of failed grader checks the pages' worker sends in place of trajectories (:func:`checks_column`).
CHECKS = "failed_checks"
COLUMNS = ("run_id", "model", "suite", "task", "family", "seed", "repeat", "reward", "success", "error",
           "trajectory", CHECKS)


def failure_anchor(suite: Any, family: Any, model: Any = None) -> str:
    """The id of a (suite, family) group in the failures list, or of one model's block in it."""
    key = f"{suite}\x00{family}" + ("" if model is None else f"\x00{model}")
    return ("fail-" if model is None else "failm-") + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def failed_checks(traj: Any) -> list[str]:
    """The grader checks an episode failed, in order (from its trajectory's grader entries)."""
    return trajectory_failed_checks(load_json_list(traj))


def checks_column(rows: Sequence[dict[str, Any]]) -> list[list[str] | None]:
    """Per row, its failed grader checks where it may be failing (no error, not a success), else None.

    A failing row's trajectory JSON text is decoded in place (its list is
    what every later reader takes as it is): the pages' worker sends this
    column back instead of the trajectories, so the main page it helps
    render names the same checks as one process does.
    """
    from .episodes import decoded

    out: list[list[str] | None] = []
    for r in rows:
        if str(r.get("error") or "").strip() or r.get("success"):   # an error as normalise reads it
            out.append(None)
            continue
        decoded([r])
        out.append(failed_checks(r.get("trajectory")))
    return out


def _fam_key(f: str) -> tuple[int, str]:
    return (_ORDER.get(f, len(_ORDER)), f)


def _pair_key(r: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(str(r.get(k, "")) for k in ("run_id", "model", "suite", "task")) + (str(_int(r.get("repeat"))),)


def _int(x: Any) -> int:
    try:
        return int(float(x or 0))
    except (TypeError, ValueError):
        return 0


def _checks_html(r: Mapping[str, Any]) -> str:
    if r.get("error"):
        return error_html(r, CHECK_CHARS)
    given = r.get(CHECKS)
    checks = [str(c) for c in given] if isinstance(given, (list, tuple)) else failed_checks(r.get("trajectory"))
    if not checks:
        return "<span class=muted>no failed check recorded</span>"
    shown = "<br>".join(f"✗ {esc(clip(c, CHECK_CHARS))}" for c in checks[:MAX_CHECKS])
    return shown + (f" <span class=muted>(+{len(checks) - MAX_CHECKS} more)</span>" if len(checks) > MAX_CHECKS else "")


def failures_section(rows: Iterable[Mapping[str, Any]], pages_url: str,
                     baselines: frozenset[str] = frozenset()) -> str:
    """The 'Failing episodes' section body for episode rows (columns :data:`COLUMNS`), links under ``pages_url``."""
    base = pages_url.rstrip("/") + "/"
    rows = list(rows)
    clean: dict[tuple[str, ...], Mapping[str, Any]] = {}
    groups: dict[tuple[str, str], dict[str, list[Mapping[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if r["family"] == CLEAN:
            clean.setdefault(_pair_key(r), r)
        groups[(str(r["suite"]), str(r["family"]))][str(r["model"])].append(r)
    n_fail = sum(verdict(r)[0] != "pass" for r in rows)
    out = [f"<p>{n_fail} of {len(rows)} episodes failed (or ended in an error). One group per family, folded: "
           "open it for its failing episodes by model, each linked to its trajectory on its task's page, with the "
           "grader checks that failed and its clean pair (<span class=fail>pass→fail</span> against a clean pass "
           "is a harmful flip). A heatmap cell links to its family here.</p>"]
    for (suite, family) in sorted(groups, key=lambda k: (k[0], _fam_key(k[1]))):
        by_model = groups[(suite, family)]
        models = sorted(by_model, key=lambda m: (m in baselines, m))
        fails = {m: [r for r in by_model[m] if verdict(r)[0] != "pass"] for m in models}
        total = sum(len(v) for v in fails.values())
        n = sum(len(v) for v in by_model.values())
        counts = " · ".join(f"{esc(m)} {len(fails[m])}/{len(by_model[m])}" for m in models)
        out.append(f"<details class=fold id='{failure_anchor(suite, family)}'><summary><b>{esc(suite)} · "
                   f"{esc(family)}</b>: <span class={'fail' if total else 'pass'}>{total} of {n} failed</span> "
                   f"<span class=muted>({counts})</span></summary>")
        out.append("<table class=failures><tr><th class=l>task</th><th>verdict</th><th>reward</th>"
                   "<th>clean pair</th><th class=l>failed checks</th></tr>")
        for m in models:
            tag = " <span class='tag baseline'>baseline</span>" if m in baselines else ""
            out.append(f"<tr id='{failure_anchor(suite, family, m)}'><th class=l colspan=5>{esc(m)}{tag}: "
                       f"{len(fails[m])} of {len(by_model[m])} failed</th></tr>")
            shown = sorted(fails[m], key=lambda r: (str(r["task"]), str(r.get("run_id", "")), _int(r.get("repeat"))))
            for r in shown[:MAX_PER_MODEL]:
                page = base + page_path(suite, str(r["task"]))
                word, cls = verdict(r)
                cell = "<td>–</td>"   # a clean episode has no clean pair
                if family != CLEAN:
                    c = clean.get(_pair_key(r))
                    cell = "<td>n/a (no clean episode)</td>"
                    if c is not None:
                        cw, ccls = verdict(c)
                        cell = f"<td><a class={ccls} href='{esc(page + '#' + episode_anchor(c))}'>{esc(cw)}</a></td>"
                reward = r.get("reward")
                rtext = "n/a (not scored)" if reward is None or reward != reward else f"{float(reward):.2f}"
                out.append(f"<tr><td class=l><a href='{esc(page + '#' + episode_anchor(r))}'>{esc(r['task'])}</a>"
                           f"</td><td class={cls}>{esc(word)}</td><td>{rtext}</td>{cell}"
                           f"<td class=l>{_checks_html(r)}</td></tr>")
            if len(shown) > MAX_PER_MODEL:
                out.append(f"<tr><td class='l muted' colspan=5>… and {len(shown) - MAX_PER_MODEL} more failing "
                           f"episode(s) of {esc(m)}: every one is on its task's page "
                           f"(<a href='{esc(base + 'index.html')}'>index of all tasks</a>).</td></tr>")
        out.append("</table></details>")
    return "".join(out)


def failure_columns(columns: Sequence[str]) -> list[str]:
    """The columns of :data:`COLUMNS` an episode table has (older tables may lack ``repeat``)."""
    return [c for c in COLUMNS if c in columns]

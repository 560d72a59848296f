"""Drill-down pages: one static page per task beside the main report, and their folder.

The main page (``reports/agentperturb.html``) keeps the summary and links
here; every episode is shown on its task's page, ``<stem>-tasks/<suite>/<task>.html``
next to it (``reports/agentperturb-tasks/workflows/book-offsite.html``),
with ``<stem>-tasks/index.html`` listing every task.  On a task's page each
(model, run, repeat) shows its clean trajectory once, in a column that stays
in view, beside the perturbed episodes (diff, canaries, images and
trajectory, each rendered once).  Pages are self-contained: inline CSS, no
script, no external resource, every string escaped.

File names come from :func:`slug`: lowercase letters, digits, ``.``, ``_``
and ``-`` only, so no id can climb out of the folder; an id that is not
already such a name gets a hash of itself appended, so two ids never share
a page (on case-insensitive file systems too).  The folder is the report's
own: :func:`write_pages` rewrites it and removes the pages an earlier
report left there (only files that carry this module's generator mark;
anything else is left alone).
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import stat
import tempfile
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ..model.errors import AgentPerturbError
from ..model.task import CLEAN, FAMILIES, INSERTED
from .episodes import CSS, canaries_of, diff_html, episode_anchor, error_html, trajectory_html, verdict
from .files import exchange, umask, unwritable
from .images import image_pairs_html
from .svg import esc

#: Marks every page this module writes; only files with it are removed as stale.
GENERATOR = "<meta name='generator' content='pytest-agentperturb drill-down'>"
INDEX = "index.html"
#: At most this many tasks are listed on the main page (all of them on the index page).
MAIN_PAGE_TASKS = 1000
#: The main page's task table is folded (``<details>``) above this many tasks (as the report's other tables).
FOLD_ROWS = 12

_SAFE = re.compile(r"[a-z0-9](?:[a-z0-9._-]{0,62}[a-z0-9])?")
_RESERVED = {"con", "prn", "aux", "nul", *(f"com{i}" for i in range(10)), *(f"lpt{i}" for i in range(10))}
_ORDER = {f: i for i, f in enumerate((CLEAN, *FAMILIES, *INSERTED))}


def slug(name: str, *, folder: bool = False) -> str:
    """A safe file or folder name for an id: the id itself where it is safe, else a cleaned form plus a hash.

    Safe means ``[a-z0-9._-]`` only, starting and ending with a letter or
    digit, at most 64 characters, no ``..`` or ``--``, not a reserved device
    name (``con``, ``nul``, ...), and for a folder not ending in ``.html``.
    Cleaned forms contain no ``--`` except before their hash, so no safe id
    equals another id's cleaned form.
    """
    s = str(name)
    if (_SAFE.fullmatch(s) and ".." not in s and "--" not in s and s.split(".")[0] not in _RESERVED
            and not (folder and s.endswith(".html"))):
        return s
    base = re.sub(r"[^a-z0-9._]+", "-", s.lower())
    base = re.sub(r"[-._]{2,}", "-", base).strip("._-")[:48].strip("._-") or "x"
    return f"{base}--{hashlib.sha256(s.encode('utf-8', 'surrogatepass')).hexdigest()[:10]}"


def page_path(suite: str, task: str) -> str:
    """Path of a task's page inside the drill-down folder (``/``-separated)."""
    return f"{slug(suite, folder=True)}/{slug(task)}.html"


def pages_folder(report: Path | str) -> Path:
    """The drill-down folder of a main page: ``reports/agentperturb.html`` -> ``reports/agentperturb-tasks``."""
    p = Path(report)
    return p.with_name(f"{p.stem or p.name}-tasks")


def episode_url(report: Path | str, row: Mapping[str, Any]) -> str:
    """``file://`` URL of an episode on its task's page (what the pytest-html extras link to)."""
    page = pages_folder(report) / page_path(str(row.get("suite", "")), str(row.get("task", "")))
    return page.resolve().as_uri() + "#" + episode_anchor(row)


@dataclass(frozen=True)
class TaskSummary:
    """Counts of one task's episodes (every model and run), for the index tables."""

    suite: str
    task: str
    episodes: int
    models: int
    clean_pass: int
    clean_scored: int
    perturbed_pass: int
    perturbed_scored: int
    errors: int

    @property
    def path(self) -> str:
        return page_path(self.suite, self.task)


def summaries(rows: Iterable[Mapping[str, Any]]) -> list[TaskSummary]:
    """One :class:`TaskSummary` per (suite, task), sorted by suite and task."""
    acc: dict[tuple[str, str], list[Any]] = {}
    for r in rows:
        k = (str(r["suite"]), str(r["task"]))
        a = acc.setdefault(k, [0, set(), 0, 0, 0, 0, 0])
        a[0] += 1
        a[1].add(str(r["model"]))
        if r.get("error"):
            a[6] += 1
            continue
        i = 2 if r["family"] == CLEAN else 4
        a[i] += bool(r.get("success"))
        a[i + 1] += 1
    return [TaskSummary(s, t, a[0], len(a[1]), *a[2:]) for (s, t), a in sorted(acc.items())]


def _rate(k: int, n: int) -> str:
    return f"{k}/{n}" if n else "n/a (none run)"


def _cls(k: int, n: int) -> str:
    return "" if not n else " class=pass" if k == n else " class=fail"


def task_rows(tasks: Sequence[TaskSummary], base_url: str, limit: int | None = None) -> str:
    """An escaped table of tasks, each linking to its page under ``base_url`` (a relative, quoted URL)."""
    head = ("<table class=tasks><tr><th class=l>suite</th><th class=l>task</th><th>models</th><th>episodes</th>"
            "<th>clean passed</th><th>perturbed passed</th><th>errors</th></tr>")
    body = [f"<tr><td class=l>{esc(t.suite)}</td><td class=l><a href='{esc(base_url + t.path)}'>{esc(t.task)}</a>"
            f"</td><td>{t.models}</td><td>{t.episodes}</td><td{_cls(t.clean_pass, t.clean_scored)}>"
            f"{_rate(t.clean_pass, t.clean_scored)}</td><td>{_rate(t.perturbed_pass, t.perturbed_scored)}</td>"
            f"<td{' class=fail' if t.errors else ''}>{t.errors}</td></tr>"
            for t in (tasks if limit is None else tasks[:limit])]
    return head + "".join(body) + "</table>"


def tasks_section(tasks: Sequence[TaskSummary], folder_url: str) -> str:
    """The main page's 'Episodes by task' section: a linked table of at most :data:`MAIN_PAGE_TASKS` tasks."""
    base = folder_url.rstrip("/") + "/"
    n_eps = sum(t.episodes for t in tasks)
    more = (f" The first {MAIN_PAGE_TASKS} of {len(tasks)} tasks are listed here;" if len(tasks) > MAIN_PAGE_TASKS
            else "")
    return (f"<h2 id='tasks'>Episodes by task</h2><p class=muted>{n_eps} episodes of {len(tasks)} tasks. Each task "
            "has its own page with every episode: the clean trajectory beside the perturbed ones, the diff of the "
            f"edited surface and its canaries (highlighted where they occur), images included.{more} "
            f"<a href='{esc(base + INDEX)}'>index of all tasks</a>.</p>"
            + (f"<details class=fold><summary><b>every task</b> <span class=muted>({min(len(tasks), MAIN_PAGE_TASKS)}"
               f" rows)</span></summary>{task_rows(tasks, base, MAIN_PAGE_TASKS)}</details>"
               if len(tasks) > FOLD_ROWS else task_rows(tasks, base, MAIN_PAGE_TASKS)))


def _page(title: str, body: str) -> str:
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>{GENERATOR}"
            "<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<title>{esc(title)}</title><style>{CSS}</style></head><body>{body}</body></html>\n")


def index_page(tasks: Sequence[TaskSummary], main_name: str) -> str:
    """The folder's ``index.html``: every task, linked."""
    back = f"<p><a href='{esc('../' + quote(main_name))}'>← the report</a></p>"
    return _page("agentperturb: tasks", f"{back}<h1>Tasks ({len(tasks)})</h1>" + task_rows(tasks, ""))


def _key(r: Mapping[str, Any]) -> tuple[Any, ...]:
    return (str(r.get("run_id", "")), _int(r.get("repeat")))


def _int(x: Any) -> int:
    try:
        return int(float(x or 0))
    except (TypeError, ValueError):
        return 0


def _fam_order(f: str) -> tuple[int, str]:
    return (_ORDER.get(f, len(_ORDER)), f)


@functools.lru_cache(maxsize=4096)
def _esc_str(s: str) -> str:
    return esc(s)


def _e(x: Any) -> str:
    """:func:`~.svg.esc`, remembered: the same few family names, verdicts and rewards recur on every page."""
    return _esc_str(x if type(x) is str else str(x))


def _head(r: Mapping[str, Any], several: bool) -> str:
    word, cls = verdict(r)
    comp = "" if r.get("compliance") is None else (" · compliance" if r["compliance"] else " · bypass")
    labels = " · ".join(_e(x) for x in (r.get("awareness"), r.get("behaviour")) if x)
    heur = " (heuristic)" if "heuristic" in (r.get("awareness_source"), r.get("behaviour_source")) else ""
    rep = f" · run {r.get('run_id')} · repeat {_int(r.get('repeat'))}" if several else ""
    op = "" if r["family"] == CLEAN else f" · operator {r.get('operator', '')}"
    return (f"<b>{_e(r['family'])}</b> · <span class={cls}>{_e(word)}</span>{_e(comp)}{_e(rep)}{_e(op)} · "
            f"reward {_e(r.get('reward'))}{' · ' + labels + _e(heur) if labels else ''}")


def _perturbed(r: Mapping[str, Any], clean: Mapping[str, Any] | None, several: bool, anchor: str) -> str:
    body = [f"<h4>{_head(r, several)}</h4>"]
    if r.get("error"):
        body.append(f"<div class=err>{error_html(r)}</div>")
    cans = canaries_of(r)
    if r["family"] != CLEAN:
        diff = r.get("diff")
        body.append(diff_html("" if diff is None or diff != diff else str(diff)))   # NULL (None or NaN): none
        if cans:
            body.append("<p>canaries: " + ", ".join(
                f"<mark>{_e(c.get('text', ''))}</mark> <span class=tag>{_e(c.get('kind', ''))}</span>"
                for c in cans) + "</p>")
        body.append(image_pairs_html(r, clean))
    texts = [str(c.get("text", "")) for c in cans if c.get("kind") != "omitted"]
    body.append(trajectory_html(r.get("trajectory"), texts))
    return f"<section class=ep id='{anchor}'>{''.join(body)}</section>"


def _matrix(models: Sequence[tuple[str, list[Mapping[str, Any]]]], anchors: Mapping[int, str],
            keys: Mapping[int, tuple[Any, ...]] | None = None) -> str:
    """Family x model grid of verdicts (one mark per run and repeat), each a link to its episode.

    ``anchors`` maps ``id(row)`` to the row's :func:`~.episodes.episode_anchor`, ``keys`` (if given)
    to its run and repeat (:func:`_key`).
    """
    fams = sorted({str(r["family"]) for _, rs in models for r in rs}, key=_fam_order)
    cells: dict[tuple[str, int], list[str]] = defaultdict(list)
    for i, (_, rs) in enumerate(models):
        for r in sorted(rs, key=_key if keys is None else lambda r: keys[id(r)]):
            word, cls = verdict(r)
            sym = {"pass": "✓", "fail": "✗", "error": "E"}[word]
            cells[(str(r["family"]), i)].append(f"<a class={cls} href='#{anchors[id(r)]}' "
                                                f"title='{esc(word)}'>{sym}</a>")
    head = "<tr><th class=l>family</th>" + "".join(f"<th class=l>{label}</th>" for label, _ in models) + "</tr>"
    body = "".join(f"<tr><td class=l>{esc(f)}</td>" + "".join(f"<td>{' '.join(cells.get((f, i), []))}</td>"
                                                             for i in range(len(models))) + "</tr>" for f in fams)
    return f"<table class=fams>{head}{body}</table>"


def task_page(suite: str, task: str, rows: Sequence[Mapping[str, Any]], *, main_name: str,
              baselines: frozenset[str] = frozenset()) -> str:
    """The page of one task: every episode of every model, each trajectory rendered once."""
    keys = {id(r): _key(r) for r in rows}
    several = len(set(keys.values())) > 1
    by_model: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for r in rows:
        by_model[str(r["model"])].append(r)
    models = sorted(by_model, key=lambda m: (m in baselines, m))
    labels = {m: esc(m) + (" <span class='tag baseline'>baseline</span>" if m in baselines else "") for m in models}
    anchors = {id(r): episode_anchor(r) for r in rows}
    main = "../../" + quote(main_name)
    out = [f"<p><a href='{esc(main)}'>← the report</a> · <a href='../{INDEX}'>all tasks</a></p>",
           f"<h1>{esc(task)} <span class=muted>· {esc(suite)}</span></h1>",
           f"<p class=muted>{len(rows)} episodes. Each perturbed episode shows the diff of the edited surface, its "
           "canaries (highlighted where they occur) and its trajectory; the clean episode of the same model, run "
           "and repeat stays in view beside them. Reference agents are <span class='tag baseline'>baseline</span>s."
           "</p>", _matrix([(labels[m], by_model[m]) for m in models], anchors, keys)]
    for i, m in enumerate(models):
        out.append(f"<h2 id='m{i}'>{labels[m]}</h2>")
        runs: dict[tuple[Any, ...], list[Mapping[str, Any]]] = defaultdict(list)
        for r in by_model[m]:
            runs[keys[id(r)]].append(r)
        for key in sorted(runs):
            rs = sorted(runs[key], key=lambda r: (_fam_order(str(r["family"])), _int(r.get("seed"))))
            if several:
                out.append(f"<h3>run {esc(key[0])} · repeat {key[1]}</h3>")
            cleans = [r for r in rs if r["family"] == CLEAN]
            clean = cleans[0] if cleans else None
            if clean is not None:
                left = (f"<div class=clean id='{anchors[id(clean)]}'><h4>{_head(clean, False)}</h4>"
                        + (f"<div class=err>{error_html(clean)}</div>" if clean.get("error") else "")
                        + trajectory_html(clean.get("trajectory")) + "</div>")
            else:
                left = "<div class=clean><h4>clean</h4><p class=muted>no clean episode</p></div>"
            right = "".join(_perturbed(r, clean, several, anchors[id(r)]) for r in rs if r is not clean)
            out.append(f"<div class=pair>{left}<div>{right or '<p class=muted>no perturbed episode</p>'}</div></div>")
    return _page(f"{task} · {suite} · agentperturb", "".join(out))


def group_by_task(rows: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], list[Mapping[str, Any]]]:
    """Rows grouped by (suite, task), in the order given."""
    out: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
    for r in rows:
        out[(str(r["suite"]), str(r["task"]))].append(r)
    return out


def render_pages(rows: Iterable[Mapping[str, Any]], *, main_name: str,
                 baselines: frozenset[str] = frozenset()) -> Iterator[tuple[str, str]]:
    """(path inside the folder, HTML) of the index page and of every task's page (nothing without rows)."""
    groups = group_by_task(rows)
    if not groups:
        return   # nothing to show: no index either (the folder is emptied of earlier pages)
    yield INDEX, index_page(summaries(r for rs in groups.values() for r in rs), main_name)
    for (suite, task), rs in sorted(groups.items()):
        yield page_path(suite, task), task_page(suite, task, rs, main_name=main_name, baselines=baselines)


def _ours(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return GENERATOR.encode() in f.read(400)
    except OSError:
        return False


def _target(folder: Path, rel: str) -> Path:
    """``folder/rel``, refusing any part that is not a :func:`slug`-made name; symlinks in the way are removed."""
    parts = rel.split("/")
    if not parts or any(not re.fullmatch(r"[a-z0-9][a-z0-9._-]*", p) or ".." in p for p in parts):
        raise AgentPerturbError(f"report page {rel!r}: not a safe path inside {folder}")
    d = folder
    for p in parts[:-1]:
        d = d / p
        if d.is_symlink() or (d.exists() and not d.is_dir()):
            d.unlink()   # inside the report's own folder: a link or file must not redirect its pages
        d.mkdir(exist_ok=True)
    target = d / parts[-1]
    if target.is_symlink():
        target.unlink()   # never write through a link
    return target


def write_pages(folder: Path | str, pages: Iterable[tuple[str, str]]) -> list[Path]:
    """Write ``pages`` (path inside ``folder``, HTML) as a set, and remove the stale pages an earlier report left.

    ``folder`` is the report's own; it is created when there is something
    to write.  Every page is first written to a staging folder beside
    ``folder`` (same file system); only when all of them are written does
    the staging folder take ``folder``'s place in one step (renamed, or
    exchanged with it where the system can, :func:`_swapped`), or, where
    ``folder`` holds other files too, is each page renamed into place; so a
    failed write (a full disk, a page that fails to render) leaves the
    earlier pages as they were, never a mix of old and new.  Stale means:
    an ``.html`` file under ``folder`` that carries :data:`GENERATOR` and is
    not among ``pages``; other files stay, and a page never replaces a file
    that is not an agentperturb page.

    Raises:
        AgentPerturbError: ``folder`` is a link or a file (the report will not write through or over it), or a
            page's path holds a file that is not an agentperturb page.
            A page could not be written (a full disk: one line naming ``folder``, the reason and the fix;
            nothing in ``folder`` changed).
    """
    folder = Path(folder)
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise AgentPerturbError(f"{folder}: the report's page folder is a link or a file; move it away or write "
                                "the report elsewhere (--agentperturb-report / --out)")
    staging: Path | None = None
    written: list[Path] = []
    try:
        staged: list[tuple[str, Path]] = []
        for rel, html in pages:
            if staging is None:
                folder.parent.mkdir(parents=True, exist_ok=True)
                staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".tmp", dir=folder.parent))
                staging.chmod(0o777 & ~umask())  # the mode mkdir gives (mkdtemp's is 0700): it becomes the folder
            page = _target(staging, rel)
            page.write_text(html, encoding="utf-8")
            staged.append((rel, page))
        if staged and staging is not None and _swapped(staging, folder):
            return [folder / rel for rel, _ in staged]   # the old set, now in ``staging``, goes with it
        if staged:
            folder.mkdir(exist_ok=True)
            moves = [(page, _target(folder, rel)) for rel, page in staged]
            for _, target in moves:
                if (target.exists() or target.is_symlink()) and (target.is_dir() or not _ours(target)):
                    raise AgentPerturbError(f"{target}: not a page of an agentperturb report; the report will not "
                                            "replace it: move it away or write the report elsewhere")
            for page, target in moves:
                os.replace(page, target)
                written.append(target)
    except OSError as exc:  # one line naming the folder, not the staging file, and the fix
        raise AgentPerturbError(unwritable(folder, exc, "report's task pages")) from None
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
    if folder.is_dir():
        _remove_stale(folder, set(written))
    return written


def _swapped(staging: Path, folder: Path) -> bool:
    """Put the staged set in ``folder``'s place in one step, if ``folder`` is absent or holds nothing but our pages.

    A new folder is the staging folder renamed; an existing one of our pages
    alone is exchanged with it (:func:`.files.exchange`; the old set is left
    in ``staging``).  False (nothing changed) where ``folder`` holds anything
    else, which stays (the pages are then moved one by one), or the system
    cannot exchange two folders.
    """
    if folder.exists():
        for dirpath, dirnames, filenames in os.walk(folder):   # links to folders are listed, not followed
            d = Path(dirpath)
            if any((d / n).is_symlink() for n in dirnames) or not all(
                    n.endswith(".html") and not (d / n).is_symlink() and _ours(d / n) for n in filenames):
                return False
        os.chmod(staging, stat.S_IMODE(folder.stat().st_mode))
        return exchange(staging, folder)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(staging, 0o777 & ~umask)
    os.rename(staging, folder)
    staging.mkdir()   # for the caller's clean-up
    return True


def _remove_stale(folder: Path, keep: set[Path]) -> None:
    for dirpath, dirnames, filenames in os.walk(folder, topdown=False):   # links to folders are not followed
        d = Path(dirpath)
        for name in filenames:
            p = d / name
            if name.endswith(".html") and p not in keep and not p.is_symlink() and _ours(p):
                p.unlink()
        if d != folder:
            try:
                d.rmdir()   # only if empty
            except OSError:
                pass

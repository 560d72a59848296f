"""``agentperturb view [STORE]``: explore a results store in the browser, with Datasette (the ``[view]`` extra).

The store is served read-only (``--immutable``) beside an *explorer*
database, a snapshot of it written at start into a temporary folder (also
immutable, removed on exit) with what the store's own columns do not say:

* ``runs``: one row per run, oldest to newest by when it started (the store's
  ``runs`` table, else its first episode), with its counts of passed,
  agent-failed and error episodes, success rates and cost, and links to its
  episodes and its failures;
* ``episodes``: every episode without its trajectory, with its ``verdict``
  (``passed``, ``agent-failed`` or ``error``), its ``error_class`` (the
  error's leading name: ``RuntimeError``, ``GraderError``, ``EpisodeTimeout``
  ...) and ``error_owner`` (``agent``, ``provider`` or ``harness``:
  :mod:`..model.ownership`), faceted by model, family, target, type,
  verdict, error class and error owner, and
  its ``page``: the URL of the episode on its task's page.

Task pages are served from ``--pages DIR`` (default: the folder the report
beside the store writes, ``<store stem>-tasks``) under ``/pages/``; an
episode whose task has no page there has no link.  The canned queries
(:data:`QUERIES`): the failures of a run, the episodes that flipped between
two runs, the costliest successes.  Nothing is ever written to the store;
the snapshot is taken at start (restart to see newer episodes).
"""

from __future__ import annotations

import argparse
import datetime as dt
import html
import importlib.util
import json
import logging
import re
import sys
import tempfile
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import closing
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from ..model.errors import AgentPerturbError, OptionError
from ..model.options import DEFAULT_STORE
from ..model.ownership import error_kind
from ..model.vocab import CLEAN

log = logging.getLogger("agentperturb")
#: The sub-commands :func:`add_commands` registers.
COMMANDS: tuple[str, ...] = ("view",)
EXPLORER = "explorer"
#: The verdict of an episode as the explorer names it.
PASSED, AGENT_FAILED, ERROR = "passed", "agent-failed", "error"
EXTRA_HINT = "pip install 'pytest-agentperturb[view]'"
FACETS: tuple[str, ...] = ("model", "family", "target", "type", "verdict", "error_class", "error_owner")
_ERROR_CLASS = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")

#: The explorer's ``episodes`` columns and their SQLite types.
EPISODE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("id", "INTEGER PRIMARY KEY"), ("run_id", "TEXT"), ("model", "TEXT"), ("suite", "TEXT"), ("task", "TEXT"),
    ("family", "TEXT"), ("verdict", "TEXT"), ("error_class", "TEXT"), ("error_owner", "TEXT"), ("page", "TEXT"),
    ("reward", "REAL"),
    ("compliance", "INTEGER"), ("cost_usd", "REAL"), ("tokens", "INTEGER"), ("turns", "INTEGER"),
    ("tool_calls", "INTEGER"), ("wall_s", "REAL"), ("target", "TEXT"), ("type", "TEXT"), ("operator", "TEXT"),
    ("seed", "INTEGER"), ("repeat", "INTEGER"), ("baseline", "INTEGER"), ("recorded", "TEXT"), ("error", "TEXT"),
    ("input_tokens", "INTEGER"), ("output_tokens", "INTEGER"), ("variant_digest", "TEXT"),
)
#: The explorer's ``runs`` columns and their SQLite types.
RUN_COLUMNS: tuple[tuple[str, str], ...] = (
    ("run_id", "TEXT PRIMARY KEY"), ("started", "TEXT"), ("episodes", "INTEGER"), ("passed", "INTEGER"),
    ("agent_failed", "INTEGER"), ("errors", "INTEGER"), ("success_rate", "REAL"), ("clean_success", "REAL"),
    ("perturbed_success", "REAL"), ("cost_usd", "REAL"), ("failures_link", "TEXT"), ("episodes_link", "TEXT"),
    ("models", "TEXT"), ("tasks", "INTEGER"), ("last_episode", "TEXT"), ("seed", "INTEGER"), ("version", "TEXT"),
    ("selection", "TEXT"),
)

_LATEST = "(SELECT run_id FROM runs ORDER BY started DESC, run_id DESC LIMIT 1)"
_BEFORE_LATEST = "(SELECT run_id FROM runs ORDER BY started DESC, run_id DESC LIMIT 1 OFFSET 1)"
#: The canned queries of the explorer database: name -> (title, description, SQL).
QUERIES: dict[str, tuple[str, str, str]] = {
    "failures_of_run": (
        "Failures of a run",
        "The agent-failed and error episodes of one run (run_id; blank: the most recent run), "
        "each with its error class and a link to its task page.",
        "SELECT run_id, model, suite, task, family, verdict, error_class, error_owner, reward, compliance, error, page\n"
        "FROM episodes\n"
        f"WHERE run_id = coalesce(nullif(:run_id, ''), {_LATEST}) AND verdict != 'passed'\n"
        "ORDER BY verdict, family, suite, task, model, seed, repeat"),
    "flipped": (
        "Episodes that flipped between two runs",
        "The episodes (same model, suite, task, family, seed and repeat) whose verdict differs between run_a and "
        "run_b (blank: the run before the most recent one, and the most recent one); same_variant says whether "
        "both played the same variant.",
        "SELECT x.run_id AS run_a, y.run_id AS run_b, x.model, x.suite, x.task, x.family, x.seed, x.repeat,\n"
        "       x.verdict || ' -> ' || y.verdict AS flip, x.variant_digest IS y.variant_digest AS same_variant,\n"
        "       x.page AS page_a, y.page AS page_b\n"
        "FROM episodes x JOIN episodes y\n"
        "  ON y.model = x.model AND y.suite = x.suite AND y.task = x.task AND y.family = x.family\n"
        "     AND y.seed = x.seed AND y.repeat = x.repeat\n"
        f"WHERE x.run_id = coalesce(nullif(:run_a, ''), {_BEFORE_LATEST})\n"
        f"  AND y.run_id = coalesce(nullif(:run_b, ''), {_LATEST})\n"
        "  AND x.verdict != y.verdict\n"
        "ORDER BY flip, x.family, x.suite, x.task, x.model, x.seed, x.repeat"),
    "costliest_successes": (
        "Costliest successes",
        "The 100 passed episodes of every run that cost the most (cost_usd; where the cost is unknown, the "
        "tokens, then the wall time), with a link to each one's task page.",
        "SELECT run_id, model, suite, task, family, cost_usd, tokens, turns, tool_calls, wall_s, page\n"
        "FROM episodes\n"
        "WHERE verdict = 'passed'\n"
        "ORDER BY cost_usd IS NULL, cost_usd DESC, tokens IS NULL, tokens DESC, wall_s DESC\n"
        "LIMIT 100"),
}


def add_commands(sub: Any) -> None:
    """Register ``view``."""
    p = sub.add_parser(
        "view", help="explore a results store in the browser (Datasette, read-only; the [view] extra).",
        description="Serve a results store read-only with Datasette: runs over time, episodes faceted by model, "
                    "family, target, type, verdict and error class, canned queries (the failures of a run, the "
                    "episodes that flipped between two runs, the costliest successes), each episode linked to its "
                    f"task page. Needs the view extra: {EXTRA_HINT}.")
    p.add_argument("store", nargs="?", default=DEFAULT_STORE, metavar="STORE",
                   help=f"results store (default: {DEFAULT_STORE}).")
    p.add_argument("--port", type=int, default=8001, metavar="N", help="port (default: 8001).")
    p.add_argument("--host", default="127.0.0.1", metavar="HOST",
                   help="address to listen on (default: 127.0.0.1, this machine only).")
    p.add_argument("--pages", default=None, metavar="DIR",
                   help="folder of the report's task pages, which episodes link to (default: <store stem>-tasks "
                        "beside the store, where `agentperturb report --out <stem>.html` writes them).")
    p.set_defaults(func=cmd_view)


# -- the explorer's rows -------------------------------------------------------------------------------------------

def verdict(row: Mapping[str, Any]) -> str:
    """``passed``, ``agent-failed`` or ``error`` (an error is never an agent failure)."""
    if row.get("error"):
        return ERROR
    return PASSED if row.get("success") else AGENT_FAILED


def error_class(error: Any) -> str | None:
    """The leading name of an error (``RuntimeError: boom`` -> ``RuntimeError``); None without an error."""
    if not error:
        return None
    m = _ERROR_CLASS.match(str(error))
    head = str(error).partition(":")[0].strip()
    return head if m and m.group(0) == head else "other"


def error_owner(row: Mapping[str, Any]) -> str | None:
    """Whose an episode's error is: ``agent``, ``provider`` or ``harness`` (:mod:`..model.ownership`); None without one."""
    error = row.get("error")
    if not error:
        return None
    traj = row.get("trajectory")
    if isinstance(traj, str):
        try:
            traj = json.loads(traj) if traj else None
        except ValueError:
            traj = None
    return error_kind(error, traj)


def _iso(t: Any) -> str | None:
    if not isinstance(t, (int, float)):
        return None
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _rate(k: int, n: int) -> float | None:
    return round(k / n, 4) if n else None


def _tokens(row: Mapping[str, Any]) -> int | None:
    i, o = row.get("input_tokens"), row.get("output_tokens")
    return None if i is None or o is None else int(i) + int(o)


def episode_rows(rows: Iterable[Mapping[str, Any]],
                 page: Callable[[Mapping[str, Any]], str | None]) -> Iterator[tuple[Any, ...]]:
    """The explorer's ``episodes`` rows (:data:`EPISODE_COLUMNS`) of store rows, ``page`` giving each one's link."""
    for i, r in enumerate(rows, 1):
        comp = r.get("compliance")
        yield (i, r.get("run_id"), r.get("model"), r.get("suite"), r.get("task"), r.get("family"), verdict(r),
               error_class(r.get("error")), error_owner(r), page(r), r.get("reward"),
               None if comp is None else int(bool(comp)),
               r.get("cost_usd"), _tokens(r), r.get("turns"), r.get("tool_calls"), r.get("wall_s"), r.get("target"),
               r.get("type"), r.get("operator"), r.get("seed"), int(r.get("repeat") or 0),
               int(bool(r.get("baseline"))), _iso(r.get("recorded_at")), r.get("error") or None,
               r.get("input_tokens"), r.get("output_tokens"), r.get("variant_digest") or None)


class _RunTally:
    def __init__(self) -> None:
        self.first: float | None = None
        self.last: float | None = None
        self.models: dict[str, None] = {}
        self.tasks: set[tuple[str, str]] = set()
        self.n = self.passed = self.failed = self.errors = 0
        self.clean = [0, 0]       # passed, scored
        self.perturbed = [0, 0]
        self.cost: float | None = None

    def add(self, r: Mapping[str, Any]) -> None:
        t = r.get("recorded_at")
        if isinstance(t, (int, float)):
            self.first = t if self.first is None else min(self.first, t)
            self.last = t if self.last is None else max(self.last, t)
        self.models[str(r.get("model"))] = None
        self.tasks.add((str(r.get("suite")), str(r.get("task"))))
        self.n += 1
        v = verdict(r)
        if v == ERROR:
            self.errors += 1
        else:
            ok = v == PASSED
            self.passed += ok
            self.failed += not ok
            side = self.clean if r.get("family") == CLEAN else self.perturbed
            side[0] += ok
            side[1] += 1
        if isinstance(r.get("cost_usd"), (int, float)):
            self.cost = (self.cost or 0.0) + float(r["cost_usd"])


def run_rows(tallies: Mapping[str, _RunTally], configs: Mapping[str, tuple[float | None, dict[str, Any]]],
             base_url: str) -> list[tuple[Any, ...]]:
    """The explorer's ``runs`` rows (:data:`RUN_COLUMNS`), oldest first."""
    out = []
    for run_id, t in tallies.items():
        created, cfg = configs.get(run_id, (None, {}))
        start = created if created is not None else t.first
        episodes = f"{base_url}/{EXPLORER}/episodes?" + urlencode({"run_id": run_id})
        failures = f"{base_url}/{EXPLORER}/failures_of_run?" + urlencode({"run_id": run_id})
        seed = cfg.get("seed")
        out.append((start or 0.0, run_id, (
            run_id, _iso(start), t.n, t.passed, t.failed, t.errors, _rate(t.passed, t.passed + t.failed),
            _rate(*t.clean), _rate(*t.perturbed), None if t.cost is None else round(t.cost, 6), failures, episodes,
            ", ".join(t.models), len(t.tasks), _iso(t.last), seed if isinstance(seed, int) else None,
            str(cfg.get("version", "")) or None, _selection(cfg))))
    return [row for _, _, row in sorted(out, key=lambda x: (x[0], x[1]))]


_ANCHOR = re.compile(r'\bid=["\']?(ep-[0-9a-f]{16})')


def _selection(cfg: Mapping[str, Any]) -> str | None:
    """The ``runs`` row's selection: the run's ``-k``/``-m``/families expression, "(all)" for a full run, None
    for a run recorded before runs said so."""
    if "selection" not in cfg:
        return None
    return str(cfg["selection"]) or "(all)"


def page_links(pages: Path | None, base_url: str) -> Callable[[Mapping[str, Any]], str | None]:
    """An episode row -> the URL of the episode on its task's page under ``/pages/`` (None: no such page).

    The URL names the episode's anchor only where the page holds that
    episode (pages show the runs their report was written from): otherwise
    it is the task's page alone.
    """
    from ..report.episodes import episode_anchor
    from ..report.pages import page_path

    have: dict[str, frozenset[str] | None] = {}

    def link(r: Mapping[str, Any]) -> str | None:
        if pages is None:
            return None
        rel = page_path(str(r.get("suite", "")), str(r.get("task", "")))
        if rel not in have:
            try:
                have[rel] = frozenset(_ANCHOR.findall((pages / rel).read_text(encoding="utf-8", errors="replace")))
            except OSError:
                have[rel] = None
        anchors = have[rel]
        if anchors is None:
            return None
        anchor = episode_anchor(r)
        return f"{base_url}/pages/{quote(rel)}" + (f"#{anchor}" if anchor in anchors else "")

    return link


def build_explorer(store: Path, out: Path, *, base_url: str, pages: Path | None) -> dict[str, int]:
    """Write the explorer database of ``store`` at ``out``; returns its counts (runs, episodes, linked)."""
    from ..run.store import Store, write_tables

    tallies: dict[str, _RunTally] = defaultdict(_RunTally)
    link = page_links(pages, base_url)
    counts = {"episodes": 0, "linked": 0, "to_episode": 0}

    def listed(s: Store) -> Iterator[dict[str, Any]]:
        for r in s.listing():
            tallies[str(r.get("run_id"))].add(r)
            yield r

    def counted(rows: Iterator[tuple[Any, ...]]) -> Iterator[tuple[Any, ...]]:
        page_at = [c for c, _ in EPISODE_COLUMNS].index("page")
        for row in rows:
            counts["episodes"] += 1
            counts["linked"] += row[page_at] is not None
            counts["to_episode"] += row[page_at] is not None and "#" in row[page_at]
            yield row

    def runs() -> Iterator[tuple[Any, ...]]:   # iterated after the episodes: their tallies are made by then
        yield from run_rows(tallies, configs, base_url)

    with closing(Store(store, readonly=True)) as s:
        configs = s.run_configs()
        indexes = [["run_id", "verdict"], ["model", "suite", "task", "family", "seed", "repeat"], ["cost_usd"],
                   *([f] for f in FACETS)]
        write_tables(out, [("episodes", EPISODE_COLUMNS, counted(episode_rows(listed(s), link)), indexes),
                           ("runs", RUN_COLUMNS, runs(), [["started"]])])
    return {"runs": len(tallies), **counts}


# -- Datasette's metadata ------------------------------------------------------------------------------------------

def metadata(store: Path, store_db: str, pages: Path | None) -> dict[str, Any]:
    """The ``metadata.json`` Datasette is started with: titles, facets, sort orders, column notes, queries."""
    links = "".join(f"<li><a href='/{EXPLORER}/{q}'>{html.escape(t)}</a></li>"
                    for q, (t, _, _) in QUERIES.items())
    pages_note = (f"task pages from {html.escape(str(pages))}" if pages is not None
                  else "no task pages found (pass --pages DIR)")
    return {
        "title": "agentperturb view",
        "description_html": (
            f"<p>Results store <code>{html.escape(str(store))}</code>, read-only ({pages_note}).</p>"
            f"<ul><li><a href='/{EXPLORER}/runs'>Runs over time</a></li>"
            f"<li><a href='/{EXPLORER}/episodes'>Episodes</a> (faceted by {', '.join(FACETS)})</li>{links}</ul>"),
        "databases": {
            EXPLORER: {
                "description": "A snapshot of the store taken when `agentperturb view` started: its runs and "
                               "episodes (without trajectories), with each episode's verdict, error class and "
                               "task page.",
                "tables": {
                    "runs": {
                        "title": "Runs over time",
                        "description": "One row per run, oldest first: when it started, its episodes by verdict, "
                                       "success rates (passed over scored; errors are not scored) and cost.",
                        "sort": "started",
                        "columns": {
                            "started": "when the run was recorded (UTC), else its first episode",
                            "success_rate": "passed / (passed + agent-failed)",
                            "clean_success": "success rate of the clean episodes",
                            "perturbed_success": "success rate of the perturbed episodes",
                            "episodes_link": "the run's episodes",
                            "failures_link": "the run's failures (a canned query)",
                            "seed": "the run's seed; its whole configuration is in the store's runs table",
                            "selection": "the run's -k / -m / --agentperturb-families selection; (all) for a "
                                         "full run; blank for a run recorded before runs said so",
                        },
                    },
                    "episodes": {
                        "title": "Episodes",
                        "description": "Every episode of every run; the page column links to the episode on its "
                                       "task's page (trajectory, diff, canaries).",
                        "facets": list(FACETS),
                        "sort_desc": "id",
                        "size": 50,
                        "columns": {
                            "verdict": "passed, agent-failed (scored, not solved) or error (not scored: never "
                                       "an agent failure)",
                            "error_class": "the error's leading name, e.g. RuntimeError, GraderError, "
                                           "EpisodeTimeout",
                            "error_owner": "whose the error is: agent (the agent's code raised it), provider (a "
                                           "model call failed) or harness (the run or the scoring failed)",
                            "tokens": "input + output tokens (blank: usage unknown)",
                            "page": "the episode on its task's page",
                        },
                    },
                },
                "queries": {name: {"title": t, "description": d, "sql": sql, "hide_sql": True}
                            for name, (t, d, sql) in QUERIES.items()},
            },
            store_db: {
                "description": "The results store as written, read-only: episodes with their trajectories, "
                               "runs and variants.",
            },
        },
    }


# -- the command ---------------------------------------------------------------------------------------------------

def _url_host(host: str) -> str:
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


def cmd_view(args: argparse.Namespace) -> int:
    """Check the store and the extra, write the snapshot and the metadata, and serve them until interrupted."""
    store = Path(args.store)
    if not store.is_file():
        raise AgentPerturbError(f"{store}: no results store here; run pytest --agentperturb first, or name "
                                "the store: agentperturb view PATH")
    if not 0 < args.port < 65536:
        raise OptionError(f"--port {args.port}: expected a port number 1..65535")
    if args.pages is not None and not Path(args.pages).is_dir():
        raise OptionError(f"--pages {args.pages}: no such folder")
    if not _have_datasette():
        raise AgentPerturbError(f"agentperturb view needs Datasette, the view extra: {EXTRA_HINT}")
    pages = Path(args.pages) if args.pages is not None else store.with_name(f"{store.stem}-tasks")
    if not pages.is_dir():
        log.info("no task pages in %s (write them with agentperturb report --store %s --run-id all --out %s, or "
                 "pass --pages DIR): episodes are listed without links", pages, store,
                 store.with_suffix(".html"))
        pages_dir: Path | None = None
    else:
        pages_dir = pages.resolve()
    base_url = f"http://{_url_host(args.host)}:{args.port}"
    store_db = store.stem if store.stem != EXPLORER else None
    with tempfile.TemporaryDirectory(prefix="agentperturb-view-") as tmp:
        folder = Path(tmp)
        db = folder / f"{EXPLORER}.db"
        counts = build_explorer(store, db, base_url=base_url, pages=pages_dir)
        if store_db is None:   # a store named explorer.*: served under another name than the snapshot's
            link = folder / "store" / "results.sqlite"
            link.parent.mkdir()
            link.symlink_to(store.resolve())
            served, store_db = link, "results"
        else:
            served = store.resolve()
        meta = folder / "metadata.json"
        meta.write_text(json.dumps(metadata(store, store_db, pages_dir), indent=1), encoding="utf-8")
        argv = ["serve", "--immutable", str(db), "--immutable", str(served), "--metadata", str(meta),
                "--host", args.host, "--port", str(args.port),
                "--setting", "suggest_facets", "off", "--setting", "truncate_cells_html", "100",
                "--setting", "sql_time_limit_ms", "5000", "--setting", "facet_time_limit_ms", "2000",
                "--setting", "default_page_size", "50"]
        if pages_dir is not None:
            argv += ["--static", f"pages:{pages_dir}"]
        log.info("serving %s read-only at %s/ (%d runs, %d episodes, %d linked to task pages, %d of them to the "
                 "episode itself%s; a snapshot: restart to see newer episodes; Ctrl-C stops)", store, base_url,
                 counts["runs"], counts["episodes"], counts["linked"], counts["to_episode"],
                 "" if counts["to_episode"] == counts["linked"] else
                 f"; the pages show only the runs their report was written from: agentperturb report --store "
                 f"{store} --run-id all --out {store.with_suffix('.html')} writes them for every run")
        sys.stderr.flush()
        return _serve(argv)


def _have_datasette() -> bool:
    try:
        return importlib.util.find_spec("datasette") is not None
    except (ImportError, ValueError):   # a broken install, or a module entry without a spec
        return False


def _serve(argv: Sequence[str]) -> int:
    """Run ``datasette serve`` in this process until it stops; its exit status."""
    from datasette.cli import cli

    try:
        cli.main(args=list(argv), prog_name="agentperturb view", standalone_mode=False)
    except SystemExit as exc:   # uvicorn's exit (a port in use: 1)
        return int(exc.code or 0) if not isinstance(exc.code, str) else 1
    except KeyboardInterrupt:
        return 0
    return 0

"""The ``report``, ``analyze`` and ``export`` sub-commands of ``agentperturb``.

``report`` re-renders the HTML report (the main page and a page per task
beside it) from a results store without running anything; ``analyze`` runs
the full analysis on an episodes CSV (at least ``model, suite, task,
family, reward``) and writes a JSON summary and/or the report; ``export``
writes the store's episode table as CSV or Parquet.  The
gate thresholds, store and report defaults come from the plugin's one option
table (:data:`~..model.options.OPTIONS`); a breached threshold makes the exit
status 1.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import gate
from ..model.errors import AgentPerturbError, OptionError
from ..model.options import DEFAULT_REPORT, DEFAULT_STORE

if TYPE_CHECKING:
    import pandas as pd

    from ..analysis import Analysis
    from .pages_worker import PageWorker

log = logging.getLogger("agentperturb")
FORMATS = ("csv", "parquet")
#: The sub-commands :func:`add_commands` registers (the command line builds only these for them: faster start).
COMMANDS: tuple[str, ...] = ("report", "analyze", "export")


def add_commands(sub: Any) -> None:
    """Register ``report``, ``analyze`` and ``export``."""
    p = sub.add_parser("report", help="re-render the HTML report from a results store (runs nothing).",
                       description="Re-render the HTML report from a results store without running anything.")
    _store_args(p)
    p.add_argument("--out", default=DEFAULT_REPORT, metavar="PATH", help=f"HTML report (default: {DEFAULT_REPORT}).")
    p.add_argument("--jobs", choices=("auto", "1", "2"), default="auto",
                   help="processes: 2 reads the store and writes the task pages in a second process while this one "
                        "analyses, 1 does everything in this one, auto (default) takes 2 when a processor is idle "
                        "(fewer other processes ready to run now than the processors less one half). The report is the "
                        "same either way.")
    p.add_argument("--baseline", default="", metavar="RUN",
                   help="compare with a baseline run on the same variants: RUN_ID, 'last' (the most recent other "
                        "run of the store) or path.sqlite[:RUN_ID]; same as --agentperturb-baseline.")
    _analysis_args(p)
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("analyze", help="analyse an episodes CSV: JSON summary and/or HTML report.",
                       description="Full analysis of an episodes CSV with at least the columns model, suite, "
                                   "task, family, reward.")
    p.add_argument("--results", required=True, metavar="CSV", help="episodes CSV (the export format).")
    p.add_argument("--json", dest="json_out", metavar="PATH", help="write the JSON summary here.")
    p.add_argument("--out", metavar="PATH", help="write the HTML report here.")
    p.add_argument("--success-threshold", type=float, default=None, metavar="R",
                   help="reward at or above which an episode counts as a success when the CSV has no "
                        "'success' value (default: the threshold of the built-in suite the CSV names, else 1.0, "
                        "which is then said).")
    _analysis_args(p)
    p.set_defaults(func=cmd_analyze)

    p = sub.add_parser("export", help="write the store's episode table as CSV or Parquet.")
    _store_args(p)
    p.add_argument("--format", choices=FORMATS, default="csv", help="output format (default: csv).")
    p.add_argument("--out", required=True, metavar="PATH", help="output file.")
    p.set_defaults(func=cmd_export)


def _store_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", default=DEFAULT_STORE, metavar="PATH",
                   help=f"results store (default: {DEFAULT_STORE}; same as --agentperturb-store).")
    p.add_argument("--run-id", default=None, metavar="ID",
                   help="run to use (default: the most recent run in the store; 'all' for every run).")


def _analysis_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--capability", metavar="CSV", help="capability table: model,capability.")
    p.add_argument("--labels", metavar="CSV", help="manual awareness/behaviour labels: "
                                                    "[run_id,]model,task,family,awareness,behaviour.")
    p.add_argument("--task-properties", metavar="CSV",
                   help="[suite,]task,tool_count,instruction_length,solution_length.")
    p.add_argument("--suite", action="append", default=[], metavar="DIR",
                   help="suite folder to read task properties from (repeatable).")
    p.add_argument("--replicates", type=int, default=2000, metavar="N", help="bootstrap replicates (2000).")
    p.add_argument("--permutations", type=int, default=100_000, metavar="N",
                   help="permutation-test assignments (100000).")
    p.add_argument("--seed", type=int, default=0, metavar="N", help="seed of every random draw (0).")
    g = p.add_argument_group("gate thresholds (same as the plugin's --agentperturb-* options)")
    gate.add_arguments(g)  # type: ignore[arg-type]


def _inputs(args: argparse.Namespace) -> dict[str, Any]:
    import pandas as pd

    from ..analysis.labels import read_manual
    from ..analysis.predictors import read_capability, task_properties

    if args.replicates < 1 or args.permutations < 1:
        raise OptionError("--replicates and --permutations must be at least 1")
    kw: dict[str, Any] = {"replicates": args.replicates, "permutations": args.permutations, "seed": args.seed}
    if args.capability:
        kw["capability"] = read_capability(args.capability)
    if args.labels:
        kw["manual_labels"] = read_manual(args.labels)
    props = []
    if args.task_properties:
        try:
            props.append(pd.read_csv(args.task_properties, dtype={"task": str, "suite": str}))
        except (OSError, ValueError) as exc:
            raise AgentPerturbError(f"{args.task_properties}: cannot read the task-properties CSV ({exc})") from None
    if args.suite:
        from ..formats.native import load_suite, load_task

        rows = []
        for d in args.suite:
            suite = load_suite(Path(d))
            rows += [task_properties(load_task(t, suite.name, suite.threshold)) for t in suite.task_dirs]
        props.append(pd.DataFrame(rows))
    if props:
        kw["task_properties"] = pd.concat(props, ignore_index=True)
    return kw


def _run_of(path: str, run_id: str | None) -> str | None:
    """The run to read (None: every run): ``run_id``, or the store's only or most recent run.

    Raises:
        AgentPerturbError: ``run_id`` names no run of the store (or the store cannot be read).
    """
    from contextlib import closing

    from ..run.store import Store

    with closing(Store(path, readonly=True)) as s:  # report and export only read: never create or migrate
        if not s.count():
            log.warning("%s: the store holds no episodes", path)
        runs = s.runs()
    if run_id is None and len(runs) > 1:
        run_id = runs[-1]
        log.info("store holds runs %s; using the most recent, %s (pass --run-id)", ", ".join(runs), run_id)
    if run_id not in (None, "all") and run_id not in runs:
        raise AgentPerturbError(f"{path}: no run {run_id!r} in this store; runs: {', '.join(runs) or 'none'}")
    return None if run_id in (None, "all") else run_id


def _store_rows(path: str, run_id: str | None) -> list[dict[str, Any]]:
    """The episode rows of the run ``run_id`` selects (:func:`_run_of`)."""
    from ..run.store import read_rows

    return read_rows(path, _run_of(path, run_id))


def _judge(table: pd.DataFrame, rows: list[dict[str, Any]], args: argparse.Namespace,
           extra: dict[str, Any] | None = None, *, kw: dict[str, Any] | None = None,
           labelled: pd.DataFrame | None = None) -> tuple[Analysis | None, gate.Verdict, dict[str, Any]]:
    """Analysis, gate verdict and the report's page options: the same steps as the plugin's session end.

    ``kw`` holds :func:`_inputs` (with ``extra``) when the caller has read them already; ``labelled``
    the labelled table when it has labelled it already.
    """
    from .. import report

    thresholds = gate.from_args(args)
    kw = {**_inputs(args), **(extra or {})} if kw is None else kw
    analysis = report.analyse(table, rows, **kw, **({"labelled": labelled} if labelled is not None else {}))
    verdict = gate.evaluate(thresholds, analysis)
    return analysis, verdict, {"skipped": (), "has_capability": "capability" in kw, "n_rows": len(table)}


def _finish(verdict: gate.Verdict) -> int:
    for line in verdict.lines():
        log.info("%s", line)
    return 1 if verdict.failed else 0


def cmd_report(args: argparse.Namespace) -> int:
    """``agentperturb report``: analysis and HTML from the store.

    The task pages are written by a second process (:class:`~.pages_worker.PageWorker`),
    started first: it reads the store and sends the episodes here (without their
    trajectories), then their labels, while this process imports what the analysis needs;
    it renders the pages while this one analyses, and writes them once the episodes passed
    the checks here; the main page is written last.  Without a worker (``--jobs 1``, or
    none could be started, or it failed before sending the labels) all of it runs here.
    """
    from ..model.heap import FrozenHeap, collector_paused
    from .pages_worker import PageWorker

    worker = PageWorker.start() if _jobs(args.jobs) > 1 else None
    heap = FrozenHeap().claim()  # what collector_paused() freezes stays frozen for this command only
    try:
        run = _run_of(args.store, args.run_id)
        out = Path(args.out)
        from .. import report
        from ..analysis.labels import MANUAL_KEYS, label, manual_rows
        from ..report.episodes import decoded
        from ..run.store import read_rows

        if worker is not None and not worker.send(args.store, run, report.pages_folder(out), main_name=out.name,
                                                  manual=bool(args.labels)):
            worker = _cancelled(worker)
        kw = _inputs(args)
        manual = kw.get("manual_labels")
        if worker is not None and manual is not None:
            if not worker.manual(manual_rows(manual), [k for k in MANUAL_KEYS if k in manual.columns]):
                worker = _cancelled(worker)
        rows, table, auto = None, None, None
        if worker is not None:
            rows = worker.rows()
            table = report.episode_table(rows) if rows is not None else None   # while the worker labels them
            auto = worker.labels() if rows is not None else None
            if auto is None:   # it failed first: this process reads and labels the episodes (the same errors)
                worker = _cancelled(worker)
        if worker is None or rows is None or table is None:
            with collector_paused(freeze=True):
                rows = decoded(read_rows(args.store, run))   # decoded once, for the labels and the pages
            table = report.episode_table(rows)
        check_values(table, args.store)
        kw.update(_baseline(args, rows))
        labelled = label(table, manual, auto=auto) if len(table) else None
        if worker is not None:
            worker.go()
        analysis, verdict, page = _judge(table, rows, args, kw=kw, labelled=labelled)
        if worker is not None:
            html = report.main_page(out, analysis, verdict, **page)   # while the worker may still be writing
            w, worker = worker, None
            w.wait()
            report.write(out, html)
        else:
            report.write_report(out, analysis, verdict, **page)
    finally:
        if worker is not None:
            worker.cancel()   # an error before "go": the worker writes nothing
        heap.thaw()   # run in-process (a test, a caller's script): leave its collector as it was
    log.info("report: %s (%d episodes; task pages in %s)", args.out, len(rows), report.pages_folder(args.out))
    return _finish(verdict)


def _cancelled(worker: PageWorker) -> PageWorker | None:
    """End a worker that cannot go on (this process does its work itself): None, the worker there is now."""
    worker.cancel()
    return None


def _jobs(choice: str) -> int:
    """Processes for ``--jobs``: 1 or 2 as asked; ``auto``: 2 when a processor is idle, else 1.

    A second process pays for itself only on a processor of its own: where the other
    processor is busy already (other processes ready to run at or above the processors
    less one half, :func:`_others_running`), the two processes share one and the second
    one's start-up is a loss.
    """
    if choice != "auto":
        return int(choice)
    try:
        cores = len(os.sched_getaffinity(0))   # the processors this process may use (a container's share)
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return 2 if cores >= 2 and _others_running() < cores - 0.5 else 1


#: Linux's count of what is running or ready to run now: the fourth field of /proc/loadavg, "running/total".
LOADAVG = Path("/proc/loadavg")


def _others_running() -> float:
    """How many other processes want a processor now.

    Linux says it at this instant (``/proc/loadavg``: the least of three readings a
    millisecond apart, this process left out), which a command that follows a test run
    needs: the one-minute load average still counts the tests for a minute after they
    ended.  Elsewhere, the one-minute load average; 0 where there is none (Windows).
    """
    import time

    try:
        seen = []
        for i in range(3):
            if i:
                time.sleep(0.001)
            seen.append(int(LOADAVG.read_text(encoding="ascii").split()[3].split("/")[0]) - 1)
        return float(max(0, min(seen)))
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):   # no load average here (Windows): trust the processor count
        return 0.0


def check_values(table: pd.DataFrame, source: str) -> None:
    """Refuse impossible rewards and unknown family names, naming the row, before they become numbers.

    A reward is blank (an unscored episode) or a number in [0, 1]; a family
    is ``clean``, one of the 12 ``<target>-<type>`` families or an inserted
    object (``inserted-<object>[-<name>]``).

    Raises:
        AgentPerturbError: naming ``source``, the row (1 = the first data row), the column and the value.
    """
    import math

    from ..model.task import CLEAN, FAMILIES, inserted_base

    def where(n: int, model: Any, task: Any) -> str:
        return f"{source}: row {n} (model {model!r}, task {task!r})"

    known = {CLEAN, *FAMILIES}
    for n, (model, task, family, reward) in enumerate(zip(*(table[c].tolist() for c in ("model", "task", "family",
                                                                                        "reward"))), start=1):
        if family not in known and inserted_base(str(family)) is None:
            raise AgentPerturbError(
                f"{where(n, model, task)}: column 'family': expected 'clean', one of {', '.join(FAMILIES)} or an "
                "inserted object (inserted-fake-tool, inserted-distractor-turn, inserted-injection[-<name>]), "
                f"found {family!r}")
        if not math.isnan(reward) and not 0.0 <= reward <= 1.0:
            raise AgentPerturbError(f"{where(n, model, task)}: column 'reward': expected a number in [0, 1] (blank "
                                    f"for an episode that could not be scored), found {reward!r}")


def _baseline(args: argparse.Namespace, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``--baseline`` run's episode table for the analysis (nothing without ``--baseline``)."""
    if not args.baseline:
        return {}
    from .. import report
    from ..run.baseline import read_rows, resolve

    current = {str(r["run_id"]) for r in rows}
    if len(current) != 1:
        raise OptionError(f"--baseline {args.baseline}: compare one run with its baseline; pass --run-id ID "
                          f"(this selection holds {len(current)} runs)")
    b = resolve(args.baseline, Path(args.store), current.pop(), Path.cwd())
    log.info("comparing with %s", b.label)
    return {"baseline": report.episode_table(read_rows(b)), "baseline_label": b.label}


def suite_thresholds() -> dict[str, float]:
    """The success threshold of every built-in suite, by name."""
    from ..formats.native.loader import load_suite
    from .simulator_check import builtin_suites

    out = {}
    for path in builtin_suites():
        try:
            suite = load_suite(path)
        except Exception:  # noqa: BLE001 - a suite that does not load names no threshold
            continue
        out[suite.name] = float(suite.threshold)
    return out


def _thresholds_for(df: pd.DataFrame, path: str) -> pd.DataFrame:
    """Fill blank ``success`` values from each row's suite threshold, saying where 1.0 was assumed."""
    import pandas as pd

    blank = df["success"].isna() if "success" in df.columns else pd.Series(True, index=df.index)
    if not len(df) or not blank.any() or "suite" not in df.columns or "reward" not in df.columns:
        return df
    known = suite_thresholds()
    suites = sorted({str(x) for x in df.loc[blank, "suite"]})
    assumed = [x for x in suites if x not in known]
    used = {x: known.get(x, 1.0) for x in suites}
    if assumed:
        log.warning("%s: no success value for suite(s) %s, which name no built-in suite: success = reward >= 1.0 "
                    "assumed (pass --success-threshold R to say otherwise)", path, ", ".join(assumed))
    for x in suites:
        if x in known:
            log.info("%s: suite %s: success = reward >= %g (its threshold) where the CSV gives none", path, x, used[x])
    reward = pd.to_numeric(df["reward"], errors="coerce")
    thr = df["suite"].astype(str).map(used).astype(float)
    ok = (reward >= thr).where(reward.notna())
    df = df.copy()
    given = list(df["success"]) if "success" in df.columns else [None] * len(df)
    df["success"] = [(bool(o) if o == o else None) if b else v for b, o, v in zip(blank, ok, given)]
    return df


def read_results(path: str, threshold: float | None = 1.0) -> pd.DataFrame:
    """An episodes CSV, normalised (see :func:`~.analysis.table.normalise`) and checked (:func:`check_values`).

    ``threshold`` None: a blank ``success`` is ``reward >=`` the threshold of the built-in suite the row
    names, else 1.0 (logged as assumed).
    """
    import math

    import pandas as pd

    from ..analysis import normalise

    if threshold is not None and not (math.isfinite(threshold) and 0.0 <= threshold <= 1.0):
        raise OptionError(f"--success-threshold {threshold!r}: expected a number in [0, 1]")
    try:
        df = pd.read_csv(path, dtype={c: str for c in ("run_id", "model", "suite", "task", "family", "operator",
                                                      "error", "awareness", "behaviour", "trajectory",
                                                      "variant_digest")},
                         keep_default_na=False, na_values={c: [""] for c in ("reward", "success", "compliance")})
    except (OSError, ValueError) as exc:
        raise AgentPerturbError(f"{path}: cannot read the episodes CSV ({exc})") from None
    if threshold is None:
        df = _thresholds_for(df, path)
    table = normalise(df, threshold=1.0 if threshold is None else threshold, source=path)
    check_values(table, path)
    return table


def cmd_analyze(args: argparse.Namespace) -> int:
    """``agentperturb analyze``: JSON summary and/or HTML report from an episodes CSV."""
    from ..analysis import summary

    if not args.json_out and not args.out:
        raise OptionError("analyze: nothing to write; pass --json PATH and/or --out PATH")
    table = read_results(args.results, getattr(args, "success_threshold", None))
    analysis, verdict, page = _judge(table, [], args)
    if args.json_out:
        doc = summary(analysis) if analysis is not None else {"degradation": [], "suite_average": [],
                                                              "predictors": []}
        doc["gate"] = {"configured": verdict.thresholds.configured, "failed": verdict.failed,
                       "lines": verdict.lines()}
        from ..report.files import is_json_with, write_text

        write_text(args.json_out, json.dumps(doc, indent=1, sort_keys=True, allow_nan=False) + "\n",
                   ours=is_json_with(SUMMARY_KEYS), what="--json summary")
        log.info("summary: %s", args.json_out)
    if args.out:
        from .. import report

        report.write_report(args.out, analysis, verdict, **page)
        log.info("report: %s (task pages in %s)", args.out, report.pages_folder(args.out))
    return _finish(verdict)


#: The keys every ``analyze --json`` summary holds (a file without them is not replaced).
SUMMARY_KEYS = ("degradation", "suite_average", "predictors", "gate")


def parquet_engine() -> str | None:
    """The installed Parquet engine for pandas, if any."""
    for name in ("pyarrow", "fastparquet"):
        if importlib.util.find_spec(name) is not None:
            return name
    return None


def cmd_export(args: argparse.Namespace) -> int:
    """``agentperturb export``: the episode table (:data:`~..model.records.STORE_COLUMNS`, then ``variant_digest``)."""
    import pandas as pd

    from ..model.records import STORE_COLUMNS as COLUMNS

    engine = parquet_engine() if args.format == "parquet" else None
    if args.format == "parquet" and engine is None:
        raise AgentPerturbError("--format parquet needs a Parquet engine for pandas, which pytest-agentperturb "
                                "does not install: pip install pyarrow (or fastparquet), or use --format csv")
    rows = _store_rows(args.store, args.run_id)
    cols = [*COLUMNS, "variant_digest"]   # so that a table read back shows which variants two runs met
    df = pd.DataFrame([{c: r.get(c) for c in cols} for r in rows], columns=cols)
    for b in ("success", "compliance"):
        df[b] = pd.Series([None if pd.isna(v) else bool(v) for v in df[b]], index=df.index, dtype=object)
    import io

    from ..report.files import is_csv_with, is_parquet_with, write_bytes

    out = Path(args.out)
    if args.format == "csv":   # atomically, never over a store or a file that is not an earlier export
        write_bytes(out, df.to_csv(index=False).encode("utf-8"), ours=is_csv_with(",".join(cols)),
                    what="CSV export")
    else:
        buf = io.BytesIO()
        df.to_parquet(buf, index=False, engine=engine)
        write_bytes(out, buf.getvalue(), ours=is_parquet_with(cols), what="Parquet export")
    log.info("exported %d episodes to %s", len(df), out)
    return 0

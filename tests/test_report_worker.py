"""``agentperturb report`` at speed: the task pages' worker process, the one-pass escaping, the import diet.

Whatever path writes the report (this process alone, or a second process
for the task pages), the files are the same byte for byte; a worker that
fails makes the command fail with its message; the command loads neither
scipy nor the suite loader.
"""

from __future__ import annotations

import html
import json
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from synthetic_store import write_store

from pytest_agentperturb.cli import main
from pytest_agentperturb.cli.pages_worker import PageWorker
from pytest_agentperturb.report import episode_table, records
from pytest_agentperturb.report.episodes import escape_all, image_html, load_json_list, trajectory_html

ROOT = Path(__file__).resolve().parents[1]


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _report(store: Path, out: Path, *extra: str) -> int:
    return main(["report", "--store", str(store), "--out", str(out), "--replicates", "30", "--permutations", "40",
                 *extra])


def test_the_worker_writes_the_same_report_as_one_process(tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite"
    write_store(store, 12)
    assert _report(store, tmp_path / "one" / "agentperturb.html", "--jobs", "1") == 0
    assert _report(store, tmp_path / "two" / "agentperturb.html", "--jobs", "2") == 0
    one, two = _files(tmp_path / "one"), _files(tmp_path / "two")
    assert len(one) == 12 + 2 and one == two   # main page, index and one page per task


def test_a_failing_worker_fails_the_command_with_its_message(tmp_path: Path,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    store = tmp_path / "s.sqlite"
    write_store(store, 2)
    out = tmp_path / "r" / "agentperturb.html"
    out.parent.mkdir()
    (out.parent / "agentperturb-tasks").write_text("not a folder")
    assert _report(store, out, "--jobs", "2") == 2
    assert "page folder is a link or a file" in caplog.text
    assert not out.exists()   # no main page whose links lead nowhere


def test_an_error_before_the_job_ends_the_worker_and_writes_nothing(tmp_path: Path,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    store = tmp_path / "s.sqlite"
    write_store(store, 2)
    out = tmp_path / "r" / "agentperturb.html"
    assert _report(store, out, "--run-id", "nope") == 2
    assert "no run 'nope'" in caplog.text
    assert not out.parent.exists()


def test_a_cancelled_worker_exits_without_writing(tmp_path: Path) -> None:
    w = PageWorker.start()
    assert w is not None
    w.cancel()
    assert w._proc.returncode == 0
    assert list(tmp_path.iterdir()) == []


def test_records_are_to_dict_records(tmp_path: Path) -> None:
    from synthetic_store import rows

    t = episode_table(rows(3))
    a, b = t.to_dict("records"), records(t)
    assert [[(k, type(v), repr(v)) for k, v in r.items()] for r in a] == \
        [[(k, type(v), repr(v)) for k, v in r.items()] for r in b]


# -- the trajectory in one escaping pass equals the trajectory escaped text by text --------------------------------

def _esc(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _marker(canaries: Sequence[str]) -> Callable[[str], str]:
    import re

    needles = sorted({c for c in canaries if c}, key=len, reverse=True)
    if not needles:
        return _esc
    pat = re.compile("|".join(re.escape(n) for n in needles))

    def mark(text: str) -> str:
        out, pos = [], 0
        for m in pat.finditer(text):
            out += [_esc(text[pos:m.start()]), f"<mark>{_esc(m.group(0))}</mark>"]
            pos = m.end()
        return "".join([*out, _esc(text[pos:])])

    return mark


def _reference(traj: Any, canaries: Sequence[str] = ()) -> str:
    """Each text escaped (and marked) on its own: the rendering the one-pass version must equal."""
    mark, esc = _marker(canaries), _esc
    items = []
    for e in load_json_list(traj):
        if not isinstance(e, Mapping):
            continue
        role = e.get("role")
        if role == "assistant" and "tool" in e:
            args = e.get("args")
            a = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False, sort_keys=True)
            items.append(f"<li class=call>→ <b>{mark(str(e['tool']))}</b>({mark(a)})</li>")
        elif role == "assistant":
            cls = "final" if e.get("final") else "call"
            items.append(f"<li class={cls}>{'final: ' if e.get('final') else ''}{mark(str(e.get('content', '')))}</li>")
        elif role == "tool":
            c = str(e.get("content", ""))
            imgs = "".join(image_html(p) for p in (e.get("parts") or []) if isinstance(p, Mapping))
            items.append(f"<li class={'err' if c.startswith('ERROR') else 'obs'}>← {mark(c)}{imgs}</li>")
        elif role == "grader":
            items.append("<li class=obs>grader: " + "; ".join(
                f"<span class={'pass' if ok else 'fail'}>{'✓' if ok else '✗'} {esc(c)}</span>"
                for c, ok in e.get("checks") or []) + "</li>")
        else:
            items.append(f"<li class=obs>{esc(role)}: {mark(str(e.get('content', '')))}</li>")
    return f"<ol class=traj>{''.join(items)}</ol>" if items else "<p class=muted>no trajectory recorded</p>"


_TEXT = st.text(alphabet=st.sampled_from(list("ab<>&\"' \x00\x01\n=xyz")), max_size=12)
_ENTRY = st.one_of(
    st.fixed_dictionaries({"role": st.just("assistant"), "tool": _TEXT,
                           "args": st.one_of(_TEXT, st.dictionaries(_TEXT, _TEXT, max_size=3))}),
    st.fixed_dictionaries({"role": st.just("assistant"), "content": _TEXT, "final": st.booleans()}),
    st.fixed_dictionaries({"role": st.just("tool"), "content": _TEXT}),
    st.fixed_dictionaries({"role": st.just("grader"), "checks": st.lists(st.tuples(_TEXT, st.booleans()), max_size=3)}),
    st.fixed_dictionaries({"role": _TEXT, "content": _TEXT}),
    st.integers(),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_ENTRY, max_size=8), st.lists(_TEXT, max_size=3))
def test_one_pass_escaping_equals_escaping_each_text(entries: list[Any], canaries: list[str]) -> None:
    assert trajectory_html(entries, canaries) == _reference(entries, canaries)
    assert trajectory_html(json.dumps(entries), canaries) == _reference(json.dumps(entries), canaries)


def test_escape_all_keeps_texts_holding_the_separator_apart() -> None:
    texts = ["a<b", "c\x00d", "", "&"]
    assert escape_all(texts) == [html.escape(t, quote=True) for t in texts]


def test_the_report_command_loads_no_scipy_or_suite_loader(tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite"
    write_store(store, 3)
    code = ("import sys\nfrom pytest_agentperturb.cli import main\n"
            f"rc = main(['report', '--store', {str(store)!r}, '--out', {str(tmp_path / 'r' / 'a.html')!r}, "
            "'--replicates', '20', '--permutations', '20'])\n"
            "heavy = [m for m in ('scipy', 'scipy.stats', 'scipy.cluster', "
            "'pytest_agentperturb.formats.native', 'pytest_agentperturb.run.episode', 'asyncio') if m in sys.modules]\n"
            "print(rc, heavy)\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert res.stdout.strip() == "0 []", res.stderr


def test_auto_jobs_take_a_second_process_only_when_a_processor_is_idle(monkeypatch: pytest.MonkeyPatch,
                                                                       tmp_path: Path) -> None:
    import os

    from pytest_agentperturb.cli import analysis
    from pytest_agentperturb.cli.analysis import _jobs

    loadavg = tmp_path / "loadavg"
    monkeypatch.setattr(analysis, "LOADAVG", loadavg)
    monkeypatch.setattr(os, "sched_getaffinity", lambda _: {0, 1}, raising=False)
    # Linux: what runs now counts, not the minute before (a test run that just ended)
    loadavg.write_text("3.90 2.10 1.20 1/81 4242\n")   # this process alone
    assert (_jobs("auto"), _jobs("1"), _jobs("2")) == (2, 1, 2)
    loadavg.write_text("0.10 0.10 0.10 3/81 4242\n")   # two others ready to run
    assert _jobs("auto") == 1
    # elsewhere: the one-minute load average
    monkeypatch.setattr(analysis, "LOADAVG", tmp_path / "missing")
    monkeypatch.setattr(os, "getloadavg", lambda: (0.7, 1.0, 1.0))
    assert _jobs("auto") == 2
    monkeypatch.setattr(os, "getloadavg", lambda: (3.9, 1.0, 1.0))
    assert _jobs("auto") == 1
    # one processor: never two processes
    monkeypatch.setattr(os, "sched_getaffinity", lambda _: {0}, raising=False)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    assert _jobs("auto") == 1
    monkeypatch.setattr(analysis, "LOADAVG", loadavg)
    loadavg.write_text("0.00 0.00 0.00 1/81 4242\n")
    assert _jobs("auto") == 1


def test_an_empty_store_still_gives_a_main_page(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from contextlib import closing

    from pytest_agentperturb.analysis import normalise
    from pytest_agentperturb.run.store import Store

    with closing(Store(tmp_path / "empty.sqlite")):
        pass
    out = tmp_path / "r" / "agentperturb.html"
    assert _report(tmp_path / "empty.sqlite", out) == 0
    assert "No episodes." in out.read_text(encoding="utf-8")
    t = normalise(episode_table([]))
    assert len(t) == 0 and t["error"].dtype == object and t["trajectory"].dtype == object


# -- the worker reads the store itself: its rows and labels are the analysis' own ----------------------------------

def _varied_store(path: Path) -> Path:
    """A synthetic store with what a real one holds too: errors, blank rewards and usage, recorded labels,
    a continuous-reward suite, repeats, a task without its clean episode and one with a variant missing."""
    import random
    import sqlite3

    write_store(path, 8)
    rng = random.Random(3)
    with sqlite3.connect(path) as c:
        cols = [r[1] for r in c.execute("PRAGMA table_info(episodes)")]
        ix = {n: i for i, n in enumerate(cols)}
        new = []
        for r in c.execute("SELECT * FROM episodes").fetchall():
            q = list(r)
            q[ix["suite"]], q[ix["reward"]] = "cont", round(rng.random(), 3)
            q[ix["success"]] = int(q[ix["reward"]] >= 0.5)
            new.append(q)
            if r[ix["task"]].endswith(("1", "4")):
                q = list(r)
                q[ix["repeat"]], q[ix["reward"]] = 1, float(rng.random() < 0.5)
                q[ix["success"]] = int(q[ix["reward"]])
                new.append(q)
        c.executemany(f"INSERT INTO episodes VALUES ({', '.join('?' * len(cols))})", new)
        ids = [x[0] for x in c.execute("SELECT rowid FROM episodes")]
        for sql, n in (("error='timeout', reward=NULL, success=NULL", 15), ("input_tokens=NULL", 20),
                       ("awareness='A2', behaviour='E1'", 10), ("error='  '", 5), ("success=NULL", 10)):
            for rid in rng.sample(ids, n):
                c.execute(f"UPDATE episodes SET {sql} WHERE rowid=?", (rid,))
        c.execute("DELETE FROM episodes WHERE task='task-0002' AND family='clean'")
        c.execute("DELETE FROM episodes WHERE task='task-0003' AND family='tool-missing'")
    return path


def test_rows_normalised_without_pandas_are_the_tables_rows(tmp_path: Path) -> None:
    import math
    from contextlib import closing

    from pytest_agentperturb.analysis.table import normalise_rows
    from pytest_agentperturb.run.store import Store

    with closing(Store(_varied_store(tmp_path / "v.sqlite"), readonly=True)) as s:
        raw = s.rows()
    got, want = normalise_rows(raw), records(episode_table(raw))
    assert len(got) == len(want) == len(raw) > 500

    def same(a: Any, b: Any) -> bool:
        nan = isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)
        return nan or (type(a) is type(b) and a == b)

    for g, w in zip(got, want):
        assert g.keys() == w.keys()
        # the store's own columns cell by cell, type included; diff and canaries (kept as read) may be NaN there
        assert all(same(g[k], w[k]) for k in g if k not in ("diff", "canaries", "variant_digest")), (g, w)
        assert all(g[k] == w[k] or (g[k] is None and w[k] != w[k]) for k in ("diff", "canaries"))


def test_labels_from_rows_are_the_labels_of_the_table(tmp_path: Path) -> None:
    import pandas as pd
    from contextlib import closing

    from pytest_agentperturb.analysis.labels import FLIP_COLUMNS, LABEL_COLUMNS, auto_labels, label
    from pytest_agentperturb.analysis.table import normalise_rows
    from pytest_agentperturb.run.store import Store

    with closing(Store(_varied_store(tmp_path / "v.sqlite"), readonly=True)) as s:
        raw = s.rows()
    rows = normalise_rows(raw)
    auto = auto_labels({c: [r.get(c) for r in rows] for c in (*FLIP_COLUMNS, *LABEL_COLUMNS)})
    table = episode_table(raw)
    manual = pd.DataFrame([{"model": "acme/agent-7b", "task": "task-0001", "family": "tool-missing",
                            "awareness": "A4", "behaviour": ""}])
    in_process, given = label(table, manual), label(table, manual, auto=auto)
    pd.testing.assert_frame_equal(in_process, given, check_exact=True)
    assert 0 < int(given["harmful_flip"].sum()) < len(given)
    assert {"heuristic", "recorded", "manual"} <= {*given["awareness_source"], *given["behaviour_source"]}


def test_the_worker_writes_what_one_process_writes_on_a_varied_store_with_manual_labels(tmp_path: Path) -> None:
    store = _varied_store(tmp_path / "v.sqlite")
    labels = tmp_path / "labels.csv"
    labels.write_text("model,task,family,awareness,behaviour\nacme/agent-7b,task-0001,tool-missing,A4,E6\n"
                      "reference/careful,task-0005,user-incorrect,,E5\n")
    for jobs in ("1", "2"):
        assert _report(store, tmp_path / jobs / "agentperturb.html", "--jobs", jobs, "--labels", str(labels)) == 0
    one, two = _files(tmp_path / "1"), _files(tmp_path / "2")
    assert len(one) == 2 * 8 + 2 and one == two   # two suites
    assert b"A4 \xc2\xb7 E6" in one["agentperturb-tasks/synthetic/task-0001.html"]   # the manual labels are shown


def test_a_refused_store_leaves_the_worker_writing_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    import sqlite3

    store = tmp_path / "s.sqlite"
    write_store(store, 2)
    with sqlite3.connect(store) as c:
        c.execute("UPDATE episodes SET reward = 7 WHERE rowid = 3")
    out = tmp_path / "r" / "agentperturb.html"
    assert _report(store, out, "--jobs", "2") == 2
    assert "column 'reward': expected a number in [0, 1]" in caplog.text
    assert not out.parent.exists()   # the worker had rendered the pages: none was written


def test_a_worker_that_dies_first_leaves_this_process_to_write_everything(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_agentperturb.cli import pages_worker

    store = tmp_path / "s.sqlite"
    write_store(store, 3)
    assert _report(store, tmp_path / "one" / "agentperturb.html", "--jobs", "1") == 0
    monkeypatch.setattr(pages_worker, "_BOOT", "import sys; sys.exit(3)")
    started: list[Any] = []
    real = pages_worker.PageWorker.start.__func__  # type: ignore[attr-defined]
    monkeypatch.setattr(pages_worker.PageWorker, "start", classmethod(lambda cls: started.append(1) or real(cls)))
    assert _report(store, tmp_path / "two" / "agentperturb.html", "--jobs", "2") == 0
    assert started and _files(tmp_path / "one") == _files(tmp_path / "two")


def test_a_worker_that_dies_between_the_episodes_and_their_labels_leaves_this_process_to_do_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_agentperturb.cli import pages_worker

    store = tmp_path / "s.sqlite"
    write_store(store, 3)
    assert _report(store, tmp_path / "one" / "agentperturb.html", "--jobs", "1") == 0
    # a worker that reads its job, sends an (empty) episode table and dies before the labels
    monkeypatch.setattr(pages_worker, "_BOOT", "import pickle, sys\npickle.load(sys.stdin.buffer)\n"
                        "pickle.dump((['run_id'], [[]]), sys.stdout.buffer)\nsys.stdout.flush()\nsys.exit(1)\n")
    assert _report(store, tmp_path / "two" / "agentperturb.html", "--jobs", "2") == 0
    assert _files(tmp_path / "one") == _files(tmp_path / "two")


@settings(max_examples=200, deadline=None)
@given(st.lists(_ENTRY, max_size=5), st.sampled_from(["", " ", "\n", " x", "]"]), st.sampled_from(["", " ", "\t"]))
def test_decoding_once_reads_what_json_loads_reads(entries: list[Any], tail: str, head: str) -> None:
    from pytest_agentperturb.report.episodes import decoded

    text = head + json.dumps(entries) + tail
    try:
        want: Any = json.loads(text)
    except ValueError:
        want = text   # not JSON: stays text
    got = decoded([{"trajectory": text, "canaries": ""}])[0]
    assert got["trajectory"] == (want if isinstance(want, list) else text) and got["canaries"] == ""

"""``agentperturb view``: the explorer's snapshot, metadata and canned queries, the command's errors, and what a
person sees in a real browser (headless Chromium) of a store written by the real plugin.

The store: two runs (``run-a``, ``run-b``) of the built-in reference agents and an agent of the test's own,
``acme/flaky``, on one task's clean and incorrect variants; ``acme/flaky`` plays like ``reference/careful`` in
run-a and like ``reference/literal`` in run-b, where it also raises on the tool variant: two of its episodes flip
(passed -> agent-failed, passed -> error) and run-b has one error, a ``RuntimeError``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from browser import browse as _browse
from browser import chromium  # noqa: F401 - the fixture
from browser import seen as _seen

from pytest_agentperturb.cli import main, view

ROOT = Path(__file__).resolve().parent.parent
FLAKY = '''
import os
from pytest_agentperturb.agents.reference import CarefulAgent, LiteralAgent


class Flaky:
    name = "acme/flaky"

    async def run(self, ctx):
        if os.environ.get("FLAKY_MODE") == "b":
            if ctx.variant.family.startswith("tool-"):
                raise RuntimeError("boom from my agent")
            return await LiteralAgent().run(ctx)
        return await CarefulAgent().run(ctx)
'''
BASE = "http://127.0.0.1:9"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store of two runs written by the plugin (and the task pages of the last one beside it)."""
    d = tmp_path_factory.mktemp("view")
    shutil.copytree(ROOT / "suites" / "workflows", d / "suites" / "workflows")
    (d / "flaky.py").write_text(FLAKY, encoding="utf-8")
    for mode in ("a", "b"):
        env = {**os.environ, "FLAKY_MODE": mode}
        r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--agentperturb",
                            "suites/workflows", "-k", "share-report and (clean or incorrect)",
                            "--agentperturb-model", "reference/literal", "--agentperturb-model", "reference/careful",
                            "--agentperturb-agent", "flaky.py:Flaky", "--agentperturb-run-id", f"run-{mode}",
                            "--agentperturb-report", "reports/agentperturb.html"],  # not the -k subset's own
                           cwd=d, env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode in (0, 1), r.stdout + r.stderr
    return d / "reports" / "agentperturb.sqlite"


@pytest.fixture(scope="module")
def explorer(store: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("explorer") / "explorer.db"
    counts = view.build_explorer(store, out, base_url=BASE, pages=store.with_name("agentperturb-tasks"))
    # the pages beside the store are run-b's report's: run-a's 15 episodes link to their task's page alone
    assert counts == {"runs": 2, "episodes": 30, "linked": 30, "to_episode": 15}
    return out


def _rows(db: Path, sql: str, params: Any = ()) -> list[dict[str, Any]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute(sql, params)]
    finally:
        conn.close()


def _query(db: Path, name: str, **params: str) -> list[dict[str, Any]]:
    return _rows(db, view.QUERIES[name][2], params)


def _digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


# -- the snapshot ----------------------------------------------------------------------------------------------------

def test_runs_over_time(explorer: Path) -> None:
    runs = _rows(explorer, "SELECT * FROM runs ORDER BY started, run_id")
    assert [r["run_id"] for r in runs] == ["run-a", "run-b"]
    a, b = runs
    assert (a["episodes"], a["passed"], a["agent_failed"], a["errors"]) == (15, 8, 7, 0)
    assert (b["episodes"], b["passed"], b["agent_failed"], b["errors"]) == (15, 6, 8, 1)
    assert a["clean_success"] == b["clean_success"] == 1.0 and a["success_rate"] == round(8 / 15, 4)
    assert a["models"] == "acme/flaky, reference/careful, reference/literal" and a["tasks"] == 1
    assert a["started"] <= b["started"] and a["version"] and a["seed"] == 0
    assert b["failures_link"] == f"{BASE}/explorer/failures_of_run?run_id=run-b"
    assert a["episodes_link"] == f"{BASE}/explorer/episodes?run_id=run-a"
    assert a["selection"] == b["selection"] == "share-report and (clean or incorrect)"  # a subset run says so


def test_episodes_verdicts_error_classes_and_pages(explorer: Path, store: Path) -> None:
    eps = _rows(explorer, "SELECT * FROM episodes")
    assert len(eps) == 30 and {r["verdict"] for r in eps} == {"passed", "agent-failed", "error"}
    err = [r for r in eps if r["verdict"] == "error"]
    assert [(r["run_id"], r["model"], r["family"], r["error_class"]) for r in err] == [
        ("run-b", "acme/flaky", "tool-incorrect", "RuntimeError")]
    assert "boom from my agent" in err[0]["error"]
    assert all(r["error_class"] is None for r in eps if r["verdict"] != "error")
    assert err[0]["error_owner"] == "agent"   # the agent's own exception (model/ownership.py)
    assert all(r["error_owner"] is None for r in eps if r["verdict"] != "error")
    assert {r["target"] for r in eps} == {"clean", "user", "procedure", "context", "tool"}
    assert {r["type"] for r in eps} == {"clean", "incorrect"}
    page = store.with_name("agentperturb-tasks") / "workflows" / "share-report.html"
    text = page.read_text(encoding="utf-8")
    for r in eps:
        if r["run_id"] == "run-b":   # the report beside the store is run-b's: its episodes are on the page
            assert r["page"].startswith(f"{BASE}/pages/workflows/share-report.html#ep-")
            assert f"id='{r['page'].partition('#')[2]}'" in text
        else:   # run-a's are not: a link to the page, never to an anchor it lacks
            assert r["page"] == f"{BASE}/pages/workflows/share-report.html"


def test_error_class_of_odd_errors() -> None:
    assert view.error_class("GraderError: ValueError: reward 2 is not a number") == "GraderError"
    assert view.error_class("EpisodeTimeout: no answer within 5 s") == "EpisodeTimeout"
    assert view.error_class("no colon at all") == "other"
    assert view.error_class("<b>x</b>: y") == "other"
    assert view.error_class("") is None and view.error_class(None) is None


def test_no_pages_no_links(store: Path, tmp_path: Path) -> None:
    out = tmp_path / "e.db"
    assert view.build_explorer(store, out, base_url=BASE, pages=None)["linked"] == 0
    assert {r["page"] for r in _rows(out, "SELECT page FROM episodes")} == {None}
    out2 = tmp_path / "e2.db"
    assert view.build_explorer(store, out2, base_url=BASE, pages=tmp_path)["linked"] == 0   # no page there


# -- the canned queries ----------------------------------------------------------------------------------------------

def test_failures_of_a_run(explorer: Path) -> None:
    latest = _query(explorer, "failures_of_run", run_id="")
    assert {r["run_id"] for r in latest} == {"run-b"} and len(latest) == 9
    assert [r["verdict"] for r in latest] == ["agent-failed"] * 8 + ["error"]
    assert latest[-1]["error_class"] == "RuntimeError" and latest[-1]["page"]
    a = _query(explorer, "failures_of_run", run_id="run-a")
    assert len(a) == 7 and {r["verdict"] for r in a} == {"agent-failed"}
    assert _query(explorer, "failures_of_run", run_id="nope") == []


def test_flipped_between_two_runs(explorer: Path) -> None:
    flips = _query(explorer, "flipped", run_a="", run_b="")   # blank: the run before the latest, and the latest
    assert [(r["run_a"], r["run_b"], r["model"], r["family"], r["flip"]) for r in flips] == [
        ("run-a", "run-b", "acme/flaky", "context-incorrect", "passed -> agent-failed"),
        ("run-a", "run-b", "acme/flaky", "tool-incorrect", "passed -> error")]
    assert all(r["same_variant"] == 1 and r["page_a"] != r["page_b"] for r in flips)
    back = _query(explorer, "flipped", run_a="run-b", run_b="run-a")
    assert [r["flip"] for r in back] == ["agent-failed -> passed", "error -> passed"]
    assert _query(explorer, "flipped", run_a="run-a", run_b="run-a") == []


def test_costliest_successes(explorer: Path) -> None:
    rows = _query(explorer, "costliest_successes")
    assert len(rows) == 14   # every passed episode (8 + 6); none has a known cost: ordered by tokens
    assert all(r["cost_usd"] is None for r in rows)
    tokens = [r["tokens"] for r in rows]
    assert tokens == sorted(tokens, reverse=True) and all(r["page"] for r in rows)


def test_metadata_names_what_exists() -> None:
    meta = json.loads(json.dumps(view.metadata(Path("s.sqlite"), "s", Path("/p"))))
    db = meta["databases"][view.EXPLORER]
    cols = {c for c, _ in view.EPISODE_COLUMNS}
    assert db["tables"]["episodes"]["facets"] == ["model", "family", "target", "type", "verdict", "error_class",
                                                  "error_owner"]
    assert set(db["tables"]["episodes"]["facets"]) <= cols and set(db["tables"]["episodes"]["columns"]) <= cols
    assert set(db["tables"]["runs"]["columns"]) <= {c for c, _ in view.RUN_COLUMNS}
    assert set(db["queries"]) == {"failures_of_run", "flipped", "costliest_successes"}
    assert db["queries"]["flipped"]["title"] == "Episodes that flipped between two runs"
    assert "s" in meta["databases"] and "/explorer/runs" in meta["description_html"]
    odd = view.metadata(Path("<b>.sqlite"), "<b>", None)["description_html"]
    assert "<b>" not in odd and "&lt;b&gt;" in odd and "pass --pages DIR" in odd


# -- the command -----------------------------------------------------------------------------------------------------

def test_missing_store_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                   caplog: pytest.LogCaptureFixture) -> None:
    assert main(["view", str(tmp_path / "none.sqlite")]) == 2
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "none.sqlite: no results store here" in lines[0] and "\n" not in lines[0]


def test_without_the_extra_names_it(store: Path, monkeypatch: pytest.MonkeyPatch,
                                    caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(view, "_have_datasette", lambda: False)
    assert main(["view", str(store)]) == 2
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "pip install 'pytest-agentperturb[view]'" in lines[0]


def test_bad_options(store: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    assert main(["view", str(store), "--pages", str(tmp_path / "no")]) == 2
    assert "--pages" in caplog.text and "no such folder" in caplog.text
    assert main(["view", str(store), "--port", "70000"]) == 2


def test_serves_both_immutable(store: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(view, "_have_datasette", lambda: True)
    caplog.set_level(logging.INFO, "agentperturb")
    seen: dict[str, Any] = {}
    before = _digest(store)

    def serve(argv: list[str]) -> int:
        seen["argv"] = argv
        db = Path(argv[argv.index("--immutable") + 1])
        seen["runs"] = _rows(db, "SELECT run_id FROM runs")
        seen["meta"] = json.loads(Path(argv[argv.index("--metadata") + 1]).read_text(encoding="utf-8"))
        seen["db"] = db
        return 0

    monkeypatch.setattr(view, "_serve", serve)
    assert main(["view", str(store), "--port", "8123", "--host", "127.0.0.1"]) == 0
    argv = seen["argv"]
    served = [argv[i + 1] for i, a in enumerate(argv) if a == "--immutable"]
    assert served == [str(seen["db"]), str(store.resolve())] and "--immutable" in argv
    assert argv[argv.index("--port") + 1] == "8123" and argv[argv.index("--host") + 1] == "127.0.0.1"
    assert argv[argv.index("--static") + 1] == f"pages:{store.with_name('agentperturb-tasks').resolve()}"
    assert len(seen["runs"]) == 2 and "agentperturb" in seen["meta"]["databases"]
    assert not seen["db"].exists()   # the snapshot's folder is removed when the server stops
    assert _digest(store) == before
    assert "serving" in caplog.text and "http://127.0.0.1:8123/" in caplog.text


def test_a_store_named_like_the_snapshot(store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(view, "_have_datasette", lambda: True)
    named = tmp_path / "explorer.sqlite"
    shutil.copy(store, named)
    seen: dict[str, Any] = {}

    def serve(argv: list[str]) -> int:
        served = [Path(argv[i + 1]) for i, a in enumerate(argv) if a == "--immutable"]
        seen["names"] = [p.stem for p in served]
        seen["target"] = served[1].resolve()
        seen["meta"] = json.loads(Path(argv[argv.index("--metadata") + 1]).read_text(encoding="utf-8"))
        seen["static"] = "--static" in argv
        return 0

    monkeypatch.setattr(view, "_serve", serve)
    assert main(["view", str(named)]) == 0
    assert seen["names"] == ["explorer", "results"] and seen["target"] == named.resolve()
    assert set(seen["meta"]["databases"]) == {"explorer", "results"}
    assert not seen["static"]   # no explorer-tasks folder beside it: no pages to serve


# -- in a real browser -----------------------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def served(store: Path, tmp_path: Path) -> Any:
    """``agentperturb view STORE`` as a subprocess on a free port; yields its base URL."""
    if importlib.util.find_spec("datasette") is None:
        pytest.skip(f"datasette is not installed ({view.EXTRA_HINT})")
    port = _free_port()
    log = (tmp_path / "view.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "pytest_agentperturb.cli", "view", str(store), "--port", str(port)],
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/-/versions.json", timeout=5):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("agentperturb view did not start: " + (tmp_path / "view.log").read_text())
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def test_in_a_browser(chromium: str, served: str, store: Path, tmp_path: Path) -> None:
    before = _digest(store)
    with urllib.request.urlopen(f"{served}/-/databases.json", timeout=10) as r:
        dbs = json.load(r)
    assert {d["name"]: d["is_mutable"] for d in dbs} == {"explorer": False, "agentperturb": False}

    home = _seen(_browse(chromium, tmp_path, f"{served}/"))
    assert "Runs over time" in home and "Failures of a run" in home and "Costliest successes" in home

    dom = _browse(chromium, tmp_path, f"{served}/explorer/episodes")
    text = _seen(dom)
    assert "Episodes" in text and "30 rows" in text
    for facet in ("model", "family", "target", "type", "verdict", "error_class"):
        assert f"| {facet} |" in text, facet
    for value in ("acme/flaky", "reference/careful", "tool-incorrect", "agent-failed", "passed", "RuntimeError"):
        assert f"| {value} |" in text, value
    assert f'href="{served}/pages/workflows/share-report.html#ep-' in dom

    runs = _seen(_browse(chromium, tmp_path, f"{served}/explorer/runs"))
    assert runs.index("run-a") < runs.index("run-b") and "failures_of_run?run_id=run-b" in runs

    failures = _seen(_browse(chromium, tmp_path, f"{served}/explorer/failures_of_run?run_id=run-b"))
    assert "Failures of a run" in failures and "9 rows" in failures and "boom from my agent" in failures
    assert "acme/flaky" in failures and "RuntimeError" in failures and "| passed |" not in failures

    flipped = _seen(_browse(chromium, tmp_path, f"{served}/explorer/flipped?run_a=run-a&run_b=run-b"))
    assert "Episodes that flipped between two runs" in flipped and "2 rows" in flipped
    assert "passed -> agent-failed" in flipped and "passed -> error" in flipped

    # an episode's link opens its task page, served beside the explorer
    link = dom.split(f'href="{served}/pages/', 1)[1].split('"', 1)[0]
    page = _seen(_browse(chromium, tmp_path, f"{served}/pages/{link}"))
    assert "share-report" in page

    # screenshots to look at (AGENTPERTURB_VIEW_SCREENSHOTS=DIR keeps them)
    shots = Path(os.environ.get("AGENTPERTURB_VIEW_SCREENSHOTS") or tmp_path / "shots")
    shots.mkdir(parents=True, exist_ok=True)
    from PIL import Image

    for name, url in (("episodes", "explorer/episodes"), ("failures", "explorer/failures_of_run?run_id=run-b"),
                      ("runs", "explorer/runs")):
        _browse(chromium, tmp_path, f"{served}/{url}", screenshot=shots / f"{name}.png")
        with Image.open(shots / f"{name}.png") as im:
            assert im.size == (1400, 1000)
            assert sum(1 for n in im.convert("L").histogram() if n) > 10   # not a blank page
    assert _digest(store) == before   # served read-only: the store is untouched

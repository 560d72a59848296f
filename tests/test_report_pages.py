"""The report at scale: a small main page, one drill-down page per task, safe file names, no stale pages."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import pytest
import scipy.stats  # noqa: F401  (see conftest: C extensions load once)
from hypothesis import given
from hypothesis import strategies as st
from report_links import assert_links_resolve
from synthetic_store import IMAGE_FAMILY, PER_TASK, rows, write_store

from pytest_agentperturb import gate
from pytest_agentperturb.model.errors import AgentPerturbError
from pytest_agentperturb.report import analyse, episode_table, pages_folder, write_report
from pytest_agentperturb.report.pages import (
    GENERATOR,
    MAIN_PAGE_TASKS,
    TaskSummary,
    page_path,
    slug,
    tasks_section,
    write_pages,
)

SAFE_NAME = re.compile(r"[a-z0-9][a-z0-9._-]*")


def report(rows_: list[dict[str, Any]], out: Path, **kw: Any) -> Path:
    """What a session end or ``agentperturb report`` does (few replicates: the numbers are not under test)."""
    table = episode_table(rows_)
    a = analyse(table, rows_, replicates=20, permutations=50, **kw)
    return write_report(out, a, gate.evaluate(gate.Thresholds(), a), n_rows=len(table))


def test_the_main_page_stays_small_for_a_big_store(tmp_path: Path) -> None:
    small = report(rows(9), tmp_path / "small" / "agentperturb.html")
    big = report(rows(180), tmp_path / "big" / "agentperturb.html")
    main = big.read_text(encoding="utf-8")
    assert len(rows(180)) == 5760 and big.stat().st_size < 3_000_000
    assert big.stat().st_size < 2 * small.stat().st_size   # 20x the episodes; the summary hardly grows
    assert "<ol class=traj" not in main and "data:image" not in main and "<img" not in main
    assert "5760 episodes of 180 tasks" in main
    pages = sorted(pages_folder(big).rglob("*.html"))
    assert len(pages) == 180 + 1   # one per task and the index
    texts = {p.name: p.read_text(encoding="utf-8") for p in pages}
    assert sum(t.count("<ol class=traj>") for t in texts.values()) == 5760   # each trajectory once
    assert all(t.count("<ol class=traj>") == 2 * len(PER_TASK) for n, t in texts.items() if n != "index.html")
    image_page = texts["task-0000.html"]   # an image task: images go to its page, never the main page
    assert image_page.count("data:image/png;base64,") >= 2 * 3 and IMAGE_FAMILY in image_page
    assert assert_links_resolve(big) > 180


def test_the_main_page_lists_at_most_a_bounded_number_of_tasks() -> None:
    many = [TaskSummary("s", f"t{i:05d}", 32, 2, 1, 2, 10, 30, 0) for i in range(5 * MAIN_PAGE_TASKS)]
    html = tasks_section(many, "agentperturb-tasks")
    assert html.count("<tr>") == MAIN_PAGE_TASKS + 1
    assert f"The first {MAIN_PAGE_TASKS} of {5 * MAIN_PAGE_TASKS} tasks" in html and "index.html" in html
    assert len(html) < 300_000


HOSTILE_TASKS = ("../../escape", "..", "a/b\\c", "<script>alert(1)</script>", "CON", "x" * 300, "Task", "task",
                 "index", "index.html", ".hidden", "", "naïve-ü", "a--b", "t'\"><img src=x onerror=alert(1)>")
HOSTILE_SUITES = ("../up", "index.html", "s")


def _hostile_rows() -> list[dict[str, Any]]:
    out = []
    for suite in HOSTILE_SUITES:
        for task in HOSTILE_TASKS:
            for fam, reward in (("clean", 1.0), ("tool-missing", 0.0)):
                t, _, k = fam.partition("-")
                out.append({"run_id": "r", "model": "acme/<img src=x onerror=alert(2)>", "suite": suite, "task": task,
                            "family": fam, "target": t if k else "clean", "type": k or "clean", "operator": "op",
                            "seed": 0, "reward": reward, "success": reward == 1.0, "error": "",
                            "trajectory": [{"role": "assistant", "content": f"answer for {task}", "final": True}],
                            "diff": "-a\n+<script>alert(3)</script>" if k else "",
                            "canaries": [{"kind": "value", "text": "<b>x</b>"}] if k else []})
    return out


def test_hostile_task_ids_and_model_names_are_escaped_and_stay_in_the_folder(tmp_path: Path) -> None:
    out = tmp_path / "deep" / "out" / "r.html"
    report(_hostile_rows(), out)
    everything = sorted(p for p in tmp_path.rglob("*") if p.is_file())
    folder = pages_folder(out)
    assert folder == out.parent / "r-tasks"
    assert all(p == out or folder in p.parents for p in everything), everything   # nothing outside
    pages = [p for p in everything if p.parent not in (out.parent, folder)]
    assert len(pages) == len(HOSTILE_SUITES) * len(HOSTILE_TASKS)   # one page each: no two ids share a file
    for p in pages:
        rel = p.relative_to(folder)
        assert len(rel.parts) == 2 and all(SAFE_NAME.fullmatch(part) for part in rel.parts), rel
    for p in everything:
        text = p.read_text(encoding="utf-8")
        assert "<script" not in text and "<img" not in text and "<b>x" not in text, p
    drill = (folder / page_path("../up", "<script>alert(1)</script>")).read_text(encoding="utf-8")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in drill and "&lt;script&gt;alert(3)&lt;/script&gt;" in drill
    assert "acme/&lt;img src=x onerror=alert(2)&gt;" in drill and "<mark>&lt;b&gt;x&lt;/b&gt;</mark>" in drill
    assert assert_links_resolve(out) >= len(pages) * 3


def test_stale_pages_go_and_other_files_stay(tmp_path: Path) -> None:
    out = tmp_path / "agentperturb.html"
    two = [r for r in rows(2) if r["model"] == "acme/agent-7b"]
    report(two, out)
    folder = pages_folder(out)
    page_a, page_b = folder / "synthetic" / "task-0000.html", folder / "synthetic" / "task-0001.html"
    assert page_a.is_file() and page_b.is_file()
    mine = {folder / "notes.txt": "my notes", folder / "synthetic" / "mine.html": "<p>mine, not the report's</p>",
            tmp_path / "other.html": GENERATOR + " outside the folder: never touched"}
    for p, text in mine.items():
        p.write_text(text)
    outside = tmp_path / "elsewhere.html"
    outside.write_text("precious")
    page_a.unlink()
    page_a.symlink_to(outside)   # a link where a page goes: the report writes a page, not through the link
    old_page = folder / "old-suite" / "gone.html"
    old_page.parent.mkdir()
    old_page.write_text(page_b.read_text())
    report([r for r in two if r["task"] == "task-0000"], out)
    assert page_a.is_file() and not page_a.is_symlink() and GENERATOR in page_a.read_text()
    assert outside.read_text() == "precious"
    assert not page_b.exists() and not old_page.exists() and not old_page.parent.exists()   # stale: removed
    assert all(p.read_text() == text for p, text in mine.items())
    assert "task-0001" not in (folder / "index.html").read_text() and "task-0001" not in out.read_text()
    a = None
    write_report(out, a, gate.evaluate(gate.Thresholds(), a))   # an empty report leaves no page behind either
    assert not page_a.exists() and not (folder / "index.html").exists()
    assert all(p.read_text() == text for p, text in mine.items())


def test_a_page_folder_that_is_a_link_or_a_file_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    folder = tmp_path / "r" / "agentperturb-tasks"
    folder.parent.mkdir()
    folder.symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(AgentPerturbError, match="link or a file"):
        report(rows(1), tmp_path / "r" / "agentperturb.html")
    assert list(elsewhere.iterdir()) == []
    with pytest.raises(AgentPerturbError, match="not a safe path"):
        write_pages(tmp_path / "x", [("../escape.html", "<p>")])
    assert not (tmp_path / "escape.html").exists()


@given(st.lists(st.text(max_size=80), unique=True, max_size=12))
def test_slugs_are_safe_distinct_and_stable(names: list[str]) -> None:
    slugs = [slug(n) for n in names]
    for s in [*slugs, *(slug(n, folder=True) for n in names)]:
        assert SAFE_NAME.fullmatch(s) and ".." not in s and len(s) <= 64, s
    assert len(set(slugs)) == len(names)   # distinct ids, distinct files (case-insensitive too: all lowercase)
    assert [slug(n) for n in names] == slugs
    assert not any(slug(n, folder=True).endswith(".html") for n in names)


def test_safe_ids_keep_their_names() -> None:
    assert page_path("workflows", "book-offsite") == "workflows/book-offsite.html"
    assert slug("user_task_0") == "user_task_0" and slug("Task") != slug("task") == "task"
    assert slug("con").startswith("con--") and slug("index.html", folder=True).startswith("index.html--")


def test_the_report_command_writes_the_task_pages(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from pytest_agentperturb.cli import main

    caplog.set_level(logging.INFO)
    write_store(tmp_path / "s.sqlite", 3)
    out = tmp_path / "r" / "report.html"
    assert main(["report", "--store", str(tmp_path / "s.sqlite"), "--out", str(out), "--replicates", "20",
                 "--permutations", "50"]) == 0
    assert f"task pages in {out.parent / 'report-tasks'}" in caplog.text
    assert sorted(p.name for p in (out.parent / "report-tasks" / "synthetic").iterdir()) == [
        "task-0000.html", "task-0001.html", "task-0002.html"]
    assert assert_links_resolve(out) > 3


def _page(text: str) -> str:
    from pytest_agentperturb.report.pages import GENERATOR

    return f"<!doctype html>{GENERATOR}<p>{text}</p>"


def test_pages_are_written_as_a_set_a_failed_write_changes_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "r-tasks"
    write_pages(folder, [("index.html", _page("old index")), ("s/a.html", _page("old a")), ("s/b.html", _page("old b"))])
    before = {p: p.read_text() for p in folder.rglob("*.html")}

    def failing() -> Any:
        yield "index.html", _page("new index")
        yield "s/a.html", _page("new a")
        raise OSError(28, "No space left on device")

    with pytest.raises(AgentPerturbError, match=r"r-tasks: the report's task pages could not be written \(disk full\)"):
        write_pages(folder, failing())   # one line naming the folder, not the staging file
    assert {p: p.read_text() for p in folder.rglob("*.html")} == before   # no mix of old and new
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r-tasks"]     # no staging folder left
    write_pages(folder, [("index.html", _page("new index")), ("s/a.html", _page("new a"))])
    assert (folder / "s" / "a.html").read_text() == _page("new a") and not (folder / "s" / "b.html").exists()


def test_a_page_never_replaces_a_file_that_is_not_a_page(tmp_path: Path) -> None:
    folder = tmp_path / "r-tasks"
    (folder / "s").mkdir(parents=True)
    (folder / "s" / "a.html").write_text("my own notes")
    (folder / "index.html").write_text(_page("old index"))
    with pytest.raises(AgentPerturbError, match="not a page of an agentperturb report"):
        write_pages(folder, [("index.html", _page("new index")), ("s/a.html", _page("new a"))])
    assert (folder / "s" / "a.html").read_text() == "my own notes"
    assert (folder / "index.html").read_text() == _page("old index")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r-tasks"]

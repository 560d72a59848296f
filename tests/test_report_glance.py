"""The report at a glance (#29 point 6): failing episodes by family, linked heatmap cells, turn and cost
distributions, long tables folded, no sideways scrolling at 800 px (checked in headless Chromium)."""

from __future__ import annotations

import html
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import scipy.cluster.hierarchy  # noqa: F401  (see conftest: C extensions load once)
import scipy.stats  # noqa: F401
from report_links import assert_links_resolve

from pytest_agentperturb import gate
from pytest_agentperturb.report import analyse, episode_anchor, episode_table, pages_folder, write_report
from pytest_agentperturb.report import sections as rs
from pytest_agentperturb.report import svg
from pytest_agentperturb.report.failures import (CHECKS, MAX_PER_MODEL, checks_column, failed_checks,
                                                 failure_anchor, failures_section)
from pytest_agentperturb.report.pages import page_path

EVIL_MODEL = "acme/<img src=x onerror=alert(1)>"
EVIL_TASK = "t\"'><script>alert(1)</script>"
FAMILIES = ("clean", "tool-incorrect", "user-missing", "context-redundant", "inserted-injection")


def rows(n_tasks: int = 14, long_names: bool = False) -> list[dict[str, Any]]:
    """Two models (one hostile, one baseline), ``n_tasks`` tasks (one hostile), five families."""
    out: list[dict[str, Any]] = []
    for model in ("reference/careful", EVIL_MODEL):
        for i in range(n_tasks):
            task = EVIL_TASK if i == 0 else (f"task-{i:03d}-" + "very-long-task-name" * 8 if long_names
                                             else f"task-{i:03d}")
            for fam in FAMILIES:
                ok = fam == "clean" or (fam == "context-redundant") or (i % 3 == 0)
                t, _, k = fam.partition("-")
                traj = [{"role": "assistant", "tool": "mail_send", "args": {"to": "x"}},
                        {"role": "tool", "tool": "mail_send", "content": "sent"},
                        {"role": "assistant", "content": "done", "final": True},
                        {"role": "grader", "checks": [[f"mail sent to <a@b.c> {'y' * (400 if long_names else 1)}",
                                                       ok], ["<b>subject</b> kept", True]]}]
                out.append({"run_id": "r", "model": model, "suite": "s<1>", "task": task, "family": fam,
                            "target": t if k else "clean", "type": k or "clean", "operator": "op", "seed": 3,
                            "reward": float(ok), "success": ok, "compliance": None if not k else not ok,
                            "input_tokens": 100 + 10 * i + (50 if fam != "clean" else 0), "output_tokens": 10,
                            "tool_calls": 2, "turns": 3 + i % 4 + (fam == "user-missing"),
                            "error": "provider <timeout>" if (fam == "tool-incorrect" and i == 5) else "",
                            "trajectory": traj, "diff": "--- a\n+++ b\n@@ -1 +1 @@\n-a\n+b" if k else "",
                            "canaries": []})
    return out


def report(rows_: list[dict[str, Any]], out: Path) -> tuple[Path, str]:
    table = episode_table(rows_)
    a = analyse(table, rows_, replicates=20, permutations=50)
    p = write_report(out, a, gate.evaluate(gate.Thresholds(), a), n_rows=len(table))
    return p, p.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    return report(rows(), tmp_path_factory.mktemp("glance") / "agentperturb.html")


def _section(text: str, sid: str) -> str:
    start = text.index(f"<h2 id='{sid}'>")
    end = text.find("<h2 ", start + 1)
    return text[start:end if end > 0 else len(text)]


def test_the_failing_episodes_are_listed_by_family_and_link_to_their_trajectories(page: tuple[Path, str]) -> None:
    main, text = page
    assert text.index("class='models'") < text.index("<svg") < text.index("id='failures'") < text.index(
        "id='distributions'") < text.index("id='degradation'")
    assert "href='#failures'" in text and "href='#distributions'" in text
    fails = _section(text, "failures")
    for fam in FAMILIES:   # one group per family that ran, a block per model in it
        assert f"<details class=fold id='{failure_anchor('s<1>', fam)}'>" in fails
        for m in ("reference/careful", EVIL_MODEL):
            assert f"id='{failure_anchor('s<1>', fam, m)}'" in fails
    failing = [r for r in rows() if r["error"] or not r["success"]]
    assert failing and f"{len(failing)} of {len(rows())} episodes failed" in fails
    for r in failing:   # each failing episode links to its anchor on its task's page
        href = f"agentperturb-tasks/{page_path('s<1>', r['task'])}#{episode_anchor(r)}"
        assert f"href='{html.escape(href)}'" in fails, r
    for r in rows():
        if r["success"] and not r["error"] and r["family"] != "clean":   # passing perturbed episodes: not listed
            assert f"#{episode_anchor(r)}'>{html.escape(r['task'])}" not in fails
    assert "✗ mail sent to &lt;a@b.c&gt;" in fails and "subject" not in fails   # only the failed checks
    assert "error (not an agent failure): provider &lt;timeout&gt;" in fails
    assert "<td><a class=pass href=" in fails   # the clean pair, linked
    assert assert_links_resolve(main) > len(failing)   # every link and anchor resolves, task pages included


def test_heatmap_cells_link_to_their_familys_failures(page: tuple[Path, str]) -> None:
    _, text = page
    links = re.findall(r"<a href='(#fail[m]?-[0-9a-f]+)'><title>", text)
    assert f"#{failure_anchor('s<1>', 'tool-incorrect')}" in links   # the all-models heatmap
    for m in ("reference/careful", EVIL_MODEL):   # the per-model heatmaps, to the model's block
        assert f"#{failure_anchor('s<1>', 'user-missing', m)}" in links
    assert f"#{failure_anchor('s<1>', 'procedure-missing')}" not in links   # a family that did not run: no link
    for link in links:
        assert f"id='{link[1:]}'" in text


def test_turn_and_cost_distributions_per_family_clean_beside_perturbed(page: tuple[Path, str]) -> None:
    _, text = page
    d = _section(text, "distributions")
    assert d.count("<svg") >= 2 + 2 * 2   # turns and tokens for all models, then per model (folded)
    assert "turns, all models" in d and "cost in tokens" in d and "cost in USD" not in d   # no USD recorded
    for fam in FAMILIES[1:]:
        assert f"{fam} (" in d
    assert svg.CLEAN_COLOUR in d and svg.PERTURBED_COLOUR in d and "<details class=fold>" in d
    assert "acme/&lt;img src=x onerror=alert(1)&gt;" in d and "<img" not in d


def test_five_numbers_and_box_pairs() -> None:
    assert svg.five_numbers([4, 1, 3, 2, float("nan")]) == (1.0, 1.75, 2.5, 3.25, 4.0)
    assert svg.five_numbers([]) is None and svg.five_numbers([float("nan")]) is None
    s = svg.box_pairs([("<f>", [1, 2, 3], [2, 4, 8]), ("only clean", [1], [])], title="<t>")
    assert "&lt;f&gt;" in s and "&lt;t&gt;" in s and "<f>" not in s and s.count("<rect") >= 2 + 3
    assert "2 → 4" in s.replace("</tspan>", "").replace(f"<tspan fill='{svg.CLEAN_COLOUR}'>", "").replace(
        f"<tspan fill='{svg.PERTURBED_COLOUR}'>", "")
    assert svg.box_pairs([]) == ""


class _Tables(HTMLParser):
    """Rows of every table and whether it sits inside a <details>."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.tables: list[list[Any]] = []   # [rows, folded, class]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self.tables.append([0, "details" in self.stack, dict(attrs).get("class")])
        if tag == "tr" and self.tables:
            self.tables[-1][0] += 1
        if tag in ("table", "details"):
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in ("table", "details") and tag in self.stack:
            while self.stack.pop() != tag:
                pass


def test_long_tables_fold_behind_their_headings(page: tuple[Path, str]) -> None:
    _, text = page
    p = _Tables()
    p.feed(text)
    assert p.tables
    for n, folded, cls in p.tables:
        if cls != "models":   # the model table stays open: it is the headline
            assert folded or n <= rs.FOLD_ROWS + 1, (n, cls)
    assert any(folded for _, folded, _ in p.tables)
    assert "<summary><b>every task</b> <span class=muted>(14 rows)</span></summary>" in text
    assert re.search(r"<summary><b>Rollout ratios \(perturbed / clean, per pair\)</b> <span class=muted>\(\d+ rows\)</span>", text)


def test_the_list_is_bounded_per_family_and_model(tmp_path: Path) -> None:
    many = [{"run_id": "r", "model": "m", "suite": "s", "task": f"t{i}", "family": "user-missing", "seed": 0,
             "repeat": 0, "reward": 0.0, "success": False, "error": "", "trajectory": []}
            for i in range(MAX_PER_MODEL + 7)]
    out = failures_section(many, "agentperturb-tasks")
    assert out.count("<td class=fail>fail</td>") == MAX_PER_MODEL
    assert "… and 7 more failing episode(s) of m" in out and "no failed check recorded" in out


def test_the_workers_checks_column_names_what_the_trajectory_does() -> None:
    traj = '[{"role": "grader", "checks": [["a <x>", false], ["b", true], ["c", false]]}]'
    got = checks_column([{"error": "", "success": 0, "trajectory": traj},
                         {"error": "", "success": 1, "trajectory": traj},
                         {"error": "  ", "success": None, "trajectory": traj},
                         {"error": "boom", "success": None, "trajectory": traj}])
    assert got == [["a <x>", "c"], None, ["a <x>", "c"], None]
    assert failed_checks(traj) == ["a <x>", "c"] and failed_checks("not json") == []
    row = {"run_id": "r", "model": "m", "suite": "s", "task": "t", "family": "user-missing", "reward": 0.0,
           "success": False, "error": "", "trajectory": "[]", CHECKS: ["from <the> worker"]}
    assert "✗ from &lt;the&gt; worker" in failures_section([row], "p")


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
# The lines an interval of a table takes: the text of a td.ci from its start to its first "]", laid out.
_MEASURE = ("<script>window.addEventListener('load',()=>{for(const d of document.querySelectorAll('details'))"
            "d.open=true;const e=document.documentElement,p=document.createElement('pre');let most=0;"
            "for(const td of document.querySelectorAll('td.ci')){const w=document.createTreeWalker(td,4);let first=null,n;"
            "while((n=w.nextNode())){first=first||n;const i=n.data.indexOf(']');if(i>=0){const r=document.createRange();"
            "r.setStart(first,0);r.setEnd(n,i+1);most=Math.max(most,new Set([...r.getClientRects()]"
            ".map(x=>Math.round(x.top))).size);break;}}}"
            "p.textContent='SCROLL '+e.scrollWidth+' '+e.clientWidth+' '+most;document.body.appendChild(p);});</script>")


def _widths(page: Path, tmp: Path, width: int) -> tuple[int, int, int]:
    """(scrollWidth, clientWidth, most lines an interval takes) of a copy of ``page`` in headless Chromium,
    every <details> opened."""
    probe = page.with_name(f".probe-{page.name}")
    probe.write_text(page.read_text(encoding="utf-8") + _MEASURE, encoding="utf-8")
    try:
        res = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", f"--window-size={width},1200",
                              f"--user-data-dir={tmp / 'chromium-profile'}", "--virtual-time-budget=3000",
                              "--dump-dom", probe.resolve().as_uri()],
                             capture_output=True, text=True, timeout=120)
    finally:
        probe.unlink()
    m = re.search(r"SCROLL (\d+) (\d+) (\d+)", res.stdout)
    assert m, res.stderr[-2000:]
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed: the 800 px check needs a real browser")
def test_the_pages_read_at_800_px_without_sideways_scrolling(tmp_path: Path) -> None:
    main, _ = report(rows(long_names=True), tmp_path / "agentperturb.html")   # long task names and checks
    task = next(p for p in sorted(pages_folder(main).rglob("*.html")) if p.name != "index.html")
    for p in (main, task, pages_folder(main) / "index.html"):
        scroll, client, lines = _widths(p, tmp_path, 800)
        assert client <= 800 and scroll <= client, (p.name, scroll, client)
        assert lines <= 1, (p.name, lines)         # an interval ([19.6 %, 26.2 %]) never wraps


def test_cut_text_ends_at_a_word_and_says_so() -> None:
    """A failed check (or an error) too long for its cell is cut after a whole word, with "…" (never mid-word)."""
    from pytest_agentperturb.formats.native.grader import check_result
    from pytest_agentperturb.model.trajectory import clip

    text = "Dear Tomás, your interview is confirmed " + "for the final round at the office " * 8
    name, ok = check_result({"path": "note", "contains": "CC-4410"}, {"note": text}, "")   # the grader's own cut
    # stored, so ASCII "...": one "…" makes Python hold the whole trajectory's text at two bytes a character
    assert not ok and len(name) <= 200 and name.endswith(" at..."), name
    assert all(ord(ch) < 256 for ch in name), name
    row = {"run_id": "r", "model": "m", "suite": "s", "task": "t", "family": "user-missing", "reward": 0.0,
           "success": False, "error": "", "trajectory": "[]", CHECKS: [text * 2]}
    (shown,) = re.findall(r"✗ ([^<]*)", failures_section([row], "p"))
    assert shown.endswith("…") and len(shown) <= 200 and (text * 2).startswith(shown[:-1] + " "), shown
    assert clip("short", 10) == "short" and clip("aaaa bbbb cccc", 10) == "aaaa bbbb…"
    assert clip("the day before. Kind regards", 20) == "the day before…"
    assert clip("x" * 40, 10) == "x" * 9 + "…"                  # no word boundary near: cut mid-word, still marked

"""The HTML report: self-contained, escaped, baselines labelled, drill-down, pytest-html extras."""

from __future__ import annotations

import html
import json
import re
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
import scipy.cluster.hierarchy  # noqa: F401  (loaded before pytester's in-process runs, which
import scipy.stats  # noqa: F401               restore sys.modules and cannot reload C extensions)

from pytest_agentperturb.report import svg
from pytest_agentperturb.gate import parse
from pytest_agentperturb import gate
from pytest_agentperturb.report import (analyse, episode_anchor, episode_table, highlight, pages_folder, render_page,
                                        write_report)
from pytest_agentperturb.report.pages import page_path
from report_links import assert_links_resolve

ROOT = Path(__file__).resolve().parents[1]

EVIL = "<script>alert('x')</script>"


class Page:
    """The report for rows: analysis, the gate's verdict, the main page and the task pages (a session end)."""

    def __init__(self, rows: list[dict[str, Any]], thresholds: gate.Thresholds | None = None,
                 out: Path | None = None, **kw: Any) -> None:
        table = episode_table(rows)
        self.analysis = analyse(table, rows, **kw)
        self.verdict = gate.evaluate(thresholds or gate.Thresholds(), self.analysis)
        self.html = render_page(self.analysis, self.verdict, n_rows=len(table))
        self.pages: dict[str, str] = {}
        if out is not None:
            self.main = write_report(out, self.analysis, self.verdict, n_rows=len(table))
            assert self.main.read_text(encoding="utf-8") == self.html
            self.folder = pages_folder(out)
            self.pages = {p.relative_to(self.folder).as_posix(): p.read_text(encoding="utf-8")
                          for p in sorted(self.folder.rglob("*.html"))}

    def task(self, suite: str, task: str) -> str:
        return self.pages[page_path(suite, task)]


def build(rows: list[dict[str, Any]], **kw: Any) -> Page:
    return Page(rows, **kw)


def render(rows: list[dict[str, Any]]) -> str:
    return Page(rows).html


def rows() -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for model in ("reference/careful", "acme/<img src=x onerror=alert(1)>"):
        for i in range(3):
            for fam, reward in (("clean", 1.0), ("tool-incorrect", float(i == 0)), ("user-missing", 0.0)):
                t, _, k = fam.partition("-")
                traj = [{"role": "assistant", "tool": "mail_send", "args": {"to": "eve@wrong.test" if k else "a@b.c"}},
                        {"role": "tool", "tool": "mail_send", "content": "ERROR: " + EVIL},
                        {"role": "assistant", "content": f"Done {EVIL} ({model} {i} {fam})", "final": True},
                        {"role": "grader", "checks": [["mail sent to <a@b.c>", reward == 1.0]]}]
                out.append({"run_id": "r", "model": model, "suite": "s", "task": f"task-{i}\"'", "family": fam,
                            "target": t if k else "clean", "type": k or "clean", "operator": "op<1>", "seed": 3,
                            "reward": reward, "success": reward == 1.0, "compliance": None if not k else reward < 1,
                            "input_tokens": 100, "output_tokens": 10, "tool_calls": 2, "turns": 3, "error": "",
                            "trajectory": traj, "diff": "--- a\n+++ b\n@@ -1 +1 @@\n-to a@b.c\n+to eve@wrong.test"
                            if k else "", "canaries": [{"kind": "value", "text": "eve@wrong.test", "fact": "to"}]
                            if k else []})
    return out


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Page:
    return build(rows(), replicates=100, permutations=500,
                 out=tmp_path_factory.mktemp("report") / "agentperturb.html")


@pytest.fixture(scope="module")
def page(report: Page) -> str:
    return report.html


def all_pages(report: Page) -> list[tuple[str, str]]:
    return [("main page", report.html), *report.pages.items()]


def test_strings_from_tasks_models_and_tools_stay_inert(report: Page) -> None:
    for name, text in all_pages(report):
        assert "<script" not in text.lower(), name
        assert "<img" not in text and "op<1>" not in text and "task-0\"'" not in text, name
    page = report.html
    assert "acme/&lt;img src=x onerror=alert(1)&gt;" in page and "task-0&quot;&#x27;" in page
    drill = report.task("s", "task-0\"'")
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in drill
    assert "acme/&lt;img src=x onerror=alert(1)&gt;" in drill and "op&lt;1&gt;" in drill


def test_self_contained_no_network(report: Page) -> None:
    for name, text in all_pages(report):
        assert not re.search(r"""(src|href)\s*=\s*['"]?(https?:)?//""", text), name
        assert "<link" not in text and "@import" not in text and "<script" not in text, name
        assert set(re.findall(r"https?://[^\s'\"<>]+", text)) <= {"http://www.w3.org/2000/svg"}, name


def test_top_of_page_order_and_baselines(page: str) -> None:
    gate, table, heat = page.index("class='gate"), page.index("class='models'"), page.index("<svg")
    assert gate < table < heat < page.index("id='degradation'") < page.index("id='tasks'")
    assert "reference/careful <span class='tag baseline'>baseline</span>" in page
    assert "acme/&lt;img src=x onerror=alert(1)&gt; <span" not in page
    for sid in ("marginal", "paired", "malleability", "compliance", "predictors", "sensitivity", "cost", "labels"):
        assert f"id='{sid}'" in page
    assert "[" in page and "95% CI" in page


def test_the_main_page_links_each_task_and_holds_no_trajectory(report: Page) -> None:
    page = report.html
    assert "<ol class=traj" not in page and "Done &lt;script" not in page and "<mark>" not in page
    for i in range(3):
        assert f"href='agentperturb-tasks/{page_path('s', f'task-{i}' + chr(34) + chr(39))}'" in page
    assert "href='agentperturb-tasks/index.html'" in page
    assert sorted(report.pages) == ["index.html", *sorted(page_path("s", f"task-{i}\"'") for i in range(3))]


def test_drill_down_side_by_side_with_diff_and_canaries(report: Page) -> None:
    drill = report.task("s", "task-1\"'")
    assert "<div class=pair><div class=clean" in drill and "<section class=ep" in drill
    assert "<span class='add'>+to eve@wrong.test</span>" in drill
    assert "<mark>eve@wrong.test</mark>" in drill
    for r in rows():   # every episode has its anchor once, on its task's page
        assert report.task("s", str(r["task"])).count(f"id='{episode_anchor(r)}'") == 1
        assert sum(text.count(f"id='{episode_anchor(r)}'") for _, text in all_pages(report)) == 1


def test_each_trajectory_is_rendered_once(report: Page) -> None:
    for i in range(3):
        drill = report.task("s", f"task-{i}\"'")
        mine = [r for r in rows() if r["task"] == f"task-{i}\"'"]
        assert drill.count("<ol class=traj>") == len(mine) == 6
        for r in mine:   # each final answer names its episode: it appears once, on its own page
            final = f"Done &lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; ({html.escape(str(r['model']))} {i} "
            assert drill.count(final + f"{r['family']})") == 1
    assert sum(text.count("<ol class=traj>") for _, text in all_pages(report)) == len(rows())


def test_links_resolve_to_pages_that_exist(report: Page) -> None:
    assert assert_links_resolve(report.main) >= 3 + 3 * 2 + 3


def test_highlight_escapes_before_marking() -> None:
    assert highlight("a <b> c", ["<b>"]) == "a <mark>&lt;b&gt;</mark> c"
    assert highlight("x", []) == "x"
    assert highlight("a<b>a", ["a", "<b>"]) == "<mark>a</mark><mark>&lt;b&gt;</mark><mark>a</mark>"


def test_deterministic_bytes(tmp_path: Path) -> None:
    a = build(rows(), replicates=100, permutations=500, seed=1, out=tmp_path / "a" / "agentperturb.html")
    b = build(rows(), replicates=100, permutations=500, seed=1, out=tmp_path / "b" / "agentperturb.html")
    assert a.html == b.html and a.pages == b.pages and len(a.pages) == 4


def test_gate_box_states() -> None:
    failed = build(rows(), thresholds=parse({"max_drop": "10"}), replicates=50, permutations=100)
    assert failed.verdict.failed and "Gate: FAILED" in failed.html
    assert "acme/&lt;img" in failed.html.split("Gate: FAILED")[1][:1000]
    passed = build(rows(), thresholds=parse({"max_drop": "100"}), replicates=50, permutations=100)
    assert "Gate: PASSED" in passed.html
    assert "no thresholds configured" in render(rows())


def test_svg_escapes_labels() -> None:
    s = svg.heatmap([[1.0]], ["<r>"], ["c&"], title="<t>")
    assert "<r>" not in s and "&lt;r&gt;" in s and "c&amp;" in s
    d = svg.dot_intervals([("<x>", 5.0, 1.0, 9.0)])
    assert "&lt;x&gt;" in d and "<circle" in d
    assert svg.diverging(float("nan")) == "#eeeeee" and svg.diverging(100) != svg.diverging(-100)


def _run(pytester: pytest.Pytester, suite_path: Path, *args: str) -> pytest.RunResult:
    shutil.copytree(suite_path, pytester.path / "suites" / "workflows")
    return pytester.runpytest_subprocess("--agentperturb", "suites/workflows", "-p", "no:cacheprovider",
                                         "-k", "share-report", "--agentperturb-report", "reports/agentperturb.html",
                                         *args)  # named: a -k subset's report is otherwise its own


def test_plain_run_under_xdist_writes_full_report(pytester: pytest.Pytester, suite_path: Path) -> None:
    r = _run(pytester, suite_path, "-n", "2")
    assert r.ret == 0
    main = pytester.path / "reports" / "agentperturb.html"
    text = main.read_text(encoding="utf-8")
    assert "reference/literal <span class='tag baseline'>baseline</span>" in text
    assert "reference/careful <span class='tag baseline'>baseline</span>" in text
    assert "tool_count" in text   # task properties travel on the reports to the controller
    from pytest_agentperturb.model.task import FAMILIES, INSERTED

    drill = (pytester.path / "reports" / "agentperturb-tasks" / "workflows" / "share-report.html").read_text()
    assert "href='agentperturb-tasks/workflows/share-report.html'" in text
    assert drill.count("<div class=clean id='ep-") == 2                                  # one task, two agents
    assert drill.count("<section class=ep id='ep-") == (len(FAMILIES) + len(INSERTED)) * 2
    assert drill.count("<ol class=traj>") == (1 + len(FAMILIES) + len(INSERTED)) * 2      # each rendered once
    assert "diff not recorded" not in drill and "<mark>" in drill
    assert assert_links_resolve(main) > 3


def test_pytest_html_extras(pytester: pytest.Pytester, suite_path: Path) -> None:
    r = _run(pytester, suite_path, "--agentperturb-model", "reference/literal", "--html", "ph.html",
             "--self-contained-html", "-k", "tool-incorrect")
    assert r.ret == 0
    text = (pytester.path / "ph.html").read_text(encoding="utf-8")
    data = re.search(r'data-jsonblob="([^"]*)"', text)
    assert data is not None
    import html as h

    blob = json.loads(h.unescape(data.group(1)))
    extras = [e for t in blob["tests"].values() for run in t for e in run.get("extras", [])]
    names = {e.get("name") for e in extras}
    assert "agentperturb report" in names
    link = next(e for tid, t in blob["tests"].items() if "share-report" in tid for run in t
                for e in run.get("extras", []) if e.get("name") == "agentperturb report")["content"]
    assert link.startswith("file://") and "#ep-" in link
    from urllib.parse import urlparse

    url = urlparse(link)   # the episode on its task's page
    page = Path(unquote(url.path))
    assert page == (pytester.path / "reports" / "agentperturb-tasks" / "workflows" / "share-report.html").resolve()
    assert f"id='{url.fragment}'" in page.read_text(encoding="utf-8")
    body = " ".join(str(e.get("content", "")) for e in extras)
    assert "verdict <b>" in body and "<span class='add'>" in body


def test_undefined_figures_of_the_report_say_why(page: str) -> None:
    """The suite average's per-model figures and a correlation over too few models read ``n/a (why)``, never bare."""
    start = page.index("class='models'")
    models = page[start:page.index("</table>", start)]
    average = models[models.index("all models (suite average)"):]
    assert average.count("<td>n/a (per model only)</td>") == 3       # harmful flips, bypass, smallest detectable D
    start = page.index("Clean score vs D")
    clean = page[start:page.index("</table>", start)]
    assert clean.count("<td>n/a (fewer than 3 models)</td>") == 2    # rho and p, over one real model
    assert "<td>n/a</td>" not in models + clean


def test_no_table_cell_of_the_report_reads_a_bare_n_a(page: str, tmp_path: Path) -> None:
    """Every undefined figure of every table says why: malleability rates, the cross-family rank correlations and
    their contrasts, the recovery cost (here and on the README's main job, where they were bare)."""
    assert not re.findall(r"<td[^>]*>n/a</td>", page)
    import subprocess
    import sys

    shutil.copytree(ROOT / "suites" / "workflows", tmp_path / "suites" / "workflows")
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--agentperturb",
                        "suites/workflows", "--agentperturb-model", "reference/literal",
                        "--agentperturb-model", "reference/careful"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout[-2000:]
    main = (tmp_path / "reports" / "agentperturb.html").read_text(encoding="utf-8")
    cells = re.findall(r"<td[^>]*>(n/a[^<]*)</td>", main)
    assert cells and not [c for c in cells if c == "n/a"]
    assert {"n/a (no clean fails)", "n/a (a contrast of two groups)"} <= set(cells)
    assert any(c.startswith("n/a (a family") for c in cells) and "n/a (no perturbed successes)" in cells


def test_the_gate_box_counts_its_breaches_and_shows_its_notes_apart() -> None:
    p = build(rows(), thresholds=parse({"max_family_drop": ["30"]}), replicates=50, permutations=100)
    v = p.verdict
    assert v.breaches and v.notes                    # breaches, a power note and the baselines' note
    start = p.html.index("<div class='gate fail'>")
    box = p.html[start:p.html.index("</div>", start)]
    assert f"Gate: FAILED — {len(v.breaches)} threshold breach(es)." in box
    assert box.count("<li>") == len(v.breaches)
    assert not any(html.escape(n, quote=True) in box for n in v.notes)
    start = p.html.index("<div class='gate notes'>")
    notes = p.html[start:p.html.index("</div>", start)]
    assert f"Gate notes ({len(v.notes)}), not breaches:" in notes and notes.count("<li>") == len(v.notes)
    assert any("cannot tell a 30 % drop from noise" in n for n in v.notes)
    assert all(html.escape(n, quote=True) in notes for n in v.notes)


def test_heatmap_cells_say_why_they_have_no_value() -> None:
    s = svg.heatmap([[float("nan"), 5.0]], ["r"], ["a", "b"], whys=[["no <pairs>", "unused"]])
    assert ">n/a</text>" in s and ">(no &lt;pairs&gt;)</text>" in s and "<title>r x a: n/a (no &lt;pairs&gt;)</title>" in s
    assert "unused" not in s and ">5.0%</text>" in s                 # a cell with a value needs no reason

"""The HTML report: self-contained, escaped, baselines labelled, drill-down, pytest-html extras."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import scipy.cluster.hierarchy  # noqa: F401  (loaded before pytester's in-process runs, which
import scipy.stats  # noqa: F401               restore sys.modules and cannot reload C extensions)

from pytest_agentperturb.report import svg
from pytest_agentperturb.gate import parse
from pytest_agentperturb import gate
from pytest_agentperturb.report import analyse, episode_anchor, episode_table, highlight, render_page

EVIL = "<script>alert('x')</script>"


class Page:
    """The report for rows: analysis, the gate's verdict and the page (what a session end does)."""

    def __init__(self, rows: list[dict[str, Any]], thresholds: gate.Thresholds | None = None, **kw: Any) -> None:
        table = episode_table(rows)
        self.analysis = analyse(table, rows, **kw)
        self.verdict = gate.evaluate(thresholds or gate.Thresholds(), self.analysis)
        self.html = render_page(self.analysis, self.verdict, n_rows=len(table))


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
                        {"role": "assistant", "content": f"Done {EVIL}", "final": True},
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
def page() -> str:
    return build(rows(), replicates=100, permutations=500).html


def test_strings_from_tasks_models_and_tools_stay_inert(page: str) -> None:
    assert "<script" not in page.lower()
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    assert "<img" not in page and "acme/&lt;img src=x onerror=alert(1)&gt;" in page
    assert "op<1>" not in page and "task-0\"'" not in page


def test_self_contained_no_network(page: str) -> None:
    assert not re.search(r"""(src|href)\s*=\s*['"]?(https?:)?//""", page)
    assert "<link" not in page and "@import" not in page
    assert set(re.findall(r"https?://[^\s'\"<>]+", page)) <= {"http://www.w3.org/2000/svg"}   # SVG namespace only


def test_top_of_page_order_and_baselines(page: str) -> None:
    gate, table, heat = page.index("class='gate"), page.index("class='models'"), page.index("<svg")
    assert gate < table < heat < page.index("id='degradation'") < page.index("id='episodes'")
    assert "reference/careful <span class='tag baseline'>baseline</span>" in page
    assert "acme/&lt;img src=x onerror=alert(1)&gt; <span" not in page
    for sid in ("marginal", "paired", "malleability", "compliance", "predictors", "sensitivity", "cost", "labels"):
        assert f"id='{sid}'" in page
    assert "[" in page and "95% CI" in page


def test_drill_down_side_by_side_with_diff_and_canaries(page: str) -> None:
    assert "<h4>clean</h4>" in page and "<h4>perturbed</h4>" in page
    assert "<span class='add'>+to eve@wrong.test</span>" in page
    assert "<mark>eve@wrong.test</mark>" in page
    r = rows()[1]
    assert f"id='{episode_anchor(r)}'" in page


def test_highlight_escapes_before_marking() -> None:
    assert highlight("a <b> c", ["<b>"]) == "a <mark>&lt;b&gt;</mark> c"
    assert highlight("x", []) == "x"


def test_deterministic_bytes() -> None:
    a = build(rows(), replicates=100, permutations=500, seed=1).html
    b = build(rows(), replicates=100, permutations=500, seed=1).html
    assert a == b


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
                                         "-k", "share-report", *args)


def test_plain_run_under_xdist_writes_full_report(pytester: pytest.Pytester, suite_path: Path) -> None:
    r = _run(pytester, suite_path, "-n", "2")
    assert r.ret == 0
    text = (pytester.path / "reports" / "agentperturb.html").read_text(encoding="utf-8")
    assert "reference/literal <span class='tag baseline'>baseline</span>" in text
    assert "reference/careful <span class='tag baseline'>baseline</span>" in text
    from pytest_agentperturb.model.task import FAMILIES, INSERTED

    assert text.count("<details id='ep-") == (1 + len(FAMILIES) + len(INSERTED)) * 2  # one task, two agents
    assert "diff not recorded" not in text and "<mark>" in text
    assert "tool_count" in text   # task properties travel on the reports to the controller


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
    link = next(e for e in extras if e.get("name") == "agentperturb report")["content"]
    assert link.startswith("file://") and "#ep-" in link
    body = " ".join(str(e.get("content", "")) for e in extras)
    assert "verdict <b>" in body and "<span class='add'>" in body

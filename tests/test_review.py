"""``agentperturb generate --review``: one self-contained page to read variants before trusting a run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_agentperturb.cli import main
from pytest_agentperturb.formats.native import load_task
from pytest_agentperturb.perturb import clean_variant
from pytest_agentperturb.report.review import review_page, sample, side_by_side
from pytest_agentperturb.run import make_engine


def _generate(suite: Path, out: Path, review: Path, *extra: str) -> int:
    return main(["generate", str(suite), "--out", str(out), "--seed", "2",
                 "--families", "user-missing,procedure-redundant,tool-incorrect,inserted-injection",
                 "--review", str(review), *extra])


def test_review_page_is_self_contained_sampled_and_deterministic(suite_copy: Path, tmp_path: Path) -> None:
    instruction = suite_copy / "share-report" / "instruction.md"
    instruction.write_text(instruction.read_text() + "Thanks <b>a lot</b> & see you.\n")
    a, b = tmp_path / "a.html", tmp_path / "b.html"
    assert _generate(suite_copy, tmp_path / "out1", a, "--review-size", "12") == 0
    assert _generate(suite_copy, tmp_path / "out2", b, "--review-size", "12") == 0
    page = a.read_text(encoding="utf-8")
    assert a.read_bytes() == b.read_bytes()  # same seed, same bytes
    n_tasks = sum(1 for d in suite_copy.iterdir() if (d / "task.toml").is_file())
    assert page.count("<h2 id=") == 12 and f"12 of {4 * n_tasks} variants" in page
    full = tmp_path / "all.html"
    assert _generate(suite_copy, tmp_path / "out3", full, "--review-size", "100") == 0
    page = full.read_text(encoding="utf-8")
    assert page.count("<h2 id=") == min(100, 4 * n_tasks)
    assert "<script" not in page.lower() and not re.search(r"(?:src|href)=['\"]?(?:https?:)?//", page)
    assert "<b>a lot</b>" not in page and "&lt;b&gt;a lot&lt;/b&gt;" in page  # task text is escaped
    assert "operator <b>" in page and "<mark>" in page and "<ins>" in page and "clean instruction.md" in page
    assert "Known-bad shapes found: 0" in page


def test_review_size_must_be_positive(suite_copy: Path, tmp_path: Path) -> None:
    assert _generate(suite_copy, tmp_path / "out", tmp_path / "r.html", "--review-size", "0") == 2


def test_side_by_side_highlights_the_edit_and_the_canaries() -> None:
    html = side_by_side("Book room \"Fjord\" today.\nBye.", "Book room \"Birch\" today.\nBye.", ["Birch"])
    assert "<del>&quot;Fjord&quot;</del>" in html and "<ins>&quot;<mark>Birch</mark>&quot;</ins>" in html
    assert html.count("<tr class=chg>") == 1


def test_sample_is_seeded_and_keeps_order(suite_path: Path) -> None:
    task = load_task(suite_path / "book-offsite", "workflows")
    engine = make_engine()
    items = [(task, engine.make_variant(task, f, 0)) for f in ("user-missing", "tool-missing", "user-redundant")]
    assert sample(items, 2, 5) == sample(items, 2, 5) and len(sample(items, 2, 5)) == 2
    assert sample(items, 10, 5) == items
    page = review_page([(task, clean_variant(task))], total=1)
    assert "1 of 1 variants" in page and "the clean task: nothing edited" in page


@pytest.mark.parametrize("bad", ['"><script>alert(1)</script>', "</td></tr></table><img src=x>"])
def test_everything_is_escaped(bad: str) -> None:
    html = side_by_side(bad, bad + " x", [bad])
    assert "<script" not in html and "<img" not in html

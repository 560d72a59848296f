"""Subsets stay paired, every run has its own run id, a subset run its own report (plugin/subsets.py).

Each case runs ``pytest --agentperturb`` on a three-task copy of the built-in suite, as a user
would, with the careful reference agent: it passes every clean task and fails some perturbed ones,
so a paired figure has a drop to show.
"""

from __future__ import annotations

import re
import shlex
import shutil
import sqlite3
from pathlib import Path

import pytest

from task_files import report_of

ROOT = Path(__file__).resolve().parents[1]
TASKS = ("book-final-interview", "coordinate-release", "share-report")
AGENT = ("--agentperturb-model", "reference/careful")
RUN_ID = re.compile(r"seed-0-\d{8}T\d{6}(-\d+)?")


@pytest.fixture
def small(pytester: pytest.Pytester) -> Path:
    """Three tasks of the workflows suite, in the pytester folder as ``suites/workflows``."""
    dst = pytester.path / "suites" / "workflows"
    dst.mkdir(parents=True)
    src = ROOT / "suites" / "workflows"
    for p in src.iterdir():
        if p.is_file():
            shutil.copy(p, dst / p.name)
        elif p.name in TASKS:
            shutil.copytree(p, dst / p.name)
    return dst


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("--agentperturb", "suites/workflows", *AGENT, "-p", "no:cacheprovider", *args)


def rows(pytester: pytest.Pytester) -> list[tuple[str, str, str]]:
    """(run id, task, family) of every stored episode."""
    with sqlite3.connect(pytester.path / "reports" / "agentperturb.sqlite") as db:
        return [tuple(r) for r in db.execute("SELECT run_id, task, family FROM episodes ORDER BY 1, 2, 3")]


def run_id_of(result: pytest.RunResult) -> str:
    (m,) = [re.search(r"\(run_id (\S+)\)$", ln) for ln in result.outlines if ln.startswith("store: ")]
    assert m is not None
    return m.group(1)


def test_k_selection_runs_the_clean_partners_and_gives_the_drop(pytester: pytest.Pytester, small: Path) -> None:
    result = run(pytester, "-k", "tool and missing")
    out = result.stdout.str()
    assert result.ret == 0, out[-3000:]
    assert "no scored episodes" not in out
    assert "paired: 3 clean episode(s) run for the 3 selected perturbed item(s)" in out
    result.stdout.re_match_lines([r"reference/careful +workflows +clean 1\.000 +perturbed .* drop .*%"
                                  r" \[.*\] .* pairs 3\b.*"])
    run_id = run_id_of(result)
    assert RUN_ID.fullmatch(run_id)
    assert rows(pytester) == [(run_id, t, f) for t in TASKS for f in ("clean", "tool-missing")]
    # the put-back items run, so they are not counted as deselected
    (collected,) = [m for ln in result.outlines if (m := re.match(r"collected (\d+) items / (\d+) deselected / "
                                                                  r"(\d+) selected", ln))]
    assert int(collected.group(3)) == 6 and int(collected.group(2)) == int(collected.group(1)) - 6
    n_run = sum(int(n) for n in re.findall(r"(\d+) (?:passed|agent-failed)", result.outlines[-1]))
    assert n_run == 6 and f"{int(collected.group(1)) - 6} deselected" in result.outlines[-1]
    # a subset's report is its own: the full run's report is not replaced
    assert report_of(result) == pytester.path / "reports" / "agentperturb-tool-and-missing.html"
    assert report_of(result).is_file()
    assert not (pytester.path / "reports" / "agentperturb.html").exists()


def test_m_selection_pairs_each_family_with_one_clean_episode(pytester: pytest.Pytester, small: Path) -> None:
    result = run(pytester, "-m", "user and not redundant")
    out = result.stdout.str()
    assert "paired: 3 clean episode(s) run for the 6 selected perturbed item(s)" in out
    result.stdout.re_match_lines([r".* clean 1\.000 .* pairs 6\b.*"])
    assert sorted({f for _, _, f in rows(pytester)}) == ["clean", "user-incorrect", "user-missing"]
    assert report_of(result).name == "agentperturb-user-and-not-redundant.html"


def test_families_without_clean_still_run_the_partners(pytester: pytest.Pytester, small: Path) -> None:
    result = run(pytester, "--agentperturb-families", "tool-incorrect")
    result.stdout.re_match_lines([r".* pairs 3\b.*"])
    assert "paired: 3 clean episode(s) run for the 3 selected perturbed item(s)" in result.stdout.str()
    assert [f for _, _, f in rows(pytester)].count("clean") == 3
    assert report_of(result).name == "agentperturb-tool-incorrect.html"


@pytest.mark.parametrize("how", [("-k", "tool and incorrect"), ("--agentperturb-families", "tool-incorrect")])
def test_a_clean_item_deselected_by_name_stays_out(pytester: pytest.Pytester, small: Path,
                                                  how: tuple[str, str]) -> None:
    nodeid = "suites/workflows::share-report::clean[reference/careful]"
    result = run(pytester, *how, "--deselect", nodeid)
    out = result.stdout.str()
    assert "paired: 2 clean episode(s) run for the 2 selected perturbed item(s)" in out
    result.stdout.re_match_lines([r".* pairs 2 \(dropped 1: 1 no clean episode\).*"])
    assert ("share-report", "clean") not in [(t, f) for _, t, f in rows(pytester)]


def test_clean_alone_says_no_perturbed_episodes_were_selected(pytester: pytest.Pytester, small: Path) -> None:
    result = run(pytester, "-k", "clean")
    out = result.stdout.str()
    assert result.ret == 0
    assert "no perturbed episodes selected" in out
    assert "no scored episodes" not in out and "paired:" not in out
    assert [f for _, _, f in rows(pytester)] == ["clean"] * 3


def test_the_printed_reproduce_line_reproduces_its_figure(pytester: pytest.Pytester, small: Path) -> None:
    first = run(pytester, "-k", "tool and missing")
    lines = [ln.strip() for ln in first.outlines if ln.strip().startswith("reproduce: pytest ")]
    assert lines, first.stdout.str()[-2000:]
    args = shlex.split(lines[0].removeprefix("reproduce: "))
    assert args[0] == "pytest" and "--agentperturb" in args
    k = args[args.index("-k") + 1]
    assert re.fullmatch(r"[\w-]+ and \(tool-missing or clean\)", k)
    again = pytester.runpytest(*args[1:], "-p", "no:cacheprovider")
    out = again.stdout.str()
    assert "no scored episodes" not in out
    again.stdout.re_match_lines([r".* clean 1\.000 +perturbed 0\.000 +drop 100\.0% .* pairs 1\b.*"])
    assert "paired:" not in out  # the line selects the clean partner itself


def test_runs_never_replace_each_other_and_last_and_resume_find_the_newest(pytester: pytest.Pytester,
                                                                          small: Path) -> None:
    one = run(pytester, "-k", "coordinate-release and tool-missing")
    two = run(pytester, "-k", "coordinate-release and tool-missing")
    a, b = run_id_of(one), run_id_of(two)
    assert a != b and RUN_ID.fullmatch(a) and RUN_ID.fullmatch(b)
    stored = rows(pytester)
    assert [r for r in stored if r[0] == a] == [(a, "coordinate-release", f) for f in ("clean", "tool-missing")]
    assert [r for r in stored if r[0] == b] == [(b, "coordinate-release", f) for f in ("clean", "tool-missing")]
    # ``last`` is the newest other run; resuming without a run id continues the newest run of the seed
    resumed = run(pytester, "-k", "coordinate-release and tool-missing", "--agentperturb-resume",
                  "--agentperturb-baseline", "last")
    assert run_id_of(resumed) == b
    out = resumed.stdout.str()
    assert "episodes run: 0, reused: 2" in out
    assert f"versus baseline run {a!r}" in out
    assert len(rows(pytester)) == 4
    # an explicit run id is taken as given
    named = run(pytester, "-k", "coordinate-release and tool-missing", "--agentperturb-run-id", "nightly")
    assert run_id_of(named) == "nightly"
    # another seed resumes nothing of seed 0: a new run
    other = run(pytester, "-k", "coordinate-release and tool-missing", "--agentperturb-resume",
                "--agentperturb-seed", "1")
    assert re.fullmatch(r"seed-1-\d{8}T\d{6}", run_id_of(other))
    assert "episodes run: 2, reused: 0" in other.stdout.str()


def test_full_run_keeps_the_report_name_and_an_explicit_report_wins(pytester: pytest.Pytester,
                                                                  small: Path) -> None:
    full = run(pytester, "--agentperturb-families", "clean,tool-missing", "--agentperturb-report",
               "reports/mine.html")
    assert report_of(full) == pytester.path / "reports" / "mine.html"
    assert report_of(full).is_file()
    plain = pytester.runpytest("--agentperturb", "suites/workflows/", *AGENT, "-p", "no:cacheprovider")
    assert report_of(plain) == pytester.path / "reports" / "agentperturb.html"
    assert report_of(plain).is_file()


def test_a_long_selection_is_cut_with_a_hash(pytester: pytest.Pytester, small: Path) -> None:
    expr = " or ".join(f"({t} and tool-missing)" for t in TASKS)
    result = run(pytester, "-k", expr)
    name = report_of(result).name
    assert name.startswith("agentperturb-book-final-interview-and-tool-missing-or-")
    stem = name.removeprefix("agentperturb-").removesuffix(".html")
    assert len(stem) <= 60 and re.search(r"-[0-9a-f]{8}$", stem)
    assert re.fullmatch(r"[A-Za-z0-9._-]+", stem)


def test_xdist_workers_share_the_run_id_and_the_pairing(pytester: pytest.Pytester, small: Path) -> None:
    result = pytester.runpytest_subprocess("--agentperturb", "suites/workflows", *AGENT, "-p", "no:cacheprovider",
                                           "-n", "2", "-k", "tool and missing", timeout=240)
    out = result.stdout.str()
    assert result.ret == 0, out[-3000:]
    assert "paired: 3 clean episode(s) run for the 3 selected perturbed item(s)" in out
    result.stdout.re_match_lines([r".* pairs 3\b.*"])
    run_id = run_id_of(result)
    assert rows(pytester) == [(run_id, t, f) for t in TASKS for f in ("clean", "tool-missing")]


def test_collect_only_lists_the_clean_partners(pytester: pytest.Pytester, small: Path) -> None:
    result = run(pytester, "--collect-only", "-q", "-k", "tool and missing")
    ids = [ln for ln in result.outlines if "::" in ln]
    assert sorted(ids) == sorted(f"suites/workflows::{t}::{f}[reference/careful]" for t in TASKS
                                 for f in ("clean", "tool-missing"))
    for t in TASKS:  # each clean partner just before its perturbed item
        assert ids.index(f"suites/workflows::{t}::clean[reference/careful]") + 1 == \
            ids.index(f"suites/workflows::{t}::tool-missing[reference/careful]")
    assert "paired: 3 clean episode(s) collected for the 3 selected perturbed item(s)" in result.stdout.str()


def test_runs_started_in_the_same_second_each_get_their_own_run_id(tmp_path: Path) -> None:
    """The id is chosen and reserved in the store in one transaction: sessions started together (here four
    threads, each with its own connection, at one frozen clock) never share one; a reserved id gets its run's
    configuration when the session records it."""
    import threading

    from pytest_agentperturb.run.runids import default_run_id
    from pytest_agentperturb.run.store import Store

    store, now = tmp_path / "s.sqlite", 1_800_000_000.0
    assert default_run_id(store, 0, now=now) == "seed-0-20270115T080000" and not store.exists()  # nothing made
    closing_store = Store(store)   # the store exists (an earlier run made it)
    closing_store.close()
    got: list[str] = []
    threads = [threading.Thread(target=lambda: got.append(default_run_id(store, 0, now=now))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    base = "seed-0-20270115T080000"
    assert sorted(got) == [base, f"{base}-2", f"{base}-3", f"{base}-4"]
    assert default_run_id(store, 0, resume=True, now=now) == f"{base}-4"  # resume continues the newest
    from contextlib import closing

    with closing(Store(store)) as s:
        s.record_run(base, {"seed": 0})
        s.record_run(base, {"seed": 1})  # first writer wins, after the reservation
        assert s.run_configs()[base][1] == {"seed": 0}

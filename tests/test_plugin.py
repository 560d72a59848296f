"""The plugin as users meet it: options, ids, -k / -m, verdicts, exit codes, report, junitxml."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pytest_agentperturb.model.task import FAMILIES, IMAGE_OBJECTS, INSERTED

ROOT = Path(__file__).resolve().parents[1]
N_TASKS = len([p for p in (ROOT / "suites" / "workflows").iterdir() if (p / "task.toml").is_file()])
N_FAM = 1 + len(FAMILIES) + len(INSERTED)  # clean, the 12 families, the inserted objects
N_IMAGE = sum(1 for p in (ROOT / "suites" / "workflows").iterdir() if (p / "task.toml").is_file()
              and "observations" in (p / "task.toml").read_text())  # tasks whose tools return images
N_ITEMS = N_TASKS * N_FAM + N_IMAGE * len(IMAGE_OBJECTS)  # per agent


def _ids(result: pytest.RunResult) -> list[str]:
    return [line for line in result.outlines if "::" in line and "[" in line]


def test_inert_without_the_flag(pytester: pytest.Pytester, suite: Path) -> None:
    pytester.makepyfile(test_plain="def test_ok():\n    assert True\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert not (pytester.path / "reports").exists()


def test_plain_pytest_does_not_import_heavy_libraries(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        "import sys\n"
        "def pytest_sessionfinish(session):\n"
        "    heavy = [m for m in ('litellm', 'pandas', 'scipy') if m in sys.modules]\n"
        "    assert not heavy, heavy\n"
    )
    pytester.makepyfile(test_plain="def test_ok():\n    assert True\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert result.ret == 0


def test_collects_every_task_by_family_and_model(pytester: pytest.Pytester, suite: Path) -> None:
    result = pytester.runpytest("--agentperturb", "suites/workflows", "--collect-only", "-q", "-p", "no:cacheprovider")
    ids = _ids(result)
    assert len(ids) == N_ITEMS * 2
    assert "suites/workflows::reschedule-standup::tool-missing[reference/literal]" in ids
    assert "suites/workflows::reschedule-standup::clean[reference/careful]" in ids
    assert {i.split("::")[2].split("[")[0] for i in ids} == {"clean", *FAMILIES, *INSERTED, *IMAGE_OBJECTS}
    # image objects only where a tool returns images
    assert "suites/workflows::scan-taxi-receipt::inserted-image-erase[reference/literal]" in ids
    assert not any(i.startswith("suites/workflows::reschedule-standup::inserted-image") for i in ids)
    assert not (pytester.path / "reports" / "agentperturb.html").exists()  # nothing ran, nothing written


@pytest.mark.parametrize(
    ("args", "expected", "partners"),
    [
        (["-k", "tool and missing"], N_TASKS * 2, N_TASKS * 2),
        (["-k", "clean"], N_TASKS * 2, 0),
        (["-k", "not redundant"], N_TASKS * 2 * (N_FAM - 4) + N_IMAGE * 2 * len(IMAGE_OBJECTS), 0),
        (["-k", "injection"], N_TASKS * 2 + N_IMAGE * 2, N_TASKS * 2),
        (["-m", "inserted"], N_TASKS * 2 * len(INSERTED) + N_IMAGE * 2 * len(IMAGE_OBJECTS), N_TASKS * 2),
        (["-k", "image"], N_IMAGE * 2 * (N_FAM + len(IMAGE_OBJECTS)), 0),
        (["-m", "image and clean"], N_IMAGE * 2, 0),
        (["-k", "image and not clean and not inserted"], N_IMAGE * 2 * len(FAMILIES), N_IMAGE * 2),
        (["-k", "literal and user"], N_TASKS * 3, N_TASKS),
        (["-m", "tool and missing"], N_TASKS * 2, N_TASKS * 2),
        (["-m", "procedure or context"], N_TASKS * 2 * 7, N_TASKS * 2),  # + inserted-distractor-turn
        (["--agentperturb-families", "clean,tool-missing"], N_TASKS * 2 * 2, 0),
        (["--agentperturb-families", "tool-missing"], N_TASKS * 2, N_TASKS * 2),
        (["--agentperturb-model", "reference/oracle"], N_ITEMS, 0),
    ],
)
def test_selection(pytester: pytest.Pytester, suite: Path, args: list[str], expected: int, partners: int) -> None:
    """``expected`` items selected, plus the clean ``partners`` they are compared with (plugin/subsets.py)."""
    result = pytester.runpytest("--agentperturb", "suites/workflows", "--collect-only", "-q",
                                "--strict-markers", "-p", "no:cacheprovider", *args)
    assert result.ret == 0
    assert len(_ids(result)) == expected + partners


def test_unknown_family_is_a_usage_error(pytester: pytest.Pytester, suite: Path) -> None:
    result = pytester.runpytest("--agentperturb", "suites/workflows", "--agentperturb-families", "tool-mising")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--agentperturb-families*unknown family 'tool-mising'*tool-missing*"])


def test_unknown_model_is_a_usage_error(pytester: pytest.Pytester, suite: Path) -> None:
    pytester.makeconftest(
        "import pytest\n"
        "@pytest.hookimpl(tryfirst=True)\n"
        "def pytest_agentperturb_make_agent(model, config):\n"
        "    if model == 'nobody/none':\n"
        "        raise pytest.UsageError('--agentperturb-model nobody/none: unknown agent')\n"
    )
    result = pytester.runpytest("--agentperturb", "suites/workflows", "--agentperturb-model", "nobody/none")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*nobody/none*unknown agent*"])


def test_bad_seed_in_ini_names_its_source(pytester: pytest.Pytester, suite: Path) -> None:
    pytester.makeini("[pytest]\nagentperturb_seed = abc\n")
    result = pytester.runpytest("--agentperturb", "suites/workflows")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*ini option 'agentperturb_seed'*seed must be an integer*'abc'*"])


def test_full_run_reports_verdicts_and_exits_zero(pytester: pytest.Pytester, suite: Path) -> None:
    result = pytester.runpytest("--agentperturb", "suites/workflows", "-v", "-p", "no:cacheprovider",
                                "--agentperturb-seed", "5", "--junitxml", "junit.xml")
    assert result.ret == 0, result.stdout.str()[-3000:]
    result.stdout.fnmatch_lines([
        "agentperturb: seed=5 run_id=seed-5-2???????T?????? models=reference/literal,reference/careful",
        "*::clean?reference/literal? PASS*",
        "*agent-failed*",
    ])
    out = result.stdout.str()
    assert "FAIL compliance" in out and "PASS bypass" in out
    assert f"episodes run: {N_ITEMS * 2}, reused: 0, errors: 0" in out
    assert "reproduce: pytest --agentperturb suites/workflows -k '" in out
    report = (pytester.path / "reports" / "agentperturb.html").read_text()
    assert "reference/literal" in report and "baseline" in report
    assert "relative drop D by target x type" in report
    with sqlite3.connect(pytester.path / "reports" / "agentperturb.sqlite") as db:
        assert db.execute("SELECT COUNT(*) FROM episodes").fetchone()[0] == N_ITEMS * 2
        cols = [r[1] for r in db.execute("PRAGMA table_info(episodes)")]
    from pytest_agentperturb.model.records import COLUMNS

    assert cols[: len(COLUMNS)] == list(COLUMNS)
    tree = ET.parse(pytester.path / "junit.xml")
    case = next(c for c in tree.iter("testcase") if c.get("name") == "user-incorrect[reference/literal]")
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert props["agentperturb_family"] == "user-incorrect"
    assert props["agentperturb_verdict"] in ("pass", "fail")
    assert props["agentperturb_compliance"] in ("compliance", "bypass")
    assert props["agentperturb_operator"] and props["agentperturb_seed"].isdigit()
    names = ("agentperturb_family", "agentperturb_model", "agentperturb_operator", "agentperturb_seed",
             "agentperturb_reward", "agentperturb_verdict", "agentperturb_compliance")
    episodes = [c for c in tree.iter("testcase") if c.get("name", "").startswith(("clean[", "user-", "tool-",
                                                                                 "procedure-", "context-"))]
    assert episodes and all({p.get("name") for p in c.iter("property")} >= set(names) for c in episodes)  # README
    clean = next(c for c in episodes if c.get("name") == "clean[reference/literal]")
    assert {p.get("name"): p.get("value") for p in clean.iter("property")}["agentperturb_compliance"] \
        == "n/a (clean: nothing planted)"


def test_malformed_task_is_an_error_and_the_rest_runs(pytester: pytest.Pytester, suite: Path) -> None:
    (suite / "reschedule-standup" / "environment.json").write_text("[]")
    result = pytester.runpytest("--agentperturb", "suites/workflows", "-p", "no:cacheprovider",
                                "--agentperturb-families", "clean")
    result.stdout.fnmatch_lines([
        "*invalid task:*reschedule-standup/environment.json: field '(top level)': expected an object, found list*",
    ])
    outcomes = result.parseoutcomes()
    assert outcomes["errors"] == 1 and outcomes["passed"] == (N_TASKS - 1) * 2
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_agent_exception_is_an_agent_error_not_a_failure(pytester: pytest.Pytester, suite: Path) -> None:
    pytester.makeconftest(
        "import pytest\n"
        "class Broken:\n"
        "    name = 'test/broken'\n"
        "    baseline = False\n"
        "    async def run(self, ctx):\n"
        "        raise ConnectionError('provider unreachable')\n"
        "@pytest.hookimpl(tryfirst=True)\n"
        "def pytest_agentperturb_make_agent(model, config):\n"
        "    return Broken() if model == 'test/broken' else None\n"
    )
    result = pytester.runpytest("--agentperturb", "suites/workflows", "-p", "no:cacheprovider",
                                "--agentperturb-model", "test/broken", "--agentperturb-model", "reference/oracle",
                                "--agentperturb-families", "clean", "-k", "reschedule-standup")
    result.assert_outcomes(passed=1, errors=1)
    # the user's own agent raised it: the agent's error (never a FAIL), with its own frame
    result.stdout.fnmatch_lines(["*agent error: ConnectionError: provider unreachable*",
                                 "*conftest.py:6 in run: raise ConnectionError('provider unreachable')",
                                 "*errors: 1*"])
    assert "not an agent failure" not in result.stdout.str()
    with sqlite3.connect(pytester.path / "reports" / "agentperturb.sqlite") as db:
        row = db.execute("SELECT reward, success, error FROM episodes WHERE model='test/broken'").fetchone()
    assert row == (None, None, "ConnectionError: provider unreachable")


def test_help_lists_every_option() -> None:
    out = subprocess.run([sys.executable, "-m", "pytest", "--help", "-p", "no:cacheprovider"],
                         capture_output=True, text=True, cwd=ROOT, env={"COLUMNS": "100", "PATH": ""}).stdout
    block = out[out.index("robustness of agents under perturbation"):]
    block = block[: block.index("\n\n")]
    snapshot = ROOT / "tests" / "snapshots" / "help.txt"
    assert block.strip() == snapshot.read_text().strip(), (
        f"pytest --help changed; if intended, update {snapshot} with:\n{block}")


def test_register_operators_hook_adds_an_operator(pytester: pytest.Pytester, suite: Path) -> None:
    pytester.makeconftest(
        "from dataclasses import replace\n"
        "from pytest_agentperturb.perturb import Edit\n"
        "from pytest_agentperturb.model.records import Canary\n"
        "class Shout:\n"
        "    '''Append a loud, irrelevant line to the user request.'''\n"
        "    id = 'shout'\n"
        "    family = 'user-redundant'\n"
        "    def applicable(self, task):\n"
        "        return True\n"
        "    def apply(self, task, rng):\n"
        "        s = task.surfaces\n"
        "        return Edit(replace(s, user=s.user + '\\nPS: HAPPY FRIDAY ZZTOP!\\n'), (Canary('text', 'ZZTOP'),))\n"
        "def pytest_agentperturb_register_operators(register):\n"
        "    register(Shout())\n"
    )
    for edits in suite.glob("*/edits.toml"):
        edits.unlink()  # a user's own tasks, without authored edits: the registered operator is drawn
    result = pytester.runpytest_subprocess("--agentperturb", "suites/workflows", "-p", "no:cacheprovider",
                                           "--agentperturb-families", "user-redundant", "-q")
    assert result.ret == 0
    with sqlite3.connect(pytester.path / "reports" / "agentperturb.sqlite") as db:
        ops = {r[0] for r in db.execute("SELECT operator FROM episodes")}
    assert "shout" in ops, ops


def test_resume_key_covers_injections(suite_path: Path) -> None:
    from dataclasses import replace

    from pytest_agentperturb.model.records import Injection
    from pytest_agentperturb.plugin.session import variant_digest
    from pytest_agentperturb.run import make_engine

    make_variant = make_engine().make_variant
    from pytest_agentperturb.formats.native import load_task

    task = load_task(suite_path / "reschedule-standup", "workflows")
    v = make_variant(task, "inserted-injection", 0)
    assert v.injections
    other = replace(v, injections=(Injection(v.injections[0].tool, "something else", "x@y.test"),))
    assert variant_digest(task.digest(), v) != variant_digest(task.digest(), other)
    assert variant_digest(task.digest(), v) == variant_digest(task.digest(), make_variant(task, "inserted-injection", 0))


"""A named suite runs from any folder, any number of times, and never loads the project's own tests' conftests."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_agentperturb.plugin.collect import plugin_args

HERE = Path(__file__).resolve().parent


def _project(root: Path) -> Path:
    """A project like this repository: testpaths = tests, whose conftest must not load, and the kv suite's hook."""
    shutil.copy(HERE / "kv_benchmark.py", root / "conftest.py")
    (root / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["tests"]\n'
                                         'addopts = "-p no:hypothesispytest"\n', encoding="utf-8")
    (root / "tests").mkdir()
    (root / "tests" / "conftest.py").write_text(
        'pytest_plugins = ["_hypothesis_pytestplugin"]\nraise RuntimeError("tests/conftest.py was imported")\n',
        encoding="utf-8")
    (root / "tests" / "test_x.py").write_text("def test_x():\n    assert False\n", encoding="utf-8")
    return root


def _run(cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "--agentperturb", "--agentperturb-suite", "kv",
                           "--agentperturb-model", "reference/oracle", "-k", "clean", "-q"],
                          cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("where", ["root", "subfolder"])
def test_a_named_suite_runs_twice_without_importing_the_testpaths_conftests(tmp_path: Path, where: str) -> None:
    root = _project(tmp_path)
    cwd = root if where == "root" else root / "sub"
    cwd.mkdir(exist_ok=True)
    (cwd / "notes.txt").write_text("a file of the folder\n", encoding="utf-8")
    for attempt in (1, 2):  # the second run finds reports/ from the first
        res = _run(cwd)
        assert res.returncode == 0, (attempt, res.stdout[-2000:], res.stderr[-2000:])
        assert "1 passed" in res.stdout and "was imported" not in res.stdout + res.stderr
    assert (root / "reports" / "agentperturb.sqlite").exists()  # reports/ of the rootdir


def test_with_a_path_argument_the_testpaths_conftests_still_load(tmp_path: Path) -> None:
    root = _project(tmp_path)
    res = subprocess.run([sys.executable, "-m", "pytest", "--agentperturb", "--agentperturb-suite", "kv", "tests",
                          "--agentperturb-model", "reference/oracle", "-q"], cwd=root, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode != 0 and "tests/conftest.py was imported" in res.stdout + res.stderr


def test_plugin_args_reads_both_spellings_of_p_and_leaves_out_blocked_plugins() -> None:
    args = ["-p", "tests.kv_benchmark", "-pno:cacheprovider", "--agentperturb", "--pdb", "-k", "x", "-pacme",
            "-p", "no:anyio"]
    assert plugin_args(args) == ["-p", "tests.kv_benchmark", "-p", "acme"]
    assert plugin_args(["--agentperturb", "-q"]) == []


def test_the_reproduce_line_of_a_suite_from_a_p_plugin_runs_as_printed(tmp_path: Path) -> None:
    """``pytest -p kvplug --agentperturb-suite kv``: without ``-p kvplug`` the printed line found no suite (rc 4)."""
    shutil.copy(HERE / "kv_benchmark.py", tmp_path / "kvplug.py")
    res = subprocess.run([sys.executable, "-m", "pytest", "-p", "kvplug", "--agentperturb", "--agentperturb-suite",
                          "kv", "--agentperturb-model", "reference/literal", "-k", "context", "-q"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and "agent-failed" in res.stdout, res.stdout[-2000:] + res.stderr[-2000:]
    lines = [ln.strip() for ln in res.stdout.splitlines() if ln.strip().startswith("reproduce: ")]
    assert lines, res.stdout[-2000:]
    args = shlex.split(lines[0].removeprefix("reproduce: "))
    assert args[:3] == ["pytest", "-p", "kvplug"]
    again = subprocess.run([sys.executable, "-m", *args, "-q"], cwd=tmp_path, capture_output=True, text=True,
                           timeout=300)
    assert again.returncode == 0 and "1 agent-failed" in again.stdout, again.stdout[-2000:] + again.stderr[-2000:]

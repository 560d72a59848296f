"""Helpers for the tests of hostile or careless task folders: a tiny TOML writer, private task copies, edits.

The hostile inputs are built in temporary folders from these; none of them lives under ``suites/``.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import tomllib
from pathlib import Path
from typing import Any

import pytest

from pytest_agentperturb.formats.native import load_task
from pytest_agentperturb.model.errors import TaskFormatError
from pytest_agentperturb.model.task import Task

ROOT = Path(__file__).resolve().parents[1]
TASK = ROOT / "suites" / "workflows" / "reschedule-standup"
FILES = sorted(p.name for p in TASK.iterdir())
N_TASKS = len([p for p in (ROOT / "suites" / "workflows").iterdir() if (p / "task.toml").is_file()])


# -- a tiny TOML writer (inline tables and arrays only, which TOML accepts anywhere) -------------------
def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(v)


def toml_doc(doc: dict[str, Any]) -> str:
    return "".join(f"{json.dumps(str(k))} = {toml_value(v)}\n" for k, v in doc.items())


def write_toml(path: Path, doc: dict[str, Any]) -> None:
    path.write_text(toml_doc(doc), encoding="utf-8")


def edit_toml(path: Path, edit: Any) -> None:
    """Parse a TOML file, let ``edit`` change the document in place, write it back."""
    doc = tomllib.loads(path.read_text())
    edit(doc)
    write_toml(path, doc)


# -- one task, loaded or refused ---------------------------------------------------------------------------
def task_copy(tmp: Path) -> Path:
    """A one-task suite under ``tmp`` holding a copy of one built-in task; the task's folder."""
    suite = tmp / "suite"
    suite.mkdir()
    (suite / "suite.toml").write_text('name = "s"\nthreshold = 1.0\n')
    shutil.copytree(TASK, suite / "t")
    return suite / "t"


def load(task: Path) -> Task:
    return load_task(task, "s")


def format_error(task: Path) -> TaskFormatError:
    """The TaskFormatError loading ``task`` raises; it names the file, the field, what was expected and found."""
    with pytest.raises(TaskFormatError) as ei:
        load(task)
    err = ei.value
    assert err.path and err.field and err.expected and err.found, str(err)
    return err


# -- the plugin on the copied suite (the ``suite`` fixture) and the command line ---------------------------
def run_clean(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """``pytest --agentperturb suites/workflows`` in the pytester folder: clean episodes, the oracle."""
    return pytester.runpytest("--agentperturb", "suites/workflows", "-p", "no:cacheprovider",
                              "--agentperturb-families", "clean", "--agentperturb-model", "reference/oracle", *args)


def cli(*args: str) -> int:
    """``agentperturb ARGS`` in this process; its exit status."""
    from pytest_agentperturb.cli import main

    return main(list(args))


def generate(suite_dir: Path, out: Path, families: str = "user-missing") -> int:
    """``agentperturb generate SUITE --out OUT --families FAMILIES``; its exit status."""
    return cli("generate", str(suite_dir), "--out", str(out), "--families", families)


#: One task (share-report), one baseline agent: the fastest plugin run that still has pairs to gate.
FAST = ["-p", "no:cacheprovider", "-k", "share-report", "--agentperturb-model", "reference/literal"]


def run_fast(pytester: pytest.Pytester, suite: Path, *args: str, n: int | None = None) -> pytest.RunResult:
    """One plugin run on one task and one baseline agent; in-process unless xdist is asked for."""
    dst = pytester.path / "suites" / "workflows"
    if not dst.exists():
        shutil.copytree(suite, dst)
    if n:
        return pytester.runpytest_subprocess("--agentperturb", "suites/workflows", *FAST, "-n", str(n), *args)
    return pytester.runpytest("--agentperturb", "suites/workflows", *FAST, *args)


# -- where a run wrote its report -------------------------------------------------------------------------
def report_of(result: Any) -> Path:
    """The report a run wrote: the path of its summary's ``report: <path>`` line.

    ``result`` is a pytester ``RunResult``, a ``subprocess.CompletedProcess`` or the output itself.  A run of a
    ``-k``, ``-m`` or ``--agentperturb-families`` subset names its report after the selection, so a test reads
    the report the run says it wrote rather than assuming ``reports/agentperturb.html``.
    """
    out = result if isinstance(result, str) else getattr(result, "stdout", "")
    text = out if isinstance(out, str) else out.str()
    lines = [ln.strip() for ln in text.splitlines()]
    paths = [ln.removeprefix("report: ") for ln in lines
             if ln.startswith("report: ") and not ln.startswith(("report: NOT", "report: not"))]
    assert len(paths) == 1, f"no single 'report:' line in the output:\n{text[-2000:]}"
    return Path(paths[0])


def line_counts(line: str) -> dict[str, int]:
    """The counts of pytest's last line, ``agent-failed`` included (pytest's parseoutcomes splits at the hyphen)."""
    return {k: int(n) for n, k in re.findall(r"(\d+) ([\w-]+)", line)}

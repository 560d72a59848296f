"""The seams (model/interfaces.py): one module, exported, examples that run, built-ins that fit them."""

from __future__ import annotations

import ast
import doctest
import inspect
import subprocess
import sys
import tomllib
import typing
from collections.abc import Callable
from pathlib import Path

import pytest

import pytest_agentperturb as ap
from pytest_agentperturb.model import interfaces

ROOT = Path(__file__).resolve().parents[1]
SEAMS = ("Agent", "ComplianceCheck", "Edit", "Environment", "Grader", "Operator", "Simulator", "SuiteAdapter")


@pytest.mark.parametrize("name", SEAMS)
def test_each_seam_is_defined_once_in_interfaces_and_exported(name: str) -> None:
    seam = getattr(interfaces, name)
    assert seam.__module__ == "pytest_agentperturb.model.interfaces"
    assert name in interfaces.__all__ and name in ap.__all__
    assert getattr(ap, name) is seam


def test_old_locations_hand_out_the_same_objects() -> None:
    from pytest_agentperturb.model import context, protocols, task
    from pytest_agentperturb.perturb import engine

    assert (task.ComplianceCheck, task.Edit, task.Operator, task.SuiteAdapter, task.Grader) == (
        interfaces.ComplianceCheck, interfaces.Edit, interfaces.Operator, interfaces.SuiteAdapter, interfaces.Grader)
    assert context.Agent is interfaces.Agent
    assert (engine.Edit, engine.Operator) == (interfaces.Edit, interfaces.Operator)
    assert not any(hasattr(protocols, n) for n in ("Environment", "Grader", "Simulator"))


def _examples(name: str) -> list[doctest.DocTest]:
    finder = doctest.DocTestFinder(recurse=False)
    return [t for t in finder.find(getattr(interfaces, name), f"interfaces.{name}", globs={}) if t.examples]


@pytest.mark.parametrize("name", SEAMS)
def test_each_seam_docstring_has_an_example_that_runs(name: str) -> None:
    tests = _examples(name)
    assert tests, f"{name}: its docstring has no example"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for t in tests:
        runner.run(t)
    result = runner.summarize(verbose=False)
    assert result.attempted >= 2 and result.failed == 0, (name, result)


def test_a_broken_example_fails() -> None:
    """The doctest runner above can fail: an example with a wrong expected value is reported."""
    t = doctest.DocTestParser().get_doctest(">>> 1 + 1\n3\n", {}, "broken", None, 0)
    runner = doctest.DocTestRunner()
    runner.run(t, out=lambda _: None)
    assert runner.summarize(verbose=False).failed == 1


def _package_imports_at_run_time(path: Path) -> list[str]:
    """The package-relative imports of a module that are not under ``if TYPE_CHECKING:``."""
    tree = ast.parse(path.read_text())
    guarded: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            guarded |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return [f"{'.' * n.level}{n.module}" for n in ast.walk(tree)
            if isinstance(n, ast.ImportFrom) and (n.level or (n.module or "").startswith("pytest_agentperturb"))
            and id(n) not in guarded]


def test_interfaces_imports_nothing_of_the_package_at_run_time() -> None:
    """The exception to "no import cycle" (pyproject.toml) holds only while these imports stay type-only."""
    assert _package_imports_at_run_time(ROOT / "pytest_agentperturb" / "model" / "interfaces.py") == []
    out = subprocess.run([sys.executable, "-c", "import sys, pytest_agentperturb.model.interfaces; "
                          "print(sorted(m for m in sys.modules if m.startswith('pytest_agentperturb')))"],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == str(["pytest_agentperturb", "pytest_agentperturb.model",
                               "pytest_agentperturb.model.interfaces"])


def test_type_only_finder_sees_a_run_time_import(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .task import Task\n"
                   "from .records import Variant\n")
    assert _package_imports_at_run_time(src) == [".records"]


def test_the_cycle_exceptions_are_the_seams_type_only_imports() -> None:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    exceptions = [e.split(" -> ") for c in contracts if c["type"] == "acyclic_siblings"
                  for e in c.get("ignore_imports", ())]
    assert exceptions, "pyproject.toml lists no exception"
    source = (ROOT / "pytest_agentperturb" / "model" / "interfaces.py").read_text()
    for importer, imported in exceptions:
        assert importer == "pytest_agentperturb.model.interfaces", importer
        assert f"from .{imported.rsplit('.', 1)[1]} import" in source, imported


def test_builtins_fit_their_seams() -> None:
    from pytest_agentperturb.agents import REFERENCE_AGENTS, make_agent
    from pytest_agentperturb.formats.native import NativeSuiteAdapter
    from pytest_agentperturb.formats.python import FunctionGrader
    from pytest_agentperturb.perturb import builtin_operators
    from pytest_agentperturb.run import UserSimulator

    assert all(isinstance(make_agent(name), ap.Agent) for name in REFERENCE_AGENTS)
    assert isinstance(ap.as_agent(lambda ctx: None, "fn"), ap.Agent)
    adapter = NativeSuiteAdapter(ROOT / "suites" / "workflows")
    assert isinstance(adapter, ap.SuiteAdapter) and adapter.name == "workflows"
    assert all(isinstance(op, ap.Operator) for op in builtin_operators())
    assert isinstance(FunctionGrader(lambda pre, post, answer, trajectory: 1.0), ap.Grader)
    task = next(iter(adapter.tasks())).load()
    assert isinstance(task.environment(()), ap.Environment)
    assert isinstance(UserSimulator(task, [f.id for f in task.facts]), ap.Simulator)
    assert not isinstance(object(), (ap.Agent, ap.SuiteAdapter, ap.Operator, ap.Grader, ap.Environment))


def test_agent_and_adapter_factories_return_the_seams() -> None:
    """No ``Any`` where an agent or an adapter is returned: mypy strict checks the built-ins against the seams."""
    from pytest_agentperturb import agents, plugin

    for fn in (agents.make_agent, agents.as_agent, agents.load_agent):
        assert typing.get_type_hints(fn)["return"] is interfaces.Agent, fn
    assert typing.get_type_hints(agents)["REFERENCE_AGENTS"] == dict[str, Callable[[], interfaces.Agent]]
    assert inspect.signature(plugin.pytest_agentperturb_make_agent).return_annotation == "Agent"
    assert inspect.signature(plugin.pytest_agentperturb_suite_adapter).return_annotation == "SuiteAdapter | None"


HELPERS = ("facts_on", "fresh_decoy", "omission", "unrelated")


@pytest.mark.parametrize("name", HELPERS)
def test_operator_helpers_are_public_and_documented(name: str) -> None:
    import pytest_agentperturb.perturb as perturb

    assert name in perturb.__all__
    fn = getattr(perturb, name)
    assert callable(fn) and fn.__name__ == name
    doc = inspect.getdoc(fn) or ""
    assert "Args:" in doc and "Returns:" in doc, doc
    documented = {line.strip().split(":")[0] for line in doc.split("Args:")[1].split("Returns:")[0].splitlines()
                  if line.startswith("    ") and not line.startswith("        ") and ":" in line}
    assert documented == set(inspect.signature(fn).parameters), (name, documented)


def test_operator_helpers_load_on_first_use() -> None:
    """Importing the engine does not import the operators' helpers (the banks, the world, the phrasing)."""
    code = ("import sys, pytest_agentperturb.perturb as p; mod = 'pytest_agentperturb.perturb.text_ops'; "
            "before = mod in sys.modules; p.unrelated; print(before, mod in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "True"]
    import pytest_agentperturb.perturb as perturb

    with pytest.raises(AttributeError, match="no attribute 'not_a_helper'"):
        perturb.not_a_helper  # noqa: B018


def test_readme_names_every_seam() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("### The seams"):readme.index("### Your own operator")]
    rows = {line.split("|")[1].strip().strip("`") for line in section.splitlines() if line.startswith("| `")}
    assert rows == set(SEAMS)

"""README.md's operator example ("Your own operator"), run as written: by the engine, and as a conftest.py."""

from __future__ import annotations

import shutil
import sqlite3
import types
from dataclasses import replace
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_agentperturb import Operator, Registry, VariantSkipped
from pytest_agentperturb.formats.native import load_tasks
from pytest_agentperturb.model.authored import Authored
from pytest_agentperturb.run import make_engine

ROOT = Path(__file__).resolve().parents[1]
OURS = {"user-missing": "sent_too_early", "user-redundant": "last_time_it_was"}


def readme_conftest() -> str:
    """The first Python block of the README's "Your own operator" section."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("### Your own operator"):]
    start = section.index("```python\n") + len("```python\n")
    return section[start:section.index("```", start)]


def readme_operators() -> list[Operator]:
    module = types.ModuleType("readme_conftest")
    exec(compile(readme_conftest(), "README.md", "exec"), module.__dict__)
    registered: list[Operator] = []

    def register(op: Operator) -> Operator:
        registered.append(op)
        return op

    hook: Callable[[Callable[[Operator], Operator]], None] = module.pytest_agentperturb_register_operators
    hook(register)
    return registered


def test_the_example_registers_two_operators_that_fit_the_seam() -> None:
    ops = readme_operators()
    assert {op.family: op.id for op in ops} == OURS
    assert all(isinstance(op, Operator) for op in ops)


@pytest.mark.parametrize("family", sorted(OURS))
def test_the_engine_makes_valid_variants_with_the_example(family: str, suite_path: Path) -> None:
    """Alone in their families, the README's operators pass every validity rule on some tasks and are skipped,
    with a reason, on the others; the same seed gives the same variant."""
    engine = make_engine(Registry(readme_operators()))
    made, skipped = [], []
    for task in load_tasks(suite_path):
        task = replace(task, authored=Authored())  # alone in their families: without the tasks' authored edits
        try:
            v = engine.make_variant(task, family, 0)
        except VariantSkipped as exc:
            skipped.append(str(exc))
            continue
        assert v.operator == OURS[family] and v.canaries and v.surfaces.user != task.surfaces.user
        assert v.surfaces.render("procedure") == task.surfaces.render("procedure")
        again = engine.make_variant(task, family, 0)
        assert (again.surfaces, again.canaries, again.recovery) == (v.surfaces, v.canaries, v.recovery)
        if family == "user-missing":
            assert v.recovery and all(c.kind == "omitted" for c in v.canaries)
        made.append(v)
    assert len(made) >= 5, skipped
    assert all(OURS[family] in reason for reason in skipped)


def test_the_example_runs_as_a_conftest(pytester: pytest.Pytester, suite_path: Path) -> None:
    shutil.copytree(suite_path, pytester.path / "suites" / "workflows")
    for edits in (pytester.path / "suites" / "workflows").glob("*/edits.toml"):
        edits.unlink()  # a user's own tasks: no authored edits, so the registered rule operators apply
    pytester.makeconftest(readme_conftest())
    result = pytester.runpytest_subprocess("--agentperturb", "suites/workflows", "-p", "no:cacheprovider", "-q",
                                           "--agentperturb-families", "user-missing,user-redundant",
                                           "--agentperturb-model", "reference/oracle")
    assert result.ret == 0, result.stdout.str()[-3000:]
    with sqlite3.connect(pytester.path / "reports" / "agentperturb.sqlite") as db:
        rows = db.execute("SELECT family, operator, success FROM episodes WHERE operator IN (?, ?)",
                          tuple(OURS.values())).fetchall()
    assert {(family, op) for family, op, _ in rows} == set(OURS.items())
    assert all(success == 1 for *_, success in rows), rows  # the oracle recovers: the variants are solvable

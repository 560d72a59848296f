"""The task model and the on-disk format: built-in tasks load, bad ones are named precisely."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_agentperturb.model.errors import TaskFormatError
from pytest_agentperturb.formats.native import load_suite, load_task, load_tasks
from pytest_agentperturb.model.task import TARGETS, select


def test_builtin_suite_has_realistic_tasks(suite_path: Path) -> None:
    suite = load_suite(suite_path)
    tasks = [load_task(d, suite.name, suite.threshold) for d in suite.task_dirs]
    assert len(tasks) >= 8
    for t in tasks:
        for target in TARGETS:
            assert t.surfaces.render(target).strip() not in ("", "[]"), (t.id, target)
        assert len(t.solution) >= 2 and t.facts and t.grader.spec["check"]  # type: ignore[attr-defined]
        assert {s.tool for s in t.solution} <= set(t.tools)
        # the grader is state-based: at least one check looks at the environment
        assert any("path" in c for c in t.grader.spec["check"])  # type: ignore[attr-defined]


def test_select_paths() -> None:
    state = {"a": {"items": [{"id": "X-1", "v": 1}, {"id": "X-2", "v": 2}]}}
    assert select(state, "a.items[id=X-2].v") == [2]
    assert select(state, "a.items[*].id") == ["X-1", "X-2"]
    assert select(state, "a.items[-1].v") == [2]
    assert select(state, "a.nothing[*]") == []


def _break(task_dir: Path, name: str, old: str, new: str) -> None:
    p = task_dir / name
    text = p.read_text()
    assert old in text, f"fixture text {old!r} not in {p}"
    p.write_text(text.replace(old, new, 1))


@pytest.mark.parametrize(
    ("file", "old", "new", "field", "fix"),
    [
        ("task.toml", 'id = "reschedule-standup"', 'title_only = "x"', "id", "add id"),
        ("task.toml", 'value = "10:30"', 'value = "11:45"', "facts[1].value", "state the value"),
        ("task.toml", '"mail_send", "contacts_search"]', '"mail_send", "fax_send"]', "tools", "use an office tool"),
        ("context.json", '"role": "user"', '"role": "robot"', "[0]", ""),
        ("grader.toml", "equals = \"2026-12-02T15:00\"", "equals = 1\ncount = 2", "check[1]", ""),
        ("solution.json", "{recipient}", "{mailbox}", "steps[2].args", "declare a fact 'mailbox'"),
    ],
)
def test_malformed_task_names_file_field_and_fix(
    suite_copy: Path, file: str, old: str, new: str, field: str, fix: str
) -> None:
    d = suite_copy / "reschedule-standup"
    _break(d, file, old, new)
    with pytest.raises(TaskFormatError) as ei:
        load_task(d)
    msg = str(ei.value)
    assert ei.value.field == field
    assert str(d) in msg and "expected" in msg and "found" in msg
    assert fix in msg


def test_invalid_json_is_named(suite_copy: Path) -> None:
    d = suite_copy / "reschedule-standup"
    (d / "tools.json").write_text("[{not json")
    with pytest.raises(TaskFormatError, match=r"tools.json: field 'tools': expected valid JSON"):
        load_task(d)


def test_one_bad_task_does_not_stop_the_others(suite_copy: Path) -> None:
    (suite_copy / "reschedule-standup" / "context.json").write_text(json.dumps({"role": "user"}))
    results = list(load_tasks(suite_copy))
    errors = [r for r in results if isinstance(r, TaskFormatError)]
    assert len(errors) == 1 and len(results) >= 8


def test_task_ids_may_not_contain_selection_words(suite_copy: Path) -> None:
    d = suite_copy / "reschedule-standup"
    _break(d, "task.toml", 'id = "reschedule-standup"', 'id = "reschedule-tool"')
    with pytest.raises(TaskFormatError, match="selection word 'tool'"):
        load_task(d)

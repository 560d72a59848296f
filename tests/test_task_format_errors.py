"""Malformed task folders: every outcome is a loaded task or a TaskFormatError naming file and field.

Each value the loader reads, when malformed, gives the file, the field, what was expected and what was
found (and a fix where there is one), never a raw traceback; random mutations of every file of a task
hold the same.  The hostile inputs are built in temporary folders (tests/task_files.py).
"""

from __future__ import annotations

import json
import tempfile
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from task_files import FILES, TASK, edit_toml, format_error, task_copy, toml_doc, toml_value, write_toml

from pytest_agentperturb.formats.native import load_task
from pytest_agentperturb.model.errors import TaskFormatError
from pytest_agentperturb.model.task import Task


def test_the_toml_writer_round_trips() -> None:
    doc = tomllib.loads((TASK / "task.toml").read_text())
    assert tomllib.loads(toml_doc(doc)) == doc


# -- malformed values give file/field/expected/found(/fix), never a raw traceback -----------------
@pytest.mark.parametrize(("name", "edit", "field"), [
    ("facts-not-tables", lambda d: d.__setitem__("facts", [1, 2]), "facts[0]"),
    ("cues-a-string", lambda d: d["facts"][0].__setitem__("cues", "standup"), "facts[0].cues"),
    ("bad-regex", lambda d: d["facts"][4].__setitem__("pattern", "subject (["), "facts[4].pattern"),
    ("threshold-text", lambda d: d.__setitem__("threshold", "high"), "threshold"),
    ("threshold-range", lambda d: d.__setitem__("threshold", 7.5), "threshold"),
    ("threshold-nan", lambda d: d.__setitem__("threshold", float("nan")), "threshold"),
    ("tool-not-a-name", lambda d: d["tools"].append({"x": 1}), "tools"),
    ("domain-bad-path", lambda d: d["facts"][0].__setitem__("domain", "calendar.events[id=x"), "facts[0].domain"),
    ("duplicate-fact", lambda d: d["facts"].append(dict(d["facts"][0])), "facts[5].id"),
    ("title-a-table", lambda d: d.__setitem__("title", {"a": 1}), "title"),
])
def test_malformed_task_toml_values_are_named(tmp_path: Path, name: str, edit: Any, field: str) -> None:
    task = task_copy(tmp_path)
    edit_toml(task / "task.toml", edit)
    err = format_error(task)
    assert err.field == field and err.path == str(task / "task.toml"), str(err)


def test_non_utf8_files_are_named(tmp_path: Path) -> None:
    task = task_copy(tmp_path)
    (task / "instruction.md").write_bytes(b"Move the standup \xff\xfe to 10:30")
    err = format_error(task)
    assert err.path == str(task / "instruction.md") and "UTF-8" in err.expected and "save the file as UTF-8" in str(err)
    (tmp_path / "b").mkdir()
    task2 = task_copy(tmp_path / "b")
    (task2 / "task.toml").write_bytes((task2 / "task.toml").read_bytes() + b"\n# \xc3\x28\n")
    assert "UTF-8" in format_error(task2).expected


def test_a_grader_path_that_matches_nothing_is_an_error(tmp_path: Path) -> None:
    task = task_copy(tmp_path)
    text = (task / "grader.toml").read_text().replace("calendar.events[id=EV-104].start",
                                                      "calendar.event[id=EV-104].start")
    (task / "grader.toml").write_text(text)
    err = format_error(task)
    assert err.path == str(task / "grader.toml") and err.field == "check[0]"
    assert "gold solution" in err.expected and "a path that matches nothing" in err.fix


def test_grader_conditions_of_the_wrong_type_are_named(tmp_path: Path) -> None:
    task = task_copy(tmp_path)
    (task / "grader.toml").write_text('scoring = "binary"\n[[check]]\npath = "mail.outbox[*]"\ncount = "one"\n')
    assert format_error(task).field == "check[0].count"


# -- random malformed task files -------------------------------------------------------------
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12)
toml_values = st.recursive(
    st.booleans() | st.integers(-10**6, 10**6) | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12)


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path into a parsed document (to replace or delete one value)."""
    out = [prefix] if prefix else []
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*prefix, i))
    return out


def _mutate(doc: Any, path: tuple[Any, ...], value: Any, delete: bool) -> Any:
    if not path:
        return value
    parent = doc
    for k in path[:-1]:
        parent = parent[k]
    if delete:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return doc


@st.composite
def mutations(draw: st.DrawFn) -> tuple[str, str, Any]:
    name = draw(st.sampled_from(FILES))
    kind = draw(st.sampled_from(["bytes", "text", "delete", "value", "drop", "shape"]))
    if kind == "bytes":
        return name, kind, draw(st.binary(max_size=64))
    if kind == "text":
        return name, kind, draw(st.text(max_size=64))
    if kind == "delete":
        return name, kind, None
    original = (TASK / name).read_text()
    if name.endswith(".toml"):
        doc: Any = tomllib.loads(original)
        values = toml_values
    elif name.endswith(".json"):
        doc = json.loads(original)
        values = json_values
    else:
        return name, "text", draw(st.text(max_size=64))
    if kind == "shape":  # a whole document of another shape
        return name, kind, draw(values)
    path = draw(st.sampled_from(_paths(doc)))
    return name, kind, _mutate(doc, path, draw(values), delete=kind == "drop")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutations())
def test_random_malformed_task_files_load_or_raise_task_format_error(mutation: tuple[str, str, Any]) -> None:
    name, kind, payload = mutation
    with tempfile.TemporaryDirectory() as tmp:
        task = task_copy(Path(tmp))
        target = task / name
        if kind == "bytes":
            target.write_bytes(payload)
        elif kind == "text":
            target.write_text(payload, encoding="utf-8")
        elif kind == "delete":
            target.unlink()
        elif name.endswith(".json"):
            target.write_text(json.dumps(payload), encoding="utf-8")
        elif isinstance(payload, dict):
            write_toml(target, payload)
        else:
            target.write_text(f"x = {toml_value(payload)}\n", encoding="utf-8")
        try:
            result = load_task(task, "s")
        except TaskFormatError as exc:
            assert exc.field and exc.expected and exc.found, str(exc)
            named = Path(exc.path)
            assert named == task or task in named.parents, f"{exc} does not name a file of the task"
        else:
            assert isinstance(result, Task) and result.id
            # a loaded task is usable: its facts' regexes compile and its solution names declared tools
            assert all(f.regex() for f in result.facts) and {s.tool for s in result.solution} <= set(result.tools)

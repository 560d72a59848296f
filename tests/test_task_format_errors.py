"""Hostile or careless task folders: every outcome is a loaded task or a TaskFormatError naming file and field.

The hostile inputs are built here, in temporary folders; none of them lives under ``suites/``.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import tempfile
import tomllib
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_agentperturb.formats.native import load_suite, load_task
from pytest_agentperturb.model.errors import TaskFormatError
from pytest_agentperturb.model.task import Task

ROOT = Path(__file__).resolve().parents[1]
TASK = ROOT / "suites" / "workflows" / "reschedule-standup"
FILES = sorted(p.name for p in TASK.iterdir())


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


def test_the_toml_writer_round_trips() -> None:
    doc = tomllib.loads((TASK / "task.toml").read_text())
    assert tomllib.loads(toml_doc(doc)) == doc


def _write_toml(path: Path, doc: dict[str, Any]) -> None:
    path.write_text(toml_doc(doc), encoding="utf-8")


def _task_copy(tmp: Path) -> Path:
    suite = tmp / "suite"
    suite.mkdir()
    (suite / "suite.toml").write_text('name = "s"\nthreshold = 1.0\n')
    shutil.copytree(TASK, suite / "t")
    return suite / "t"


def _edit_toml(path: Path, edit: Any) -> None:
    doc = tomllib.loads(path.read_text())
    edit(doc)
    _write_toml(path, doc)


def _load(task: Path) -> Task:
    return load_task(task, "s")


def _error(task: Path) -> TaskFormatError:
    with pytest.raises(TaskFormatError) as ei:
        _load(task)
    err = ei.value
    assert err.path and err.field and err.expected and err.found, str(err)
    return err


# -- item 7: malformed values give file/field/expected/found(/fix), never a raw traceback -----------------
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
    task = _task_copy(tmp_path)
    _edit_toml(task / "task.toml", edit)
    err = _error(task)
    assert err.field == field and err.path == str(task / "task.toml"), str(err)


def test_non_utf8_files_are_named(tmp_path: Path) -> None:
    task = _task_copy(tmp_path)
    (task / "instruction.md").write_bytes(b"Move the standup \xff\xfe to 10:30")
    err = _error(task)
    assert err.path == str(task / "instruction.md") and "UTF-8" in err.expected and "save the file as UTF-8" in str(err)
    (tmp_path / "b").mkdir()
    task2 = _task_copy(tmp_path / "b")
    (task2 / "task.toml").write_bytes((task2 / "task.toml").read_bytes() + b"\n# \xc3\x28\n")
    assert "UTF-8" in _error(task2).expected


def test_a_grader_path_that_matches_nothing_is_an_error(tmp_path: Path) -> None:
    task = _task_copy(tmp_path)
    text = (task / "grader.toml").read_text().replace("calendar.events[id=EV-104].start",
                                                      "calendar.event[id=EV-104].start")
    (task / "grader.toml").write_text(text)
    err = _error(task)
    assert err.path == str(task / "grader.toml") and err.field == "check[0]"
    assert "gold solution" in err.expected and "a path that matches nothing" in err.fix


def test_grader_conditions_of_the_wrong_type_are_named(tmp_path: Path) -> None:
    task = _task_copy(tmp_path)
    (task / "grader.toml").write_text('scoring = "binary"\n[[check]]\npath = "mail.outbox[*]"\ncount = "one"\n')
    assert _error(task).field == "check[0].count"


# -- item 1: files stay inside the task folder -------------------------------------------------------------
@pytest.mark.parametrize("name", ["/etc/hostname", "../../outside.md", "sub/../../x.md", "grader.toml", "task.toml"])
def test_surface_files_must_be_inside_the_task_folder(tmp_path: Path, name: str) -> None:
    task = _task_copy(tmp_path)
    (tmp_path / "outside.md").write_text("secret outside the suite: 10:30 EV-104 2026-12-02")
    _edit_toml(task / "task.toml", lambda d: d.__setitem__("files", {"user": name}))
    err = _error(task)
    assert err.field == "files.user" and err.path == str(task / "task.toml")


def test_a_symlinked_file_in_a_task_folder_is_refused(tmp_path: Path) -> None:
    task = _task_copy(tmp_path)
    outside = tmp_path / "secret.md"
    outside.write_text((task / "instruction.md").read_text() + "\nPASSWORD=hunter2\n")
    (task / "instruction.md").unlink()
    (task / "instruction.md").symlink_to(outside)
    err = _error(task)
    assert err.path == str(task / "instruction.md") and "symbolic link" in err.found


def test_a_symlinked_task_folder_pointing_outside_the_suite_is_refused(tmp_path: Path) -> None:
    task = _task_copy(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    shutil.move(str(task), elsewhere)
    task.symlink_to(elsewhere, target_is_directory=True)
    assert [d.name for d in load_suite(task.parent).task_dirs] == ["t"]  # listed, so it is reported
    err = _error(task)
    assert err.field == "(folder)" and "symbolic link" in err.found


@pytest.mark.parametrize("name", ["/tmp/abs", "../up", "a/b", ".hidden", ""])
def test_a_suite_name_is_one_plain_folder_name(tmp_path: Path, name: str) -> None:
    (tmp_path / "suite.toml").write_text(f"name = {json.dumps(name)}\n")
    with pytest.raises(TaskFormatError) as ei:
        load_suite(tmp_path)
    assert ei.value.field == "name"


# -- acceptance 2: random malformed task files -------------------------------------------------------------
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
        task = _task_copy(Path(tmp))
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
            _write_toml(target, payload)
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


# -- items 6 and 7: a bad or duplicate task is an ERROR of its own; the session goes on -----------------------
N_TASKS = len([p for p in (ROOT / "suites" / "workflows").iterdir() if (p / "task.toml").is_file()])


@pytest.fixture
def suite(pytester: pytest.Pytester) -> Path:
    dst = pytester.path / "suites" / "workflows"
    shutil.copytree(ROOT / "suites" / "workflows", dst)
    return dst


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("--agentperturb", "suites/workflows", "-p", "no:cacheprovider",
                              "--agentperturb-families", "clean", "--agentperturb-model", "reference/oracle", *args)


def test_one_bad_task_is_an_error_the_others_run_and_the_report_lists_it(pytester: pytest.Pytester,
                                                                         suite: Path) -> None:
    _edit_toml(suite / "share-report" / "task.toml", lambda d: d["facts"][0].__setitem__("cues", "report"))
    result = _run(pytester)
    result.assert_outcomes(passed=N_TASKS - 1, errors=1)
    result.stdout.fnmatch_lines([
        "tasks not loaded: 1 (each an ERROR; the other tasks ran)",
        "*share-report/task.toml: field 'facts?0?.cues': expected a list of strings*",
        "*ERROR suites/workflows::share-report::invalid-task*",
    ])
    assert "Interrupted" not in result.stdout.str()
    page = (pytester.path / "reports" / "agentperturb.html").read_text()
    assert "not loaded: suites/workflows::share-report::invalid-task" in page and "facts[0].cues" in page


def test_the_bad_task_still_shows_under_k_and_in_collect_only(pytester: pytest.Pytester, suite: Path) -> None:
    (suite / "share-report" / "instruction.md").write_bytes(b"\xff\xfe")
    result = _run(pytester, "-k", "share-report and clean")
    result.assert_outcomes(passed=0, errors=1)
    for select in (["-m", "tool and missing"], ["-k", "share-report and inserted"]):
        result = pytester.runpytest("--agentperturb", "suites/workflows", "-p", "no:cacheprovider",
                                    "--agentperturb-model", "reference/oracle", "--collect-only", "-q", *select)
        assert "suites/workflows::share-report::invalid-task" in result.outlines, (select, result.outlines)
    result = _run(pytester, "--collect-only", "-q")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["suites/workflows::share-report::invalid-task", "tasks not loaded: 1*",
                                 "*instruction.md: field 'files.user': expected UTF-8 text*"])


def test_a_malformed_suite_is_an_error_of_that_suite(pytester: pytest.Pytester, suite: Path) -> None:
    other = pytester.path / "suites" / "other"
    shutil.copytree(suite, other)
    (other / "suite.toml").write_text('name = "../../escape"\n')
    result = pytester.runpytest("--agentperturb", "suites/workflows", "suites/other", "-p", "no:cacheprovider",
                                "--agentperturb-families", "clean", "--agentperturb-model", "reference/oracle")
    result.assert_outcomes(passed=N_TASKS, errors=1)
    result.stdout.fnmatch_lines(["*invalid suite: *suite.toml: field 'name': expected a plain name*",
                                 "*ERROR suites/other::invalid-suite*"])


def test_two_tasks_with_one_id_the_second_is_an_error_and_no_row_is_lost(pytester: pytest.Pytester,
                                                                        suite: Path) -> None:
    shutil.copytree(suite / "share-report", suite / "share-report-copy")
    result = _run(pytester, "-n", "2")
    result.assert_outcomes(passed=N_TASKS, errors=1)
    result.stdout.fnmatch_lines(["*share-report-copy/task.toml: field 'id': expected a task id unique within "
                                 "suite 'workflows', found 'share-report', already the id of "
                                 "suites/workflows::share-report*"])
    from pytest_agentperturb.run.store import read_episodes

    rows = read_episodes(pytester.path / "reports" / "agentperturb.sqlite")
    assert len(rows) == N_TASKS  # every episode that ran is stored: none overwrote another


def test_a_run_without_episodes_keeps_the_last_report(pytester: pytest.Pytester, suite: Path) -> None:
    _run(pytester, "-k", "share-report").assert_outcomes(passed=1)
    page = pytester.path / "reports" / "agentperturb.html"
    before = page.read_bytes()
    result = _run(pytester, "-k", "no-such-task")
    result.stdout.fnmatch_lines(["report: not written (no episode ran); * is left as it was"])
    assert page.read_bytes() == before


# -- item 5: non-finite and odd option values are usage errors at start-up ------------------------------------
@pytest.mark.parametrize(("args", "message"), [
    (["--agentperturb-backoff", "inf"], "*--agentperturb-backoff: backoff must be a finite number, got 'inf'*"),
    (["--agentperturb-episode-timeout", "nan"], "*episode timeout must be a finite number, got 'nan'*"),
    (["--agentperturb-request-timeout=-inf"], "*request timeout must be a finite number*"),
    (["--agentperturb-seed", "-1"], "*--agentperturb-seed: seed must be at least 0, got '-1'*"),
    (["--agentperturb-model", ""], "*--agentperturb-model: an empty value; expected MODEL*"),
    (["--agentperturb-model", "reference/literal", "--agentperturb-model", " "], "*--agentperturb-model: an empty*"),
    (["--agentperturb-families", ""], "*--agentperturb-families: an empty value; expected LIST*"),
    (["--agentperturb-families", " , "], "*--agentperturb-families: ',' names no family*"),
    (["--agentperturb-run-id", ""], "*--agentperturb-run-id: an empty value*"),
    (["--agentperturb-max-drop", ""], "*--agentperturb-max-drop: an empty value*"),
])
def test_odd_option_values_are_usage_errors(pytester: pytest.Pytester, suite: Path, args: list[str],
                                            message: str) -> None:
    result = pytester.runpytest("--agentperturb", "suites/workflows", "-p", "no:cacheprovider", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()[-2000:]
    result.stderr.fnmatch_lines([message])
    assert not (pytester.path / "reports").exists()  # nothing ran


def test_resolver_rejects_non_finite_numbers_for_every_caller() -> None:
    from pytest_agentperturb.model.errors import OptionError
    from pytest_agentperturb.model.options import resolve

    def lookup(value: dict[str, Any]) -> Any:
        return lambda o: (value.get(o.dest), o.flag if o.dest in value else "default")

    assert resolve(lookup({}), ROOT).llm.backoff == 30.0
    for dest, raw in [("backoff", "inf"), ("backoff", "1e999"), ("episode_timeout", "nan"), ("concurrency", "nan")]:
        with pytest.raises(OptionError, match=dest.replace("_", " ")):
            resolve(lookup({dest: raw}), ROOT)


# -- item 1: generate writes only inside --out and deletes nothing of the user's; verify reads only suite tasks -----
def _generate(suite_dir: Path, out: Path, families: str = "user-missing") -> int:
    from pytest_agentperturb.cli import main

    return main(["generate", str(suite_dir), "--out", str(out), "--families", families])


def _suite_copy(tmp_path: Path) -> Path:
    dst = tmp_path / "suites" / "workflows"
    shutil.copytree(ROOT / "suites" / "workflows", dst)
    return dst


def test_generate_never_writes_a_surface_file_outside_the_task(tmp_path: Path) -> None:
    suite_dir = _suite_copy(tmp_path)
    outside = tmp_path / "precious.md"
    outside.write_text("the user's own file\n")
    task = suite_dir / "share-report"
    shutil.copy(task / "instruction.md", outside)
    before = outside.read_bytes()
    _edit_toml(task / "task.toml", lambda d: d.__setitem__("files", {"user": str(outside)}))
    assert _generate(suite_dir, tmp_path / "out") == 1  # that task is listed as not loaded
    assert outside.read_bytes() == before
    index = json.loads((tmp_path / "out" / "workflows" / "index.json").read_text())
    assert [e["task"] for e in index["errors"]] == ["share-report"] and "files.user" in index["errors"][0]["error"]


def test_generate_does_not_copy_what_a_symlink_points_to(tmp_path: Path) -> None:
    suite_dir = _suite_copy(tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_text("PASSWORD=hunter2\n")
    (suite_dir / "share-report" / "notes.txt").symlink_to(secret)
    assert _generate(suite_dir, tmp_path / "out") == 1
    written = b"".join(p.read_bytes() for p in (tmp_path / "out").rglob("*") if p.is_file())
    assert b"hunter2" not in written and b"notes.txt: field '(file)'" in written


@pytest.mark.parametrize("name", ["../escape", "/tmp/agentperturb-escape-test"])
def test_generate_with_a_suite_name_that_is_a_path_writes_nothing(tmp_path: Path, name: str,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    suite_dir = _suite_copy(tmp_path)
    (suite_dir / "suite.toml").write_text(f"name = {json.dumps(name)}\n")
    out = tmp_path / "out" / "inner"
    (tmp_path / "out" / "escape").mkdir(parents=True)
    keep = tmp_path / "out" / "escape" / "index.json"
    keep.write_text("the user's file")
    assert _generate(suite_dir, out) == 2
    assert "field 'name': expected a plain name" in caplog.text
    assert keep.read_text() == "the user's file" and not out.exists()
    assert not Path("/tmp/agentperturb-escape-test").exists()


def test_generate_into_a_folder_with_a_colliding_user_file_deletes_nothing(tmp_path: Path,
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    suite_dir = _suite_copy(tmp_path)
    out = tmp_path / "out"
    mine = out / "workflows" / "share-report" / "user-missing"
    mine.mkdir(parents=True)
    (mine / "notes.md").write_text("mine")
    assert _generate(suite_dir, out) == 2
    assert (mine / "notes.md").read_text() == "mine"
    assert "is not a variant folder written by 'agentperturb generate'" in caplog.text
    assert not (out / "workflows" / "index.json").exists()  # stopped before writing anything
    (mine / "notes.md").unlink()
    mine.rmdir()
    (out / "workflows" / "share-report").rmdir()
    (out / "workflows" / "share-report").write_text("a file where a folder goes")
    assert _generate(suite_dir, out) == 2
    assert (out / "workflows" / "share-report").read_text() == "a file where a folder goes"
    (out / "workflows" / "share-report").unlink()
    assert _generate(suite_dir, out) == 0 and _generate(suite_dir, out) == 0  # its own output is replaced


def test_generate_out_naming_a_file_is_a_message_not_a_traceback(tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    out = tmp_path / "file.txt"
    out.write_text("x")
    assert _generate(ROOT / "suites" / "workflows", out) == 2
    assert "names a file, not a folder" in caplog.text and out.read_text() == "x"


def test_verify_reads_only_task_folders_of_the_manifests_suite(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_agentperturb.cli import main

    suite_dir = _suite_copy(tmp_path)
    out = tmp_path / "out"
    assert _generate(suite_dir, out) == 0
    folder = out / "workflows" / "share-report" / "user-missing"
    manifest = json.loads((folder / "manifest.json").read_text())
    stray = tmp_path / "stray"  # a task folder that is no suite's
    shutil.copytree(suite_dir / "share-report", stray)
    for clean_task, why in [(str(suite_dir / "share-report"), "is absolute"),
                            (os.path.relpath(stray, folder), "no task folder of a suite there")]:
        manifest["clean_task"] = clean_task
        (folder / "manifest.json").write_text(json.dumps(manifest))
        assert main(["verify", str(folder)]) == 1
        assert why in capsys.readouterr().out
    other = tmp_path / "other" / "workflows"
    shutil.copytree(suite_dir, other)
    (other / "suite.toml").write_text('name = "other"\n')
    manifest["clean_task"] = os.path.relpath(other / "share-report", folder)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    assert main(["verify", str(folder)]) == 1
    assert "names a task of suite 'other', not of 'workflows'" in capsys.readouterr().out


def test_verify_reports_symbolic_links_in_a_variant_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_agentperturb.cli import main

    suite_dir = _suite_copy(tmp_path)
    out = tmp_path / "out"
    assert _generate(suite_dir, out) == 0
    folder = out / "workflows" / "share-report" / "user-missing"
    (folder / "extra.txt").symlink_to(tmp_path / "secret.txt")
    assert main(["verify", str(folder)]) == 1
    assert "extra.txt is a symbolic link (never followed)" in capsys.readouterr().out


# -- item 3: a threshold that could not be evaluated fails the gate, with a line that says why ------------------
def _episodes(rows: list[dict[str, Any]]) -> Any:
    import pandas as pd

    from pytest_agentperturb.analysis import normalise

    return normalise(pd.DataFrame(rows))


def test_nothing_scored_fails_every_configured_threshold() -> None:
    from pytest_agentperturb import gate

    v = gate.evaluate(gate.parse({"max_drop": "0", "min_bypass": "1"}), None)
    assert v.failed and v.lines() == [
        "agentperturb gate: --agentperturb-max-drop not evaluated for this run: no scored episodes "
        "(a threshold that cannot be evaluated fails)",
        "agentperturb gate: --agentperturb-min-bypass not evaluated for this run: no scored episodes "
        "(a threshold that cannot be evaluated fails)"]
    assert not gate.evaluate(gate.parse({}), None).failed  # nothing configured: nothing to fail


def test_clean_only_episodes_fail_drop_and_bypass_thresholds_but_measure_the_clean_score() -> None:
    from pytest_agentperturb import gate
    from pytest_agentperturb.analysis import drops

    df = _episodes([{"model": "m", "suite": "s", "task": t, "family": "clean", "reward": 1.0} for t in "ab"])
    t = gate.parse({"max_drop": "0", "min_bypass": "1", "min_clean": "0.5", "max_family_drop": ["tool-missing=5"]})
    v = gate.evaluate_tables(t, drops(df, replicates=10), df)
    lines = v.lines()
    assert v.failed and len(v.breaches) == 3, lines
    assert "--agentperturb-max-drop not evaluated for m on s: no scored perturbed episodes of the 12 families" \
        in lines[0]
    assert any("--agentperturb-max-family-drop not evaluated for m on s [tool-missing]: no scored tool-missing "
               "episodes" in ln for ln in lines)
    assert any("--agentperturb-min-bypass not evaluated for m on s: no scored perturbed episodes" in ln
               for ln in lines)
    assert not any("min-clean" in ln for ln in lines)  # 1.0 >= 0.5: measured and met


def test_a_perturbed_level_without_clean_episodes_is_not_evaluated() -> None:
    from pytest_agentperturb import gate
    from pytest_agentperturb.analysis import drops

    df = _episodes([{"model": "m", "suite": "s", "task": "a", "family": "tool-missing", "reward": 1.0,
                     "compliance": False}])
    v = gate.evaluate_tables(gate.parse({"max_drop": "50", "min_clean": "0.1"}), drops(df, replicates=10), df)
    assert [b.reason for b in v.breaches] == ["no scored clean episodes", "no scored clean episodes"]


def test_a_clean_only_plugin_run_fails_the_gate(pytester: pytest.Pytester, suite: Path) -> None:
    result = _run(pytester, "-k", "share-report", "--agentperturb-max-drop", "0", "--agentperturb-min-bypass", "1")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "agentperturb gate: --agentperturb-max-drop not evaluated for reference/oracle on workflows: no scored "
        "perturbed episodes of the 12 families*",
        "agentperturb gate: --agentperturb-min-bypass not evaluated for reference/oracle on workflows: *"])
    assert "gate: passed" not in result.stdout.str()


def test_analyze_on_an_empty_csv_fails_a_configured_gate(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from pytest_agentperturb.cli import main

    caplog.set_level(logging.INFO)
    csv = tmp_path / "e.csv"
    csv.write_text("model,suite,task,family,reward\n")
    assert main(["analyze", "--results", str(csv), "--json", str(tmp_path / "s.json"), "--max-drop", "0"]) == 1
    assert "--max-drop not evaluated for this run: no scored episodes" in caplog.text
    assert "gate: passed" not in caplog.text
    assert json.loads((tmp_path / "s.json").read_text())["gate"]["failed"] is True


# -- item 8: store failures name the file; report/export only read; schemas are checked and migrated -----------
def _cli(*args: str) -> int:
    from pytest_agentperturb.cli import main

    return main(list(args))


def test_a_corrupt_store_is_a_usage_error_naming_the_file(pytester: pytest.Pytester, suite: Path,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    store = pytester.path / "reports" / "agentperturb.sqlite"
    store.parent.mkdir()
    store.write_bytes(b"this is not a database, it is a shopping list\n" * 100)
    result = _run(pytester, "-k", "share-report")
    assert result.ret == pytest.ExitCode.USAGE_ERROR and "INTERNALERROR" not in result.stdout.str()
    result.stderr.fnmatch_lines([f"*{store}: not a usable results store (file is not a database); fix: point "
                                 "--agentperturb-store (or --store) at another file, or move this one away*"])
    assert _cli("report", "--store", str(store), "--out", str(pytester.path / "r.html")) == 2
    assert f"{store}: not a usable results store" in caplog.text


def test_report_and_export_only_read_the_store(pytester: pytest.Pytester, suite: Path,
                                                caplog: pytest.LogCaptureFixture) -> None:
    from pytest_agentperturb.run.store import Store

    caplog.set_level(logging.INFO)
    empty = pytester.path / "empty.sqlite"
    empty.write_bytes(b"")
    assert _cli("report", "--store", str(empty), "--out", str(pytester.path / "e.html"), "--max-drop", "10") == 1
    assert empty.read_bytes() == b"" and "the store holds no episodes" in caplog.text  # not a 36 KB store
    assert "not evaluated for this run: no scored episodes" in caplog.text
    _run(pytester, "-k", "share-report").assert_outcomes(passed=1)
    store = pytester.path / "reports" / "agentperturb.sqlite"
    before = store.read_bytes()
    assert _cli("report", "--store", str(store), "--out", str(pytester.path / "r.html")) == 0
    assert _cli("export", "--store", str(store), "--out", str(pytester.path / "e.csv")) == 0
    assert store.read_bytes() == before
    import sqlite3

    ro = Store(store, readonly=True)
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        ro._conn.execute("CREATE TABLE x (a)")  # (the process runs as root here: file modes do not stop it)
    ro.close()


def test_an_older_store_is_migrated_and_a_newer_one_refused(pytester: pytest.Pytester, suite: Path,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    import sqlite3

    _run(pytester, "-k", "share-report").assert_outcomes(passed=1)
    store = pytester.path / "reports" / "agentperturb.sqlite"
    with closing(sqlite3.connect(store)) as db:
        db.execute("ALTER TABLE episodes DROP COLUMN reasoning_tokens")
        db.execute("ALTER TABLE episodes DROP COLUMN baseline")
        db.commit()
    assert _cli("report", "--store", str(store), "--out", str(pytester.path / "r.html")) == 0  # reads NULLs
    result = _run(pytester, "-k", "share-report or forward-invoice")
    result.assert_outcomes(passed=2)
    assert "errors: 0" in result.stdout.str()
    with closing(sqlite3.connect(store)) as db:
        cols = {r[1] for r in db.execute("PRAGMA table_info(episodes)")}
        assert {"reasoning_tokens", "baseline"} <= cols
        assert db.execute("SELECT COUNT(*) FROM episodes").fetchone()[0] == 2
        db.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
        db.commit()
    result = _run(pytester, "-k", "share-report")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    from pytest_agentperturb.run.store import SCHEMA_VERSION

    result.stderr.fnmatch_lines(["*written by a newer pytest-agentperturb (store schema 99; this version reads "
                                 f"up to {SCHEMA_VERSION}); fix: upgrade pytest-agentperturb*"])
    assert _cli("export", "--store", str(store), "--out", str(pytester.path / "e.csv")) == 2
    assert "store schema 99" in caplog.text


def test_a_store_that_fails_while_running_is_an_error_not_a_silent_zero(pytester: pytest.Pytester, suite: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import sqlite3

    from pytest_agentperturb.run.store import Store

    def boom(self: Any, *args: Any) -> None:
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(Store, "_put", boom)  # (the in-process run shares this module; undone after the test)
    result = _run(pytester, "-k", "share-report")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*results store error (not an agent failure): *agentperturb.sqlite: cannot record "
                                 "the episode * (database or disk is full)*", "*errors: 1 (excluded*"])


# -- item 9: analyze refuses impossible rewards and unknown families -------------------------------------------
@pytest.mark.parametrize(("family", "reward", "message"), [
    ("clean", "inf", "row 2 (model 'm', task 't2'): column 'reward': expected a number in [0, 1]"),
    ("clean", "7.5", "found 7.5"),
    ("tool-missing", "-3", "found -3.0"),
    ("tool-mising", "0.5", "row 2 (model 'm', task 't2'): column 'family': expected 'clean', one of"),
    ("Clean", "1", "found 'Clean'"),
])
def test_analyze_refuses_impossible_rewards_and_unknown_families(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                                 family: str, reward: str, message: str) -> None:
    csv = tmp_path / "e.csv"
    csv.write_text(f"model,suite,task,family,reward\nm,s,t1,clean,1\nm,s,t2,{family},{reward}\n")
    assert _cli("analyze", "--results", str(csv), "--json", str(tmp_path / "s.json")) == 2
    assert message in caplog.text and not (tmp_path / "s.json").exists()


def test_analyze_accepts_blank_rewards_and_named_inserted_objects(tmp_path: Path) -> None:
    csv = tmp_path / "e.csv"
    csv.write_text("model,suite,task,family,reward,error\nm,s,t1,clean,1,\nm,s,t1,tool-missing,,Timeout\n"
                   "m,s,t1,inserted-injection-exfiltrate,0,\n")
    assert _cli("analyze", "--results", str(csv), "--json", str(tmp_path / "s.json")) == 0
    assert _cli("analyze", "--results", str(csv), "--json", str(tmp_path / "s.json"),
                "--success-threshold", "nan") == 2


def test_an_inserted_object_name_cannot_be_a_path(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from pytest_agentperturb.model.task import parse_families

    assert parse_families("inserted-injection-exfil_1") == ["inserted-injection-exfil_1"]
    for bad in ("inserted-injection-../../x", "inserted-injection-a/b", "inserted-fake-tool-[x]"):
        with pytest.raises(ValueError, match="may use letters, digits"):
            parse_families(bad)
    assert _generate(ROOT / "suites" / "workflows", tmp_path / "out", "inserted-injection-../../../x") == 2
    assert not (tmp_path / "x").exists() and "may use letters, digits" in caplog.text


def test_report_and_export_work_on_a_store_nobody_may_write(tmp_path: Path) -> None:
    """A read-only store in a read-only folder (made immutable with chattr when the tests run as root)."""
    import subprocess

    from pytest_agentperturb.model.records import EpisodeRecord
    from pytest_agentperturb.run.store import put_all

    ro_dir, out_dir = tmp_path / "ro", tmp_path / "out"
    ro_dir.mkdir()
    recs = [EpisodeRecord("r", "m", "s", t, fam, *(("clean", "clean") if fam == "clean" else ("tool", "missing")),
                          "op", 0, reward=1.0 if fam == "clean" else 0.0, success=fam == "clean")
            for t in ("a", "b") for fam in ("clean", "tool-missing")]
    put_all(ro_dir / "s.sqlite", recs)
    before = (ro_dir / "s.sqlite").read_bytes()
    root = os.geteuid() == 0  # root writes through file modes: make the file and folder immutable instead

    def lock(on: bool) -> bool:
        if not root:
            os.chmod(ro_dir / "s.sqlite", 0o444 if on else 0o644)
            os.chmod(ro_dir, 0o555 if on else 0o755)
            return True
        flag = "+i" if on else "-i"
        return all(subprocess.run(["chattr", flag, str(p)], capture_output=True).returncode == 0
                   for p in (ro_dir / "s.sqlite", ro_dir))

    try:
        if not lock(True):
            pytest.skip("cannot make a file read-only for root on this filesystem (no chattr)")
        with pytest.raises(OSError):
            (ro_dir / "probe").write_text("x")  # really read-only
        assert _cli("report", "--store", str(ro_dir / "s.sqlite"), "--out", str(out_dir / "r.html")) == 0
        assert _cli("export", "--store", str(ro_dir / "s.sqlite"), "--out", str(out_dir / "e.csv")) == 0
    finally:
        lock(False)
    assert (out_dir / "r.html").is_file() and (out_dir / "e.csv").read_text().count("\n") == 5
    assert (ro_dir / "s.sqlite").read_bytes() == before and sorted(p.name for p in ro_dir.iterdir()) == ["s.sqlite"]

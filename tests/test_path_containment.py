"""Files stay inside their folders: what a task names, what generate writes, what verify reads.

The loader reads only files inside the task folder (no path out of it, no symbolic link followed);
``agentperturb generate`` writes only inside ``--out`` and deletes nothing of the user's; ``agentperturb
verify`` reads only task folders of the manifest's suite.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from task_files import ROOT, edit_toml, format_error, generate, task_copy

from pytest_agentperturb.formats.native import load_suite
from pytest_agentperturb.model.errors import TaskFormatError


# -- the loader reads only inside the task folder ----------------------------------------------------------
@pytest.mark.parametrize("name", ["/etc/hostname", "../../outside.md", "sub/../../x.md", "grader.toml", "task.toml"])
def test_surface_files_must_be_inside_the_task_folder(tmp_path: Path, name: str) -> None:
    task = task_copy(tmp_path)
    (tmp_path / "outside.md").write_text("secret outside the suite: 10:30 EV-104 2026-12-02")
    edit_toml(task / "task.toml", lambda d: d.__setitem__("files", {"user": name}))
    err = format_error(task)
    assert err.field == "files.user" and err.path == str(task / "task.toml")


def test_a_symlinked_file_in_a_task_folder_is_refused(tmp_path: Path) -> None:
    task = task_copy(tmp_path)
    outside = tmp_path / "secret.md"
    outside.write_text((task / "instruction.md").read_text() + "\nPASSWORD=hunter2\n")
    (task / "instruction.md").unlink()
    (task / "instruction.md").symlink_to(outside)
    err = format_error(task)
    assert err.path == str(task / "instruction.md") and "symbolic link" in err.found


def test_a_symlinked_task_folder_pointing_outside_the_suite_is_refused(tmp_path: Path) -> None:
    task = task_copy(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    shutil.move(str(task), elsewhere)
    task.symlink_to(elsewhere, target_is_directory=True)
    assert [d.name for d in load_suite(task.parent).task_dirs] == ["t"]  # listed, so it is reported
    err = format_error(task)
    assert err.field == "(folder)" and "symbolic link" in err.found


@pytest.mark.parametrize("name", ["/tmp/abs", "../up", "a/b", ".hidden", ""])
def test_a_suite_name_is_one_plain_folder_name(tmp_path: Path, name: str) -> None:
    (tmp_path / "suite.toml").write_text(f"name = {json.dumps(name)}\n")
    with pytest.raises(TaskFormatError) as ei:
        load_suite(tmp_path)
    assert ei.value.field == "name"


# -- generate writes only inside --out and deletes nothing of the user's; verify reads only suite tasks -----
def test_generate_never_writes_a_surface_file_outside_the_task(tmp_path: Path, suite_copy: Path) -> None:
    suite_dir = suite_copy
    outside = tmp_path / "precious.md"
    outside.write_text("the user's own file\n")
    task = suite_dir / "share-report"
    shutil.copy(task / "instruction.md", outside)
    before = outside.read_bytes()
    edit_toml(task / "task.toml", lambda d: d.__setitem__("files", {"user": str(outside)}))
    assert generate(suite_dir, tmp_path / "out") == 1  # that task is listed as not loaded
    assert outside.read_bytes() == before
    index = json.loads((tmp_path / "out" / "workflows" / "index.json").read_text())
    assert [e["task"] for e in index["errors"]] == ["share-report"] and "files.user" in index["errors"][0]["error"]


def test_generate_does_not_copy_what_a_symlink_points_to(tmp_path: Path, suite_copy: Path) -> None:
    suite_dir = suite_copy
    secret = tmp_path / "secret.txt"
    secret.write_text("PASSWORD=hunter2\n")
    (suite_dir / "share-report" / "notes.txt").symlink_to(secret)
    assert generate(suite_dir, tmp_path / "out") == 1
    written = b"".join(p.read_bytes() for p in (tmp_path / "out").rglob("*") if p.is_file())
    assert b"hunter2" not in written and b"notes.txt: field '(file)'" in written


@pytest.mark.parametrize("name", ["../escape", "/tmp/agentperturb-escape-test"])
def test_generate_with_a_suite_name_that_is_a_path_writes_nothing(tmp_path: Path, suite_copy: Path, name: str,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    suite_dir = suite_copy
    (suite_dir / "suite.toml").write_text(f"name = {json.dumps(name)}\n")
    out = tmp_path / "out" / "inner"
    (tmp_path / "out" / "escape").mkdir(parents=True)
    keep = tmp_path / "out" / "escape" / "index.json"
    keep.write_text("the user's file")
    assert generate(suite_dir, out) == 2
    assert "field 'name': expected a plain name" in caplog.text
    assert keep.read_text() == "the user's file" and not out.exists()
    assert not Path("/tmp/agentperturb-escape-test").exists()


def test_generate_into_a_folder_with_a_colliding_user_file_deletes_nothing(tmp_path: Path, suite_copy: Path,
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    suite_dir = suite_copy
    out = tmp_path / "out"
    mine = out / "workflows" / "share-report" / "user-missing"
    mine.mkdir(parents=True)
    (mine / "notes.md").write_text("mine")
    assert generate(suite_dir, out) == 2
    assert (mine / "notes.md").read_text() == "mine"
    assert "is not a variant folder written by 'agentperturb generate'" in caplog.text
    assert not (out / "workflows" / "index.json").exists()  # stopped before writing anything
    (mine / "notes.md").unlink()
    mine.rmdir()
    (out / "workflows" / "share-report").rmdir()
    (out / "workflows" / "share-report").write_text("a file where a folder goes")
    assert generate(suite_dir, out) == 2
    assert (out / "workflows" / "share-report").read_text() == "a file where a folder goes"
    (out / "workflows" / "share-report").unlink()
    assert generate(suite_dir, out) == 0 and generate(suite_dir, out) == 0  # its own output is replaced


def test_generate_out_naming_a_file_is_a_message_not_a_traceback(tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    out = tmp_path / "file.txt"
    out.write_text("x")
    assert generate(ROOT / "suites" / "workflows", out) == 2
    assert "names a file, not a folder" in caplog.text and out.read_text() == "x"


def test_verify_reads_only_task_folders_of_the_manifests_suite(tmp_path: Path, suite_copy: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_agentperturb.cli import main

    suite_dir = suite_copy
    out = tmp_path / "out"
    assert generate(suite_dir, out) == 0
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


def test_verify_reports_symbolic_links_in_a_variant_folder(tmp_path: Path, suite_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_agentperturb.cli import main

    suite_dir = suite_copy
    out = tmp_path / "out"
    assert generate(suite_dir, out) == 0
    folder = out / "workflows" / "share-report" / "user-missing"
    (folder / "extra.txt").symlink_to(tmp_path / "secret.txt")
    assert main(["verify", str(folder)]) == 1
    assert "extra.txt is a symbolic link (never followed)" in capsys.readouterr().out


# -- only regular files are read: a FIFO never hangs collection; a suite.toml linked from outside is refused --
@pytest.mark.parametrize("name", ["instruction.md", "notes.txt"])
def test_a_fifo_in_a_task_folder_is_a_task_format_error(pytester: pytest.Pytester, name: str) -> None:
    shutil.copytree(ROOT / "suites" / "workflows", pytester.path / "suites" / "workflows")
    fifo = pytester.path / "suites" / "workflows" / "book-offsite" / name
    fifo.unlink(missing_ok=True)
    os.mkfifo(fifo)
    result = pytester.runpytest_subprocess("--agentperturb", "suites/workflows", "--agentperturb-families",
                                           "clean", "-k", "book-offsite", "--agentperturb-model",
                                           "reference/literal", "-p", "no:cacheprovider", timeout=60)
    out = result.stdout.str()
    assert f"{fifo}: field '(file)'" in out and "a named pipe (FIFO)" in out, out
    assert "tasks not loaded: 1" in out and "Traceback" not in out


def test_a_fifo_as_suite_toml_is_one_error_naming_it(pytester: pytest.Pytester) -> None:
    """Not "collected 0 items": the suite is one ERROR that names its suite.toml; nothing waits on the pipe."""
    suite = pytester.path / "suites" / "workflows"
    suite.mkdir(parents=True)
    shutil.copytree(ROOT / "suites" / "workflows" / "book-offsite", suite / "book-offsite")
    os.mkfifo(suite / "suite.toml")
    result = pytester.runpytest_subprocess("--agentperturb", "suites/workflows", "--agentperturb-model",
                                           "reference/literal", "-p", "no:cacheprovider", timeout=60)
    out = result.stdout.str()
    assert f"{suite / 'suite.toml'}: field '(file)': expected a regular file (only regular files are read), " \
           "found a named pipe (FIFO). Fix: replace it by a regular file" in out, out
    assert result.ret == pytest.ExitCode.TESTS_FAILED and "Traceback" not in out, out


def test_only_regular_files_are_read(tmp_path: Path) -> None:
    task = task_copy(tmp_path)
    (task / "instruction.md").unlink()
    (task / "instruction.md").mkdir()
    err = format_error(task)
    assert err.path == str(task / "instruction.md") and err.found == "a folder"


def test_a_suite_toml_linked_from_outside_the_suite_is_refused(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    (tmp_path / "elsewhere.toml").write_text('name = "elsewhere"\n')
    (suite / "suite.toml").symlink_to(tmp_path / "elsewhere.toml")
    with pytest.raises(TaskFormatError) as ei:
        load_suite(suite)
    assert ei.value.path == str(suite / "suite.toml") and "symbolic link" in ei.value.found
    (suite / "own.toml").write_text('name = "own"\n')   # a link inside the suite folder is its own file
    (suite / "suite.toml").unlink()
    (suite / "suite.toml").symlink_to("own.toml")
    assert load_suite(suite).name == "own"

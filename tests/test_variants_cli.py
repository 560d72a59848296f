"""``agentperturb generate`` / ``verify`` and selecting families and inserted objects in pytest."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_agentperturb.cli import main
from pytest_agentperturb.formats.native import GRADER_FILES, load_task

ROOT = Path(__file__).resolve().parent.parent
TASK_DIRS = sorted(p for p in (ROOT / "suites" / "workflows").iterdir() if (p / "task.toml").is_file())
N_TASKS = len(TASK_DIRS)
N_IMAGE = sum(1 for p in TASK_DIRS if "observations" in (p / "task.toml").read_text())  # tools return images


def tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Variants of the built-in suite for two families and the injection, seed 7."""
    root = tmp_path_factory.mktemp("gen")
    suite = root / "suites" / "workflows"
    shutil.copytree(ROOT / "suites" / "workflows", suite)
    out = root / "variants"
    assert main(["generate", str(suite), "--out", str(out), "--seed", "7",
                 "--families", "tool-incorrect,user-missing,inserted-injection"]) == 0
    return out


def test_generate_writes_one_folder_per_task_and_family(generated: Path) -> None:
    folders = sorted(p.parent.relative_to(generated / "workflows").as_posix()
                     for p in (generated / "workflows").rglob("manifest.json"))
    assert len(folders) == 3 * N_TASKS and "book-offsite/tool-incorrect" in folders
    index = json.loads((generated / "workflows" / "index.json").read_text())
    assert len(index["variants"]) == 3 * N_TASKS and index["skipped"] == [] and index["seed"] == 7


def test_variant_folders_keep_grader_files_and_record_everything(generated: Path) -> None:
    clean = generated.parent / "suites" / "workflows" / "escalate-outage"
    folder = generated / "workflows" / "escalate-outage" / "user-missing"
    m = json.loads((folder / "manifest.json").read_text())
    for name in GRADER_FILES:
        assert (folder / name).read_bytes() == (clean / name).read_bytes()
    assert (folder / "task.toml").read_bytes() == (clean / "task.toml").read_bytes()
    assert m["family"] == "user-missing" and m["edited_file"] == "instruction.md"
    assert m["operator"] == "authored" and m["requested_seed"] == 7
    assert m["diff"].startswith("--- a/workflows/escalate-outage/instruction.md")
    assert m["canaries"] and m["recovery"] and not Path(m["clean_task"]).is_absolute()
    assert (folder / "instruction.md").read_bytes() != (clean / "instruction.md").read_bytes()
    variant = load_task(folder, "workflows", check_statements=False)
    assert variant.facts == load_task(clean, "workflows").facts


def test_injection_variant_edits_no_file(generated: Path) -> None:
    clean = generated.parent / "suites" / "workflows" / "triage-ticket"
    folder = generated / "workflows" / "triage-ticket" / "inserted-injection"
    m = json.loads((folder / "manifest.json").read_text())
    assert m["edited_file"] is None and m["injections"][0]["tool"] == "tickets_list"
    assert {k: v for k, v in tree(folder).items() if k != "manifest.json"} == tree(clean)


def test_same_inputs_and_seed_give_byte_identical_trees(generated: Path, tmp_path: Path) -> None:
    out = tmp_path / "again"
    # same relative layout, so the recorded relative path to the clean task is the same too
    shutil.copytree(generated.parent / "suites", tmp_path / "suites")
    main(["generate", str(tmp_path / "suites" / "workflows"), "--out", str(out), "--seed", "7",
          "--families", "tool-incorrect,user-missing,inserted-injection"])
    assert tree(out) == tree(generated)
    other = tmp_path / "seed8"
    main(["generate", str(tmp_path / "suites" / "workflows"), "--out", str(other), "--seed", "8",
          "--families", "tool-incorrect,user-missing,inserted-injection"])
    assert tree(other) != tree(generated)


def test_verify_passes_on_fresh_output(generated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", str(generated)]) == 0
    assert capsys.readouterr().out == ""


def test_verify_reports_one_line_per_breach(generated: Path, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copytree(generated.parent, tmp_path / "w")
    out = tmp_path / "w" / "variants" / "workflows"
    (out / "share-report" / "tool-incorrect" / "grader.toml").write_text("scoring = 'binary'\n")
    (out / "book-offsite" / "user-missing" / "manifest.json").write_text("{not json")
    m = json.loads((out / "onboard-hire" / "user-missing" / "manifest.json").read_text())
    del m["operator"]
    (out / "onboard-hire" / "user-missing" / "manifest.json").write_text(json.dumps(m))
    (out / "expense-claim" / "user-missing" / "notes.txt").write_text("extra")
    assert main(["verify", str(tmp_path / "w" / "variants")]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert any("book-offsite/user-missing/manifest.json: corrupted manifest (not valid JSON" in x
               and "agentperturb generate" in x for x in lines)
    assert any("onboard-hire/user-missing/manifest.json: corrupted manifest (missing or mistyped: operator)" in x
               for x in lines)
    assert any("[share-report tool-incorrect]" in x and "grader.toml" in x and "byte-identical" in x
               for x in lines)
    assert any("[expense-claim user-missing]: file notes.txt is not listed" in x for x in lines)
    assert len(lines) == 5  # grader.toml gives checksum + byte-identity; nothing else is flagged


def test_verify_reruns_the_solvability_check(generated: Path, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A hand edit that keeps the checksums consistent still fails: the oracle cannot recover."""
    import hashlib

    shutil.copytree(generated.parent, tmp_path / "w")
    folder = tmp_path / "w" / "variants" / "workflows" / "forward-invoice" / "user-missing"
    m = json.loads((folder / "manifest.json").read_text())
    m["recovery"] = []
    m["canaries"] = [c for c in m["canaries"] if c["kind"] != "omitted"] or [{"kind": "text", "text": "zz"}]
    data = (folder / "instruction.md").read_bytes()
    m["sha256"]["instruction.md"] = hashlib.sha256(data).hexdigest()
    (folder / "manifest.json").write_text(json.dumps(m))
    assert main(["verify", str(folder)]) == 1
    out = capsys.readouterr().out
    assert "rule 4: the oracle with recovery scored 0.0" in out


def test_generate_rejects_an_unknown_family(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    assert main(["generate", str(ROOT / "suites" / "workflows"), "--out", str(tmp_path),
                 "--families", "tool-wrong"]) == 2
    assert "unknown family 'tool-wrong'" in caplog.text and "inserted-injection" in caplog.text
    assert not any(tmp_path.iterdir())


def test_a_task_without_facts_is_skipped_and_the_rest_is_written(suite_copy: Path, tmp_path: Path) -> None:
    from pytest_agentperturb.model.task import fill

    clean = load_task(suite_copy / "book-offsite", "workflows")
    sol = suite_copy / "book-offsite" / "solution.json"
    sol.write_text(json.dumps(fill(json.loads(sol.read_text()), clean.fact_values())))
    toml = suite_copy / "book-offsite" / "task.toml"
    toml.write_text(toml.read_text().split("[[facts]]")[0].replace("tools = [", "facts = []\ntools = ["))
    (suite_copy / "book-offsite" / "edits.toml").unlink()  # the authored edits are written against the facts
    (suite_copy / "triage-ticket" / "grader.toml").write_text("[[check]]\npath = 3\n")
    out = tmp_path / "v"
    assert main(["generate", str(suite_copy), "--out", str(out), "--families", "user-missing,tool-missing"]) == 1
    index = json.loads((out / "workflows" / "index.json").read_text())
    assert [(s["task"], s["family"]) for s in index["skipped"]] == [("book-offsite", "user-missing")]
    assert "declares no facts" in index["skipped"][0]["reason"] and "Fix: declare facts" in index["skipped"][0]["reason"]
    assert [e["task"] for e in index["errors"]] == ["triage-ticket"]
    assert len(index["variants"]) == (N_TASKS - 1) * 2 - 1  # triage-ticket fails to load, one skip
    assert main(["verify", str(out)]) == 0


def test_the_command_line_entry_point(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "pytest_agentperturb.cli", "generate",
                           str(ROOT / "suites" / "workflows"), "--out", str(tmp_path), "--seed", "7",
                           "--families", "context-redundant"], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert f"wrote {N_TASKS} variants" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "pytest_agentperturb.cli", "verify", str(tmp_path)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0 and f"verified {N_TASKS} variants: all rules hold" in proc.stderr


def test_image_variants_are_written_with_their_images_and_verified(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    suite = tmp_path / "suites" / "workflows"
    shutil.copytree(ROOT / "suites" / "workflows", suite)
    out = tmp_path / "v"
    assert main(["generate", str(suite), "--out", str(out), "--families", "inserted-image-overwrite"]) == 0
    index = json.loads((out / "workflows" / "index.json").read_text())
    assert len(index["variants"]) == N_IMAGE and len(index["skipped"]) == N_TASKS - N_IMAGE
    assert all("no operator applies" in s["reason"] for s in index["skipped"])
    folder = out / "workflows" / "chart-q3-spend" / "inserted-image-overwrite"
    m = json.loads((folder / "manifest.json").read_text())
    assert m["edited_file"] is None and m["diff"] == "" and m["injections"] == []
    (e,) = m["image_edits"]
    assert e["tool"] == "dashboard_snapshot" and (folder / e["file"]).read_bytes()[:4] == b"\x89PNG"
    assert e["file"] in m["sha256"] and "data" not in e
    for name in ("instruction.md", "procedure.md", "context.json", "tools.json", *GRADER_FILES):
        assert (folder / name).read_bytes() == (suite / "chart-q3-spend" / name).read_bytes()
    capsys.readouterr()
    assert main(["verify", str(out)]) == 0
    png = folder / e["file"]
    png.write_bytes(png.read_bytes()[:-4] + b"\0\0\0\0")
    assert main(["verify", str(out)]) == 1
    assert f"file {e['file']} changed since generation" in capsys.readouterr().out


# -- in pytest ---------------------------------------------------------------------------


def test_inserted_objects_are_parameters_selectable_with_k(pytester: pytest.Pytester, suite_copy: Path) -> None:
    shutil.copytree(suite_copy, pytester.path / "suites" / "workflows")
    res = pytester.runpytest("--agentperturb", "suites/workflows", "-p", "no:cacheprovider",
                             "-k", "injection", "--agentperturb-seed", "7", "-v")
    assert res.ret == pytest.ExitCode.OK  # agent failures are reported verdicts, not test failures
    lines = [x for x in res.outlines if x.startswith("suites/workflows::") and "%]" in x and "::clean[" not in x]
    assert len(lines) == 2 * (N_TASKS + N_IMAGE)  # inserted-injection, and inserted-image-injection
    assert len([x for x in res.outlines if "::clean[" in x and "%]" in x]) == 2 * N_TASKS  # their clean partners
    assert any("inserted-injection[reference/literal]" in x and "compliance" in x for x in lines)
    assert any("inserted-image-injection[reference/literal]" in x and "compliance" in x for x in lines)
    assert all("bypass" in x for x in lines if "reference/careful" in x)


def test_tool_and_incorrect_selects_only_that_family(pytester: pytest.Pytester, suite_copy: Path) -> None:
    shutil.copytree(suite_copy, pytester.path / "suites" / "workflows")
    res = pytester.runpytest("--agentperturb", "suites/workflows", "-p", "no:cacheprovider",
                             "-k", "tool and incorrect", "--collect-only", "-q")
    ids = [x for x in res.outlines if "::" in x]
    assert len(ids) == 2 * 2 * N_TASKS  # and each one's clean partner
    assert len([x for x in ids if "::tool-incorrect[" in x]) == len([x for x in ids if "::clean[" in x]) == 2 * N_TASKS
    res = pytester.runpytest("--agentperturb", "suites/workflows", "-p", "no:cacheprovider",
                             "-m", "inserted", "--collect-only", "-q")
    assert len([x for x in res.outlines if "::inserted-" in x]) == 2 * (3 * N_TASKS + 4 * N_IMAGE)


def test_families_option_accepts_objects_and_names_valid_ones(pytester: pytest.Pytester,
                                                              suite_copy: Path) -> None:
    shutil.copytree(suite_copy, pytester.path / "suites" / "workflows")
    res = pytester.runpytest("--agentperturb", "suites/workflows", "-p", "no:cacheprovider", "--collect-only",
                             "-q", "--agentperturb-families", "inserted-fake-tool,clean")
    assert len([x for x in res.outlines if "::" in x]) == 2 * 2 * N_TASKS
    res = pytester.runpytest("--agentperturb", "suites/workflows", "-p", "no:cacheprovider",
                             "--agentperturb-families", "fake-tool")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*unknown family 'fake-tool'*inserted-fake-tool*"])

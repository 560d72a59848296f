"""The wheel ships the built-in suites, the prompt templates and the question bank inside the package."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from pytest_agentperturb.cli import main
from pytest_agentperturb.formats import shipped
from pytest_agentperturb.formats.native import load_suite

ROOT = Path(__file__).resolve().parents[1]


def test_build_puts_suites_and_prompts_in_the_package(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for name in ("pytest_agentperturb", "suites", "prompts", "fixtures/question_bank"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path / "build"
    # build_py is what a wheel is made of; it needs no network and no wheel package
    subprocess.run([sys.executable, "-c", "import sys, setuptools; sys.argv = ['setup.py', '-q', 'build_py', "
                    f"'--build-lib', {str(out)!r}]; setuptools.setup()"], cwd=src, check=True,
                   capture_output=True)
    pkg = out / "pytest_agentperturb"
    for name in ("workflows", "knowledge"):
        shipped_suite = load_suite(pkg / "suites" / name)
        assert len(shipped_suite.task_dirs) == len(load_suite(ROOT / "suites" / name).task_dirs)
        for d in shipped_suite.task_dirs:
            assert sorted(p.name for p in d.iterdir()) == sorted(p.name for p in (ROOT / "suites" / name / d.name).iterdir())
    assert sorted(p.relative_to(pkg / "prompts") for p in (pkg / "prompts").rglob("*.md")) == \
        sorted(p.relative_to(ROOT / "prompts") for p in (ROOT / "prompts").rglob("*.md"))
    questions = sorted(p.name for p in (ROOT / "fixtures" / "question_bank").glob("*.json"))
    assert questions and sorted(p.name for p in (pkg / "question_bank").glob("*.json")) == questions
    banks = ROOT / "pytest_agentperturb" / "perturb" / "banks"
    assert sorted(p.name for p in (pkg / "perturb" / "banks").glob("*.toml")) == \
        sorted(p.name for p in banks.glob("*.toml")) != []  # the snippet banks the operators draw from


def test_source_checkout_finds_its_own_folders(capsys) -> None:  # type: ignore[no-untyped-def]
    assert shipped("suites") == ROOT / "suites" and shipped("prompts") == ROOT / "prompts"
    assert main(["suites"]) == 0
    assert capsys.readouterr().out.splitlines() == [str(ROOT / "suites" / n) for n in ("knowledge", "workflows")]

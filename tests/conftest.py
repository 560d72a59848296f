"""Shared fixtures of the project's own tests."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

# The vision extra's tests must never reach the Hugging Face hub; huggingface_hub reads this once,
# when first imported (litellm imports it too), so it is set before anything else.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

# C extensions (numpy.fft, scipy's) cannot be loaded twice in one process, and in-process
# pytester runs drop the modules they imported: load what the analysis uses up front.  The same
# holds for pillow and the imaging layer, whose fonts and rendered images are cached per module:
# re-imported after an in-process run, they no longer match what an earlier import drew.
import numpy.fft  # noqa: F401
import pandas  # noqa: F401
import PIL.Image  # noqa: F401
import PIL.ImageDraw  # noqa: F401
import PIL.ImageFont  # noqa: F401
import pytest
import scipy.stats  # noqa: F401

import pytest_agentperturb.formats  # noqa: F401
import pytest_agentperturb.imaging  # noqa: F401

# hypothesis's pytest plugin serves these tests only: the project's pytest settings keep its entry point
# from loading (it imports hypothesis at the end of every session, `pytest --agentperturb` runs included)
# and it is loaded here instead, before any test module imports hypothesis, as the entry point would be.
pytest_plugins = ["_hypothesis_pytestplugin", "pytester"]  # pytester too: the main job does not load it

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "suites" / "workflows"


@pytest.fixture
def suite_path() -> Path:
    """The built-in workflows suite."""
    return SUITE


@pytest.fixture
def suite_copy(tmp_path: Path) -> Path:
    """A private copy of the built-in suite that a test may edit."""
    dst = tmp_path / "suites" / "workflows"
    shutil.copytree(SUITE, dst)
    return dst


@pytest.fixture
def suite(pytester: pytest.Pytester) -> Path:
    """The built-in suite copied into the pytester folder (where ``--agentperturb suites/workflows`` finds it)."""
    dst = pytester.path / "suites" / "workflows"
    shutil.copytree(SUITE, dst)
    return dst


@pytest.fixture
def run_without_extra(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Run ``pytest --agentperturb --agentperturb-suite SUITE`` as if the distribution of an adapter were not installed.

    Call it with the adapter module, the distribution's name and the suite name; it returns the run's result.
    """

    def run(adapter: Any, distribution: str, suite: str) -> pytest.RunResult:
        real = adapter.importlib.metadata.version

        def missing(name: str) -> str:
            if name == distribution:
                raise adapter.importlib.metadata.PackageNotFoundError(name)
            return real(name)

        monkeypatch.setattr(adapter.importlib.metadata, "version", missing)
        return pytester.runpytest("--agentperturb", "--agentperturb-suite", suite, "-p", "no:cacheprovider")

    return run

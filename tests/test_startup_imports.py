"""Start-up: each heavy import waits until it is needed (pandas at the analysis, litellm before the first model-backed
item), and the plugin's own modules are imported as plain Python, not through pytest's assertion rewriter.

Each run is a subprocess (the modules a run imports are what is checked) with a ``-p`` probe module that records
what ``sys.modules`` holds at the moments that matter, into a JSON file the test reads.  Speed:
``bench/startup.py``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, StepsPolicy

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("litellm", "openai", "pandas")

PROBE = '''
"""Records which modules are loaded when the plugin is configured, when litellm's import returns, and at the end."""
import json
import sys

SEEN = {}
HEAVY = ("litellm", "openai", "pandas", "pytest_agentperturb.gate")


def loaded():
    return sorted(m for m in HEAVY if m in sys.modules)


def pytest_configure(config):
    from pytest_agentperturb.agents import litellm_agent

    real = litellm_agent.import_litellm

    def import_litellm():
        out = real()
        SEEN.setdefault("at_litellm", loaded())
        return out

    litellm_agent.import_litellm = import_litellm
    SEEN["configured"] = loaded()


def pytest_sessionfinish(session):
    own = [m for name, m in sorted(sys.modules.items()) if name.startswith("pytest_agentperturb.")]
    SEEN["rewritten"] = [m.__name__ for m in own
                         if type(getattr(m, "__loader__", None)).__name__ == "AssertionRewritingHook"]
    SEEN["own_modules"] = len(own)
    SEEN["at_finish"] = loaded()


def pytest_unconfigure(config):
    with open("probe.json", "w") as f:
        json.dump(SEEN, f)
'''


@pytest.fixture
def probed(pytester: pytest.Pytester) -> pytest.Pytester:
    """A pytester folder with the built-in suite and the ``startup_probe`` module, importable by ``-p``."""
    shutil.copytree(ROOT / "suites" / "workflows", pytester.path / "suites" / "workflows")
    pytester.makepyfile(startup_probe=PROBE)
    pytester.syspathinsert()
    return pytester


def _seen(p: pytest.Pytester, *args: str) -> dict[str, list[str]]:
    result = p.runpytest_subprocess("-p", "startup_probe", "-p", "no:cacheprovider", *args)
    assert result.ret in (0, 1), result.outlines[-20:]  # 1: a verdict failed, which is no start-up matter
    return json.loads((p.path / "probe.json").read_text())


def test_a_plain_run_imports_neither_the_gate_nor_a_heavy_library(probed: pytest.Pytester) -> None:
    probed.makepyfile(test_plain="def test_ok():\n    assert True\n")
    seen = _seen(probed)
    assert seen["at_finish"] == [], seen  # the gate is imported only when --agentperturb resolves options


def test_a_reference_only_run_imports_no_model_client_and_no_pandas_before_its_analysis(
        probed: pytest.Pytester) -> None:
    seen = _seen(probed, "--agentperturb", "suites/workflows", "-k", "forward-invoice and clean",
                 "--agentperturb-model", "reference/oracle")
    assert "at_litellm" not in seen, seen  # litellm is never imported for the reference agents
    assert not {"litellm", "openai"} & set(seen["at_finish"]), seen
    assert "pandas" not in seen["configured"], seen


def test_the_plugins_own_modules_skip_the_assertion_rewriter(probed: pytest.Pytester) -> None:
    seen = _seen(probed, "--agentperturb", "suites/workflows", "-k", "forward-invoice and clean",
                 "--agentperturb-model", "reference/oracle")
    assert seen["own_modules"] >= 20, seen  # the session's modules were imported...
    # ...by Python's own import, not parsed and rewritten by pytest's: all but the entry point and what the
    # package's __init__ imports (its version), which pytest imports before their code can opt out
    assert set(seen["rewritten"]) <= {"pytest_agentperturb.model", "pytest_agentperturb.plugin"}, seen


def test_a_model_backed_run_imports_litellm_before_the_first_item_and_pandas_only_after_it(
        probed: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-fake")
    with FakeOpenAI(StepsPolicy(steps=2, latency=0.0)) as srv:
        seen = _seen(probed, "--agentperturb", "suites/workflows", "-k", "forward-invoice and clean",
                     "--agentperturb-model", "openai/fake", "--agentperturb-api-base", srv.base)
        assert srv.requests, "the one model-backed item sent no request"
    assert "litellm" not in seen["configured"], seen
    # the one item is also the last, whose analysis preload waits for litellm's import: pandas does not
    # share the CPU with it (the run's first request waits for that import)
    assert "pandas" not in seen["at_litellm"], seen

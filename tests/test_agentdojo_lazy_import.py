"""The deferred ``agentdojo.agent_pipeline`` package: concurrent first imports all get the real names."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("agentdojo", reason="the AgentDojo adapter tests need the extra: pip install -e '.[agentdojo]'")

ROOT = Path(__file__).resolve().parents[1]

CODE = """
import threading
from pytest_agentperturb.formats import agentdojo as ad
ad.load()
n = 8
barrier, got, errors = threading.Barrier(n), [], []
def first_import():
    barrier.wait()
    try:
        from agentdojo.agent_pipeline import AgentPipeline
        got.append(AgentPipeline)
    except Exception as exc:
        errors.append(repr(exc))
threads = [threading.Thread(target=first_import) for _ in range(n)]
for t in threads: t.start()
for t in threads: t.join()
assert not errors, errors
assert len(got) == n and len(set(map(id, got))) == 1, got
print("ok", n)
"""


@pytest.mark.parametrize("attempt", range(3))
def test_concurrent_first_imports_of_the_deferred_package_all_succeed(attempt: int) -> None:
    res = subprocess.run([sys.executable, "-c", CODE], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and "ok 8" in res.stdout, res.stderr[-3000:]

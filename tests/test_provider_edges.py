"""Provider edges of the litellm agent: a trickling server, empty choices, Retry-After, missing usage.

Every run goes through ``pytest --agentperturb`` against the local fake OpenAI server, like
``test_litellm_agent.py``.
"""

from __future__ import annotations

import copy
import sqlite3
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from fake_openai import GOLD_REPLIES, FakeOpenAI, Reply, Script, answer, error, preimported  # noqa: F401 (fixture)

from pytest_agentperturb.agents.litellm_agent import RateLimitError, retry_after, retry_delay
from pytest_agentperturb.model.options import LLMSettings
from pytest_agentperturb.run.store import read_episodes

pytestmark = pytest.mark.usefixtures("preimported")
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _fake_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")


def run(pytester: pytest.Pytester, suite: Path, srv: FakeOpenAI, *args: str) -> pytest.RunResult:
    return pytester.runpytest(
        "--agentperturb", str(suite), "-p", "no:cacheprovider", "-k", "forward and clean",
        "--agentperturb-model", "openai/fake", "--agentperturb-api-base", srv.base,
        "--agentperturb-store", str(pytester.path / "s.sqlite"),
        "--agentperturb-report", str(pytester.path / "r.html"), *args)


# -- the request timeout is a deadline for the whole reply -------------------------------------------------
def test_a_server_that_trickles_is_cut_off_at_the_request_timeout(pytester: pytest.Pytester, suite: Path) -> None:
    slow = Reply(200, answer("a reply sent one byte at a time").body, trickle=0.1)  # ~40 s for the whole body
    with FakeOpenAI(Script([slow])) as srv:
        t0 = time.perf_counter()
        result = run(pytester, suite, srv, "--agentperturb-request-timeout", "1", "--agentperturb-attempts", "1")
        wall = time.perf_counter() - t0
    result.assert_outcomes(errors=1)
    (rec,) = read_episodes(pytester.path / "s.sqlite")
    assert rec.error.startswith("RequestTimeout: openai/fake: no reply within the request timeout (1 s for the "
                                "whole reply)"), rec.error
    assert wall < 20, f"the call was not cut off at its deadline ({wall:.1f} s)"


# -- provider edges -------------------------------------------------------------------------------------------------
def test_an_empty_choices_list_is_a_provider_error_with_a_fix(pytester: pytest.Pytester, suite: Path) -> None:
    body = answer("x").body
    body["choices"] = []
    with FakeOpenAI(Script([Reply(200, body)])) as srv:
        result = run(pytester, suite, srv)
    result.assert_outcomes(errors=1)
    assert "IndexError" not in result.stdout.str()
    (rec,) = read_episodes(pytester.path / "s.sqlite")
    assert rec.error.startswith("ProviderError: openai/fake: the provider returned no choices") and "Fix:" in rec.error
    assert len(srv.requests) == 1  # not retried


def test_retry_after_is_honoured(pytester: pytest.Pytester, suite: Path) -> None:
    """backoff 2 s (3 attempts: delays up to 4 s); the provider asks for 0.3 s: the retry comes after 0.3 s."""
    limited = error(429, "slow down", "rate_limit_error")
    limited.headers = {"retry-after-ms": "300"}
    with FakeOpenAI(Script([limited, *GOLD_REPLIES])) as srv:
        result = run(pytester, suite, srv, "--agentperturb-backoff", "2", "--agentperturb-attempts", "3")
        times = list(srv.times)
    result.assert_outcomes(passed=1)
    gap = times[1][0] - times[0][1]
    assert 0.25 <= gap < 1.5, f"waited {gap:.2f} s; the provider asked for 0.3 s (the backoff alone: 2 s)"


def test_retry_after_is_capped_by_the_backoff_schedule(pytester: pytest.Pytester, suite: Path) -> None:
    limited = error(429, "come back in an hour", "rate_limit_error")
    limited.headers = {"Retry-After": "3600"}
    with FakeOpenAI(Script([limited, *GOLD_REPLIES])) as srv:
        t0 = time.perf_counter()
        result = run(pytester, suite, srv, "--agentperturb-backoff", "0.05", "--agentperturb-attempts", "2")
        wall = time.perf_counter() - t0
    result.assert_outcomes(passed=1)
    assert wall < 30


def test_retry_after_parsing_and_the_delay_rule() -> None:
    class Exc(Exception):
        def __init__(self, headers: dict[str, str]) -> None:
            self.litellm_response_headers = headers

    assert retry_after(Exc({"retry-after": "7"})) == 7.0
    assert retry_after(Exc({"retry-after-ms": "1500", "retry-after": "7"})) == 1.5
    assert 50 < (retry_after(Exc({"retry-after": time.strftime("%a, %d %b %Y %H:%M:%S GMT",
                                                               time.gmtime(time.time() + 60))})) or 0) <= 61
    assert retry_after(Exc({"retry-after": "soon"})) is None and retry_after(Exc({"retry-after": "inf"})) is None
    assert retry_after(Exc({})) is None and retry_after(ValueError("no headers")) is None
    settings = LLMSettings(backoff=30.0, attempts=3)
    err = RateLimitError("x")
    assert [retry_delay(err, a, settings) for a in (0, 1)] == [30.0, 60.0]
    err.retry_after = 5.0
    assert retry_delay(err, 0, settings) == 5.0
    err.retry_after = 3600.0
    assert retry_delay(err, 0, settings) == 60.0  # the schedule's longest delay


def test_missing_usage_is_stored_as_unknown_not_zero(pytester: pytest.Pytester, suite: Path) -> None:
    replies = []
    for r in GOLD_REPLIES:
        body: dict[str, Any] = copy.deepcopy(r.body)
        del body["usage"]
        replies.append(Reply(200, body))
    with FakeOpenAI(Script(replies)) as srv:
        result = run(pytester, suite, srv)
    result.assert_outcomes(passed=1)
    (rec,) = read_episodes(pytester.path / "s.sqlite")
    assert (rec.input_tokens, rec.output_tokens, rec.reasoning_tokens) == (None, None, None)
    with closing(sqlite3.connect(pytester.path / "s.sqlite")) as db:
        assert db.execute("SELECT input_tokens, output_tokens FROM episodes").fetchone() == (None, None)

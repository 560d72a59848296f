"""The litellm agent over the real litellm code path, against a local fake OpenAI server.

Every run goes through ``pytest --agentperturb`` (pytester, in process) with
``--agentperturb-model openai/fake --agentperturb-api-base http://127.0.0.1:PORT/v1``.
Retry delays are shortened with ``--agentperturb-backoff``, never by patching sleep.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fake_openai import GOLD_REPLIES, FakeOpenAI, Reply, Script, StepsPolicy, answer, error, tool_call, preimported  # noqa: F401 (fixture)

from pytest_agentperturb.agents.litellm_agent import tool_result_messages
from pytest_agentperturb.run.store import read_episodes

pytestmark = pytest.mark.usefixtures("preimported")
ROOT = Path(__file__).resolve().parents[1]
FAKE_KEY = "sk-test-not-a-real-key"


@pytest.fixture(autouse=True)
def _fake_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)


def run(pytester: pytest.Pytester, suite: Path, srv: FakeOpenAI, *args: str, k: str = "forward and clean"
        ) -> pytest.RunResult:
    """One in-process ``pytest --agentperturb`` run of the ``forward-invoice`` task against ``srv``."""
    return pytester.runpytest(
        "--agentperturb", str(suite), "-p", "no:cacheprovider", "-k", k,
        "--agentperturb-model", "openai/fake", "--agentperturb-api-base", srv.base,
        "--agentperturb-store", str(pytester.path / "s.sqlite"),
        "--agentperturb-report", str(pytester.path / "r.html"), "--agentperturb-backoff", "0.01", *args)


def rows(pytester: pytest.Pytester) -> list[Any]:
    return read_episodes(pytester.path / "s.sqlite")


GOLD = GOLD_REPLIES


def test_scripted_tool_calls_solve_the_task_and_usage_is_recorded(pytester: pytest.Pytester,
                                                                   suite: Path) -> None:
    with FakeOpenAI(Script(GOLD)) as srv:
        result = run(pytester, suite, srv)
    result.assert_outcomes(passed=1)
    (rec,) = rows(pytester)
    assert (rec.success, rec.reward, rec.error) == (True, 1.0, "")
    assert (rec.input_tokens, rec.output_tokens, rec.reasoning_tokens) == (1800, 100, 10)
    assert (rec.tool_calls, rec.turns, rec.cost_usd) == (3, 4, None)  # openai/fake has no price
    per_call = [e["usage"] for e in rec.trajectory if e.get("role") == "assistant" and "usage" in e]
    assert [u["input_tokens"] for u in per_call] == [300, 400, 500, 600]
    # the surfaces map onto the chat format: procedure = system, context = earlier turns, user last
    first = srv.requests[0]
    roles = [m["role"] for m in first["messages"]]
    assert roles == ["system", "user", "assistant", "user"]
    assert first["messages"][0]["content"].startswith("You are the finance assistant of ACME.")
    assert "PO-7730" in first["messages"][1]["content"]
    assert first["messages"][-1]["content"].startswith("Northwind sent us invoice INV-5521")
    names = [t["function"]["name"] for t in first["tools"]]
    assert names[-1] == "ask_user" and "mail_send" in names
    assert first["max_tokens"] == 16384
    # each tool result comes back as a tool message answering its call id
    second = srv.requests[1]["messages"]
    assert second[-1]["role"] == "tool" and second[-1]["tool_call_id"] == second[-2]["tool_calls"][0]["id"]
    assert "INV-5521" in second[-1]["content"]


def test_bad_calls_become_error_observations_and_the_loop_goes_on(pytester: pytest.Pytester,
                                                                  suite: Path) -> None:
    script = [tool_call("mail_search", '{"query": "INV-'),        # malformed JSON
              tool_call("mail_delete_all", {}),                    # unknown tool
              tool_call("files_move", {"path": "/x.pdf"}),         # schema violation (true schema)
              tool_call("ask_user", {"question": "Which purchase order does the invoice belong to?"}),
              *GOLD]
    with FakeOpenAI(Script(script)) as srv:
        result = run(pytester, suite, srv)
    result.assert_outcomes(passed=1)
    obs = [r["messages"][-1]["content"] for r in srv.requests[1:5]]
    assert obs[0].startswith("ERROR: the arguments of mail_search are not valid JSON")
    assert obs[1].startswith("ERROR: unknown tool 'mail_delete_all'")
    assert obs[2] == "ERROR: files_move: missing required argument 'folder'"
    assert obs[3] == "I don't have more details."  # the simulator answered (nothing is withheld on clean)
    (rec,) = rows(pytester)
    assert rec.tool_calls == 7 and rec.success
    assert {"role": "assistant", "tool": "mail_search", "args": '{"query": "INV-'} in rec.trajectory
    assert {"role": "assistant", "tool": "ask_user",
            "args": {"question": "Which purchase order does the invoice belong to?"}} in rec.trajectory


def test_rate_limit_is_retried_then_succeeds(pytester: pytest.Pytester, suite: Path) -> None:
    with FakeOpenAI(Script([error(429, "Rate limit reached", "rate_limit_error"), *GOLD])) as srv:
        result = run(pytester, suite, srv)
    result.assert_outcomes(passed=1)
    assert len(srv.requests) == 5  # one retry, and no hidden retries inside litellm/openai


def test_persistent_rate_limit_is_an_error_excluded_from_aggregates(pytester: pytest.Pytester,
                                                                    suite: Path) -> None:
    with FakeOpenAI(Script([error(429, "Rate limit reached", "rate_limit_error")] * 3)) as srv:
        result = run(pytester, suite, srv)
    result.assert_outcomes(errors=1)
    assert len(srv.requests) == 3  # --agentperturb-attempts default: 3
    result.stdout.fnmatch_lines(["*RateLimitError: openai/fake: *Rate limit reached*",
                                 "*errors: 1 (excluded from every aggregate)*"])
    (rec,) = rows(pytester)
    assert rec.error.startswith("RateLimitError") and rec.reward is None and rec.success is None


def test_timeout_is_retried_then_recorded(pytester: pytest.Pytester, suite: Path) -> None:
    slow = Reply(200, answer("late").body, delay=1.5)
    with FakeOpenAI(Script([slow, slow])) as srv:
        result = run(pytester, suite, srv, "--agentperturb-request-timeout", "0.3",
                     "--agentperturb-attempts", "2")
    result.assert_outcomes(errors=1)
    assert len(srv.requests) == 2
    (rec,) = rows(pytester)
    assert rec.error.startswith("RequestTimeout: openai/fake: no reply within the request timeout")


@pytest.mark.parametrize(("status", "cls", "fix"), [
    (401, "AuthenticationError", "Fix: set OPENAI_API_KEY"),
    (400, "BadRequestError", "Fix: check the model name"),
])
def test_auth_and_bad_request_errors_are_not_retried(pytester: pytest.Pytester, suite: Path,
                                                     status: int, cls: str, fix: str) -> None:
    with FakeOpenAI(Script([error(status, "nope"), *GOLD])) as srv:
        result = run(pytester, suite, srv)
    result.assert_outcomes(errors=1)
    assert len(srv.requests) == 1
    (rec,) = rows(pytester)
    assert rec.error.startswith(f"{cls}: openai/fake") and fix in rec.error


def test_turn_limit_ends_the_episode_as_an_agent_outcome(pytester: pytest.Pytester, suite: Path) -> None:
    with FakeOpenAI(StepsPolicy(steps=50, latency=0)) as srv:
        result = run(pytester, suite, srv, "--agentperturb-max-turns", "3")
    result.assert_outcomes(failed=0, errors=0)
    assert len(srv.requests) == 3
    (rec,) = rows(pytester)
    assert rec.error == "" and rec.success is False and rec.turns == 3
    assert rec.trajectory[-2] == {"role": "harness", "content": "turn limit 3 reached"}


def test_image_and_text_tool_outputs_in_the_message_format() -> None:
    assert tool_result_messages("c1", "files_read", "plain") == [
        {"role": "tool", "tool_call_id": "c1", "content": "plain"}]
    msgs = tool_result_messages("c2", "screenshot", [
        {"type": "text", "text": "the screen"}, {"type": "image", "data": "iVBORw0K", "mime_type": "image/png"}])
    assert msgs[0] == {"role": "tool", "tool_call_id": "c2",
                       "content": "the screen (1 image(s) follow in the next message)"}
    assert msgs[1]["role"] == "user"
    assert msgs[1]["content"][1] == {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0K"}}


def test_protocol_options_from_the_ini_file_and_bad_values(pytester: pytest.Pytester, suite: Path) -> None:
    pytester.makeini("[pytest]\nagentperturb_max_tokens = 512\nagentperturb_attempts = 1\n")
    with FakeOpenAI(Script([error(429, "slow down", "rate_limit_error"), *GOLD])) as srv:
        result = run(pytester, suite, srv)
    result.assert_outcomes(errors=1)
    assert len(srv.requests) == 1 and srv.requests[0]["max_tokens"] == 512
    bad = pytester.runpytest("--agentperturb", str(suite), "--agentperturb-concurrency", "zero")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*--agentperturb-concurrency: concurrency must be an integer, got 'zero'*"])


def test_a_reference_run_imports_neither_litellm_nor_hypothesis_and_litellm_not_the_network(tmp_path: Path) -> None:
    """The README's main job, from the repository (its pytest settings apply), in a fresh process.

    A reference-only run imports neither litellm nor hypothesis (whose pytest
    plugin would import it at the end of the session; the project's addopts
    turn that plugin off).  Importing litellm afterwards opens no socket: the
    plugin sets LITELLM_LOCAL_MODEL_COST_MAP before the (lazy) import.
    """
    code = """
import os, socket, sys
calls = []
real = socket.socket.connect
def spy(self, addr):
    calls.append(addr)
    raise OSError("network disabled in this test")
socket.socket.connect = spy
import pytest
rc = pytest.main(["--agentperturb", "suites/workflows", "-q", "-p", "no:cacheprovider", "-k", "forward-invoice and clean",
                  "--agentperturb-model", "reference/literal", "--agentperturb-model", "reference/careful",
                  "--agentperturb-store", sys.argv[1] + "/s.sqlite", "--agentperturb-report", sys.argv[1] + "/r.html"])
assert rc == 0, rc
loaded = sorted(m for m in ("litellm", "hypothesis") if m in sys.modules)
print("LOADED", loaded)
from pytest_agentperturb.agents.litellm_agent import import_litellm
import_litellm()
print("COSTMAP", os.environ["LITELLM_LOCAL_MODEL_COST_MAP"], "CONNECTS", len(calls))
"""
    env = {k: v for k, v in os.environ.items() if k != "LITELLM_LOCAL_MODEL_COST_MAP"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=180)
    assert "LOADED []" in out.stdout, out.stdout[-2000:] + out.stderr[-2000:]
    assert "COSTMAP True CONNECTS 0" in out.stdout, out.stdout[-2000:] + out.stderr[-2000:]


def test_litellm_is_imported_in_the_main_thread_before_the_episode_loop_starts(tmp_path: Path) -> None:
    """The seconds of litellm's import never stall the episodes that share the loop; the cyclic collector
    pauses while it runs (it would walk the objects the import builds again and again) and runs again after."""
    code = """
import gc, sys, threading
seen = []
class Spy:
    def find_spec(self, name, path=None, target=None):
        if name == "litellm" and not seen:
            seen.append((threading.current_thread().name, sorted(t.name for t in threading.enumerate()),
                         gc.isenabled()))
        return None
sys.meta_path.insert(0, Spy())
import pytest
rc = pytest.main(["--agentperturb", "suites/workflows", "-q", "-p", "no:cacheprovider", "-k", "forward-invoice",
                  "--agentperturb-model", "openai/fake", "--agentperturb-api-base", sys.argv[1],
                  "--agentperturb-store", "s.sqlite", "--agentperturb-report", "r.html"])
print("RC", rc, "SEEN", seen, "COLLECTING", gc.isenabled())
"""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    shutil.copytree(ROOT / "suites" / "workflows", tmp_path / "suites" / "workflows")
    with FakeOpenAI(StepsPolicy(steps=2, latency=0.0)) as srv:
        out = subprocess.run([sys.executable, "-c", code, srv.base], cwd=tmp_path, env=env, capture_output=True,
                             text=True, timeout=300)
        requests = len(srv.requests)
    text = out.stdout[-3000:] + out.stderr[-2000:]
    assert "errors: 0 " in out.stdout and requests >= 2 * 10, text  # the episodes really ran, against the server
    # first import: main thread, no loop yet, the collector paused; on again afterwards
    assert "SEEN [('MainThread', ['MainThread'], False)] COLLECTING True" in out.stdout, text


def test_prepare_runs_each_agents_set_up_and_imports_litellm_for_a_user_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the session calls before the episode loop starts: agents' ``prepare()``; litellm for a user model."""
    from pytest_agentperturb.agents import prepare
    from pytest_agentperturb.agents import litellm_agent
    from pytest_agentperturb.model.options import LLMSettings

    imports: list[str] = []
    monkeypatch.setattr(litellm_agent, "import_litellm", lambda: imports.append("litellm") or object())

    class Own:
        name, baseline, ready = "own", False, 0

        def prepare(self) -> None:
            self.ready += 1

    own, llm = Own(), litellm_agent.LiteLLMAgent("openai/fake")
    prepare([own, llm, object()], LLMSettings())
    assert own.ready == 1 and imports == ["litellm"] and llm._litellm is not None  # the agent keeps the module
    prepare([], LLMSettings(user_model="openai/user"))
    assert imports == ["litellm", "litellm"]
    prepare([], LLMSettings())
    assert imports == ["litellm", "litellm"]  # no model anywhere: nothing imported


def test_json_of_requests_is_serialisable_by_the_server_fixture() -> None:
    """The fake server itself answers 404 off-route and records only chat requests."""
    import urllib.request

    with FakeOpenAI(Script([answer("x")])) as srv:
        req = urllib.request.Request(srv.base + "/models", data=b"{}", method="POST")
        with pytest.raises(urllib.error.HTTPError) as exc:
            urllib.request.urlopen(req, timeout=5)
        exc.value.close()
        assert exc.value.code == 404 and srv.requests == []
        with urllib.request.urlopen(urllib.request.Request(
                srv.base + "/chat/completions", data=b'{"messages": []}', method="POST"), timeout=5) as resp:
            body = json.loads(resp.read())
        assert body["choices"][0]["message"]["content"] == "x" and len(srv.requests) == 1


def test_litellm_prepares_requests_inline_on_the_episode_loop_and_other_jobs_use_threads(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """litellm's request preparation runs on the loop for key-based providers; threads for the rest."""
    import asyncio
    import concurrent.futures
    import threading

    from pytest_agentperturb.agents.litellm_agent import LiteLLMAgent, prepares_inline, with_deadline
    from pytest_agentperturb.model.options import LLMSettings
    from pytest_agentperturb.run.batcher import Batcher

    assert prepares_inline("openai/gpt-4o") and prepares_inline("gpt-4o") and prepares_inline("hosted_vllm/x")
    assert not prepares_inline("vertex_ai/gemini-pro") and not prepares_inline("bedrock/claude")

    async def where(model: str) -> list[str]:
        """Threads that ran the jobs submitted during one call of ``model`` (two jobs), then outside a call."""
        loop = asyncio.get_running_loop()

        async def call() -> list[str]:
            first = await loop.run_in_executor(None, lambda: threading.current_thread().name)
            second = await loop.run_in_executor(None, lambda: threading.current_thread().name)
            return [first, second]

        got = await with_deadline(call(), model, LLMSettings())
        return [*got, await asyncio.to_thread(lambda: threading.current_thread().name)]

    threaded_jobs = []
    submit = concurrent.futures.ThreadPoolExecutor.submit
    monkeypatch.setattr(concurrent.futures.ThreadPoolExecutor, "submit",
                        lambda self, fn, *a, **k: threaded_jobs.append(fn) or submit(self, fn, *a, **k))
    with FakeOpenAI(StepsPolicy(steps=1, latency=0)) as srv:  # real litellm calls on the episode loop
        agent = LiteLLMAgent("openai/fake", LLMSettings(api_base=srv.base))
        agent.prepare()
        fresh = Batcher(concurrency=2)
        try:
            replies = [fresh.call(lambda: agent.complete([{"role": "user", "content": "hi"}], [])) for _ in range(6)]
        finally:
            fresh.close()
    assert [r.choices[0].message.content for r in replies] == ["done"] * 6
    # litellm prepares each request in the loop's default executor: six preparations ran inline; what went to a
    # thread is at most the first connection's address lookup (aiohttp caches it)
    assert len(threaded_jobs) <= 1, threaded_jobs
    batcher = Batcher(concurrency=2)
    try:
        inline = batcher.call(lambda: where("openai/x"))
        threaded = batcher.call(lambda: where("vertex_ai/x"))
    finally:
        batcher.close()
    assert inline[0] == "agentperturb-episodes"  # the first job of the call: on the loop's own thread
    assert inline[1].startswith("agentperturb-episode_") and inline[2].startswith("agentperturb-episode_")
    assert all(name.startswith("agentperturb-episode_") for name in threaded)


def test_a_huge_model_reply_is_cut_and_the_row_says_so(pytester: pytest.Pytester, suite: Path) -> None:
    """A 10 MB reply: the row and the pages stay small, the reply ends in a marker, a harness note says so."""
    from pytest_agentperturb.model.limits import MAX_REPLY_CHARS

    huge = "Filed INV-5521. " + "x" * 10_000_000
    with FakeOpenAI(Script([*GOLD[:3], answer(huge)])) as srv:
        result = run(pytester, suite, srv)
    assert "Traceback" not in result.stdout.str()
    (rec,) = rows(pytester)
    replies = [e["content"] for e in rec.trajectory if e.get("role") == "assistant" and e.get("content")]
    assert max(map(len, replies)) <= MAX_REPLY_CHARS and replies[-1].endswith("characters left out]")
    notes = [e["content"] for e in rec.trajectory if e.get("role") == "harness"]
    assert any(n.startswith("truncated: a model reply was cut to 200,000 characters") for n in notes), notes
    assert len(json.dumps(rec.trajectory)) < 3 * MAX_REPLY_CHARS
    pages = sum(p.stat().st_size for p in pytester.path.rglob("*.html"))
    assert pages < 4_000_000, pages

"""A local OpenAI-compatible chat-completions server for tests and the benchmark.

Only ``POST /v1/chat/completions`` is served, on 127.0.0.1 (never the network).
Replies come from a *policy*: a callable that gets the parsed request body and
returns a :class:`Reply` (status, JSON body, delay).  Ready-made policies:

* :class:`Script` -- replies popped from a queue, one per request, in order;
* :class:`StepsPolicy` -- ``k`` calls per episode: ``k - 1`` tool calls to the
  first advertised tool, then a final answer (what the benchmark uses).

Run it as a script for the benchmark::

    python tests/fake_openai.py --latency 0.5 --steps 4   # prints "PORT <n>" then serves
"""

from __future__ import annotations

import argparse
import itertools
import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

try:  # litellm imports this backport, which patches the stdlib's distribution finder and adds its
    # own to sys.meta_path; pytester restores sys.meta_path after an in-process run, so import it
    # *before* any run, or later runs find no pytest11 entry points at all.
    import importlib_metadata  # noqa: F401
except ImportError:  # pragma: no cover
    pass


@dataclass
class Reply:
    """One HTTP reply: status code, JSON body, and a delay before it is sent.

    ``headers`` are extra response headers (``Retry-After``...); ``trickle``
    > 0 sends the body one byte every ``trickle`` seconds (a server that
    keeps a request alive without ever finishing it).
    """

    status: int = 200
    body: dict[str, Any] = field(default_factory=dict)
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    trickle: float = 0.0


_ids = itertools.count(1)


def preimport() -> None:
    """Import litellm and pandas in the outer test process, once.

    pytester's in-process runs delete the modules imported during a run
    afterwards; numpy cannot be imported twice and litellm takes seconds, so
    tests import both before their first in-process run.
    """
    import pandas  # noqa: F401

    from pytest_agentperturb.agents.litellm_agent import import_litellm

    import_litellm()


try:
    import pytest

    @pytest.fixture(scope="session")
    def preimported() -> None:
        """Session-scoped :func:`preimport`: runs before any function-scoped ``pytester``,
        whose teardown would otherwise delete modules imported inside the test."""
        preimport()
except ImportError:  # pragma: no cover - the benchmark runs this file without pytest fixtures
    pass


def completion(content: str | None = None, tool_calls: Iterable[tuple[str, str]] = (),
               prompt_tokens: int = 100, completion_tokens: int = 20, reasoning_tokens: int = 0,
               model: str = "fake") -> dict[str, Any]:
    """A chat.completion body; ``tool_calls`` are (name, raw JSON arguments) pairs."""
    calls = [{"id": f"call_{next(_ids)}", "type": "function", "function": {"name": n, "arguments": a}}
             for n, a in tool_calls]
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    return {
        "id": f"chatcmpl-{next(_ids)}", "object": "chat.completion", "created": 1700000000, "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens,
                  "completion_tokens_details": {"reasoning_tokens": reasoning_tokens}},
    }


def error(status: int, message: str, kind: str = "invalid_request_error") -> Reply:
    """An OpenAI-style error reply (429 rate limit, 401 auth, 400 bad request...)."""
    return Reply(status, {"error": {"message": message, "type": kind, "param": None, "code": None}})


def tool_call(name: str, args: dict[str, Any] | str, **usage: Any) -> Reply:
    """A reply that calls one tool (``args`` as a dict, or raw text for malformed JSON)."""
    raw = args if isinstance(args, str) else json.dumps(args)
    return Reply(200, completion(None, [(name, raw)], **usage))


def answer(text: str, **usage: Any) -> Reply:
    """A final answer without tool calls."""
    return Reply(200, completion(text, **usage))


#: The gold solution of ``suites/workflows/forward-invoice`` as model replies, with usage.
GOLD_REPLIES = [
    tool_call("mail_search", {"query": "INV-5521"}, prompt_tokens=300, completion_tokens=10, reasoning_tokens=4),
    tool_call("files_move", {"path": "/mail-attachments/INV-5521.pdf", "folder": "/finance/payable"},
              prompt_tokens=400, completion_tokens=20, reasoning_tokens=0),
    tool_call("mail_send", {"to": "ap@acme.test", "subject": "Invoice INV-5521 / PO-7730", "body": "filed"},
              prompt_tokens=500, completion_tokens=30, reasoning_tokens=6),
    answer("Filed INV-5521 in /finance/payable and forwarded it to ap@acme.test quoting PO-7730.",
           prompt_tokens=600, completion_tokens=40),
]


class Script:
    """Replies popped from a queue in request order; an empty queue is a 500."""

    def __init__(self, replies: Iterable[Reply] = ()) -> None:
        self.replies: deque[Reply] = deque(replies)
        self.lock = threading.Lock()

    def __call__(self, request: dict[str, Any]) -> Reply:
        with self.lock:
            if not self.replies:
                return error(500, "fake server: script exhausted", "server_error")
            return self.replies.popleft()


class StepsPolicy:
    """``steps`` calls per episode: tool calls to the first advertised tool, then an answer.

    The episode's position is read from the request (number of assistant
    messages so far), so any number of episodes can run concurrently.
    """

    def __init__(self, steps: int, latency: float) -> None:
        self.steps, self.latency = steps, latency

    def __call__(self, request: dict[str, Any]) -> Reply:
        done = sum(1 for m in request.get("messages", []) if m.get("role") == "assistant"
                   and m.get("tool_calls"))
        tools = request.get("tools") or []
        if done < self.steps - 1 and tools:
            fn = tools[0]["function"]
            args = {p: "x" for p in fn.get("parameters", {}).get("required", [])}
            r = tool_call(fn["name"], args)
        else:
            r = answer("done")
        r.delay = self.latency
        return r


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # many concurrent connections at start-up

    def __init__(self, *args: Any) -> None:
        self.connections: set[Any] = set()
        super().__init__(*args)

    def get_request(self) -> Any:
        conn, addr = super().get_request()
        self.connections.add(conn)
        return conn, addr

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a connection closed at shutdown is not an error here

    def close_connections(self) -> None:
        """Close kept-alive client connections (their handler threads end)."""
        import socket

        for conn in list(self.connections):
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()
        self.connections.clear()


class FakeOpenAI:
    """The server; use as a context manager.  ``requests`` keeps every request body."""

    def __init__(self, policy: Callable[[dict[str, Any]], Reply]) -> None:
        self.policy = policy
        self.requests: list[dict[str, Any]] = []
        self.times: list[tuple[float, float]] = []
        self.auth: list[str] = []
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, like a real provider
            # headers and body go out in separate writes: with Nagle's algorithm the body would wait for
            # the client's delayed ACK of the headers (~40 ms on Linux), a latency no real provider adds
            disable_nagle_algorithm = True

            def do_POST(self) -> None:  # noqa: N802 (http.server API)
                t0 = time.perf_counter()
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except json.JSONDecodeError:
                    body = {}
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    reply = error(404, f"fake server: no route {self.path}")
                else:
                    with outer._lock:
                        outer.requests.append(body)
                        outer.auth.append(self.headers.get("Authorization", ""))
                    reply = outer.policy(body)
                if reply.delay:  # the reply is due `delay` seconds after the request came in, work included
                    time.sleep(max(0.0, reply.delay - (time.perf_counter() - t0)))
                data = json.dumps(reply.body).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    if reply.trickle:
                        for i in range(len(data)):
                            self.wfile.write(data[i:i + 1])
                            self.wfile.flush()
                            time.sleep(reply.trickle)
                    else:
                        self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout test)
                    pass
                with outer._lock:
                    outer.times.append((t0, time.perf_counter()))

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.base = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.server.close_connections()


def main() -> None:
    """Serve :class:`StepsPolicy` until killed; print the port first."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--latency", type=float, default=0.5)
    ap.add_argument("--steps", type=int, default=4)
    a = ap.parse_args()
    srv = FakeOpenAI(StepsPolicy(a.steps, a.latency))
    print(f"PORT {srv.port}", flush=True)
    srv.server.serve_forever()


if __name__ == "__main__":
    main()

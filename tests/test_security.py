"""What a user, a task author or a model controls stays inert: node ids, both HTML outputs, names."""

from __future__ import annotations

import html
import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from fake_openai import preimported  # noqa: F401 (fixture)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

PAYLOADS = ("<script>alert(1)</script>", '"><img src=x onerror=alert(2)>', "</textarea>", "javascript:alert(3)")
P = " ".join(PAYLOADS)


class _Markup(HTMLParser):
    """Every element and attribute of an HTML fragment."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str]] = []
        self.end_tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs += [(k, v or "") for k, v in attrs]

    def handle_endtag(self, tag: str) -> None:
        self.end_tags.append(tag)


def assert_no_raw_payload(text: str, where: str) -> None:
    for p in PAYLOADS[:3]:
        assert p not in text, f"raw payload {p!r} in {where}"


def assert_inert(fragment: str, where: str) -> None:
    """No raw payload survives: no script or payload element, no event handler, no javascript: URL."""
    assert_no_raw_payload(fragment, where)
    m = _Markup()
    m.feed(fragment)
    assert "script" not in m.tags and "textarea" not in m.end_tags, where
    assert not [k for k, _ in m.attrs if k.startswith("on")], f"an event handler in {where}"
    urls = [v for k, v in m.attrs if k in ("href", "src", "action", "formaction", "xlink:href")]
    assert not [u for u in urls if u.strip().lower().startswith("javascript:")], f"a javascript: URL in {where}"
    assert not [v for k, v in m.attrs if k == "src" and v == "x"], f"the payload's <img> in {where}"


CONFTEST = '''
import dataclasses
import pytest
from kv_benchmark import approval_task
from pytest_agentperturb import Turn

P = {P!r}


class EvilSuite:
    name = "evil"

    def tasks(self):
        t = approval_task("evil")
        s = t.surfaces
        yield dataclasses.replace(
            t, id='x"><img src=x onerror=alert(1)>', title=P,
            surfaces=dataclasses.replace(s, user=s.user + P, context=(*s.context, Turn("user", P))))


def pytest_agentperturb_suite_adapter(path, name, config):
    return EvilSuite() if name == "evil" else None
'''

AGENTS = '''
P = {P!r}


def talker(ctx):
    ctx.call_tool("kv_read", {{"key": P}})
    ctx.call_tool(P, {{"x": P}})
    ctx.ask_user(P)
    ctx.finish(P)


def broken(ctx):
    raise RuntimeError(P)
'''


def test_every_user_and_model_string_is_inert_in_both_html_outputs(pytester: pytest.Pytester) -> None:
    shutil.copy(HERE / "kv_benchmark.py", pytester.path / "kv_benchmark.py")
    pytester.makeconftest(CONFTEST.format(P=P))
    (pytester.path / "agents.py").write_text(AGENTS.format(P=P))
    result = pytester.runpytest(
        "--agentperturb", "--agentperturb-suite", "evil", "-p", "no:cacheprovider",
        "--agentperturb-families", "clean,user-incorrect,tool-redundant,inserted-injection",
        "--agentperturb-agent", "agents.py:talker", "--agentperturb-agent", "agents.py:broken",
        "--agentperturb-report", "r.html", "--agentperturb-store", "s.sqlite",
        "--html", "ph.html", "--self-contained-html")
    result.stdout.fnmatch_lines(["*= 4 errors, 4 agent-failed in *"])
    assert "onerror=alert(1)" in result.stdout.str()  # the id really held the payload

    page = (pytester.path / "r.html").read_text(encoding="utf-8")
    assert html.escape('x"><img src=x onerror=alert(1)>') in page  # the task id, shown as text
    assert_inert(page, "the agentperturb report")
    # the task pages: the hostile task id names no path, and every string on them is inert
    folder = pytester.path / "r-tasks"
    pages = sorted(folder.rglob("*"))
    assert all(p.is_dir() or p.suffix == ".html" for p in pages)
    (drill,) = [p for p in pages if p.is_file() and p.name != "index.html"]
    assert drill.parent.name == "evil" and re.fullmatch(r"x-img-src-x-onerror-alert-1--[0-9a-f]{10}\.html", drill.name)
    text = drill.read_text(encoding="utf-8")
    assert html.escape(PAYLOADS[1]) in text and html.escape(PAYLOADS[0]) in text  # the agent's strings, as text
    assert text.count(" id='ep-") == 8 and text.count("<ol class=traj>") == 8  # both agents' episodes, once each (the broken one's: its traceback)
    assert text.count("agent error: RuntimeError: ") == 4   # the broken agent's: its own error, no trajectory
    assert text.count("<pre class=err>Traceback (most recent call last):") == 4   # with its traceback (escaped)
    for p in pages:
        if p.is_file():
            assert_inert(p.read_text(encoding="utf-8"), f"the task page {p.name}")
    assert sorted(p.name for p in pytester.path.iterdir() if p.name.startswith("r")) == ["r-tasks", "r.html"]

    text = (pytester.path / "ph.html").read_text(encoding="utf-8")
    assert_no_raw_payload(text, "the pytest-html page")  # (the page has pytest-html's own script)
    blob = json.loads(html.unescape(re.search(r'data-jsonblob="([^"]*)"', text).group(1)))  # type: ignore[union-attr]
    fragments = 0
    for test_id, runs in blob["tests"].items():
        for run in runs:
            # what pytest-html's script inserts with innerHTML / insertAdjacentHTML
            parts: list[Any] = [*run.get("resultsTableRow", []), run.get("log", ""), *run.get("tableHtml", [])]
            parts += [e["content"] for e in run.get("extras", []) if e.get("format_type") == "html"]
            parts += [f"<a href=\"{e['content']}\">{e.get('name', '')}</a>" for e in run.get("extras", [])
                      if e.get("format_type") == "url"]
            for frag in parts:
                assert_inert(str(frag), f"pytest-html cell of {test_id}")
                fragments += 1
    assert fragments > 20


def test_a_model_name_with_markup_is_a_usage_error(pytester: pytest.Pytester) -> None:
    shutil.copytree(ROOT / "suites" / "workflows", pytester.path / "suites" / "workflows")
    result = pytester.runpytest("--agentperturb", "suites/workflows", "-p", "no:cacheprovider",
                                "--agentperturb-model", 'openai/"><img src=x onerror=alert(1)>')
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--agentperturb-model: 'openai/\"><img src=x onerror=alert(1)>' is not a valid "
                                 "agent or model name; allowed: letters, digits and . _ - + : / @*"])


@pytest.mark.parametrize("name", ["<script>x</script>", "a b", "suite::task"])
def test_a_python_agent_name_with_odd_characters_is_a_usage_error(pytester: pytest.Pytester, name: str) -> None:
    shutil.copytree(ROOT / "suites" / "workflows", pytester.path / "suites" / "workflows")
    (pytester.path / "agents.py").write_text(f"class Agent:\n    name = {name!r}\n    def run(self, ctx):\n"
                                             "        ctx.finish('x')\n")
    result = pytester.runpytest("--agentperturb", "suites/workflows", "-p", "no:cacheprovider",
                                "--agentperturb-agent", "agents.py:Agent")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--agentperturb-agent agents.py:Agent: *fix: rename the agent*"])


def test_ordinary_litellm_names_are_accepted() -> None:
    from pytest_agentperturb.model.options import check_name

    for name in ("openai/gpt-5-mini", "ollama_chat/qwen3:8b", "bedrock/anthropic.claude-3-5-sonnet-20240620-v1:0",
                 "huggingface/meta-llama/Llama-3.1-8B-Instruct", "vertex_ai/gemini-1.5-pro@001", "my.agent:run"):
        assert check_name(name, "--agentperturb-model") == name


# -- a key echoed by the provider never reaches the store or the report ------------------------------
def test_a_key_echoed_in_model_content_is_redacted_before_it_is_stored(
        preimported: None, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    from fake_openai import FakeOpenAI, Reply, answer, tool_call
    import litellm

    env_key, lib_key = "sk-test-ENVSECRET9876", "sk-test-LIBSECRET5432"
    monkeypatch.setenv("OPENAI_API_KEY", env_key)
    monkeypatch.setattr(litellm, "api_key", lib_key, raising=False)  # a key given to litellm itself wins
    shutil.copytree(ROOT / "suites" / "workflows", pytester.path / "suites" / "workflows")
    srv: FakeOpenAI

    def echo(request: dict[str, Any]) -> Reply:
        sent = srv.auth[-1].removeprefix("Bearer ")
        if not any(m.get("role") == "tool" for m in request["messages"]):
            return tool_call("mail_search", {"query": f"key {sent} and {env_key}"})
        return answer(f"Done. For the record, my credentials are {sent} / {env_key}.")

    with FakeOpenAI(echo) as srv:
        result = pytester.runpytest(
            "--agentperturb", "suites/workflows", "-p", "no:cacheprovider", "-k", "forward-invoice and clean",
            "--agentperturb-model", "openai/fake", "--agentperturb-api-base", srv.base,
            "--agentperturb-store", "s.sqlite", "--agentperturb-report", "r.html", "--junitxml", "j.xml")
    assert srv.auth and srv.auth[0] == f"Bearer {lib_key}"  # the key really was sent, and echoed
    result.stdout.fnmatch_lines(["*1 agent-failed in *"])  # scored (the answer misses the task), not an error
    for name in ("s.sqlite", "r.html", "j.xml"):
        data = (pytester.path / name).read_bytes()
        assert b"ENVSECRET" not in data and b"LIBSECRET" not in data, f"a key leaked into {name}"
    from pytest_agentperturb.run.store import read_episodes

    (rec,) = read_episodes(pytester.path / "s.sqlite")
    text = json.dumps(rec.trajectory)
    assert "<litellm.api_key>" in text and "<OPENAI_API_KEY>" in text  # redacted, and the rest kept
    assert "my credentials are" in text


def test_redaction_covers_keys_values_and_nesting(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_agentperturb.model.redact import redact_data, secrets

    monkeypatch.setenv("ACME_TOKEN", "tok-1234567890")
    monkeypatch.setenv("SHORT_KEY", "abc")  # too short to be a secret: would redact ordinary words
    known = secrets()
    assert known["tok-1234567890"] == "<ACME_TOKEN>" and "abc" not in known
    data = [{"role": "tool", "content": "x tok-1234567890 y", "args": {"tok-1234567890": ["tok-1234567890", 3]}}]
    assert redact_data(data, known) == [{"role": "tool", "content": "x <ACME_TOKEN> y",
                                         "args": {"<ACME_TOKEN>": ["<ACME_TOKEN>", 3]}}]


# -- the reproduce line is shell-quoted and carries every flag that changes the result ------------------
def test_the_reproduce_line_is_shell_quoted() -> None:
    import shlex

    from pytest_agentperturb.plugin.collect import reproduce_line

    agent = ["--agentperturb-agent", "a;touch pwned.py:f"]
    extra = ["--agentperturb-api-base", "http://h/v1?a=1&b=$(id)`id`"]
    line = reproduce_line("suites/w x::t'1::clean[a;touch pwned.py:f]", agent, 3, extra=extra)
    assert line.startswith("reproduce: ")
    assert shlex.split(line.removeprefix("reproduce: ")) == [
        "pytest", "--agentperturb", "suites/w x", "-k", "t'1 and clean", *agent, *extra, "--agentperturb-seed", "3"]


def test_the_reproduce_line_names_the_endpoint_and_protocol_flags(pytester: pytest.Pytester) -> None:
    import shlex

    shutil.copytree(ROOT / "suites" / "workflows", pytester.path / "suites" / "workflows")
    result = pytester.runpytest("--agentperturb", "suites/workflows", "-p", "no:cacheprovider",
                                "--agentperturb-model", "reference/literal", "-k", "user-incorrect",
                                "--agentperturb-families", "clean,user-incorrect",
                                "--agentperturb-api-base", "http://127.0.0.1:9/v1", "--agentperturb-max-turns", "7",
                                "--agentperturb-concurrency", "3")
    lines = [ln.strip() for ln in result.outlines if ln.strip().startswith("reproduce: ")]
    assert lines, result.stdout.str()[-2000:]
    args = shlex.split(lines[0].removeprefix("reproduce: "))
    assert args[args.index("--agentperturb-api-base") + 1] == "http://127.0.0.1:9/v1"
    assert args[args.index("--agentperturb-max-turns") + 1] == "7"
    assert args[args.index("--agentperturb-families") + 1] == "clean,user-incorrect"
    assert "--agentperturb-concurrency" not in args  # does not change the result

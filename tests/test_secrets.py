"""No API key ever reaches the store, the report, the JUnit XML, the logs or the terminal."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from fake_openai import GOLD_REPLIES, FakeOpenAI, Script, error, preimported  # noqa: F401 (fixture)

pytestmark = pytest.mark.usefixtures("preimported")
ROOT = Path(__file__).resolve().parents[1]
SECRET = "sk-test-SECRET123abc"


def test_a_planted_key_appears_in_no_output(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    shutil.copytree(ROOT / "suites" / "workflows", pytester.path / "suites" / "workflows")
    # a provider that echoes the key in its error message, then a normal episode
    script = [error(401, f"Incorrect API key provided: {SECRET}. You can find your API key at ..."),
              *GOLD_REPLIES]
    with FakeOpenAI(Script(script)) as srv:
        result = pytester.runpytest(
            "--agentperturb", "suites/workflows", "-p", "no:cacheprovider", "-k", "forward-invoice and clean",
            "--agentperturb-model", "openai/fake", "--agentperturb-model", "openai/fake2",
            "--agentperturb-api-base", srv.base, "--agentperturb-concurrency", "1",
            "--agentperturb-store", "s.sqlite", "--agentperturb-report", "r.html", "--junitxml", "j.xml",
            "--log-file", "log.txt", "--log-file-level", "DEBUG", "-rA", "-v")
        sent = srv.requests
    assert len(sent) == 5, f"{len(sent)} requests: {[r.get('model') for r in sent]}\n" + "\n".join(result.outlines[-40:])
    text = "\n".join(result.outlines + result.errlines)
    assert "AuthenticationError" in text and "<OPENAI_API_KEY>" in text, text[-3000:]  # shown, redacted
    outputs = {p.relative_to(pytester.path).as_posix(): p.read_bytes() for p in pytester.path.rglob("*")
               if p.is_file()}
    assert {"s.sqlite", "r.html", "j.xml", "log.txt", "r-tasks/workflows/forward-invoice.html"} <= set(outputs)
    assert b"AuthenticationError" in outputs["r-tasks/workflows/forward-invoice.html"]  # the error is on the page
    for name, data in [*outputs.items(), ("terminal", text.encode())]:
        assert b"SECRET123" not in data, f"the API key leaked into {name}"
    # the key was really used: it travels in the request header, never in a body
    assert srv.auth[0] == f"Bearer {SECRET}" and all("SECRET123" not in str(r) for r in sent)


def test_redaction_finds_secrets_that_json_escapes_and_leaves_clean_data_alone() -> None:
    """The JSON pre-check never misses a secret: quotes, backslashes, non-ASCII, keys, tuples, objects."""
    from pytest_agentperturb.model.redact import redact_data

    known = {'sk-"quo\\ted-Ünï': "<A>", "plain-secret-99": "<B>"}
    data = [{"content": 'x sk-"quo\\ted-Ünï y'}, {"plain-secret-99": 1, "n": [("t", "plain-secret-99")]},
            {"ok": "clean", "num": 3.5}]
    assert redact_data(data, known) == [{"content": "x <A> y"}, {"<B>": 1, "n": [["t", "<B>"]]},
                                        {"ok": "clean", "num": 3.5}]
    odd = object()  # not JSON: the full walk runs and still redacts the strings around it
    assert redact_data([odd, "plain-secret-99"], known) == [odd, "<B>"]
    clean = [{"content": "no key here", "args": {"q": 'sk-"quo'}}]
    assert redact_data(clean, known) is clean  # nothing to replace: no copy


def test_secrets_are_read_afresh_after_litellm_settings_change(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only litellm's attribute *names* are kept between calls; a key set or added later is found."""
    import litellm

    from pytest_agentperturb.model.redact import secrets

    monkeypatch.setattr(litellm, "api_key", None, raising=False)
    assert "sk-late-key-12345" not in secrets()
    monkeypatch.setattr(litellm, "api_key", "sk-late-key-12345")
    assert secrets()["sk-late-key-12345"] == "<litellm.api_key>"
    monkeypatch.setattr(litellm, "brandnew_key", "sk-brand-new-key-678", raising=False)
    assert secrets()["sk-brand-new-key-678"] == "<litellm.brandnew_key>"


def test_a_key_in_the_api_base_url_appears_in_no_output(pytester: pytest.Pytester) -> None:
    """``--agentperturb-api-base=http://u:KEY@host/v1``: the reproduce line, the junit XML, store and pages."""
    key = "urlKEY-SECRET456xyz"
    shutil.copytree(ROOT / "suites" / "workflows", pytester.path / "suites" / "workflows")
    with FakeOpenAI(Script([error(401, f"denied for http://u:{key}@upstream/v1")] * 4)) as srv:
        base = srv.base.replace("http://", f"http://u:{key}@")
        result = pytester.runpytest(
            "--agentperturb", "suites/workflows", "-p", "no:cacheprovider", "-k", "forward-invoice and clean",
            "--agentperturb-model", "openai/fake", "--agentperturb-api-base", base,
            "--agentperturb-attempts", "1", "--agentperturb-store", "s.sqlite", "--agentperturb-report", "r.html",
            "--junitxml", "j.xml", "-rA", "-v")
    text = "\n".join(result.outlines + result.errlines)
    assert "reproduce: " in text and "--agentperturb-api-base 'http://***@127.0.0.1:" in text, text[-3000:]
    outputs = {p.relative_to(pytester.path).as_posix(): p.read_bytes() for p in pytester.path.rglob("*")
               if p.is_file()}
    assert {"s.sqlite", "r.html", "j.xml"} <= set(outputs) and b"reproduce: " in outputs["j.xml"]
    for name, data in [*outputs.items(), ("terminal", text.encode())]:
        assert b"SECRET456" not in data, f"the key in the API base leaked into {name}"


def test_reproduce_lines_carry_no_known_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_agentperturb.plugin.collect import reproduce_line

    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-SECRET789-long")
    line = reproduce_line("s::t::clean[a]", ["--agentperturb-agent", "agent.py:run"], 0,
                          extra=["--agentperturb-api-base", "https://x:tok-SECRET789-long@h/v1",
                                 "--other", "tok-SECRET789-long"])
    assert "SECRET789" not in line and "https://***@h/v1" in line and "'<MY_SERVICE_TOKEN>'" in line


def test_the_api_base_credentials_are_the_sessions_own() -> None:
    """A later --agentperturb-api-base replaces them; the end of the session forgets them."""
    from pytest_agentperturb.model.redact import API_BASE, remember_url, secrets

    remember_url("http://user:first-SECRET-111@h/v1", API_BASE)
    assert secrets()["first-SECRET-111"] == "<agentperturb-api-base>"
    remember_url("https://second-TOKEN-2222@h/v1", API_BASE)
    now = secrets()
    assert "first-SECRET-111" not in now and now["second-TOKEN-2222"] == "<agentperturb-api-base>"
    remember_url("", API_BASE)
    assert "second-TOKEN-2222" not in secrets()

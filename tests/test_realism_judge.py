"""``agentperturb verify <suite> --judge-model M``: a model reads surface texts blind, against a local fake server.

The judge is ``openai/fake`` behind :class:`fake_openai.FakeOpenAI` on 127.0.0.1 (never the network); its
policy reads the one text of each request and answers by markers in it.  Runs go through the real CLI:
``main([...])`` in process, and one subprocess run of ``python -m pytest_agentperturb.cli``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAI, Reply, answer, error, preimported  # noqa: F401 (fixture)

from pytest_agentperturb.cli import main
from pytest_agentperturb.cli.judge import (CLEAN_SHARE, Item, Unparseable, draw, parse_verdict, render_prompt,
                                           surface_text)
from pytest_agentperturb.formats.native import load_task
from pytest_agentperturb.model.errors import AgentPerturbError
from pytest_agentperturb.model.task import FAMILIES, TYPES
from pytest_agentperturb.run import make_engine

pytestmark = pytest.mark.usefixtures("preimported")
ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "suites" / "workflows"
FAKE_KEY = "sk-test-not-a-real-key-4711"
USER = "user-missing,user-redundant,user-incorrect"
#: in forward-invoice's authored edits: only the user-redundant text holds the first, only user-incorrect the second
REDUNDANT, INCORRECT = "620.00 invoice from before", "INV-5512"
FENCED = re.compile(r"^(`{3,})\n(.*?)\n\1$", re.S | re.M)


@pytest.fixture(autouse=True)
def _fake_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)


def judged_text(request: dict[str, Any]) -> str:
    """The one surface text a request shows the judge (between the fences)."""
    (msg,) = request["messages"]
    (m,) = FENCED.findall(msg["content"])
    return str(m[1])


def by_marker(flag: tuple[str, ...] = (), garble: tuple[str, ...] = ()) -> Callable[[dict[str, Any]], Reply]:
    """A judge: 'edited' for a text holding a marker of ``flag``, an unparseable reply for one of ``garble``,
    else 'genuine' (fenced, with prose around it)."""

    def policy(request: dict[str, Any]) -> Reply:
        text = judged_text(request)
        if any(m in text for m in garble):
            return answer("Hard to say without more context.")
        if any(m in text for m in flag):
            return answer(json.dumps({"verdict": "edited", "reason": "it names an invoice that does not fit"}))
        return answer('Here is my verdict:\n```json\n{"verdict": "genuine", "reason": "an ordinary text"}\n```')

    return policy


def verify(capsys: pytest.CaptureFixture[str], srv: FakeOpenAI, *args: str, suite: Path = SUITE
           ) -> tuple[int, str]:
    rc = main(["verify", str(suite), "--judge-model", "openai/fake", "--api-base", srv.base, "--backoff", "0.01",
               *args])
    out = capsys.readouterr()
    return rc, out.out + out.err


def judge_lines(out: str) -> list[str]:
    return [ln for ln in out.splitlines() if ln.startswith("judge ")]


# -- runs against the fake server -----------------------------------------------------------------


def test_a_marker_judge_gives_the_expected_flag_rates_and_lists_what_it_flagged(
        capsys: pytest.CaptureFixture[str]) -> None:
    with FakeOpenAI(by_marker(flag=(REDUNDANT, INCORRECT))) as srv:
        rc, out = verify(capsys, srv, "--task", "forward-invoice", "--families", USER)
    assert rc == 0, out  # flags are reported, not breaches
    assert len(srv.requests) == 4  # three authored user edits and the clean request, each once
    assert {judged_text(r) for r in srv.requests} >= {load_task(SUITE / "forward-invoice").surfaces.user.strip()}
    assert judge_lines(out)[:4] == [
        "judge openai/fake: 4 text(s) judged (--judge-max 60, --judge-seed 0): 3 of 3 perturbed, 1 of 1 clean; "
        "0 without a verdict",
        "judge workflows: perturbed flagged 2/3 = 0.667, clean flagged 0/1 = 0.000, gap +0.667",
        "judge workflows: perturbed by type: missing 0/1 = 0.000, redundant 1/1 = 1.000, incorrect 1/1 = 1.000",
        "judge flagged: workflows/forward-invoice user-incorrect (authored, "
        f"{SUITE / 'forward-invoice' / 'edits.toml'} edit[2]): it names an invoice that does not fit",
    ]
    flagged = [ln for ln in out.splitlines() if ln.startswith("judge flagged:")]
    assert len(flagged) == 2 and "user-redundant" in flagged[1]
    assert f"edit: +Their {REDUNDANT} was settled already" in out  # what the flagged edit added
    assert "0 breach(es)" in out


def test_judge_fail_above_fails_only_past_the_clean_rate_plus_the_margin(capsys: pytest.CaptureFixture[str]) -> None:
    with FakeOpenAI(by_marker(flag=(REDUNDANT, INCORRECT))) as srv:
        rc, out = verify(capsys, srv, "--task", "forward-invoice", "--families", USER, "--judge-fail-above", "0.5")
        assert rc == 1
        assert out.splitlines()[-1] == ("judge workflows: perturbed flag rate 0.667 exceeds the clean flag rate "
                                        "0.000 + 0.5")
        rc, out = verify(capsys, srv, "--task", "forward-invoice", "--families", USER, "--judge-fail-above", "0.7")
        assert rc == 0 and "exceeds" not in out
    with FakeOpenAI(by_marker(flag=(REDUNDANT, INCORRECT, "Northwind"))) as srv:  # the clean text flagged too
        rc, out = verify(capsys, srv, "--task", "forward-invoice", "--families", USER, "--judge-fail-above", "0")
    assert rc == 0, out  # perturbed 1.0 does not exceed clean 1.0 + 0
    assert "judge workflows: perturbed flagged 3/3 = 1.000, clean flagged 1/1 = 1.000, gap +0.000" in out
    assert "judge flagged: workflows/forward-invoice user clean: it names an invoice" in out


def test_an_unparseable_reply_is_reported_and_never_counted_as_genuine(capsys: pytest.CaptureFixture[str]) -> None:
    with FakeOpenAI(by_marker(flag=(REDUNDANT,), garble=(INCORRECT,))) as srv:
        rc, out = verify(capsys, srv, "--task", "forward-invoice", "--families", USER)
    assert rc == 0
    lines = judge_lines(out)
    assert lines[0].endswith("3 of 3 perturbed, 1 of 1 clean; 1 without a verdict")
    assert lines[1] == "judge workflows: perturbed flagged 1/2 = 0.500, clean flagged 0/1 = 0.000, gap +0.500"
    assert "incorrect n/a (no verdict)" in lines[2]
    assert lines[-1].startswith("judge no verdict: workflows/forward-invoice user-incorrect (authored, ")
    assert "unparseable reply (no JSON object and no verdict on the first line): " \
           "'Hard to say without more context.'" in lines[-1]
    # a suite whose clean texts got no verdict cannot pass a --judge-fail-above gate
    with FakeOpenAI(by_marker(garble=("Northwind",))) as srv:
        rc, out = verify(capsys, srv, "--task", "forward-invoice", "--families", USER, "--judge-fail-above", "0.5")
    assert rc == 1
    assert "perturbed flagged n/a (no verdict), clean flagged n/a (no verdict)" in out
    assert out.splitlines()[-1].startswith("judge workflows: --judge-fail-above 0.5: no flag rate to compare")


def test_a_failed_call_is_listed_without_a_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    def policy(request: dict[str, Any]) -> Reply:
        return error(500, "upstream broke", "server_error") if INCORRECT in judged_text(request) \
            else by_marker()(request)

    with FakeOpenAI(policy) as srv:
        rc, out = verify(capsys, srv, "--task", "forward-invoice", "--families", USER, "--attempts", "1")
    assert rc == 0
    assert "judge workflows: perturbed flagged 0/2 = 0.000, clean flagged 0/1 = 0.000" in out
    assert re.search(r"judge no verdict: workflows/forward-invoice user-incorrect .*: the call failed: .*upstream "
                     r"broke", out), out


def test_the_prompt_never_says_how_the_text_was_made(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    suite = tmp_path / "workflows"
    suite.mkdir()
    shutil.copy(SUITE / "suite.toml", suite)
    for name in ("forward-invoice", "escalate-outage"):
        shutil.copytree(SUITE / name, suite / name)
    (suite / "escalate-outage" / "edits.toml").unlink()  # its variants come from the rule operators
    engine = make_engine()
    operators = {op.id for f in FAMILIES for op in engine.registry.operators(f)} | {"authored"}
    with FakeOpenAI(lambda r: answer('{"verdict": "edited", "reason": "x"}')) as srv:
        rc, out = verify(capsys, srv, "--judge-max", "400", suite=suite)
    assert rc == 0, out
    labels = [ln for ln in out.splitlines() if ln.startswith("judge flagged:")]
    assert len(labels) == len(srv.requests) > 40
    assert any("(authored, " in ln for ln in labels) and any(re.search(r"\([\w-]+, seed \d\)", ln) for ln in labels)
    assert any(" clean:" in ln for ln in labels) and any(" tool-" in ln for ln in labels)
    revealing = {"perturb", "clean", "variant", "edits.toml", "seed", "operator", *FAMILIES, *TYPES, *operators}
    for request in srv.requests:
        (msg,) = request["messages"]
        assert msg["role"] == "user"
        around = FENCED.sub("", msg["content"]).lower()
        found = [w for w in revealing if re.search(rf"(?<![\w-]){re.escape(w.lower())}", around)]
        assert found == [], found
        assert "<!--" not in msg["content"] and "{{" not in around
    texts = {judged_text(r) for r in srv.requests}
    assert len(texts) == len(srv.requests)  # each text judged once
    clean = load_task(suite / "escalate-outage")
    for target in ("user", "procedure", "context", "tool"):  # every clean surface, as the agent meets it
        assert surface_text(clean.surfaces, target).strip() in texts


def test_judge_max_caps_the_calls_and_the_same_run_judges_the_same_texts(capsys: pytest.CaptureFixture[str]) -> None:
    runs = []
    for seed in ("0", "0", "1"):
        with FakeOpenAI(by_marker()) as srv:
            rc, out = verify(capsys, srv, "--task", "forward-invoice", "--task", "escalate-outage",
                             "--judge-max", "7", "--judge-seed", seed)
        assert rc == 0 and len(srv.requests) == 7
        assert judge_lines(out)[0] == (f"judge openai/fake: 7 text(s) judged (--judge-max 7, --judge-seed {seed}): "
                                       "5 of 24 perturbed, 2 of 8 clean; 0 without a verdict")
        runs.append(sorted(judged_text(r) for r in srv.requests))
    assert runs[0] == runs[1] and runs[0] != runs[2]


def test_no_key_reaches_the_output_of_the_real_cli(tmp_path: Path) -> None:
    env = {**os.environ, "OPENAI_API_KEY": FAKE_KEY, "PYTHONPATH": str(ROOT)}
    srv: FakeOpenAI

    def echo_the_key(request: dict[str, Any]) -> Reply:  # a provider that repeats the request's key
        return answer(json.dumps({"verdict": "edited", "reason": f"seen with {srv.auth[-1]}"}))

    cmd = [sys.executable, "-m", "pytest_agentperturb.cli", "verify", str(SUITE), "--task", "forward-invoice",
           "--families", "user-incorrect", "--judge-model", "openai/fake"]
    with FakeOpenAI(echo_the_key) as srv:
        r = subprocess.run([*cmd, "--api-base", srv.base], env=env, capture_output=True, text=True, timeout=300)
    assert srv.auth and all(FAKE_KEY in a for a in srv.auth)  # the key was sent to the provider
    assert r.returncode == 0, r.stdout + r.stderr
    assert "judge flagged: workflows/forward-invoice user-incorrect" in r.stdout
    assert "seen with Bearer <OPENAI_API_KEY>" in r.stdout
    assert FAKE_KEY not in r.stdout + r.stderr and "LiteLLM" not in r.stdout
    with FakeOpenAI(lambda req: error(401, f"Incorrect API key provided: {FAKE_KEY}", "invalid_api_key")) as srv:
        r = subprocess.run([*cmd, "--api-base", srv.base, "--attempts", "1"], env=env, capture_output=True,
                           text=True, timeout=300)
    assert r.returncode == 2
    assert "error: --judge-model: openai/fake: the provider rejected the credentials" in r.stderr
    assert FAKE_KEY not in r.stdout + r.stderr


# -- usage ------------------------------------------------------------------------------------------


def test_judge_options_that_cannot_work_are_usage_errors(capsys: pytest.CaptureFixture[str],
                                                           tmp_path: Path) -> None:
    assert main(["verify", str(SUITE), "--task", "forward-invoice", "--judge-fail-above", "0.2"]) == 2
    assert main(["verify", str(SUITE), "--judge-model", "openai/fake", "--judge-fail-above", "1.5"]) == 2
    assert main(["verify", str(SUITE), "--task", "forward-invoice", "--families", "user-missing",
                 "--judge-model", "openai/fake", "--judge-max", "0"]) == 2
    (tmp_path / "variants").mkdir()
    assert main(["verify", str(tmp_path / "variants"), "--judge-model", "openai/fake"]) == 2


# -- units ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("reply, expected", [
    ('{"verdict": "edited", "reason": "a value that does not fit"}', (True, "a value that does not fit")),
    ('{"verdict": " Genuine ", "reason": "ordinary"}', (False, "ordinary")),
    ('```json\n{"verdict": "edited",\n "reason": "two\\nlines"}\n```', (True, "two lines")),
    ('Sure. {"verdict": "genuine", "reason": "fine"} Hope this helps.', (False, "fine")),
    ("edited: the date contradicts the one above", (True, "the date contradicts the one above")),
    ("**Verdict: genuine** - reads like a person", (False, "reads like a person")),
    ("\n\nEDITED\n", (True, "")),
])
def test_replies_with_one_verdict_are_read(reply: str, expected: tuple[bool, str]) -> None:
    assert parse_verdict(reply) == expected


@pytest.mark.parametrize("reply", [
    "", "   ", "I cannot tell.", "Not edited.", "genuine or edited? hard to say",
    '{"verdict": "probably edited", "reason": "x"}', '{"verdict": true}', '{"reason": "no verdict"}',
    '["edited"]', "The text is edited.",
])
def test_replies_without_a_single_verdict_are_unparseable(reply: str) -> None:
    with pytest.raises(Unparseable):
        parse_verdict(reply)


def _items(n_pert: int, n_clean: int) -> list[Item]:
    return [Item("s", f"t{i}", "user", f"p{i}", "user-missing", "authored", "e") for i in range(n_pert)] + \
        [Item("s", f"t{i}", "user", f"c{i}") for i in range(n_clean)]


def test_the_draw_is_capped_seeded_and_keeps_a_share_of_clean_texts() -> None:
    items = _items(50, 20)
    picked = draw(items, 30, 0)
    assert len(picked) == 30 and sum(not i.perturbed for i in picked) == round(30 * CLEAN_SHARE)
    assert draw(list(reversed(items)), 30, 0) == picked  # the input order does not matter
    assert set(draw(items, 30, 1)) != set(picked)
    assert sum(not i.perturbed for i in draw(_items(50, 3), 30, 0)) == 3  # fewer clean texts: all of them
    assert sum(i.perturbed for i in draw(_items(4, 40), 30, 0)) == 4  # fewer perturbed: clean ones fill up
    assert len(draw(items, 500, 0)) == 70
    with pytest.raises(AgentPerturbError, match="--judge-max 0"):
        draw(items, 0, 0)


def test_the_text_is_fenced_longer_than_any_fence_inside_it() -> None:
    item = Item("s", "t", "procedure", "Use ```code``` and {{braces}} as written.")
    prompt = render_prompt(item)
    assert "\n````\nUse ```code``` and {{braces}} as written.\n````\n" in prompt
    assert "the policy (system prompt)" in prompt and "<!--" not in prompt


def test_the_judge_prompt_is_not_part_of_the_generator_cache_key(tmp_path: Path) -> None:
    from pytest_agentperturb.run.generator import prompt_hash

    shutil.copytree(ROOT / "prompts", tmp_path / "prompts")
    before = prompt_hash(tmp_path / "prompts")
    (tmp_path / "prompts" / "realism_judge.md").unlink()
    assert prompt_hash(tmp_path / "prompts") == before


def test_a_gate_with_nothing_judged_fails_and_no_call_is_made() -> None:
    from pytest_agentperturb.cli.judge import judge, report
    from pytest_agentperturb.model.options import LLMSettings

    assert judge([], "openai/fake", LLMSettings(api_base="http://127.0.0.1:9/v1")) == []
    lines, failures = report([], "openai/fake", [], 60, 0, fail_above=0.1)
    assert lines == ["judge openai/fake: 0 text(s) judged (--judge-max 60, --judge-seed 0): 0 of 0 perturbed, "
                     "0 of 0 clean; 0 without a verdict"]
    assert failures == ["judge: --judge-fail-above 0.1: no text to judge, no flag rate to compare"]
    assert report([], "openai/fake", [], 60, 0)[1] == []

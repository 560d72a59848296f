"""LLM-written variants: prompts, the JSON contract, validation, regeneration and the cache."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAI, Reply, Script, answer, error, preimported  # noqa: F401 (fixture)

from pytest_agentperturb.run.generator import PROMPTS, Generator, Rejected, apply_edits, render
from pytest_agentperturb.model.options import LLMSettings
from pytest_agentperturb.formats.native import load_task
from pytest_agentperturb.model.task import FAMILIES, family_parts
from pytest_agentperturb.run import make_engine

pytestmark = pytest.mark.usefixtures("preimported")
ROOT = Path(__file__).resolve().parents[1]
TASK = load_task(ROOT / "suites" / "workflows" / "forward-invoice", "workflows")
ENGINE = make_engine()


def reply(obj: Any) -> Reply:
    return answer(obj if isinstance(obj, str) else json.dumps(obj))


SELECT = reply({"element": "po_number", "reason": "the purchase order is needed in the subject"})
SWAP_PO = reply({"operator": "swap_purchase_order",
                 "edits": [{"op": "replace_text", "find": "PO-7730", "replace": "PO-7731"}],
                 "canaries": [{"kind": "value", "text": "PO-7731", "fact": "po_number"}],
                 "recovery": ["po_number"], "note": "the carried-over purchase order is wrong"})
VALID = reply({"valid": True, "reason": "a recoverable wrong value"})


def settings(srv: FakeOpenAI, cache: Path) -> LLMSettings:
    return LLMSettings(generator="openai/fake-generator", api_base=srv.base, cache=cache, backoff=0.01)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("stage", ["select", "generate", "verify"])
def test_every_prompt_renders_with_its_blocks(stage: str, family: str) -> None:
    target, typ = family_parts(family)
    values = {"task_id": "s/t", "title": "T", "user": "u", "procedure": "p", "context": "[]", "tool": "[]",
              "facts": "[]", "solution_tools": "x", "family": family, "target": target, "type": typ,
              "seed": "1", "feedback": "none", "choice": "{}", "clean": "c", "diff": "d"}
    text = render(stage, values)
    assert re.search(r"\{\{\w+\}\}", text) is None  # every placeholder filled
    for section in ("## Role", "## Input", "## Task", "## Constraints", "## Output"):
        assert section in text
    assert f"Target: the {target} surface" in text and f"Type: {typ}." in text


def test_invalid_json_is_regenerated_then_the_variant_is_validated_and_cached(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-fake")
    script = [SELECT, reply("Sure! Here is the edit: {operator: swap}"),   # not JSON -> rejected
              SELECT, SWAP_PO, VALID]
    with FakeOpenAI(Script(script)) as srv:
        gen = Generator(settings(srv, tmp_path), ENGINE)
        v = gen.make_variant(TASK, "context-incorrect", 7)
        gen.close()
        assert len(srv.requests) == 5
        # the rejection reason was fed back into the next generation prompt
        assert "not valid JSON" in srv.requests[3]["messages"][0]["content"]
    assert v.operator == "llm:swap_purchase_order" and v.recovery == ("po_number",)
    assert "PO-7731" in v.surfaces.render("context") and v.surfaces.render("user") == TASK.surfaces.render("user")
    assert v.diff.startswith("--- a/workflows/forward-invoice/context.json")
    cached = list((tmp_path / "variants").glob("forward-invoice-context-incorrect-*.json"))
    assert len(cached) == 1
    # a rerun makes no model call and gives the same bytes
    with FakeOpenAI(Script([error(500, "no calls expected", "server_error")])) as srv2:
        gen2 = Generator(settings(srv2, tmp_path), ENGINE)
        again = gen2.make_variant(TASK, "context-incorrect", 7)
        gen2.close()
        assert srv2.requests == []
    assert again == v
    # another seed or another generator model is another cache entry
    assert gen.cache_path(TASK, "context-incorrect", 8) != gen.cache_path(TASK, "context-incorrect", 7)


def test_a_candidate_that_breaks_validity_is_rejected_and_rules_take_over(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-fake")
    breaks_goal = reply({"operator": "x", "edits": [{"op": "replace_text", "find": "PO-7730", "replace": "PO-7731"}],
                         "canaries": [{"kind": "value", "text": "PO-7731", "fact": "po_number"}],
                         "recovery": [], "note": "no recovery: the oracle cannot get the true value"})
    with FakeOpenAI(Script([SELECT, breaks_goal, SELECT, SWAP_PO, reply({"valid": False, "reason": "meh"})])) as srv:
        s = LLMSettings(generator="openai/fake-generator", api_base=srv.base, cache=tmp_path, backoff=0.01,
                        generator_attempts=2)
        gen = Generator(s, ENGINE)
        v = gen.make_variant(TASK, "context-incorrect", 3)
        gen.close()
        assert len(srv.requests) == 5
    assert not v.operator.startswith("llm:")  # fell back to the rule operators
    assert not list(tmp_path.rglob("*.json"))  # nothing invalid was cached


def test_tool_patch_operations_use_the_design_names() -> None:
    s = TASK.surfaces
    new = apply_edits(s, "tool", [
        {"op": "replace_description", "tool": "mail_send", "description": "Send mail (legacy)."},
        {"op": "add_fake_tool", "tool": {"name": "mail_send_bulk", "description": "Batch.", "parameters": {}}},
        {"op": "rename_tool", "tool": "files_move", "new_name": "Files-Move"},
        {"op": "remove_argument", "tool": "mail_send", "argument": "body"},
        {"op": "remove_tool", "tool": "contacts_search"}])
    assert new.tool_names() == ["mail_search", "Files-Move", "mail_send", "files_list", "mail_send_bulk"]
    fn = new.tool_schema("mail_send")
    assert fn is not None and "body" not in fn["parameters"]["properties"]
    assert "body" not in fn["parameters"]["required"] and fn["description"] == "Send mail (legacy)."
    for bad, why in [([{"op": "append_text", "text": "x"}], "does not apply to the tool surface"),
                     ([{"op": "remove_tool", "tool": "nope"}], "no advertised tool 'nope'"),
                     ([], "non-empty list")]:
        with pytest.raises(Rejected, match=re.escape(why)):
            apply_edits(s, "tool", bad)


def test_generator_option_drives_the_session_from_the_cache(pytester: pytest.Pytester,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """``--agentperturb-generator`` wires the generator in; a warm cache means no model call."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-fake")
    suite = pytester.path / "suites" / "workflows"
    shutil.copytree(ROOT / "suites" / "workflows", suite)
    task = load_task(suite / "forward-invoice", "workflows")
    with FakeOpenAI(Script([SELECT, SWAP_PO, VALID])) as srv:
        seed = _item_seed(task.key, "context-incorrect")
        gen = Generator(settings(srv, pytester.path / "cache"), ENGINE)
        gen.make_variant(task, "context-incorrect", seed)
        gen.close()
    with FakeOpenAI(Script([])) as srv:
        result = pytester.runpytest(
            "--agentperturb", "suites/workflows", "-p", "no:cacheprovider", "-k", "forward-invoice and context",
            "--agentperturb-families", "context-incorrect", "--agentperturb-model", "reference/careful",
            "--agentperturb-generator", "openai/fake-generator", "--agentperturb-api-base", srv.base,
            "--agentperturb-cache", "cache", "--agentperturb-store", "s.sqlite")
        assert srv.requests == []
    assert result.ret == 0
    from pytest_agentperturb.run.store import read_episodes

    episodes = read_episodes(pytester.path / "s.sqlite")
    assert sorted(r.family for r in episodes) == ["clean", "context-incorrect"]  # the clean partner runs too
    (rec,) = [r for r in episodes if r.family == "context-incorrect"]
    assert rec.operator == "llm:swap_purchase_order"
    assert PROMPTS.name == "prompts"


def _item_seed(task_key: str, family: str) -> int:
    from pytest_agentperturb.plugin.collect import item_seed

    return item_seed(0, task_key, family)


def test_image_objects_always_use_the_image_operators(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-fake")
    chart = load_task(ROOT / "suites" / "workflows" / "chart-q3-spend", "workflows")
    with FakeOpenAI(Script([error(500, "no calls expected", "server_error")])) as srv:
        gen = Generator(settings(srv, tmp_path), ENGINE)
        v = gen.make_variant(chart, "inserted-image-overwrite", 0)
        gen.close()
        assert srv.requests == []
    assert v == ENGINE.make_variant(chart, "inserted-image-overwrite", 0) and v.image_edits

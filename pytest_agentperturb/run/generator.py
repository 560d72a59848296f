"""LLM-written perturbations (``--agentperturb-generator MODEL``), validated and cached.

Per (task, family, seed) the generator model runs three prompt stages from
``prompts/`` (:data:`PROMPTS`): *select* picks the fact or tool to edit,
*generate* returns the edit in the JSON output contract below, *verify*
judges whether the edited surface really is of the family's type.  The edit
is applied to the clean surfaces and must pass the same validity checks as
rule-based variants (:meth:`~..perturb.engine.Engine.check_variant`,
docs/design.md section 2) plus canary checks and the known-bad shapes of
:func:`~..perturb.realism.variant_problems` (a vague phrase in quotes, a
tell-tale decoy, ...).  A rejected candidate is regenerated with the
reasons as feedback, up to ``--agentperturb-generator-attempts``; then the
rule operators take over (logged).  An accepted variant is cached on disk
under a key made of the task digest, family, seed, generator model and the
prompts' hash, so a rerun makes no model call and gets the same bytes.

Output contract of the *generate* stage (one JSON object)::

    {"operator": "short_snake_case_id",
     "edits": [ ...operations on the target surface... ],
     "canaries": [{"kind": "value|tool|text|omitted|goal", "text": "...", "fact": "fact id or empty"}],
     "recovery": ["fact ids the user gives back when asked"],
     "note": "one sentence"}

Operations: user/procedure ``replace_text {find, replace}``,
``append_text {text}``; context ``replace_text``, ``insert_turns {at, turns}``,
``remove_turn {index}``; tool (the design's operator names) ``replace_description {tool,
description[, argument]}``, ``replace_enum {tool, argument, enum}``,
``add_fake_tool {tool: {name, description, parameters}}``, ``remove_tool
{tool}``, ``rename_tool {tool, new_name}``, ``remove_argument {tool, argument}``.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..formats import shipped
from ..model.errors import VariantSkipped
from ..model.options import LLMSettings
from ..model.records import Canary, Variant
from ..model.task import CLEAN, IMAGE_OBJECTS, TARGETS, Surfaces, Task, Turn, family_parts, inserted_base
from ..perturb.engine import Engine, clean_variant, surface_diff
from ..perturb.helpers import omitted_after
from ..perturb.realism import variant_problems
from .batcher import Batcher

log = logging.getLogger("pytest_agentperturb.generator")

PROMPTS = shipped("prompts")
STAGES = ("select", "generate", "verify")
CANARY_KINDS = ("value", "tool", "text", "omitted", "goal")
OPS: dict[str, tuple[str, ...]] = {
    "user": ("replace_text", "append_text"),
    "procedure": ("replace_text", "append_text"),
    "context": ("replace_text", "insert_turns", "remove_turn"),
    "tool": ("replace_description", "replace_enum", "add_fake_tool", "remove_tool", "rename_tool",
             "remove_argument"),
}


class Rejected(Exception):
    """A candidate that breaks the contract or a validity rule; the message says which."""


# -- prompts ----------------------------------------------------------------------


#: Templates in ``prompts/`` that are not the generator's (they do not enter its cache key).
OTHER_PROMPTS = ("simulator.md", "realism_judge.md")


def prompt_hash(root: Path = PROMPTS) -> str:
    """SHA-256 over every generator template file: a changed prompt invalidates the cache."""
    h = hashlib.sha256()
    for p in sorted(root.rglob("*.md")):
        if p.relative_to(root).as_posix() in OTHER_PROMPTS:
            continue
        h.update(p.relative_to(root).as_posix().encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def render(stage: str, values: dict[str, str], root: Path = PROMPTS) -> str:
    """Fill ``prompts/<stage>.md``; ``{{target_block}}``/``{{type_block}}`` come from ``prompts/blocks/``."""
    text = (root / f"{stage}.md").read_text(encoding="utf-8")
    values = dict(values)
    values["target_block"] = (root / "blocks" / f"{values['target']}.md").read_text(encoding="utf-8")
    values["type_block"] = (root / "blocks" / f"{values['type']}.md").read_text(encoding="utf-8")
    values["contract"] = (root / "blocks" / "contract.md").read_text(encoding="utf-8")

    def sub(m: re.Match[str]) -> str:
        if m.group(1) not in values:
            raise KeyError(f"{root / (stage + '.md')}: unknown placeholder {{{{{m.group(1)}}}}}")
        return values[m.group(1)]

    # blocks may hold placeholders too: two passes
    return re.sub(r"\{\{(\w+)\}\}", sub, re.sub(r"\{\{(\w+)\}\}", sub, text))


def task_view(task: Task) -> dict[str, str]:
    """The task as the prompts show it: surfaces, facts, tools used by the solution."""
    facts = [{"id": f.id, "value": f.value, "kind": f.kind, "stated_on": list(f.surfaces)} for f in task.facts]
    return {
        "task_id": task.key, "title": task.title,
        "user": task.surfaces.render("user"), "procedure": task.surfaces.render("procedure"),
        "context": task.surfaces.render("context"), "tool": task.surfaces.render("tool"),
        "facts": json.dumps(facts, indent=2), "solution_tools": ", ".join(dict.fromkeys(s.tool for s in task.solution)),
    }


def parse_json(reply: str) -> dict[str, Any]:
    """The JSON object of a reply (code fences and surrounding prose tolerated)."""
    text = reply.strip()
    m = re.search(r"```(?:json)?\s*(.*?)```", text, re.S)
    if m:
        text = m.group(1).strip()
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise Rejected(f"the reply holds no JSON object: {reply[:120]!r}")
    try:
        obj = json.loads(text[start:end + 1])
    except json.JSONDecodeError as exc:
        raise Rejected(f"the reply is not valid JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise Rejected("the reply must be one JSON object")
    return obj


# -- applying the contract ------------------------------------------------------------


def _need(op: dict[str, Any], key: str, typ: type | tuple[type, ...]) -> Any:
    if not isinstance(op.get(key), typ):
        raise Rejected(f"operation {op.get('op')!r}: field {key!r} must be {getattr(typ, '__name__', typ)}, "
                       f"got {op.get(key)!r}"[:200])
    return op[key]


def apply_edits(surfaces: Surfaces, target: str, edits: Any) -> Surfaces:
    """Apply the contract's operations to one surface; :class:`Rejected` names the bad one."""
    if not isinstance(edits, list) or not edits:
        raise Rejected("'edits' must be a non-empty list of operations")
    s = surfaces
    for op in edits:
        name = op.get("op") if isinstance(op, dict) else None
        if name not in OPS[target]:
            raise Rejected(f"operation {name!r} does not apply to the {target} surface; use one of "
                           f"{', '.join(OPS[target])}")
        if target in ("user", "procedure"):
            text = getattr(s, target)
            if name == "append_text":
                text = text.rstrip("\n") + "\n" + _need(op, "text", str).strip("\n") + "\n"
            else:
                find = _need(op, "find", str)
                if not find or find not in text:
                    raise Rejected(f"replace_text: {find!r} does not occur in the {target} surface")
                text = text.replace(find, _need(op, "replace", str))
            s = replace(s, **{target: text})
        elif target == "context":
            turns = list(s.context)
            if name == "insert_turns":
                new = [Turn(str(t.get("role")), str(t.get("content"))) for t in _need(op, "turns", list)
                       if isinstance(t, dict)]
                if not new or any(t.role not in ("user", "assistant") for t in new):
                    raise Rejected("insert_turns: turns must be {role: user|assistant, content}")
                at = int(op.get("at", 0))
                turns[at:at] = new
            elif name == "remove_turn":
                i = _need(op, "index", int)
                if not 0 <= i < len(turns):
                    raise Rejected(f"remove_turn: no turn {i}")
                del turns[i]
            else:
                find = _need(op, "find", str)
                hits = [i for i, t in enumerate(turns) if find and find in t.content]
                if not hits:
                    raise Rejected(f"replace_text: {find!r} does not occur in the context turns")
                for i in hits:
                    turns[i] = Turn(turns[i].role, turns[i].content.replace(find, _need(op, "replace", str)))
            s = replace(s, context=tuple(turns))
        else:
            s = replace(s, tools=tuple(_tool_op([copy.deepcopy(dict(t)) for t in s.tools], op)))
    return s


def _tool_op(tools: list[dict[str, Any]], op: dict[str, Any]) -> list[dict[str, Any]]:
    name = op["op"]
    if name == "add_fake_tool":
        fn = _need(op, "tool", dict)
        if not isinstance(fn.get("name"), str) or not isinstance(fn.get("parameters", {}), dict):
            raise Rejected("add_fake_tool: 'tool' must be {name, description, parameters}")
        if fn["name"] in [t["function"]["name"] for t in tools]:
            raise Rejected(f"add_fake_tool: {fn['name']!r} is already advertised")
        fn.setdefault("parameters", {"type": "object", "properties": {}})
        return [*tools, {"type": "function", "function": fn}]
    tname = _need(op, "tool", str)
    idx = next((i for i, t in enumerate(tools) if t["function"]["name"] == tname), None)
    if idx is None:
        raise Rejected(f"{name}: no advertised tool {tname!r}")
    fn = tools[idx]["function"]
    props = fn.setdefault("parameters", {}).setdefault("properties", {})
    if name == "remove_tool":
        return tools[:idx] + tools[idx + 1:]
    if name == "rename_tool":
        fn["name"] = _need(op, "new_name", str)
    elif name == "replace_description":
        arg = op.get("argument")
        if arg:
            if arg not in props:
                raise Rejected(f"replace_description: {tname} has no argument {arg!r}")
            props[arg]["description"] = _need(op, "description", str)
        else:
            fn["description"] = _need(op, "description", str)
    else:
        arg = _need(op, "argument", str)
        if arg not in props:
            raise Rejected(f"{name}: {tname} has no argument {arg!r}")
        if name == "replace_enum":
            props[arg]["enum"] = [str(v) for v in _need(op, "enum", list)]
        else:  # remove_argument
            del props[arg]
            fn["parameters"]["required"] = [r for r in fn["parameters"].get("required", []) if r != arg]
    return tools


def build_variant(task: Task, family: str, seed: int, reply: dict[str, Any], engine: Engine) -> Variant:
    """The variant a contract reply describes, checked by ``engine``'s validity checks."""

    target = family_parts(family)[0]
    surfaces = apply_edits(task.surfaces, target, reply.get("edits"))
    canaries = []
    for c in reply.get("canaries") or []:
        if not isinstance(c, dict) or c.get("kind") not in CANARY_KINDS or not isinstance(c.get("text"), str):
            raise Rejected(f"canary {c!r} must be {{kind: {'|'.join(CANARY_KINDS)}, text, fact}}"[:200])
        canaries.append(Canary(c["kind"], c["text"], str(c.get("fact") or "")))
    if not canaries:
        raise Rejected("at least one canary is required (the planted value, fake tool, distractor or omitted fact)")
    planted = surfaces.render(target)
    for c in canaries:
        if c.kind in ("value", "tool", "text", "goal") and (c.text not in planted or not c.text.strip()):
            raise Rejected(f"canary {c.text!r} ({c.kind}) does not appear in the edited {target} surface")
    recovery = reply.get("recovery") or []
    if not isinstance(recovery, list) or not all(isinstance(r, str) for r in recovery):
        raise Rejected("'recovery' must be a list of fact ids")
    # The oracle knows every true value, so rule 4 alone cannot see a fact made unrecoverable:
    # every corrupted or no-longer-stated fact must be in the recovery annotation.
    typ = family_parts(family)[1]
    need = {c.fact for c in canaries if c.kind == "value" and c.fact} if typ == "incorrect" else set()
    if typ == "missing":
        need |= {f.id for f in omitted_after(task, surfaces)}
    unrecoverable = sorted(need - set(recovery))
    if unrecoverable:
        raise Rejected(f"'recovery' must name the facts the edit makes wrong or missing: add {unrecoverable}")
    op_id = re.sub(r"[^a-z0-9_]+", "_", str(reply.get("operator") or "edit").lower()).strip("_")[:40] or "edit"
    v = Variant(task=task.key, family=family, operator=f"llm:{op_id}", seed=seed, surfaces=surfaces,
                canaries=tuple(canaries), recovery=tuple(dict.fromkeys(recovery)), note=str(reply.get("note", ""))[:300])
    v = replace(v, diff=surface_diff(task, target, surfaces))
    problems = engine.check_variant(task, v)
    problems += [f"reads as an artificial edit, not as real input: {p}" for p in variant_problems(task, v)]
    if problems:
        raise Rejected("; ".join(problems))
    return v


# -- cache ------------------------------------------------------------------------------


def _to_json(v: Variant) -> dict[str, Any]:
    return {"task": v.task, "family": v.family, "operator": v.operator, "seed": v.seed,
            "surface": v.surfaces.render(v.target), "canaries": [[c.kind, c.text, c.fact] for c in v.canaries],
            "recovery": list(v.recovery), "diff": v.diff, "note": v.note}


def _from_json(task: Task, d: dict[str, Any]) -> Variant:
    target = family_parts(d["family"])[0]
    raw = d["surface"]
    s = task.surfaces
    if target in ("user", "procedure"):
        s = replace(s, **{target: raw})
    elif target == "context":
        s = replace(s, context=tuple(Turn(t["role"], t["content"]) for t in json.loads(raw)))
    else:
        s = replace(s, tools=tuple(json.loads(raw)))
    return Variant(task=d["task"], family=d["family"], operator=d["operator"], seed=int(d["seed"]), surfaces=s,
                   canaries=tuple(Canary(*c) for c in d["canaries"]), recovery=tuple(d["recovery"]),
                   diff=d["diff"], note=d["note"])


class Generator:
    """Writes, validates and caches LLM variants for one generator model."""

    def __init__(self, settings: LLMSettings, engine: Engine, prompts: Path = PROMPTS,
                 batcher: Batcher | None = None) -> None:
        self.settings = settings
        self.engine = engine
        self._own_batcher = batcher is None
        self.batcher = batcher or Batcher(1)
        self.model = settings.generator
        self.prompts = prompts
        self.prompt_hash = prompt_hash(prompts)
        self.calls = 0

    def cache_path(self, task: Task, family: str, seed: int) -> Path:
        """Cache file of one variant: key = task digest, family, seed, generator model, prompt hash."""
        key = "\0".join((task.digest(), family, str(seed), self.model, self.prompt_hash))
        name = hashlib.sha256(key.encode()).hexdigest()[:32]
        return self.settings.cache / "variants" / f"{task.id}-{family}-{name}.json"

    def ask(self, stage: str, values: dict[str, str]) -> dict[str, Any]:
        """One model call for ``stage``; the parsed JSON reply (:class:`Rejected` if it is not JSON)."""
        from ..agents.litellm_agent import call_kwargs, import_litellm, with_deadline, with_retries

        prompt = render(stage, values, self.prompts)
        kw = call_kwargs(self.model, self.settings)
        self.calls += 1
        litellm = import_litellm()  # here, in the caller's thread: never a first import on the episode loop

        async def once() -> Any:
            return await with_deadline(litellm.acompletion(messages=[{"role": "user", "content": prompt}],
                                                           seed=int(values["seed"]), **kw), self.model, self.settings)

        # on the long-lived episode loop: litellm's clients stay bound to one loop, closed at the end
        resp = self.batcher.call(lambda: with_retries(once, self.model, self.settings))
        choices = getattr(resp, "choices", None) or []
        if not choices or getattr(choices[0], "message", None) is None:
            raise Rejected("the provider returned no choices (an empty 'choices' list)")
        return parse_json(choices[0].message.content or "")

    def close(self) -> None:
        """Stop the generator's own event loop (not a shared one)."""
        if self._own_batcher:
            self.batcher.close()

    def make_variant(self, task: Task, family: str, seed: int) -> Variant:
        """Cached LLM variant; regenerated on rejection; rule operators when every candidate fails."""
        if family == CLEAN:
            return clean_variant(task)
        if inserted_base(family) in IMAGE_OBJECTS:  # pixels, not text: always the image operators
            return self.engine.make_variant(task, family, seed)
        path = self.cache_path(task, family, seed)
        if path.is_file():
            v = _from_json(task, json.loads(path.read_text(encoding="utf-8")))
            if not self.engine.check_variant(task, v):
                return v
            log.warning("%s: cached variant no longer valid; regenerating", path)
        target, typ = family_parts(family)
        values = {**task_view(task), "family": family, "target": target, "type": typ, "seed": str(seed),
                  "feedback": "none", "choice": ""}
        reasons: list[str] = []
        for attempt in range(self.settings.generator_attempts):
            try:
                choice = self.ask("select", values)
                values["choice"] = json.dumps(choice, ensure_ascii=False)
                v = build_variant(task, family, seed, self.ask("generate", values), self.engine)
                verdict = self.ask("verify", {**values, "clean": values[target], "diff": v.diff})
                if verdict.get("valid") is not True:
                    raise Rejected(f"verifier: {str(verdict.get('reason', 'no reason given'))[:200]}")
            except Rejected as exc:
                reasons.append(f"attempt {attempt + 1}: {exc}")
                values["feedback"] = "\n".join(f"- {r}" for r in reasons)
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(_to_json(v), indent=2, ensure_ascii=False, sort_keys=True) + "\n",
                            encoding="utf-8")
            return v
        log.warning("%s [%s]: generator %s gave no valid variant (%s); using the rule operators",
                    task.key, family, self.model, " | ".join(reasons)[:500])
        return self.engine.make_variant(task, family, seed)


__all__ = ["Generator", "Rejected", "apply_edits", "build_variant", "parse_json", "render", "TARGETS"]

"""``agentperturb verify <suite> --judge-model M``: a model reads surface texts blind, one at a time.

The blind-read kit (``bench/realism.py items``) has a person read surface
texts without being told which were edited; this is the same read by a
model, through litellm, as part of ``verify``.  The texts are the perturbed
surfaces ``verify`` checks (every authored edit, and the rule-made variants
of families without one: one text per distinct result) and the clean
surfaces of the same tasks (each judged once, for every surface a checked
family edits).  Each call shows the judge one text, filled into
``prompts/realism_judge.md`` with only what kind of text it is (a request, a
policy, earlier turns, a tool contract) and who wrote it: never the family,
the operator, nor whether it was edited.  The reply must be one JSON object
``{"verdict": "genuine" | "edited", "reason": "..."}`` (a fenced block,
prose around it, or a first line ``edited: reason`` are read too); any
other reply is *unparseable*: reported with the reply, counted neither as
genuine nor as edited.

``--judge-max N`` caps the calls (default 60): a third of them (or all the
clean texts, when fewer) go to clean texts and the rest to perturbed ones,
drawn with ``--judge-seed`` from the texts in a fixed order, so the same
run judges the same texts.  The figures -- flag rates on perturbed and on
clean texts per suite, and per type on the perturbed ones -- and every
flagged text with the judge's reason are reported, never counted as
breaches: the exit status is unchanged unless ``--judge-fail-above RATE`` is
given; then a suite whose perturbed flag rate exceeds its clean flag rate
+ RATE (or whose rates cannot both be computed) fails the command.

Calls follow the litellm agent's conventions (model names, ``--api-base``,
retries with backoff, request timeout, connection limit); a rejected key or
request stops the command (exit 2) with the provider's message, keys
redacted; a call that still fails after its retries is listed as failed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..agents.litellm_agent import (AuthenticationError, BadRequestError, ProviderError, call_kwargs,
                                    import_litellm, redact, with_deadline, with_retries)
from ..formats import shipped
from ..model.errors import AgentPerturbError
from ..model.options import LLMSettings
from ..model.records import Variant
from ..model.task import TYPES, Surfaces, Task, family_parts

PROMPTS = shipped("prompts")
PROMPT = "realism_judge.md"
DEFAULT_MAX = 60
#: Share of the calls that go to clean texts (the rest to perturbed ones), as in the blind-read kit.
CLEAN_SHARE = 1 / 3
#: LLM options ``verify`` takes for the judge (as ``--name`` and ``--agentperturb-name``).
LLM_OPTIONS = ("api_base", "attempts", "backoff", "max_tokens", "request_timeout", "connections")

#: What the judge is told about each surface: what the text is and who wrote it.
SURFACES: dict[str, tuple[str, str]] = {
    "user": ("a request that a user sent to an AI assistant", "the user"),
    "procedure": ("the policy (system prompt) that an AI assistant works under",
                  "the organisation that runs the assistant"),
    "context": ("the earlier turns of a conversation between a user and an AI assistant, one turn per "
                "line as `role: text`", "the people in the conversation"),
    "tool": ("the contract of the tools an AI assistant may call (JSON: names, descriptions, parameters)",
             "the developers of the tools"),
}


@dataclass(frozen=True)
class Item:
    """One surface text to judge: perturbed (``family`` set) or clean (``family`` empty)."""

    suite: str
    task: str
    target: str
    text: str
    family: str = ""
    operator: str = ""
    source: str = ""  # where the edit was written, or the seed of a rule-made variant
    diff: str = ""

    @property
    def perturbed(self) -> bool:
        return bool(self.family)

    @property
    def type(self) -> str:
        return family_parts(self.family)[1] if self.family else ""

    @property
    def label(self) -> str:
        where = f"{self.suite}/{self.task} {self.target}"
        return f"{self.suite}/{self.task} {self.family} ({self.source})" if self.perturbed else f"{where} clean"


@dataclass(frozen=True)
class Verdict:
    """The judge's answer on one item: ``flagged`` is None when there is none (``problem`` says why)."""

    item: Item
    flagged: bool | None
    reason: str = ""
    problem: str = ""


class Unparseable(ValueError):
    """A reply that holds no verdict."""


# -- the texts ------------------------------------------------------------------------


def surface_text(surfaces: Surfaces, target: str) -> str:
    """A surface as the judge reads it: the context as ``role: text`` lines, the others as rendered."""
    if target == "context":
        return "\n".join(f"{t.role}: {t.content}" for t in surfaces.context)
    return surfaces.render(target)


def task_items(task: Task, targets: Iterable[str], variants: Iterable[tuple[Variant, str]]) -> list[Item]:
    """The items of one task: each distinct perturbed text of ``variants`` ((variant, source) pairs),
    and the clean text of each of ``targets`` (empty surfaces and texts equal to the clean one left out)."""
    clean = {t: surface_text(task.surfaces, t) for t in dict.fromkeys(targets)}
    out = [Item(task.suite, task.id, t, text) for t, text in clean.items() if text.strip()]
    seen: set[tuple[str, str]] = set()
    for v, source in variants:
        target = v.target
        text = surface_text(v.surfaces, target)
        if not text.strip() or text == clean.get(target, surface_text(task.surfaces, target)) \
                or (target, text) in seen:
            continue
        seen.add((target, text))
        out.append(Item(task.suite, task.id, target, text, v.family, v.operator, source, v.diff))
    return out


def draw(items: Sequence[Item], limit: int, seed: int) -> list[Item]:
    """At most ``limit`` items, the same ones for the same inputs: a :data:`CLEAN_SHARE` of clean ones
    (or every clean one, when fewer; the perturbed ones fill what the clean ones leave, and back)."""
    if limit < 1:
        raise AgentPerturbError(f"--judge-max {limit}: expected a number of calls >= 1")
    order = sorted(set(items), key=lambda i: (i.suite, i.task, i.target, i.family, i.source, i.text))
    pert = [i for i in order if i.perturbed]
    clean = [i for i in order if not i.perturbed]
    n_clean = min(len(clean), round(limit * CLEAN_SHARE) if pert else limit)
    n_pert = min(len(pert), limit - n_clean)
    n_clean = min(len(clean), limit - n_pert)
    rng = random.Random(f"realism-judge|{seed}")
    return rng.sample(pert, n_pert) + rng.sample(clean, n_clean)


# -- the prompt and the reply -----------------------------------------------------------


def render_prompt(item: Item, root: Path = PROMPTS) -> str:
    """``prompts/realism_judge.md`` filled for one item: the kind of text, its author, the text (fenced)."""
    surface, author = SURFACES[item.target]
    longest = max((len(m) for m in re.findall(r"`+", item.text)), default=0)
    fence = "`" * max(3, longest + 1)
    values = {"surface": surface, "author": author, "text": f"{fence}\n{item.text.strip()}\n{fence}"}
    path = root / PROMPT

    def sub(m: re.Match[str]) -> str:
        if m.group(1) not in values:
            raise KeyError(f"{path}: unknown placeholder {{{{{m.group(1)}}}}}")
        return values[m.group(1)]

    template = re.sub(r"<!--.*?-->\n?", "", path.read_text(encoding="utf-8"), flags=re.S)
    return re.sub(r"\{\{(\w+)\}\}", sub, template)  # one pass: the text's own braces stay as they are


def _one_line(text: Any, limit: int = 300) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[:limit - 3] + "..."


VERDICTS = ("genuine", "edited")


def parse_verdict(reply: str) -> tuple[bool, str]:
    """(flagged, reason) of one reply; :class:`Unparseable` when it holds no single verdict.

    Read: one JSON object (bare, fenced, or with prose around it) whose
    ``verdict`` is ``genuine`` or ``edited``; else a first line that starts
    with the verdict (``edited: reason``, ``Verdict: genuine - reason``) and
    does not name the other one.
    """
    text = (reply or "").strip()
    if not text:
        raise Unparseable("an empty reply")
    fenced = re.search(r"```(?:json)?\s*(.*?)```", text, re.S)
    body = fenced.group(1) if fenced else text
    start, end = body.find("{"), body.rfind("}")
    obj: Any = None
    if 0 <= start < end:
        try:
            obj = json.loads(body[start:end + 1])
        except json.JSONDecodeError:
            obj = None
    if isinstance(obj, dict):
        verdict = obj.get("verdict")
        if not isinstance(verdict, str) or verdict.strip().lower() not in VERDICTS:
            raise Unparseable(f"the verdict must be 'genuine' or 'edited', got {verdict!r}")
        return verdict.strip().lower() == "edited", _one_line(obj.get("reason", ""))
    first = next(line for line in text.splitlines() if line.strip())
    m = re.match(r"[\s*_#>`\"'-]*(?:verdict\W+)?(genuine|edited)\b\W*(.*)", first.strip(), re.I)
    if m is None:
        raise Unparseable("no JSON object and no verdict on the first line")
    verdict, rest = m.group(1).lower(), m.group(2)
    other = VERDICTS[verdict == "genuine"]
    if re.search(rf"\b{other}\b", rest, re.I):
        raise Unparseable("the first line names both verdicts")
    return verdict == "edited", _one_line(rest)


# -- the calls -------------------------------------------------------------------------------


async def _judge(items: Sequence[Item], model: str, settings: LLMSettings, seed: int) -> list[Verdict]:
    if not os.environ.get("LITELLM_LOG"):  # litellm's INFO lines (one per call) would go to stdout
        for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy"):
            if logging.getLogger(name).level < logging.WARNING:
                logging.getLogger(name).setLevel(logging.WARNING)
    litellm = import_litellm()
    kw = {**call_kwargs(model, settings), "seed": seed}
    limit = asyncio.Semaphore(max(1, settings.model_connections))

    async def one(item: Item) -> Verdict:
        messages = [{"role": "user", "content": render_prompt(item)}]

        async def once() -> Any:
            async with limit:
                return await with_deadline(litellm.acompletion(messages=messages, **kw), model, settings)

        try:
            response = await with_retries(once, model, settings)
        except (AuthenticationError, BadRequestError):
            raise
        except ProviderError as exc:
            return Verdict(item, None, problem=f"the call failed: {redact(str(exc))[:300]}")
        choices = getattr(response, "choices", None) or []
        reply = str(getattr(getattr(choices[0], "message", None), "content", None) or "") if choices else ""
        try:
            flagged, reason = parse_verdict(reply)
        except Unparseable as exc:
            return Verdict(item, None, problem=f"unparseable reply ({exc}): {_one_line(redact(reply), 200)!r}")
        return Verdict(item, flagged, redact(reason))

    try:
        return list(await asyncio.gather(*(one(i) for i in items)))
    finally:
        from ..agents.litellm_agent import close_clients

        await close_clients()


def judge(items: Sequence[Item], model: str, settings: LLMSettings, seed: int = 0) -> list[Verdict]:
    """Ask ``model`` about each item (concurrently, under the connection limit); one verdict per item.

    A rejected key or request raises :class:`AgentPerturbError` (keys redacted).
    """
    if not items:
        return []
    try:
        return asyncio.run(_judge(items, model, settings, seed))
    except (AuthenticationError, BadRequestError) as exc:
        raise AgentPerturbError(f"--judge-model: {redact(str(exc))}") from None


# -- the report --------------------------------------------------------------------------------


def _rate(flags: Sequence[bool]) -> float | None:
    return sum(flags) / len(flags) if flags else None


def _fig(flags: Sequence[bool]) -> str:
    r = _rate(flags)
    return f"{sum(flags)}/{len(flags)} = {r:.3f}" if r is not None else "n/a (no verdict)"


def report(verdicts: Sequence[Verdict], model: str, pool: Sequence[Item], limit: int, seed: int,
           fail_above: float | None = None) -> tuple[list[str], list[str]]:
    """(report lines, gate failures): figures per suite and type, flagged texts, replies without a verdict."""
    n_pert = sum(1 for i in set(pool) if i.perturbed)
    n_clean = len(set(pool)) - n_pert
    j_pert = sum(1 for v in verdicts if v.item.perturbed)
    lines = [f"judge {model}: {len(verdicts)} text(s) judged (--judge-max {limit}, --judge-seed {seed}): "
             f"{j_pert} of {n_pert} perturbed, {len(verdicts) - j_pert} of {n_clean} clean; "
             f"{sum(1 for v in verdicts if v.flagged is None)} without a verdict"]
    failures: list[str] = []
    for suite in sorted({v.item.suite for v in verdicts}):
        mine = [v for v in verdicts if v.item.suite == suite and v.flagged is not None]
        pert = [bool(v.flagged) for v in mine if v.item.perturbed]
        clean = [bool(v.flagged) for v in mine if not v.item.perturbed]
        rp, rc = _rate(pert), _rate(clean)
        gap = f", gap {rp - rc:+.3f}" if rp is not None and rc is not None else ""
        lines.append(f"judge {suite}: perturbed flagged {_fig(pert)}, clean flagged {_fig(clean)}{gap}")
        by_type = [f"{t} {_fig([bool(v.flagged) for v in mine if v.item.type == t])}" for t in TYPES]
        lines.append(f"judge {suite}: perturbed by type: {', '.join(by_type)}")
        if fail_above is not None:
            if rp is None or rc is None:
                failures.append(f"judge {suite}: --judge-fail-above {fail_above:g}: no flag rate to compare "
                                f"(perturbed {_fig(pert)}, clean {_fig(clean)})")
            elif rp > rc + fail_above:
                failures.append(f"judge {suite}: perturbed flag rate {rp:.3f} exceeds the clean flag rate "
                                f"{rc:.3f} + {fail_above:g}")
    if fail_above is not None and not verdicts:
        failures.append(f"judge: --judge-fail-above {fail_above:g}: no text to judge, no flag rate to compare")
    ordered = sorted(verdicts, key=lambda v: v.item.label)
    for v in ordered:
        if v.flagged:
            lines.append(f"judge flagged: {v.item.label}: {v.reason or '(no reason given)'}")
            lines.append(f"    {_excerpt(v.item)}")
    for v in ordered:
        if v.flagged is None:
            lines.append(f"judge no verdict: {v.item.label}: {v.problem}")
    return lines, failures


def _excerpt(item: Item) -> str:
    """What a flagged text shows in the report: the lines an edit changed (``-`` removed, ``+`` added), or the
    start of a clean text."""
    changed = [f"{ln[0]}{ln[1:].strip()}" for ln in item.diff.splitlines()
               if ln[:1] in "+-" and not ln.startswith(("+++", "---")) and ln[1:].strip()]
    if changed:
        return "edit: " + _one_line(" / ".join(changed), 400)
    return "text: " + _one_line(item.text, 400)


def fail_rate(raw: float | None) -> float | None:
    """``--judge-fail-above``: a rate in [0, 1]."""
    if raw is not None and not 0.0 <= raw <= 1.0:
        raise AgentPerturbError(f"--judge-fail-above {raw:g}: expected a rate between 0 and 1 (e.g. 0.15)")
    return raw


__all__ = ["DEFAULT_MAX", "Item", "Unparseable", "Verdict", "draw", "fail_rate", "judge", "parse_verdict",
           "render_prompt", "report", "surface_text", "task_items"]

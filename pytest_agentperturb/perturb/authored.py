"""Applying authored edits: each one an operator with id ``authored``, tried before the rule operators.

:mod:`pytest_agentperturb.model.authored` holds the data a person wrote
for a task (read by :mod:`pytest_agentperturb.formats.authored`); this
module turns one :class:`~pytest_agentperturb.model.authored.AuthoredEdit`
into an :class:`Edit` the engine checks like every variant:

* the new surface is the written text (request, policy, earlier turns) or
  the written changes of the tool contract;
* canaries and the recovery annotation follow from the type:
  ``missing``: every fact no surface states any more is an ``omitted``
  canary and recoverable from the user (found by reading the new
  surfaces, as for the rule operators), a removed tool or argument is an
  ``omitted`` canary, a held fact the user no longer knows (``held_drop``)
  an ``omitted`` canary the user does not give back (``Edit.unheld``);
  ``redundant``: the phrases the author named (a
  ``text`` canary each), an added tool's name (a ``tool`` canary);
  ``incorrect``: each wrong value (a ``value`` canary, its fact
  recoverable), each inverted rule's true value (an ``inverted`` canary), a
  renamed tool's new name, the author's phrases of a rewritten description.

An edit that does not fit the task (an unknown fact or tool, a wrong value
the new text does not state) raises :class:`VariantSkipped` naming where it
was written, so ``agentperturb verify`` reports it as an authoring error.
"""

from __future__ import annotations

import copy
import random
from dataclasses import replace
from typing import Any

from ..model.authored import AuthoredEdit, ToolChange
from ..model.errors import VariantSkipped
from ..model.interfaces import Edit
from ..model.records import Canary
from ..model.task import Surfaces, Task, family_parts
from .helpers import omitted_after

#: The operator id of every authored edit (the report and the store show it).
AUTHORED = "authored"


def _tool_surface(task: Task, changes: tuple[ToolChange, ...], source: str) -> tuple[list[dict[str, Any]],
                                                                                     list[Canary]]:
    tools = copy.deepcopy([dict(t) for t in task.surfaces.tools])
    canaries: list[Canary] = []

    def find(name: str) -> dict[str, Any]:
        for t in tools:
            if t["function"]["name"] == name:
                return t
        raise VariantSkipped(f"{source}: the contract advertises no tool {name!r}")

    def param(t: dict[str, Any], arg: str) -> dict[str, Any]:
        props = t["function"].get("parameters", {}).get("properties", {})
        if arg not in props:
            raise VariantSkipped(f"{source}: tool {t['function']['name']!r} has no argument {arg!r}")
        return props[arg]  # type: ignore[no-any-return]

    for c in changes:
        if c.op == "remove":
            tools.remove(find(c.name))
            canaries.append(Canary("omitted", c.name))
        elif c.op == "hide":
            t = find(c.name)
            param(t, c.arg)
            params = t["function"]["parameters"]
            params["properties"].pop(c.arg)
            if "required" in params:
                params["required"] = [r for r in params["required"] if r != c.arg]
            canaries.append(Canary("omitted", f"{c.name}.{c.arg}"))
        elif c.op == "add":
            name = str(c.schema["name"])
            if name in (t["function"]["name"] for t in tools):
                raise VariantSkipped(f"{source}: tool {name!r} is already advertised")
            fn = {"name": name, "description": c.schema["description"],
                  "parameters": copy.deepcopy(dict(c.schema.get("parameters") or
                                                   {"type": "object", "properties": {}}))}
            at = tools.index(find(c.name)) + 1 if c.name else len(tools)
            tools.insert(at, {"type": "function", "function": fn})
            canaries.append(Canary("tool", name))
        elif c.op == "rename":
            find(c.name)["function"]["name"] = c.to
            canaries.append(Canary("tool", c.to))
        elif c.op == "describe":
            t = find(c.name)
            (param(t, c.arg) if c.arg else t["function"])["description"] = c.text
        elif c.op == "enum":
            param(find(c.name), c.arg)["enum"] = list(c.values)
            canaries += [Canary("value", v) for v in c.values]
    return tools, canaries


class AuthoredOperator:
    """One authored edit as an operator of its family (``id = "authored"``)."""

    id = AUTHORED

    def __init__(self, edit: AuthoredEdit) -> None:
        self.edit = edit
        self.family = edit.family

    def applicable(self, task: Task) -> bool:
        return True

    def apply(self, task: Task, rng: random.Random) -> Edit:
        e = self.edit
        target, typ = family_parts(e.family)
        known = {f.id for f in task.facts}
        unknown = [f for f in (*e.wrong, *e.inverted, *e.recovery, *e.held_drop) if f not in known]
        if unknown:
            raise VariantSkipped(f"{e.source}: names unknown fact {unknown[0]!r} (the task declares "
                                 f"{', '.join(sorted(known)) or 'none'})")
        not_held = [f for f in e.held_drop if f not in task.held]
        if not_held:
            raise VariantSkipped(f"{e.source}: held_drop names {not_held[0]!r}, which the user does not hold "
                                 f"(held: {', '.join(task.held) or 'none'})")
        canaries: list[Canary] = []
        s = task.surfaces
        if e.held_drop and not e.replace and e.user is None:
            new = s  # only what the user knows changes
        elif e.replace:
            text = s.render(target)
            for old, new_text in e.replace:
                if text.count(old) != 1:
                    raise VariantSkipped(f"{e.source}: the passage {old[:60]!r} occurs {text.count(old)} times in "
                                         f"the clean {target} (it must occur exactly once)")
                text = text.replace(old, new_text)
            new = replace(s, user=text) if target == "user" else replace(s, procedure=text)
        elif target == "user":
            new = replace(s, user=e.user or "")
        elif target == "procedure":
            new = replace(s, procedure=e.procedure or "")
        elif target == "context":
            new = replace(s, context=e.context or ())
        else:
            tools, canaries = _tool_surface(task, e.tools, e.source)
            new = replace(s, tools=tuple(tools))
        recovery = list(e.recovery)
        if typ == "missing" and target != "tool":
            gone = omitted_after(task, new) + [task.fact(f) for f in e.held_drop]
            if not gone:
                raise VariantSkipped(f"{e.source}: every fact is still stated: the edit removes nothing "
                                     "the solution needs")
            canaries += [Canary("omitted", f.value, f.id) for f in gone]
            recovery += [f.id for f in gone if f.id not in e.held_drop]
        texts = new.texts()
        for fid, value in e.wrong.items():
            if value not in {v for _, v in task.fact(fid).find(texts)}:
                raise VariantSkipped(f"{e.source}: a reader does not find the wrong value {value!r} stated "
                                     f"as {fid} (write it where the fact is stated, in the same form)")
            canaries.append(Canary("value", value, fid))
            recovery.append(fid)
        for fid in e.inverted:
            canaries.append(Canary("inverted", task.fact(fid).value, fid))
            recovery.append(fid)
        before, after = task.surfaces.render(target), new.render(target)
        for c in e.canaries:  # a contract edit's canary is what a complying call would use, not a text it shows
            if target != "tool" and (c not in after or c in before):
                raise VariantSkipped(f"{e.source}: canary {c!r} must be a phrase the edit adds "
                                     "(in the new surface, not in the clean one)")
            canaries.append(Canary("text", c))
        return Edit(new, tuple(canaries), recovery=tuple(dict.fromkeys(recovery)),
                    note=e.note or f"authored {e.family} edit", unheld=e.held_drop)


def authored_operators(task: Task, family: str) -> list[AuthoredOperator]:
    """The task's authored edits of ``family`` as operators, in file order."""
    return [AuthoredOperator(e) for e in task.authored.for_family(family)]


__all__ = ["AUTHORED", "AuthoredOperator", "authored_operators"]

"""Tool-contract operators: patch operations on the advertised ``tools`` list.

Operator ids follow the paper's edit-magnitude study (DESIGN.md section 1):
``remove_tool``, ``add_fake_tool``, ``replace_enum``, ``replace_description``
and naming edits.  Only the contract changes; the environment still runs
tools under their true names, so a call to an advertised-but-unregistered
name returns an error observation the agent can recover from.
"""

from __future__ import annotations

import copy
import random
from dataclasses import replace
from typing import Any

from ..records import Canary
from ..task import Surfaces, Task
from .base import Edit, register


def _used(task: Task) -> list[str]:
    """Tools the gold solution calls, advertised on the clean contract."""
    names = task.surfaces.tool_names()
    return list(dict.fromkeys(s.tool for s in task.solution if s.tool in names))


def _with_tools(s: Surfaces, tools: list[dict[str, Any]]) -> Surfaces:
    return replace(s, tools=tuple(tools))


def _tools(task: Task) -> list[dict[str, Any]]:
    return copy.deepcopy([dict(t) for t in task.surfaces.tools])


class RemoveTool:
    """Drop a tool the solution needs from the contract (``remove_tool``).

    The backend still registers it under its true name, so an agent that
    infers the capability and calls it anyway (or asks) can still finish.
    """

    id = "remove_tool"
    family = "tool-missing"

    def applicable(self, task: Task) -> bool:
        return len(_used(task)) >= 1 and len(task.surfaces.tools) >= 2

    def apply(self, task: Task, rng: random.Random) -> Edit | None:
        name = rng.choice(_used(task))
        tools = [t for t in _tools(task) if t["function"]["name"] != name]
        return Edit(_with_tools(task.surfaces, tools), (Canary("omitted", name),), note=f"removed {name}")


class HideRequiredArgument:
    """Remove a required argument of a needed tool from its schema.

    The backend still requires it and says so in its error observation, so
    the call can be repaired.
    """

    id = "hide_required_argument"
    family = "tool-missing"

    def applicable(self, task: Task) -> bool:
        return any(self._params(task, n) for n in _used(task))

    @staticmethod
    def _params(task: Task, name: str) -> list[str]:
        fn = task.surfaces.tool_schema(name)
        return list(fn["parameters"].get("required", [])) if fn else []

    def apply(self, task: Task, rng: random.Random) -> Edit | None:
        name = rng.choice([n for n in _used(task) if self._params(task, n)])
        arg = rng.choice(self._params(task, name))
        tools = _tools(task)
        for t in tools:
            if t["function"]["name"] == name:
                params = t["function"]["parameters"]
                params["properties"].pop(arg, None)
                params["required"] = [r for r in params["required"] if r != arg]
        return Edit(_with_tools(task.surfaces, tools), (Canary("omitted", f"{name}.{arg}"),),
                    note=f"hid {name}.{arg}")


class AddFakeTool:
    """Advertise a plausible tool that is not needed (``add_fake_tool``).

    Its name is a near neighbour of a needed tool and its description is
    about a different capability; the solution does not change.  The fake
    name is the canary; the backend does not register it.
    """

    id = "add_fake_tool"
    family = "tool-redundant"
    _SUFFIXES = (("_bulk", "Apply the same change to many items at once (batch jobs only)."),
                 ("_legacy", "Old interface kept for archived data before 2020."),
                 ("_preview", "Show what a change would look like without applying it."))

    def applicable(self, task: Task) -> bool:
        return bool(_used(task))

    def apply(self, task: Task, rng: random.Random) -> Edit | None:
        base = rng.choice(_used(task))
        suffix, desc = rng.choice(self._SUFFIXES)
        fake = base + suffix
        if fake in task.surfaces.tool_names():
            return None
        tools = _tools(task)
        src = next(t for t in tools if t["function"]["name"] == base)
        clone = copy.deepcopy(src)
        clone["function"]["name"] = fake
        clone["function"]["description"] = desc
        tools.insert(rng.randrange(len(tools) + 1), clone)
        return Edit(_with_tools(task.surfaces, tools), (Canary("tool", fake),), note=f"added {fake}")


class RenameTool:
    """Advertise a needed tool under a near-miss name (naming edit).

    Capitalisation and hyphens for underscores: the true name stays
    recoverable from the advertised one, while a call to the advertised name
    gets "unknown tool" from the backend.
    """

    id = "rename_tool"
    family = "tool-incorrect"

    def applicable(self, task: Task) -> bool:
        return bool(_used(task))

    def apply(self, task: Task, rng: random.Random) -> Edit | None:
        name = rng.choice(_used(task))
        style = rng.choice(("hyphen", "title"))
        new_name = name.replace("_", "-") if style == "hyphen" else "-".join(p.title() for p in name.split("_"))
        tools = _tools(task)
        for t in tools:
            if t["function"]["name"] == name:
                t["function"]["name"] = new_name
        return Edit(_with_tools(task.surfaces, tools), (Canary("tool", new_name),),
                    note=f"renamed {name} -> {new_name}")


register(RemoveTool())
register(HideRequiredArgument())
register(AddFakeTool())
register(RenameTool())

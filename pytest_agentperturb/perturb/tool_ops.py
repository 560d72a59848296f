"""Tool-contract operators: patch operations on the advertised ``tools`` list.

Operator ids follow the paper's edit-magnitude study (docs/design.md section 1):
``remove_tool``, ``hide_required_argument`` (missing); ``add_fake_tool``,
``duplicate_alias`` (redundant); ``rename_tool`` (capitalisation, hyphens,
counterfactual names), ``replace_description``, ``replace_enum`` (incorrect).  Only the contract changes; the environment still runs
tools under their true names, so a call to an advertised-but-unregistered
name returns an error observation the agent can recover from.
"""

from __future__ import annotations

import copy
import random
from dataclasses import replace
from typing import Any

from ..model.records import Canary
from ..model.task import Surfaces, Task
from . import bank
from ..model.interfaces import Edit, Operator
from .world import area_object


def _slots(tool: str) -> dict[str, str]:
    obj, objs = area_object(tool)
    return {"base": tool, "object": obj, "objects": objs, "area": tool.split("_")[0]}


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

    Its name is a near neighbour of a needed tool (``_bulk``, ``_export``,
    ``_history``, ...) and its description, a tool-catalog line from the
    ``fake_tools`` bank of ``banks/tools.toml``, is about a different
    capability; the solution does not change.  The fake name is the canary;
    the backend does not register it.
    """

    id = "add_fake_tool"
    family = "tool-redundant"

    def applicable(self, task: Task) -> bool:
        return bool(_used(task))

    def apply(self, task: Task, rng: random.Random) -> Edit | None:
        base = rng.choice(_used(task))
        entry = rng.choice(bank.snippets("tools", "fake_tools"))
        fake, desc = base + entry.name, entry.text.format_map(_slots(base))
        if fake in task.surfaces.tool_names():
            return None
        tools = _tools(task)
        src = next(t for t in tools if t["function"]["name"] == base)
        clone = copy.deepcopy(src)
        clone["function"]["name"] = fake
        clone["function"]["description"] = desc
        tools.insert(rng.randrange(len(tools) + 1), clone)
        return Edit(_with_tools(task.surfaces, tools), (Canary("tool", fake),), note=f"added {fake}")


class DuplicateAlias:
    """Advertise a needed tool a second time under an alias (``duplicate_alias``).

    The alias has the same schema and a maintainer's note that it is an
    alias of the true tool (``aliases`` bank of ``banks/tools.toml``), so
    the contract holds redundant entries; the backend does not register the
    alias name, and the solution does not change.  The alias is the canary.
    """

    id = "duplicate_alias"
    family = "tool-redundant"

    def applicable(self, task: Task) -> bool:
        return bool(_used(task))

    def apply(self, task: Task, rng: random.Random) -> Edit | None:
        base = rng.choice(_used(task))
        entry = rng.choice(bank.snippets("tools", "aliases"))
        alias = entry.name.format_map(_slots(base))
        if alias in task.surfaces.tool_names():
            return None
        tools = _tools(task)
        at = next(i for i, t in enumerate(tools) if t["function"]["name"] == base)
        clone = copy.deepcopy(tools[at])
        clone["function"]["name"] = alias
        clone["function"]["description"] = entry.text.format_map(_slots(base)) + " " + str(
            clone["function"].get("description", ""))
        tools.insert(at + rng.choice((0, 1)), clone)
        return Edit(_with_tools(task.surfaces, tools), (Canary("tool", alias),), note=f"aliased {base} as {alias}")


#: Plausible counterfactual verbs for a tool name's action part.
_COUNTERFACTUAL = {
    "list": "browse", "update": "modify", "create": "add", "send": "deliver", "search": "find",
    "read": "open", "move": "relocate", "share": "grant", "comment": "annotate", "submit": "file",
    "events": "entries",
}


class RenameTool:
    """Advertise a needed tool under a wrong name (``rename_tool``, a naming edit).

    Styles: capitalisation (``Calendar-Update-Event``), hyphens for
    underscores (``calendar-update-event``), or a plausible counterfactual
    name (``calendar_modify_event``).  The backend still runs the tool under
    its true name, so the task is recoverable (a retry under the true or
    normalised name, or the oracle's true names); a call to the advertised
    name gets "unknown tool".  The advertised name is the canary.
    """

    id = "rename_tool"
    family = "tool-incorrect"

    @staticmethod
    def renamed(name: str, style: str) -> str:
        parts = name.split("_")
        if style == "hyphen":
            return "-".join(parts)
        if style == "title":
            return "-".join(p.title() for p in parts)
        return "_".join(_COUNTERFACTUAL.get(p, p) for p in parts)

    def applicable(self, task: Task) -> bool:
        return bool(_used(task))

    def apply(self, task: Task, rng: random.Random) -> Edit | None:
        name = rng.choice(_used(task))
        new_name = self.renamed(name, rng.choice(("hyphen", "title", "counterfactual")))
        if new_name == name or new_name in task.surfaces.tool_names():
            return None
        tools = _tools(task)
        for t in tools:
            if t["function"]["name"] == name:
                t["function"]["name"] = new_name
        return Edit(_with_tools(task.surfaces, tools), (Canary("tool", new_name),),
                    note=f"renamed {name} -> {new_name}")


class ReplaceDescription:
    """Give an unneeded tool the description of a needed one (``replace_description``).

    The unneeded tool's description now claims it takes over the needed
    tool, in a changelog-style note from the ``redirects`` bank of
    ``banks/tools.toml`` ("Supersedes `X` since the March API release")
    followed by the needed tool's own description: a wrong statement about
    the interface.  The needed tool is still advertised and registered, so
    the task stays solvable; calling the wrong tool for the job is the
    canary.
    """

    id = "replace_description"
    family = "tool-incorrect"

    def _pairs(self, task: Task) -> list[tuple[str, str]]:
        used = _used(task)
        spare = [n for n in task.surfaces.tool_names() if n not in {s.tool for s in task.solution}]
        return [(u, s) for u in used for s in spare]

    def applicable(self, task: Task) -> bool:
        return bool(self._pairs(task))

    def apply(self, task: Task, rng: random.Random) -> Edit | None:
        needed, spare = rng.choice(self._pairs(task))
        tools = _tools(task)
        true_desc = str((task.surfaces.tool_schema(needed) or {}).get("description", ""))
        note = rng.choice(bank.snippets("tools", "redirects")).text.format(needed=needed)
        for t in tools:
            if t["function"]["name"] == spare:
                t["function"]["description"] = f"{note} {true_desc}".strip()
        return Edit(_with_tools(task.surfaces, tools), (Canary("tool", spare),),
                    note=f"{spare} now claims to replace {needed}")


class ReplaceEnum:
    """Advertise an argument's enum with values the backend rejects (``replace_enum``).

    For an enum argument a needed call uses, the advertised values become an
    interface-incompatible spelling (``VIEW`` for ``view``, ``access_view``).
    The backend keeps its true enum and names the valid values in its error
    observation, so the call can be repaired.  The planted values are the
    canaries.
    """

    id = "replace_enum"
    family = "tool-incorrect"
    _STYLES = ("upper", "prefixed")

    def _args(self, task: Task) -> list[tuple[str, str]]:
        out = []
        for step in task.solution:
            fn = task.surfaces.tool_schema(step.tool)
            props = fn["parameters"].get("properties", {}) if fn else {}
            for arg in step.args:
                if isinstance(props.get(arg), dict) and props[arg].get("enum") and (step.tool, arg) not in out:
                    out.append((step.tool, arg))
        return out

    def applicable(self, task: Task) -> bool:
        return bool(self._args(task))

    def apply(self, task: Task, rng: random.Random) -> Edit | None:
        tool, arg = rng.choice(self._args(task))
        style = rng.choice(self._STYLES)
        tools = _tools(task)
        planted: list[str] = []
        for t in tools:
            if t["function"]["name"] == tool:
                prop = t["function"]["parameters"]["properties"][arg]
                prop["enum"] = [str(v).upper() if style == "upper" else f"{arg}_{v}" for v in prop["enum"]]
                planted = list(prop["enum"])
        return Edit(_with_tools(task.surfaces, tools), tuple(Canary("value", v) for v in planted),
                    note=f"{tool}.{arg} enum -> {', '.join(planted)}")


#: The operators of this module, in catalog order.
OPERATORS: tuple[Operator, ...] = (
    RemoveTool(),
    HideRequiredArgument(),
    AddFakeTool(),
    DuplicateAlias(),
    RenameTool(),
    ReplaceDescription(),
    ReplaceEnum(),
)

"""Reading authored edits: ``edits.toml`` in a task folder, or a pack shipped with an adapter.

An authored edit is data (docs/authoring.md): the new text of one surface
of one task, for one family, written the way a person would change it.
This module reads and checks the files; the engine applies what they hold
(:mod:`pytest_agentperturb.perturb.authored`) under the validity rules::

    [[edit]]
    family = "user-missing"
    note = "the request no longer says which day"
    user = \"\"\"Please book the design offsite in the Fjord room ...\"\"\"

    [[edit]]
    family = "procedure-incorrect"
    procedure = \"\"\"... starts at 10:30 ...\"\"\"
    wrong = { start_time = "10:30" }

    [[edit]]
    family = "tool-missing"
    tools = [{ op = "remove", name = "calendar_create_event" }]

    [[not_applicable]]
    family = "procedure-missing"
    reason = "the system message states no value of the task"

A pack (for an adapter's tasks) holds the same tables, each with ``task =
"<task id>"``; ``task = "*"`` in a ``[[not_applicable]]`` entry covers every
task of the pack.  Every error names the file, the entry and the fix.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..model.authored import TOOL_OPS, Authored, AuthoredEdit, ToolChange
from ..model.errors import TaskFormatError
from ..model.vocab import FAMILIES, Turn, family_parts

#: The file name of a native task's authored edits.
EDITS_FILE = "edits.toml"

_SURFACE_KEYS: dict[str, str] = {"user": "user", "procedure": "procedure", "context": "context", "tool": "tools"}
_EDIT_KEYS = frozenset({"family", "note", "user", "procedure", "context", "tools", "replace", "wrong", "inverted",
                        "canaries", "recovery", "facts", "held_drop", "task"})


def _str_list(path: Path | str, where: str, raw: Any) -> tuple[str, ...]:
    if not (isinstance(raw, list) and all(isinstance(x, str) and x for x in raw)):
        raise TaskFormatError(path, where, "a list of non-empty strings", repr(raw)[:120])
    return tuple(raw)


def _tool_change(path: Path | str, where: str, raw: Any) -> ToolChange:
    if not isinstance(raw, dict) or raw.get("op") not in TOOL_OPS:
        raise TaskFormatError(path, where, f"a table with op = one of {', '.join(TOOL_OPS)}", repr(raw)[:120])
    op = raw["op"]
    need = {"remove": ("name",), "hide": ("name", "arg"), "add": ("schema",), "rename": ("name", "to"),
            "describe": ("name", "text"), "enum": ("name", "arg", "values")}[op]
    for key in need:
        if key not in raw:
            raise TaskFormatError(path, f"{where}.{key}", f"'{key}' for op = \"{op}\"", "nothing",
                                  f"add {key} = ... to this change")
    for key in ("name", "arg", "to", "text"):
        if not isinstance(raw.get(key, ""), str):
            raise TaskFormatError(path, f"{where}.{key}", "a string", repr(raw[key])[:80])
    schema = raw.get("schema", {})
    if op == "add" and not (isinstance(schema, dict) and isinstance(schema.get("name"), str)
                            and isinstance(schema.get("description"), str)
                            and isinstance(schema.get("parameters", {}), dict)):
        raise TaskFormatError(path, f"{where}.schema", "a function schema {name, description, parameters}",
                              repr(schema)[:120])
    values = _str_list(path, f"{where}.values", raw["values"]) if "values" in raw else ()
    return ToolChange(op=op, name=raw.get("name", ""), arg=raw.get("arg", ""), to=raw.get("to", ""),
                      text=raw.get("text", ""), values=values, schema=schema)


def parse_edit(path: Path | str, index: int, raw: Any) -> AuthoredEdit:
    """One ``[[edit]]`` table as an :class:`AuthoredEdit` (checked; the error names the entry)."""
    where = f"edit[{index}]"
    if not isinstance(raw, dict):
        raise TaskFormatError(path, where, "a table", repr(raw)[:80])
    unknown = sorted(set(raw) - _EDIT_KEYS)
    if unknown:
        raise TaskFormatError(path, f"{where}.{unknown[0]}", f"one of {', '.join(sorted(_EDIT_KEYS))}",
                              repr(unknown[0]), "remove or rename the key")
    family = raw.get("family")
    if family not in FAMILIES:
        raise TaskFormatError(path, f"{where}.family", f"one of {', '.join(FAMILIES)}", repr(family)[:80])
    target, typ = family_parts(family)
    surface_key = _SURFACE_KEYS[target]
    given = [k for k in (*_SURFACE_KEYS.values(), "replace") if k in raw]
    if "held_drop" in raw and family != "user-missing":
        raise TaskFormatError(path, f"{where}.held_drop", "held_drop only in a user-missing edit", family,
                              "move it to a user-missing edit: it removes what the user knows")
    unheld_only = "held_drop" in raw and not given  # the user's knowledge is the edited surface
    if given != [surface_key] and not (given == ["replace"] and target in ("user", "procedure")) and not unheld_only:
        raise TaskFormatError(path, where, f"exactly one surface, '{surface_key}' (the {family} target)"
                              + (" or replace = [{old, new}, ...]" if target in ("user", "procedure") else ""),
                              ", ".join(given) or "none", f"write the new {target} surface as {surface_key} = ...")
    source = f"{path} {where} ({family})"
    kw: dict[str, Any] = {}
    if given == ["replace"]:
        pairs = raw["replace"]
        if not (isinstance(pairs, list) and pairs and all(
                isinstance(r, dict) and set(r) == {"old", "new"} and isinstance(r["old"], str) and r["old"]
                and isinstance(r["new"], str) for r in pairs)):
            raise TaskFormatError(path, f"{where}.replace", "a non-empty list of {old = \"...\", new = \"...\"}",
                                  repr(pairs)[:120], "give each passage of the clean text and what it becomes")
        kw["replace"] = tuple((r["old"], r["new"]) for r in pairs)
    elif unheld_only:
        pass
    elif target in ("user", "procedure"):
        if not isinstance(raw[surface_key], str) or not raw[surface_key].strip():
            raise TaskFormatError(path, f"{where}.{surface_key}", "the whole new text", repr(raw[surface_key])[:80])
        kw[surface_key] = raw[surface_key]
    elif target == "context":
        turns = raw["context"]
        if not isinstance(turns, list) or not all(
                isinstance(t, dict) and t.get("role") in ("user", "assistant") and isinstance(t.get("content"), str)
                and set(t) <= {"role", "content"} for t in turns):
            raise TaskFormatError(path, f"{where}.context", "a list of {role = user|assistant, content = ...}",
                                  repr(turns)[:120])
        kw["context"] = tuple(Turn(t["role"], t["content"]) for t in turns)
    else:
        changes = raw["tools"]
        if not isinstance(changes, list) or not changes:
            raise TaskFormatError(path, f"{where}.tools", "a non-empty list of changes {op = ..., ...}",
                                  repr(changes)[:120])
        kw["tools"] = tuple(_tool_change(path, f"{where}.tools[{i}]", c) for i, c in enumerate(changes))
    wrong = raw.get("wrong", {})
    if not (isinstance(wrong, dict) and all(isinstance(v, str) and v for v in wrong.values())):
        raise TaskFormatError(path, f"{where}.wrong", "a table fact id = wrong value (strings)", repr(wrong)[:120])
    facts = raw.get("facts", {})
    if not (isinstance(facts, dict) and all(isinstance(v, str) and v for v in facts.values())):
        raise TaskFormatError(path, f"{where}.facts", "a table fact id = value the clean surface states (strings)",
                              repr(facts)[:120])
    if not isinstance(raw.get("note", ""), str):
        raise TaskFormatError(path, f"{where}.note", "a string", repr(raw["note"])[:80])
    edit = AuthoredEdit(
        family=family, source=source, note=raw.get("note", ""), wrong=dict(wrong),
        inverted=_str_list(path, f"{where}.inverted", raw.get("inverted", [])),
        canaries=_str_list(path, f"{where}.canaries", raw.get("canaries", [])),
        recovery=_str_list(path, f"{where}.recovery", raw.get("recovery", [])),
        facts=dict(facts), held_drop=_str_list(path, f"{where}.held_drop", raw.get("held_drop", [])), **kw)
    if typ == "incorrect" and target != "tool" and not (edit.wrong or edit.inverted):
        raise TaskFormatError(path, where, "wrong = {fact = value} or inverted = [fact] for an incorrect edit",
                              "neither", "say which fact the edit corrupts: it is the canary")
    if typ == "redundant" and target != "tool" and not edit.canaries:
        raise TaskFormatError(path, f"{where}.canaries", "phrases only the added content holds", "none",
                              "name one or two: using them shows the agent took the clutter up")
    return edit


def _not_applicable(path: Path | str, index: int, raw: Any) -> tuple[str, str]:
    where = f"not_applicable[{index}]"
    if not (isinstance(raw, dict) and raw.get("family") in FAMILIES and isinstance(raw.get("reason"), str)
            and raw["reason"].strip()):
        raise TaskFormatError(path, where, "a table {family = <one of the 12 families>, reason = \"...\"}",
                              repr(raw)[:120], "say which family cannot apply and why")
    return raw["family"], raw["reason"].strip()


def parse(path: Path | str, data: Mapping[str, Any]) -> Authored:
    """The authored edits of one task from parsed TOML (``[[edit]]`` and ``[[not_applicable]]``)."""
    unknown = sorted(set(data) - {"edit", "not_applicable"})
    if unknown:
        raise TaskFormatError(path, unknown[0] or repr(unknown[0]), "[[edit]] or [[not_applicable]] tables",
                              f"a key {unknown[0]!r}", "remove it: edits.toml holds only those two tables")
    for key in ("edit", "not_applicable"):
        if not isinstance(data.get(key, []), list):
            raise TaskFormatError(path, key, f"[[{key}]] tables (an array of tables)", type(data[key]).__name__)
    edits = tuple(parse_edit(path, i, raw) for i, raw in enumerate(data.get("edit", [])))
    na = dict(_not_applicable(path, i, raw) for i, raw in enumerate(data.get("not_applicable", [])))
    clash = sorted({e.family for e in edits} & set(na))
    if clash:
        raise TaskFormatError(path, "not_applicable", "families without edits", clash[0],
                              f"remove the edits of {clash[0]} or its not_applicable entry")
    return Authored(edits, na)


def _load(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise TaskFormatError(path, "(syntax)", "valid TOML", str(exc), "fix the TOML syntax") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskFormatError(path, "(file)", "a readable UTF-8 file", f"{type(exc).__name__}: {exc}") from None


def load_edits(folder: Path) -> Authored:
    """The authored edits of the native task in ``folder`` (none without an ``edits.toml``)."""
    path = Path(folder) / EDITS_FILE
    if not path.is_file():
        return Authored()
    return parse(path, _load(path))


def load_pack(path: Path, *more: Path) -> dict[str, Authored]:
    """An adapter's pack: task id -> its authored edits (``task = "*"`` not-applicable entries go to every task).

    A pack may span several files (``<suite>.toml`` and ``<suite>-<part>.toml``): their entries are merged,
    and an error names the file that holds the task's first entry."""
    by_task: dict[str, dict[str, list[Any]]] = {}
    where: dict[str, Path] = {}
    for file in (path, *more):
        data = _load(file)
        for key in ("edit", "not_applicable"):
            entries = data.get(key, [])
            if not isinstance(entries, list):
                raise TaskFormatError(file, key, f"[[{key}]] tables", type(entries).__name__)
            for i, raw in enumerate(entries):
                if not (isinstance(raw, dict) and isinstance(raw.get("task"), str) and raw["task"]):
                    raise TaskFormatError(file, f"{key}[{i}].task", "the id of the task it belongs to",
                                          repr(raw)[:120])
                entry = {k: v for k, v in raw.items() if k != "task"}
                by_task.setdefault(raw["task"], {"edit": [], "not_applicable": []})[key].append(entry)
                where.setdefault(raw["task"], file)
    every = by_task.pop("*", {"edit": [], "not_applicable": []})
    if every["edit"]:
        raise TaskFormatError(where["*"], "edit.task", "a task id", "'*'", "'*' is for not_applicable entries only")
    out = {}
    for task, tables in by_task.items():
        own = {e.get("family") for e in (*tables["edit"], *tables["not_applicable"])}  # the task's own win
        tables["not_applicable"] += [e for e in every["not_applicable"] if e.get("family") not in own]
        out[task] = parse(f"{where[task]} [task {task}]", tables)
    out["*"] = parse(f"{where.get('*', path)} [task *]", every)
    return out


def adapter_pack(folder: Path, name: str) -> dict[str, Authored]:
    """The pack of an adapter's suite or domain ``name`` in ``folder``: ``<name>.toml`` and any
    ``<name>-<part>.toml`` (empty when there is none)."""
    files = sorted(p for p in Path(folder).glob(f"{name}*.toml") if p.stem == name or p.stem.startswith(f"{name}-"))
    return load_pack(*files) if files else {}


def pack_entry(pack: Mapping[str, Authored], task_id: str) -> Authored:
    """A task's authored edits in a pack (its own entries, else the ``task = "*"`` ones)."""
    return pack.get(task_id) or pack.get("*") or Authored()


__all__ = ["EDITS_FILE", "adapter_pack", "load_edits", "load_pack", "pack_entry", "parse", "parse_edit"]

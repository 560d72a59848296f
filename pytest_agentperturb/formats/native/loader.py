"""The native on-disk format: a suite folder with ``suite.toml`` and one folder per task.

::

    suites/workflows/
        suite.toml                 name, description, success threshold
        reschedule-standup/
            task.toml              id, title, tools, facts (and the tools whose images
                                   state a fact: observations), file names
            instruction.md         user surface (the goal)
            procedure.md           procedure surface (policy, system prompt)
            context.json           context surface: earlier turns
            tools.json             tool surface: OpenAI-style function schemas
            environment.json       initial state of the simulated office
            grader.toml            native grader: checks on the final state
            solution.json          gold solution, written against facts

The loader validates everything it reads and raises :class:`TaskFormatError`
naming the file, the field, what was expected, what was found and the fix.
Tools are the office's (:data:`.office.OFFICE`); the grader is the
declarative one (:class:`.grader.DeclarativeGrader`).
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...model.errors import TaskFormatError
from ...model.task import FACT_KINDS, SURFACE_FILES, TARGETS, TYPES, Fact, Step, Surfaces, Task, Turn, select
from ..python import environment_factory
from .grader import DeclarativeGrader, validate_grader
from .office import OFFICE

#: Files that make up the grader, solution and verifier configuration; a
#: variant must leave them byte-identical (docs/design.md section 2, rule 2).
GRADER_FILES: tuple[str, ...] = ("grader.toml", "solution.json", "environment.json")


@dataclass(frozen=True)
class Suite:
    """A folder of tasks sharing a grader threshold."""

    name: str
    path: Path
    description: str
    threshold: float
    task_dirs: tuple[Path, ...]


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise TaskFormatError(
            path.parent / "task.toml", what, f"a file {path.name}", "no such file",
            f"create {path} or point '{what}' at an existing file",
        ) from None


def _toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(_read(path, path.name).decode())
    except tomllib.TOMLDecodeError as exc:
        raise TaskFormatError(path, "(syntax)", "valid TOML", str(exc), "fix the TOML syntax") from None


def _json(path: Path, what: str) -> Any:
    try:
        return json.loads(_read(path, what))
    except json.JSONDecodeError as exc:
        raise TaskFormatError(path, what, "valid JSON", str(exc), "fix the JSON syntax") from None


def _want(path: Path, data: Mapping[str, Any], key: str, typ: type | tuple[type, ...],
          desc: str, default: Any = ..., where: str = "") -> Any:
    name = f"{where}{key}"
    if key not in data:
        if default is not ...:
            return default
        raise TaskFormatError(path, name, desc, "nothing", f"add {name} = ...")
    val = data[key]
    if not isinstance(val, typ) or isinstance(val, bool) and typ is not bool:
        raise TaskFormatError(path, name, desc, f"{type(val).__name__} {val!r}"[:120])
    return val


def load_suite(path: Path) -> Suite:
    """Read ``suite.toml`` and list the task folders (those holding task.toml)."""
    path = Path(path)
    meta_path = path / "suite.toml"
    meta = _toml(meta_path)
    name = _want(meta_path, meta, "name", str, "a suite name", default=path.name)
    threshold = _want(meta_path, meta, "threshold", (int, float), "a number in [0, 1]", default=1.0)
    if not 0.0 <= float(threshold) <= 1.0:
        raise TaskFormatError(meta_path, "threshold", "a number in [0, 1]", repr(threshold))
    dirs = tuple(sorted(p for p in path.iterdir() if (p / "task.toml").is_file()))
    return Suite(name=name, path=path, description=str(meta.get("description", "")),
                 threshold=float(threshold), task_dirs=dirs)


def load_task(path: Path, suite: str | None = None, threshold: float = 1.0, *,
              check_statements: bool = True) -> Task:
    """Load and validate one task folder.

    ``check_statements=False`` skips the check that every fact is stated on
    its declared surfaces: a perturbed variant written to disk removes or
    corrupts exactly those statements, while its task.toml stays the clean one.
    """
    path = Path(path)
    tpath = path / "task.toml"
    meta = _toml(tpath)
    tid = _want(tpath, meta, "id", str, "a task id (letters, digits, '-')")
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", tid):
        raise TaskFormatError(tpath, "id", "lower-case letters, digits and '-'", repr(tid))
    for word in ("clean", *TARGETS, *TYPES):
        if word in tid.split("-"):
            raise TaskFormatError(tpath, "id", f"an id without the selection word '{word}'", repr(tid),
                                  "rename the task so that -k expressions stay unambiguous")
    files = dict(SURFACE_FILES)
    files.update(_want(tpath, meta, "files", dict, "a table of surface file names", default={}))

    user = _read(path / files["user"], "files.user").decode()
    procedure = _read(path / files["procedure"], "files.procedure").decode()
    ctx_path = path / files["context"]
    ctx_raw = _json(ctx_path, "context")
    if not isinstance(ctx_raw, list):
        raise TaskFormatError(ctx_path, "(top level)", "a list of {role, content} turns", type(ctx_raw).__name__)
    turns = []
    for i, t in enumerate(ctx_raw):
        if not (isinstance(t, dict) and t.get("role") in ("user", "assistant")
                and isinstance(t.get("content"), str)):
            raise TaskFormatError(ctx_path, f"[{i}]", "{role: user|assistant, content: str}", repr(t)[:120])
        turns.append(Turn(t["role"], t["content"]))
    tools_path = path / files["tool"]
    tools_raw = _json(tools_path, "tools")
    if not isinstance(tools_raw, list):
        raise TaskFormatError(tools_path, "(top level)", "a list of function schemas", type(tools_raw).__name__)
    for i, t in enumerate(tools_raw):
        fn = t.get("function") if isinstance(t, dict) else None
        if not (isinstance(fn, dict) and isinstance(fn.get("name"), str)
                and isinstance(fn.get("parameters"), dict)):
            raise TaskFormatError(tools_path, f"[{i}].function", "{name, description, parameters}",
                                  repr(t)[:120], 'use {"type": "function", "function": {...}}')
    surfaces = Surfaces(user, procedure, tuple(turns), tuple(tools_raw))
    for target in TARGETS:
        if not surfaces.render(target).strip() or surfaces.render(target).strip() in ("[]",):
            raise TaskFormatError(path / files[target], target, "a non-empty surface", "an empty one")

    env_path = path / "environment.json"
    env = _json(env_path, "environment")
    if not isinstance(env, dict):
        raise TaskFormatError(env_path, "(top level)", "an object", type(env).__name__)

    tool_names = _want(tpath, meta, "tools", list, "a list of backend tool names")
    for name in tool_names:
        if name not in OFFICE:
            raise TaskFormatError(tpath, "tools", f"names of office tools ({', '.join(sorted(OFFICE))})",
                                  repr(name), "use an office tool, or write an adapter with its own toolkit")

    facts = []
    for i, raw in enumerate(_want(tpath, meta, "facts", list, "a list of [[facts]] tables")):
        where = f"facts[{i}]."
        fid = _want(tpath, raw, "id", str, "a fact id", where=where)
        value = _want(tpath, raw, "value", str, "the fact's value as a string", where=where)
        kind = _want(tpath, raw, "kind", str, "a fact kind", default="text", where=where)
        if kind not in FACT_KINDS and kind != "text":
            raise TaskFormatError(tpath, f"{where}kind", f"one of {', '.join([*FACT_KINDS, 'text'])}", repr(kind))
        pattern = raw.get("pattern")
        if kind == "text" and not pattern:
            raise TaskFormatError(tpath, f"{where}pattern", "a regex with one group for kind 'text'", "nothing")
        where_surf = tuple(_want(tpath, raw, "surfaces", list, "a list of surfaces", where=where))
        for s in where_surf:
            if s not in TARGETS:
                raise TaskFormatError(tpath, f"{where}surfaces", f"surfaces among {', '.join(TARGETS)}", repr(s))
            if check_statements and value not in surfaces.render(s):
                raise TaskFormatError(tpath, f"{where}value", f"{value!r} stated verbatim on surface '{s}'",
                                      "no such text", f"state the value in {files[s]} or drop '{s}'")
        seen_in = tuple(_want(tpath, raw, "observations", list, "a list of tool names whose images state it",
                              default=[], where=where))
        for t in seen_in:
            if t not in tool_names:
                raise TaskFormatError(tpath, f"{where}observations", f"tools of this task ({', '.join(tool_names)})",
                                      repr(t), "name the tool whose image shows the value")
        fact = Fact(id=fid, value=value, surfaces=where_surf, kind=kind, pattern=pattern,
                    cues=tuple(raw.get("cues", ())), domain=raw.get("domain"),
                    question=str(raw.get("question", f"What is the {fid.replace('_', ' ')}?")),
                    observations=seen_in)
        if fact.domain is not None and value not in [str(v) for v in select(env, fact.domain)]:
            raise TaskFormatError(tpath, f"{where}domain", f"a path whose values include {value!r}",
                                  repr(fact.domain))
        found = [m.group(m.lastindex or 0) for m in fact.regex().finditer(surfaces.render(where_surf[0]))] \
            if where_surf else []
        if check_statements and where_surf and value not in found:
            raise TaskFormatError(tpath, f"{where}pattern", f"a pattern that captures {value!r}",
                                  f"captures {found[:5]!r}", "adjust kind or pattern")
        facts.append(fact)

    sol_path = path / "solution.json"
    sol = _json(sol_path, "solution")
    if not isinstance(sol, dict) or not isinstance(sol.get("steps"), list):
        raise TaskFormatError(sol_path, "steps", "an object with a list 'steps'", repr(sol)[:120])
    known = {f.id for f in facts}
    steps = []
    for i, s in enumerate(sol["steps"]):
        if not (isinstance(s, dict) and s.get("tool") in tool_names and isinstance(s.get("args", {}), dict)):
            raise TaskFormatError(sol_path, f"steps[{i}]", "{tool: one of task.toml tools, args: {...}}",
                                  repr(s)[:120])
        step = Step(s["tool"], s.get("args", {}))
        for ref in step.facts():
            if ref not in known:
                raise TaskFormatError(sol_path, f"steps[{i}].args", "placeholders naming declared facts",
                                      f"{{{ref}}}", f"declare a fact '{ref}' in task.toml")
        steps.append(step)

    grader_path = path / "grader.toml"
    grader = _toml(grader_path)
    validate_grader(grader_path, grader)

    fingerprint = {name: (path / name).read_bytes() for name in GRADER_FILES}
    return Task(
        suite=suite or path.parent.name, id=tid, title=str(meta.get("title", tid)), path=path,
        surfaces=surfaces, facts=tuple(facts), solution=tuple(steps), answer=str(sol.get("answer", "")),
        grader=DeclarativeGrader(grader), environment=environment_factory(env, tool_names, OFFICE),
        tools=tuple(tool_names), threshold=float(meta.get("threshold", threshold)), initial_state=env,
        fingerprint=fingerprint,
    )


def load_tasks(suite_path: Path) -> Iterator[Task | TaskFormatError]:
    """Every task of a suite, or the error that stops one task from loading."""
    suite = load_suite(suite_path)
    for d in suite.task_dirs:
        try:
            yield load_task(d, suite.name, suite.threshold)
        except TaskFormatError as exc:
            yield exc

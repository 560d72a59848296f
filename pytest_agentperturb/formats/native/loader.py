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
            edits.toml             optional: authored edits, per family (docs/authoring.md)

The loader validates everything it reads and raises :class:`TaskFormatError`
naming the file, the field, what was expected, what was found and the fix;
every image spec of ``environment.json`` is checked against the image limits
when the task is loaded, not only when an episode draws it.
Tools are the office's (:data:`.office.OFFICE`) and the document tools
(:data:`.documents.DOCUMENTS`), together :data:`BUILTIN_TOOLS`; the grader
is the declarative one (:class:`.grader.DeclarativeGrader`).
"""

from __future__ import annotations

import json
import os
import re
import stat
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

from ...model.errors import TaskFormatError, ToolError
from ...model.limits import MAX_IMAGE_PIXELS, MAX_IMAGE_ROWS, MAX_IMAGE_TEXT
from ...model.task import FACT_KINDS, SURFACE_FILES, TARGETS, TYPES, Fact, Step, Surfaces, Task, Turn, fill, select
from ..authored import load_edits
from ..python import ToolDef, environment_factory
from .documents import DOCUMENTS
from .grader import DeclarativeGrader, grade, validate_grader
from .office import OFFICE, image_specs

#: Files that make up the grader, solution and verifier configuration; a
#: variant must leave them byte-identical (docs/design.md section 2, rule 2).
GRADER_FILES: tuple[str, ...] = ("grader.toml", "solution.json", "environment.json")
#: A suite name becomes a folder name (``generate``) and part of store keys: one plain path component.
SUITE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_FACT_ID = re.compile(r"[a-z_][a-z0-9_]*")

#: Every tool a native task may list, by true name: the office's and the document tools.
BUILTIN_TOOLS: Mapping[str, ToolDef] = {**OFFICE, **DOCUMENTS}


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
        _regular(path)
        return path.read_bytes()
    except FileNotFoundError:
        raise TaskFormatError(
            path.parent / "task.toml", what, f"a file {path.name}", "no such file",
            f"create {path} or point '{what}' at an existing file",
        ) from None
    except OSError as exc:  # a folder, no permission, ...
        raise TaskFormatError(path, what, "a readable file", f"{type(exc).__name__}: {exc.strerror or exc}",
                              "make it a regular, readable file") from None


def _kind(mode: int) -> str:
    """What a file that is not a regular file is, in words."""
    for test, word in ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISDIR, "a folder")):
        if test(mode):
            return word
    return "not a regular file"


def _regular(path: Path) -> None:
    """Refuse anything but a regular file before it is opened (opening a FIFO waits for a writer forever)."""
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise TaskFormatError(path, "(file)", "a regular file (only regular files are read)", _kind(mode),
                              "replace it by a regular file with the content")


def _text(path: Path, what: str) -> str:
    data = _read(path, what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TaskFormatError(path, what, "UTF-8 text", f"a byte that is not UTF-8 at offset {exc.start}",
                              "save the file as UTF-8") from None


def _toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(_text(path, path.name))
    except tomllib.TOMLDecodeError as exc:
        raise TaskFormatError(path, "(syntax)", "valid TOML", str(exc), "fix the TOML syntax") from None


def _json(path: Path, what: str) -> Any:
    try:
        return json.loads(_text(path, what))
    except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError; absurd nesting recurses
        raise TaskFormatError(path, what, "valid JSON", str(exc)[:200] or type(exc).__name__,
                              "fix the JSON syntax") from None


def _found(val: Any) -> str:
    return f"{type(val).__name__} {val!r}"[:120]


def _no_links(folder: Path, suite_dir: Path | None = None) -> None:
    """A task folder holds only regular files and folders, and lies inside its suite.

    A symbolic link would make the harness read (and ``generate`` copy) a
    file from anywhere on the machine.
    """
    if folder.is_symlink():
        target = folder.resolve()
        parent = (suite_dir or folder.parent).resolve()
        if not target.is_relative_to(parent) or target == parent:
            raise TaskFormatError(folder, "(folder)", f"a task folder inside its suite {parent}",
                                  f"a symbolic link to {target}", "copy the task into the suite folder")
    for root, dirs, files in os.walk(folder):
        for name in sorted([*dirs, *files]):
            p = Path(root) / name
            mode = os.lstat(p).st_mode
            if stat.S_ISLNK(mode):
                raise TaskFormatError(p, "(file)", "a regular file or folder inside the task folder",
                                      f"a symbolic link to {os.readlink(p)}",
                                      "replace the link by a copy of what it points to")
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):  # a FIFO would hang the reader
                raise TaskFormatError(p, "(file)", "a regular file or folder inside the task folder",
                                      _kind(mode), "remove it, or replace it by a regular file")


def _surface_files(tpath: Path, folder: Path, meta: Mapping[str, Any]) -> dict[str, str]:
    """The file of each surface: relative names inside the task folder, none of them a grader file."""
    files = dict(SURFACE_FILES)
    given = _want(tpath, meta, "files", dict, "a table of surface file names", default={})
    root = folder.resolve()
    for target, name in given.items():
        where = f"files.{target}"
        if target not in TARGETS:
            raise TaskFormatError(tpath, where, f"a surface among {', '.join(TARGETS)}", repr(target)[:80],
                                  f"remove '{target}' from [files]")
        if not isinstance(name, str) or not name.strip():
            raise TaskFormatError(tpath, where, "a file name", _found(name))
        if (PurePosixPath(name).is_absolute() or PureWindowsPath(name).is_absolute() or "\\" in name
                or ".." in PurePosixPath(name).parts or not (folder / name).resolve().is_relative_to(root)
                or (folder / name).resolve() == root):
            raise TaskFormatError(tpath, where, "a relative file name inside the task folder", repr(name)[:120],
                                  "name a file next to task.toml, e.g. instruction.md")
        files[target] = PurePosixPath(name).as_posix()
    for target, name in files.items():
        if name in ("task.toml", *GRADER_FILES) or list(files.values()).count(name) > 1:
            raise TaskFormatError(tpath, f"files.{target}", "a file of its own for each surface, not "
                                  "task.toml or a grader, solution or environment file", repr(name),
                                  "give each surface its own file")
    return files


def _want(path: Path, data: Mapping[str, Any], key: str, typ: type | tuple[type, ...],
          desc: str, default: Any = ..., where: str = "") -> Any:
    name = f"{where}{key}"
    if key not in data:
        if default is not ...:
            return default
        raise TaskFormatError(path, name, desc, "nothing", f"add {name} = ...")
    val = data[key]
    if not isinstance(val, typ) or isinstance(val, bool) and typ is not bool:
        raise TaskFormatError(path, name, desc, _found(val))
    return val


def _threshold(path: Path, meta: Mapping[str, Any], default: float) -> float:
    val = _want(path, meta, "threshold", (int, float), "a number in [0, 1]", default=default)
    if not 0.0 <= float(val) <= 1.0:  # NaN fails too
        raise TaskFormatError(path, "threshold", "a number in [0, 1]", repr(val), "use e.g. threshold = 1.0")
    return float(val)


def load_suite(path: Path) -> Suite:
    """Read ``suite.toml`` and list the task folders (those holding task.toml)."""
    path = Path(path)
    meta_path = path / "suite.toml"
    if meta_path.is_symlink():  # a suite.toml linked from outside the suite folder is not this suite's
        target = meta_path.resolve()
        if not target.is_relative_to(path.resolve()):
            raise TaskFormatError(meta_path, "(file)", "a regular file inside the suite folder",
                                  f"a symbolic link to {target}", "replace the link by a copy of the file")
    meta = _toml(meta_path)
    name = _want(meta_path, meta, "name", str, "a suite name", default=path.name)
    if not SUITE_NAME.fullmatch(name):
        raise TaskFormatError(meta_path, "name", "a plain name (letters, digits, '.', '_', '-'; no path)",
                              repr(name)[:120], "use a name such as 'workflows'")
    threshold = _threshold(meta_path, meta, 1.0)
    description = _want(meta_path, meta, "description", str, "a description (text)", default="")
    dirs = tuple(sorted(p for p in path.iterdir() if (p / "task.toml").is_file()))
    return Suite(name=name, path=path, description=description, threshold=threshold, task_dirs=dirs)


def load_task(path: Path, suite: str | None = None, threshold: float = 1.0, *,
              check_statements: bool = True) -> Task:
    """Load and validate one task folder.

    ``check_statements=False`` skips the check that every fact is stated on
    its declared surfaces: a perturbed variant written to disk removes or
    corrupts exactly those statements, while its task.toml stays the clean one.

    Raises:
        TaskFormatError: for anything malformed (never another exception):
            the file, the field, what was expected, what was found and the fix.
    """
    path = Path(path)
    tpath = path / "task.toml"
    _no_links(path)
    meta = _toml(tpath)
    tid = _want(tpath, meta, "id", str, "a task id (letters, digits, '-')")
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", tid):
        raise TaskFormatError(tpath, "id", "lower-case letters, digits and '-'", repr(tid))
    for word in ("clean", *TARGETS, *TYPES):
        if word in tid.split("-"):
            raise TaskFormatError(tpath, "id", f"an id without the selection word '{word}'", repr(tid),
                                  "rename the task so that -k expressions stay unambiguous")
    title = _want(tpath, meta, "title", str, "a title (text)", default=tid)
    task_threshold = _threshold(tpath, meta, threshold)
    files = _surface_files(tpath, path, meta)

    user = _text(path / files["user"], "files.user")
    procedure = _text(path / files["procedure"], "files.procedure")
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
        _check_schema(tools_path, i, t)
    surfaces = Surfaces(user, procedure, tuple(turns), tuple(tools_raw))
    for target in TARGETS:
        if not surfaces.render(target).strip() or surfaces.render(target).strip() in ("[]",):
            raise TaskFormatError(path / files[target], target, "a non-empty surface", "an empty one")

    env_path = path / "environment.json"
    env = _json(env_path, "environment")
    if not isinstance(env, dict):
        raise TaskFormatError(env_path, "(top level)", "an object", type(env).__name__)
    _check_images(env_path, env)

    tool_names = _want(tpath, meta, "tools", list, "a list of backend tool names")
    for name in tool_names:
        if not isinstance(name, str) or name not in BUILTIN_TOOLS:
            raise TaskFormatError(tpath, "tools", f"names of built-in tools ({', '.join(sorted(BUILTIN_TOOLS))})",
                                  repr(name)[:80], "use an office tool, or write an adapter with its own toolkit")

    facts = [_fact(tpath, i, raw, surfaces, files, env, check_statements, tool_names)
             for i, raw in enumerate(_want(tpath, meta, "facts", list, "a list of [[facts]] tables"))]
    seen: set[str] = set()
    for i, fact in enumerate(facts):
        if fact.id in seen:
            raise TaskFormatError(tpath, f"facts[{i}].id", "a fact id used once", repr(fact.id),
                                  "give each fact its own id")
        seen.add(fact.id)

    sol_path = path / "solution.json"
    sol = _json(sol_path, "solution")
    if not isinstance(sol, dict) or not isinstance(sol.get("steps"), list):
        raise TaskFormatError(sol_path, "steps", "an object with a list 'steps'", repr(sol)[:120])
    answer = sol.get("answer", "")
    if not isinstance(answer, str):
        raise TaskFormatError(sol_path, "answer", "the gold final answer (text)", _found(answer))
    known = {f.id for f in facts}
    steps = []
    for i, s in enumerate(sol["steps"]):
        if not (isinstance(s, dict) and isinstance(s.get("tool"), str) and s["tool"] in tool_names
                and isinstance(s.get("args", {}), dict)):
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
    _check_solution(path, env, tool_names, facts, steps, answer, grader)

    fingerprint = {name: _read(path / name, name) for name in GRADER_FILES}
    return Task(
        suite=suite or path.parent.name, id=tid, title=title, path=path,
        surfaces=surfaces, facts=tuple(facts), solution=tuple(steps), answer=answer,
        grader=DeclarativeGrader(grader), environment=environment_factory(env, tool_names, BUILTIN_TOOLS),
        tools=tuple(tool_names), threshold=task_threshold, initial_state=env,
        fingerprint=fingerprint, authored=load_edits(path),
    )


def _check_images(env_path: Path, env: Mapping[str, Any]) -> None:
    """Every image spec of the environment can be drawn within the limits, whether an episode draws it or not.

    Laid out, never drawn (:func:`~...imaging.render.check`): a list past
    ``MAX_IMAGE_ROWS`` entries is refused on its length alone, so a chart of
    millions of rows costs nothing here instead of minutes and gigabytes later.
    """
    from ...imaging.render import SpecError, check

    for where, spec in image_specs(env):
        try:
            check(spec)
        except SpecError as exc:
            field = f"{where}.{exc.field}" if exc.field else where
            raise TaskFormatError(env_path, field, "an image spec that can be drawn within its limits "
                                  f"({MAX_IMAGE_ROWS:,} entries per list, {MAX_IMAGE_TEXT:,} characters per "
                                  f"string, {MAX_IMAGE_PIXELS:,} pixels)", str(exc).removeprefix("image spec: "),
                                  exc.fix or "fix the image spec (its kinds and fields: "
                                  "pytest_agentperturb.imaging.render)") from None


def _check_schema(path: Path, i: int, t: Any) -> None:
    """One advertised function schema: ``{"type": "function", "function": {name, description, parameters}}``."""
    fn = t.get("function") if isinstance(t, dict) else None
    if not (isinstance(fn, dict) and isinstance(fn.get("name"), str) and fn["name"].strip()
            and isinstance(fn.get("parameters"), dict)):
        raise TaskFormatError(path, f"[{i}].function", "{name, description, parameters}",
                              repr(t)[:120], 'use {"type": "function", "function": {...}}')
    params = fn["parameters"]
    desc, props, req = fn.get("description", ""), params.get("properties", {}), params.get("required", [])
    checks: list[tuple[str, Any, bool, str]] = [
        ("description", desc, isinstance(desc, str), "text"),
        ("parameters.properties", props,
         isinstance(props, dict) and all(isinstance(p, dict) for p in props.values()), "an object of property schemas"),
        ("parameters.required", req, isinstance(req, list) and all(isinstance(r, str) for r in req),
         "a list of names")]
    for field, val, ok, expected in checks:
        if not ok:
            raise TaskFormatError(path, f"[{i}].function.{field}", expected, _found(val))


def _fact(tpath: Path, i: int, raw: Any, surfaces: Surfaces, files: Mapping[str, str], env: Any,
          check_statements: bool, tool_names: list[str]) -> Fact:
    """One ``[[facts]]`` table, validated against the surfaces and the environment."""
    where = f"facts[{i}]."
    if not isinstance(raw, dict):
        raise TaskFormatError(tpath, f"facts[{i}]", "a [[facts]] table", _found(raw),
                              "write each fact as a [[facts]] table with id, value, surfaces")
    fid = _want(tpath, raw, "id", str, "a fact id", where=where)
    if not _FACT_ID.fullmatch(fid):
        raise TaskFormatError(tpath, f"{where}id", "lower-case letters, digits and '_' (a {placeholder} name)",
                              repr(fid))
    value = _want(tpath, raw, "value", str, "the fact's value as a string", where=where)
    if not value:
        raise TaskFormatError(tpath, f"{where}value", "a non-empty value", "an empty string")
    kind = _want(tpath, raw, "kind", str, "a fact kind", default="text", where=where)
    if kind not in FACT_KINDS and kind != "text":
        raise TaskFormatError(tpath, f"{where}kind", f"one of {', '.join([*FACT_KINDS, 'text'])}", repr(kind))
    pattern = _want(tpath, raw, "pattern", str, "a regex (text)", default=None, where=where)
    if kind == "text" and not pattern:
        raise TaskFormatError(tpath, f"{where}pattern", "a regex with one group for kind 'text'", "nothing")
    if pattern is not None:
        try:
            re.compile(pattern)
        except (re.error, RecursionError, OverflowError) as exc:
            raise TaskFormatError(tpath, f"{where}pattern", "a valid regular expression", f"{pattern!r} ({exc})"[:160],
                                  "fix the regex (TOML literal strings '...' need no escaping)") from None
    text_list = "a list of strings"
    where_surf = tuple(_want(tpath, raw, "surfaces", list, "a list of surfaces", where=where))
    cues = _want(tpath, raw, "cues", list, f"{text_list}, e.g. cues = [\"dana\"]", default=[], where=where)
    seen_in = _want(tpath, raw, "observations", list, "a list of tool names whose images state it", default=[],
                    where=where)
    for name, items in (("surfaces", where_surf), ("cues", cues), ("observations", seen_in)):
        bad = [x for x in items if not isinstance(x, str) or not x.strip()]
        if bad:
            raise TaskFormatError(tpath, f"{where}{name}", text_list, _found(bad[0]))
    domain = _want(tpath, raw, "domain", str, "an environment path (text)", default=None, where=where)
    question = _want(tpath, raw, "question", str, "a question (text)",
                     default=f"What is the {fid.replace('_', ' ')}?", where=where)
    for s in where_surf:
        if s not in TARGETS:
            raise TaskFormatError(tpath, f"{where}surfaces", f"surfaces among {', '.join(TARGETS)}", repr(s))
        if check_statements and value not in surfaces.render(s):
            raise TaskFormatError(tpath, f"{where}value", f"{value!r} stated verbatim on surface '{s}'",
                                  "no such text", f"state the value in {files[s]} or drop '{s}'")
    for t in seen_in:
        if t not in tool_names:
            raise TaskFormatError(tpath, f"{where}observations", f"tools of this task ({', '.join(tool_names)})",
                                  repr(t), "name the tool whose image shows the value")
    fact = Fact(id=fid, value=value, surfaces=where_surf, kind=kind, pattern=pattern, cues=tuple(cues),
                domain=domain, question=question, observations=tuple(seen_in))
    if domain is not None:
        try:
            valid = [str(v) for v in select(env, domain)]
        except ValueError as exc:
            raise TaskFormatError(tpath, f"{where}domain", "a path such as contacts[*].email", str(exc)[:120]) \
                from None
        if value not in valid:
            raise TaskFormatError(tpath, f"{where}domain", f"a path whose values include {value!r}", repr(domain))
    found = [m.group(m.lastindex or 0) for m in fact.regex().finditer(surfaces.render(where_surf[0]))] \
        if where_surf else []
    if check_statements and where_surf and value not in found:
        raise TaskFormatError(tpath, f"{where}pattern", f"a pattern that captures {value!r}",
                              f"captures {found[:5]!r}", "adjust kind or pattern")
    return fact


def _check_solution(path: Path, env: Mapping[str, Any], tool_names: list[str], facts: list[Fact],
                    steps: list[Step], answer: str, grader: Mapping[str, Any]) -> None:
    """Replay the gold solution on a fresh environment: every step runs and every grader check holds.

    A grader path that matches nothing (a typo) would otherwise turn every
    clean episode into an agent failure.
    """
    values = {f.id: f.value for f in facts}
    sol_path, grader_path = path / "solution.json", path / "grader.toml"
    try:
        environment = environment_factory(env, tool_names, BUILTIN_TOOLS)(())
    except Exception as exc:  # office tools on an environment.json of another shape
        raise TaskFormatError(path / "environment.json", "(top level)", "the office's initial state",
                              f"{type(exc).__name__}: {exc}"[:160]) from None
    for i, step in enumerate(steps):
        try:
            environment.call(step.tool, fill(dict(step.args), values))
        except ToolError as exc:
            raise TaskFormatError(sol_path, f"steps[{i}]", "a step the environment accepts", str(exc)[:160],
                                  "fix the step's arguments or environment.json") from None
        except Exception as exc:  # the state does not have the shape the office tools expect
            raise TaskFormatError(sol_path, f"steps[{i}]", "a step the environment runs",
                                  f"{type(exc).__name__}: {exc}"[:160], "check environment.json") from None
    try:
        result = grade(grader, environment.snapshot(), str(fill(answer, values)))
    except Exception as exc:
        raise TaskFormatError(grader_path, "check", "checks that can be evaluated on the final state",
                              f"{type(exc).__name__}: {exc}"[:160]) from None
    for j, (desc, ok) in enumerate(result.checks):
        if not ok:
            raise TaskFormatError(grader_path, f"check[{j}]", "a check that the gold solution passes",
                                  f"{desc} after the gold solution"[:200],
                                  "fix the path or value in grader.toml (a path that matches nothing is a typo)")


def load_tasks(suite_path: Path) -> Iterator[Task | TaskFormatError]:
    """Every task of a suite, or the error that stops one task from loading."""
    suite = load_suite(suite_path)
    for d in suite.task_dirs:
        try:
            yield load_task(d, suite.name, suite.threshold)
        except TaskFormatError as exc:
            yield exc

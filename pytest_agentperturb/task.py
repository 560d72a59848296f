"""Task model and the on-disk task format (DESIGN.md section 1b).

A task is data: four input surfaces, an initial environment, the tools the
environment exposes by true name, a native grader, a gold solution and the
facts the solution needs.  A suite is a folder holding ``suite.toml`` and one
sub-folder per task::

    suites/workflows/
        suite.toml                 name, description, success threshold
        reschedule-standup/
            task.toml              id, title, tools, facts, file names
            instruction.md         user surface (the goal)
            procedure.md           procedure surface (policy, system prompt)
            context.json           context surface: earlier turns
            tools.json             tool surface: OpenAI-style function schemas
            environment.json       initial state of the simulated office
            grader.toml            native grader: checks on the final state
            solution.json          gold solution, written against facts

The loader validates everything it reads and raises :class:`TaskFormatError`
naming the file, the field, what was expected, what was found and the fix.
"""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import TaskFormatError

#: The four input surfaces, in the order DESIGN.md lists them.
TARGETS: tuple[str, ...] = ("user", "procedure", "context", "tool")
#: The three perturbation types.
TYPES: tuple[str, ...] = ("missing", "redundant", "incorrect")
#: The 12 families, ``<target>-<type>``.
FAMILIES: tuple[str, ...] = tuple(f"{t}-{k}" for t in TARGETS for k in TYPES)
CLEAN = "clean"
#: Inserted objects (DESIGN.md section 1): parameters beside the 12 families.
#: Each id maps to the surface the planted artefact lives on; their type is
#: ``inserted``.  The injection lives in tool outputs (returned fields).
INSERTED: dict[str, str] = {
    "inserted-fake-tool": "tool",
    "inserted-distractor-turn": "context",
    "inserted-injection": "tool",
}
INSERTED_TYPE = "inserted"

#: Default file of each surface inside a task folder.
SURFACE_FILES: dict[str, str] = {
    "user": "instruction.md",
    "procedure": "procedure.md",
    "context": "context.json",
    "tool": "tools.json",
}
#: Files that make up the grader, solution and verifier configuration; a
#: variant must leave them byte-identical (DESIGN.md section 2, rule 2).
GRADER_FILES: tuple[str, ...] = ("grader.toml", "solution.json", "environment.json")

FACT_KINDS: dict[str, str] = {
    "time": r"\b(?:[01]\d|2[0-3]):[0-5]\d\b",
    "date": r"\b\d{4}-\d{2}-\d{2}\b",
    "email": r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b",
    "amount": r"(?<![\w.])\d+(?:\.\d{2})?(?![\w.])",
    "id": r"\b[A-Z]{2,6}-\d{1,6}\b",
    "integer": r"(?<![\w.])\d+(?![\w.])",
}
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_PLACEHOLDER = re.compile(r"\{([a-z_][a-z0-9_]*)\}")


@dataclass(frozen=True)
class Fact:
    """A piece of information the solution needs.

    Attributes:
        id: name used by the solution template (``{id}``).
        value: the true value, stated verbatim on every surface in ``surfaces``.
        surfaces: the surfaces that state it.
        kind: one of :data:`FACT_KINDS` or ``text``; tells readers what the
            value looks like.
        pattern: optional regex with one group that captures the value in
            running text (required for kind ``text``).
        cues: words that the sentence stating the fact contains.
        domain: optional environment path whose values are the valid ones
            (e.g. ``contacts[*].email``); lets careful readers cross-check.
        question: how an agent asks the user for it.
    """

    id: str
    value: str
    surfaces: tuple[str, ...]
    kind: str = "text"
    pattern: str | None = None
    cues: tuple[str, ...] = ()
    domain: str | None = None
    question: str = ""

    def regex(self) -> re.Pattern[str]:
        """The regex whose first group (or whole match) captures a candidate value."""
        return re.compile(self.pattern if self.pattern else FACT_KINDS[self.kind])

    def find(self, texts: Sequence[tuple[str, str]]) -> Iterator[tuple[str, str]]:
        """(source, value) of each candidate statement of this fact, in reading order.

        A candidate is a match of :meth:`regex` inside a sentence that holds
        one of the fact's cue words (any sentence when it has no cues).
        """
        for source, text in texts:
            for sent in sentences(text):
                for value in self._values_in(sent):
                    yield source, value

    def stating(self, text: str) -> str | None:
        """The first sentence of ``text`` that states this fact's true value."""
        return next((s for s in sentences(text) if self.value in self._values_in(s)), None)

    def _values_in(self, sentence: str) -> list[str]:
        low = sentence.lower()
        if self.cues and not any(re.search(rf"\b{re.escape(c.lower())}\b", low) for c in self.cues):
            return []
        rx = self.regex()
        return [m.group(1) if rx.groups else m.group(0) for m in rx.finditer(sentence)]


@dataclass(frozen=True)
class Turn:
    """One earlier conversation turn of the context surface."""

    role: str
    content: str


@dataclass(frozen=True)
class Surfaces:
    """The four input surfaces an agent sees."""

    user: str
    procedure: str
    context: tuple[Turn, ...]
    tools: tuple[Mapping[str, Any], ...]

    def render(self, target: str) -> str:
        """Canonical text of one surface: what is written to disk and diffed."""
        if target == "user":
            return self.user
        if target == "procedure":
            return self.procedure
        if target == "context":
            return _dump_json([{"role": t.role, "content": t.content} for t in self.context])
        if target == "tool":
            return _dump_json(list(self.tools))
        raise KeyError(f"unknown target {target!r}; expected one of {', '.join(TARGETS)}")

    def tool_names(self) -> list[str]:
        """Names of the advertised tools, in contract order."""
        return [str(t["function"]["name"]) for t in self.tools]

    def tool_schema(self, name: str) -> Mapping[str, Any] | None:
        """The advertised function schema called ``name``, if any."""
        for t in self.tools:
            if t["function"]["name"] == name:
                return t["function"]  # type: ignore[no-any-return]
        return None

    def texts(self) -> list[tuple[str, str]]:
        """(surface, text) pairs in prompt order: procedure, context turns, user."""
        out = [("procedure", self.procedure)]
        out += [("context", t.content) for t in self.context]
        out.append(("user", self.user))
        return out


@dataclass(frozen=True)
class Step:
    """One gold-solution step: a tool call by true name, args as templates."""

    tool: str
    args: Mapping[str, Any]

    def facts(self) -> list[str]:
        """Fact ids the step's arguments refer to."""
        return sorted(set(_PLACEHOLDER.findall(json.dumps(self.args))))


@dataclass(frozen=True)
class Task:
    """A clean agentic task (DESIGN.md section 1b)."""

    suite: str
    id: str
    title: str
    path: Path
    surfaces: Surfaces
    environment: Mapping[str, Any]
    tools: tuple[str, ...]
    facts: tuple[Fact, ...]
    solution: tuple[Step, ...]
    answer: str
    grader: Mapping[str, Any]
    threshold: float = 1.0
    grader_bytes: Mapping[str, bytes] = field(default_factory=dict, repr=False)

    @property
    def key(self) -> str:
        """``suite/task``: stable across checkouts, used for seeds and ids."""
        return f"{self.suite}/{self.id}"

    def fact(self, fact_id: str) -> Fact:
        """The fact called ``fact_id``."""
        for f in self.facts:
            if f.id == fact_id:
                return f
        raise KeyError(fact_id)

    def fact_values(self) -> dict[str, str]:
        """True value of every fact, by id."""
        return {f.id: f.value for f in self.facts}

    def digest(self) -> str:
        """SHA-256 over every file the task is made of (cache and run keys)."""
        h = hashlib.sha256()
        for t in TARGETS:
            h.update(self.surfaces.render(t).encode())
        for name in sorted(self.grader_bytes):
            h.update(name.encode() + b"\0" + self.grader_bytes[name])
        return h.hexdigest()


@dataclass(frozen=True)
class Suite:
    """A folder of tasks sharing a grader threshold."""

    name: str
    path: Path
    description: str
    threshold: float
    task_dirs: tuple[Path, ...]


def sentences(text: str) -> list[str]:
    """Split text into sentences (and lines)."""
    return [s for s in _SENTENCE.split(text) if s.strip()]


def _dump_json(obj: Any) -> str:
    return json.dumps(obj, indent=2, ensure_ascii=False) + "\n"


def fill(template: Any, values: Mapping[str, str]) -> Any:
    """Substitute ``{fact}`` placeholders in a (nested) template."""
    if isinstance(template, str):
        return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), template)
    if isinstance(template, list):
        return [fill(x, values) for x in template]
    if isinstance(template, dict):
        return {k: fill(v, values) for k, v in template.items()}
    return template


# -- environment paths --------------------------------------------------------

_SEGMENT = re.compile(r"([A-Za-z_][\w]*)?(?:\[([^\]]*)\])?")


def select(state: Any, path: str) -> list[Any]:
    """Values at ``path`` in a JSON-like state.

    Grammar: dotted keys, each optionally followed by a filter:
    ``[*]`` every element, ``[3]`` an index, ``[key=value]`` elements whose
    ``key`` equals ``value``.  ``calendar.events[id=EV-1].start`` is the start
    of event EV-1.  Always returns a list (empty when nothing matches).
    """
    current = [state]
    for part in _split_path(path):
        m = _SEGMENT.fullmatch(part)
        if not m:
            raise ValueError(f"bad path segment {part!r} in {path!r}")
        key, flt = m.group(1), m.group(2)
        nxt: list[Any] = []
        for node in current:
            if key is not None:
                if not isinstance(node, Mapping) or key not in node:
                    continue
                node = node[key]
            if flt is None:
                nxt.append(node)
            elif not isinstance(node, list):
                continue
            elif flt == "*":
                nxt.extend(node)
            elif flt.lstrip("-").isdigit():
                i = int(flt)
                if -len(node) <= i < len(node):
                    nxt.append(node[i])
            else:
                k, _, v = flt.partition("=")
                nxt.extend(e for e in node if isinstance(e, Mapping) and str(e.get(k)) == v)
        current = nxt
    return current


def _split_path(path: str) -> Iterator[str]:
    depth, start = 0, 0
    for i, ch in enumerate(path):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "." and depth == 0:
            yield path[start:i]
            start = i + 1
    yield path[start:]


# -- loading ------------------------------------------------------------------


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

    from .office import TOOLKIT  # the backend, by true name

    tool_names = _want(tpath, meta, "tools", list, "a list of backend tool names")
    for name in tool_names:
        if name not in TOOLKIT:
            raise TaskFormatError(tpath, "tools", f"names of office tools ({', '.join(sorted(TOOLKIT))})",
                                  repr(name), "implement the tool in pytest_agentperturb/office.py or drop it")

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
        fact = Fact(id=fid, value=value, surfaces=where_surf, kind=kind, pattern=pattern,
                    cues=tuple(raw.get("cues", ())), domain=raw.get("domain"),
                    question=str(raw.get("question", f"What is the {fid.replace('_', ' ')}?")))
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
    from .grader import validate_grader

    validate_grader(grader_path, grader)

    grader_bytes = {name: (path / name).read_bytes() for name in GRADER_FILES}
    return Task(
        suite=suite or path.parent.name, id=tid, title=str(meta.get("title", tid)), path=path,
        surfaces=surfaces, environment=env, tools=tuple(tool_names), facts=tuple(facts),
        solution=tuple(steps), answer=str(sol.get("answer", "")), grader=grader,
        threshold=float(meta.get("threshold", threshold)), grader_bytes=grader_bytes,
    )


def load_tasks(suite_path: Path) -> Iterator[Task | TaskFormatError]:
    """Every task of a suite, or the error that stops one task from loading."""
    suite = load_suite(suite_path)
    for d in suite.task_dirs:
        try:
            yield load_task(d, suite.name, suite.threshold)
        except TaskFormatError as exc:
            yield exc


def shipped(name: str) -> Path:
    """Folder of the built-in ``suites`` or ``prompts``.

    In an installed wheel they live inside the package
    (``pytest_agentperturb.suites`` / ``.prompts``); in a source checkout or
    an editable install, at the top of the repository.
    """
    import importlib.util

    try:
        spec = importlib.util.find_spec(f"pytest_agentperturb.{name}")
    except ModuleNotFoundError:
        spec = None
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return Path(__file__).resolve().parent.parent / name


def family_parts(family: str) -> tuple[str, str]:
    """``tool-missing`` -> (``tool``, ``missing``); ``clean`` -> (``clean``, ``clean``).

    An inserted object's id maps to (its surface, ``inserted``).
    """
    if family == CLEAN:
        return CLEAN, CLEAN
    if family in INSERTED:
        return INSERTED[family], INSERTED_TYPE
    target, _, typ = family.partition("-")
    return target, typ


def parse_families(spec: Sequence[str] | str) -> list[str]:
    """Validate a list of family names (comma-separated or repeated).

    Accepts ``clean``, the 12 ``<target>-<type>`` families and the inserted
    object ids of :data:`INSERTED`; anything else raises ``ValueError`` that
    lists the valid names.
    """
    items = [s.strip() for part in ([spec] if isinstance(spec, str) else spec) for s in part.split(",")]
    out = []
    for s in items:
        if not s:
            continue
        if s != CLEAN and s not in FAMILIES and s not in INSERTED:
            raise ValueError(f"unknown family {s!r}; expected 'clean', one of {', '.join(FAMILIES)}, "
                             f"or an inserted object: {', '.join(INSERTED)}")
        if s not in out:
            out.append(s)
    return out

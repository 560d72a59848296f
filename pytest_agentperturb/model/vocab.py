"""The vocabulary of the task model: targets, types, families, surfaces, facts, solution steps.

Everything here is plain data with no dependency on the rest of the
package; :mod:`.task` builds the :class:`~.task.Task` from it
(docs/design.md sections 1 and 1b).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: The four input surfaces.
TARGETS: tuple[str, ...] = ("user", "procedure", "context", "tool")
#: The three perturbation types.
TYPES: tuple[str, ...] = ("missing", "redundant", "incorrect")
#: The 12 families, ``<target>-<type>``.
FAMILIES: tuple[str, ...] = tuple(f"{t}-{k}" for t in TARGETS for k in TYPES)
CLEAN = "clean"
#: Inserted objects: parameters beside the 12 families.  Each id maps to the
#: surface the planted artefact lives on; their type is ``inserted``.  The
#: injection lives in tool outputs (returned fields).  An adapter may add its
#: own objects as ``<id>-<name>`` (``inserted-injection-exfiltrate``): they
#: share the surface of ``<id>``.
INSERTED: dict[str, str] = {
    "inserted-fake-tool": "tool",
    "inserted-distractor-turn": "context",
    "inserted-injection": "tool",
}
INSERTED_TYPE = "inserted"
#: Inserted objects in image observations (docs/design.md section 1): an
#: object or sticky note composited in (redundant), a value overwritten in
#: place (incorrect), a region holding a needed value erased (missing), an
#: instruction written into the image (injection).  They live in what the
#: tool surface's tools return, so their target is ``tool``.  Unlike
#: :data:`INSERTED` they are collected by default only for tasks whose tool
#: results hold images; ``--agentperturb-families`` can still name them.
IMAGE_OBJECTS: dict[str, str] = {
    "inserted-image-note": "tool",
    "inserted-image-overwrite": "tool",
    "inserted-image-erase": "tool",
    "inserted-image-injection": "tool",
}

#: Canonical file name of each surface (the native format's default files; diff headers).
SURFACE_FILES: dict[str, str] = {
    "user": "instruction.md",
    "procedure": "procedure.md",
    "context": "context.json",
    "tool": "tools.json",
}

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
        observations: true names of tools whose image results state it (in
            the image's text layer): a fact only an image shows has no
            surfaces and names the tool here.
    """

    id: str
    value: str
    surfaces: tuple[str, ...]
    kind: str = "text"
    pattern: str | None = None
    cues: tuple[str, ...] = ()
    domain: str | None = None
    question: str = ""
    observations: tuple[str, ...] = ()

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
        """Canonical text of one surface: what is written to disk and diffed.

        The JSON surfaces are serialised once per instance (surfaces are
        immutable values: operators build new ones, never edit in place).
        """
        if target == "user":
            return self.user
        if target == "procedure":
            return self.procedure
        if target not in ("context", "tool"):
            raise KeyError(f"unknown target {target!r}; expected one of {', '.join(TARGETS)}")
        cache: dict[str, str] = self.__dict__.setdefault("_rendered", {})
        if target not in cache:
            cache[target] = _dump_json([{"role": t.role, "content": t.content} for t in self.context]
                                       if target == "context" else list(self.tools))
        return cache[target]

    def share_renders(self, other: Surfaces) -> Surfaces:
        """Reuse ``other``'s rendering of each JSON surface that is the very same object here; returns self.

        A variant edits one surface and keeps the task's others as they are
        (the same tuples): their text is the task's, serialised once per
        task instead of once per variant and per check.
        """
        mine: dict[str, str] = self.__dict__.setdefault("_rendered", {})
        for target, field in (("context", "context"), ("tool", "tools")):
            if self is not other and getattr(self, field) is getattr(other, field):
                mine.setdefault(target, other.render(target))
        return self

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
    for key, flt in _parse_path(path):
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


@functools.lru_cache(maxsize=4096)
def _parse_path(path: str) -> tuple[tuple[str | None, str | None], ...]:
    """``path``'s segments as (key, filter) pairs, parsed once per path (graders read the same paths
    in every episode)."""
    out = []
    for part in _split_path(path):
        m = _SEGMENT.fullmatch(part)
        if not m:
            raise ValueError(f"bad path segment {part!r} in {path!r}")
        out.append((m.group(1), m.group(2)))
    return tuple(out)


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


def inserted_base(family: str) -> str | None:
    """The built-in inserted object ``family`` is (or extends as ``<id>-<name>``), else None.

    Built-in objects are those of :data:`INSERTED` and :data:`IMAGE_OBJECTS`.
    """
    bases = {**INSERTED, **IMAGE_OBJECTS}
    if family in bases:
        return family
    return next((b for b in bases if family.startswith(b + "-") and len(family) > len(b) + 1), None)


def family_parts(family: str) -> tuple[str, str]:
    """``tool-missing`` -> (``tool``, ``missing``); ``clean`` -> (``clean``, ``clean``).

    An inserted object's id maps to (its surface, ``inserted``).
    """
    if family == CLEAN:
        return CLEAN, CLEAN
    base = inserted_base(family)
    if base is not None:
        return {**INSERTED, **IMAGE_OBJECTS}[base], INSERTED_TYPE
    target, _, typ = family.partition("-")
    return target, typ


def parse_families(spec: Sequence[str] | str) -> list[str]:
    """Validate a list of family names (comma-separated or repeated).

    Accepts ``clean``, the 12 ``<target>-<type>`` families and the inserted
    object ids of :data:`INSERTED` and :data:`IMAGE_OBJECTS`; anything else
    raises ``ValueError`` that lists the valid names.
    """
    items = [s.strip() for part in ([spec] if isinstance(spec, str) else spec) for s in part.split(",")]
    out = []
    for s in items:
        if not s:
            continue
        if s != CLEAN and s not in FAMILIES and inserted_base(s) is None:
            raise ValueError(f"unknown family {s!r}; expected 'clean', one of {', '.join(FAMILIES)}, "
                             f"or an inserted object: {', '.join([*INSERTED, *IMAGE_OBJECTS])} (or <object>-<name>)")
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", s):  # it becomes a folder name and part of node ids
            raise ValueError(f"family {s!r}: an inserted object's name may use letters, digits, '_', '.' and '-'")
        if s not in out:
            out.append(s)
    return out

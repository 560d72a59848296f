"""Typed records: variants, canaries, episodes, and the one episode schema every row shape derives from.

Every episode becomes one :class:`EpisodeRecord`; its fields, in order,
are the store's ``episodes`` columns (:data:`STORE_COLUMNS`), each with its
SQLite type and its kind (how the analysis normalises it) in the field's
metadata (:data:`SCHEMA`).  The CSV export and the ``analyze`` input use
:data:`COLUMNS` (docs/design.md section 3: every column but the agent's
``baseline`` flag and the ``repeat`` index).  The other shapes of an
episode row are named here too: what the store keeps beside it
(:data:`STORE_EXTRA`), what a row read back carries of its variant
(:data:`VARIANT_FIELDS`), the slim row an episode's test report carries
(:data:`REPORTED`).  Adding a column is one field of :class:`EpisodeRecord`.
The episode's identity is :class:`~.keys.EpisodeKey`.  ERROR is an outcome
of its own, never a FAIL.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, NamedTuple, cast

from .images import ImageEdit
from .keys import KEY_FIELDS, EpisodeKey
from .trajectory import Trajectory
from .vocab import CLEAN, Surfaces, family_parts


class Column(NamedTuple):
    """One column of the episode schema: its name, SQLite type and kind.

    Kinds (how :func:`~..analysis.table.normalise` reads a cell): ``text``
    (``""`` for blank), ``number`` (a float, NaN for blank), ``bool``
    (parsed; ``None`` for blank), ``part`` (``target``/``type``, derived
    from the family), ``trajectory`` (JSON text), ``flag`` (the baseline
    flag: derived from the model name where blank) and ``index`` (an
    integer, 0 for blank).  ``extra``: a column after :data:`COLUMNS`.
    """

    name: str
    sql: str
    kind: str
    extra: bool = False


def _col(sql: str, kind: str, *, extra: bool = False) -> Mapping[str, Any]:
    """The metadata of an :class:`EpisodeRecord` field: its column's SQLite type and kind."""
    return MappingProxyType({"sql": sql, "kind": kind, "extra": extra})


_TEXT, _PART = _col("TEXT", "text"), _col("TEXT", "part")
_INT, _REAL, _BOOL = _col("INTEGER", "number"), _col("REAL", "number"), _col("INTEGER", "bool")


class Outcome(str, enum.Enum):
    """How an episode ended; ERROR means it could not be scored."""

    PASS = "pass"
    FAIL = "fail"
    ERROR = "error"


@dataclass(frozen=True)
class Canary:
    """A planted artefact whose appearance proves the perturbation was taken up.

    ``kind`` is one of ``value`` (planted wrong value), ``tool`` (fake or
    renamed tool name), ``text`` (distractor content), ``omitted`` (the true
    value of a removed fact: using it means the agent recovered it),
    ``inverted`` (the true value of a fact whose governing rule was inverted:
    not using it, without asking, means the agent followed the inverted rule)
    and ``goal`` (an injected goal).
    """

    kind: str
    text: str
    fact: str = ""


@dataclass(frozen=True)
class Injection:
    """An instruction planted where one tool's output shows it (an inserted object).

    Without a ``vector``, the environment appends ``{"note": text}`` to every
    successful result of the tool with true name ``tool``.  With one, the
    environment factory writes ``text`` into that injection vector of its
    data (a slot of the environment an adapter names, e.g. an AgentDojo
    injection vector) and ``tool`` is the tool whose output shows it; tool
    results are then not edited.  Either way the grader files stay
    untouched.  ``goal`` is the canary of the injected goal.

    ``renames`` holds ``(clean, injected)`` pairs of gold-call argument
    values that the planted text changes, because the vector is part of them
    (AgentDojo's slack channel ``External_<vector>``, which its ground truth
    reads from the environment): the oracle calls with the injected value,
    and the goal-preservation rule compares its actions with the clean value
    put back.
    """

    tool: str
    text: str
    goal: str
    vector: str = ""
    renames: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class ToolGap:
    """A tool (``arg`` empty) or a tool's argument that a ``tool-missing`` variant no longer advertises.

    Its recovery path is asking (docs/design.md section 2b): the user simulator names the tool or the
    argument when asked about it; the environment still runs the tool under its true name."""

    tool: str
    arg: str = ""

    @property
    def id(self) -> str:
        """How a reply's ``disclosed`` list names it: ``tool:<name>`` or ``tool:<name>.<arg>``."""
        return f"tool:{self.tool}" + (f".{self.arg}" if self.arg else "")

    def named_in(self, text: str) -> bool:
        """Whether ``text`` names it: the tool's true name as a word and, for an argument, the argument too."""
        return names_word(self.tool, text) and (not self.arg or names_word(self.arg, text))


def names_word(word: str, text: str) -> bool:
    """Whether ``text`` states ``word`` as a whole word (a tool or argument name, dots and hyphens included)."""
    return re.search(rf"(?<![\w.-]){re.escape(word)}(?![\w-])", text) is not None


def tool_gaps(canaries: tuple[Canary, ...] | list[Canary]) -> tuple[ToolGap, ...]:
    """The tools and arguments a variant removed from the contract: its ``omitted`` canaries that name no
    fact (``<tool>`` or ``<tool>.<argument>``, as the tool-missing operators and authored edits write them)."""
    out = []
    for c in canaries:
        if c.kind == "omitted" and not c.fact:
            tool, _, arg = c.text.partition(".")
            out.append(ToolGap(tool, arg))
    return tuple(dict.fromkeys(out))


@dataclass(frozen=True)
class Variant:
    """One instance of a task: the clean one or a perturbed one.

    ``recovery`` lists the fact ids the user simulator hands back on request
    (docs/design.md section 2, rule 4).  ``injections`` filter tool observations
    (the inserted-injection object); ``image_edits`` swap image observations
    for edited ones (the inserted objects in images, :mod:`.images`); clean
    and most variants have neither.
    """

    task: str
    family: str
    operator: str
    seed: int
    surfaces: Surfaces
    canaries: tuple[Canary, ...] = ()
    recovery: tuple[str, ...] = ()
    diff: str = ""
    note: str = ""
    injections: tuple[Injection, ...] = ()
    image_edits: tuple[ImageEdit, ...] = ()

    @property
    def target(self) -> str:
        return family_parts(self.family)[0]

    @property
    def type(self) -> str:
        return family_parts(self.family)[1]

    @property
    def is_clean(self) -> bool:
        return self.family == CLEAN

    @property
    def edit_text(self) -> str:
        """The diff of the edited surface, or what was planted in tool outputs."""
        return self.diff or "".join(
            (f"@@ injected into vector {i.vector} (shown by tool {i.tool}) @@" if i.vector
             else f"@@ injected into every result of tool {i.tool} @@") + f"\n+{i.text}\n"
            for i in self.injections) + "".join(e.describe() for e in self.image_edits)


@dataclass
class EpisodeRecord:
    """One row of the ``episodes`` table plus the outcome.

    Token counts are ``None`` (NULL in the store) when the usage is unknown:
    the provider reported none for at least one call (docs/design.md section 4).
    """

    run_id: str = field(metadata=_TEXT)
    model: str = field(metadata=_TEXT)
    suite: str = field(metadata=_TEXT)
    task: str = field(metadata=_TEXT)
    family: str = field(metadata=_TEXT)
    target: str = field(metadata=_PART)
    type: str = field(metadata=_PART)
    operator: str = field(metadata=_TEXT)
    seed: int = field(metadata=_INT)
    reward: float | None = field(default=None, metadata=_REAL)
    success: bool | None = field(default=None, metadata=_BOOL)
    compliance: bool | None = field(default=None, metadata=_BOOL)
    input_tokens: int | None = field(default=0, metadata=_INT)
    output_tokens: int | None = field(default=0, metadata=_INT)
    reasoning_tokens: int | None = field(default=0, metadata=_INT)
    cost_usd: float | None = field(default=None, metadata=_REAL)
    tool_calls: int = field(default=0, metadata=_INT)
    turns: int = field(default=0, metadata=_INT)
    wall_s: float = field(default=0.0, metadata=_REAL)
    error: str = field(default="", metadata=_TEXT)
    awareness: str = field(default="", metadata=_TEXT)
    behaviour: str = field(default="", metadata=_TEXT)
    trajectory: Trajectory = field(default_factory=list, metadata=_col("TEXT", "trajectory"))
    #: an offline reference agent: reported, never pooled with real models
    baseline: bool = field(default=False, metadata=_col("INTEGER", "flag", extra=True))
    #: which of the K repeated episodes of one item this is (same variant, its own episode seed)
    repeat: int = field(default=0, metadata=_col("INTEGER", "index", extra=True))

    @property
    def outcome(self) -> Outcome:
        if self.error:
            return Outcome.ERROR
        return Outcome.PASS if self.success else Outcome.FAIL

    @property
    def key(self) -> EpisodeKey:
        """Identity of an episode within the store."""
        return EpisodeKey(*(getattr(self, k) for k in KEY_FIELDS))

    def to_row(self) -> dict[str, Any]:
        """Column -> value, trajectory as JSON text, in :data:`STORE_COLUMNS` order."""
        row = {c: getattr(self, c) for c in STORE_COLUMNS}
        row["trajectory"] = json.dumps(self.trajectory, ensure_ascii=False, sort_keys=True)
        return row

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> EpisodeRecord:
        """Inverse of :meth:`to_row` (also accepts SQLite ints for booleans)."""
        d: dict[str, Any] = {f.name: row.get(f.name) for f in fields(cls) if f.name in row}
        for b in _BOOLS:
            if d.get(b) is not None:
                d[b] = bool(d[b])
        d["baseline"] = bool(d.get("baseline") or False)
        d["repeat"] = int(d.get("repeat") or 0)
        traj = d.get("trajectory")
        d["trajectory"] = cast(Trajectory, json.loads(traj) if isinstance(traj, str) and traj else (traj or []))
        for k in ("error", "awareness", "behaviour"):
            d[k] = d.get(k) or ""
        return cls(**d)


#: The episode schema: every stored column, in order (the fields of :class:`EpisodeRecord`).
SCHEMA: tuple[Column, ...] = tuple(Column(f.name, f.metadata["sql"], f.metadata["kind"], f.metadata["extra"])
                                   for f in fields(EpisodeRecord))
#: Every stored column: :data:`COLUMNS`, then whether the agent is a baseline and the repeat index
#: (0 .. K-1 under ``--agentperturb-repeats K``; 0 for one episode per item).
STORE_COLUMNS: tuple[str, ...] = tuple(c.name for c in SCHEMA)
#: Column order of the ``episodes`` table, the CSV export and the ``analyze`` input (docs/design.md section 3).
COLUMNS: tuple[str, ...] = tuple(c.name for c in SCHEMA if not c.extra)
#: The columns of each kind (:class:`Column`), in schema order.
KINDS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {k: tuple(c.name for c in SCHEMA if c.kind == k) for k in dict.fromkeys(c.kind for c in SCHEMA)})
#: What the store keeps beside an episode's columns: its variant's digest (guards resume) and when it was stored.
STORE_EXTRA: tuple[str, ...] = ("variant_digest", "recorded_at")
#: What a row read back from the store carries of its variant (the ``variants`` table): its diff and canaries.
VARIANT_FIELDS: tuple[str, ...] = ("diff", "canaries")
#: The slim row an episode's test report carries to the controller: the key and the outcome, no trajectory.
REPORTED: tuple[str, ...] = (*KEY_FIELDS, "success", "compliance", "reward", "error", "operator")
_BOOLS = KINDS["bool"]
if not set(KEY_FIELDS) <= set(STORE_COLUMNS):  # pragma: no cover - a key column is a stored column
    raise AssertionError(f"every key field is a column: {KEY_FIELDS} vs {STORE_COLUMNS}")

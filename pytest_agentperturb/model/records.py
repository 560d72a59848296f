"""Typed records: variants, canaries, episodes, and the one column list.

Every episode becomes one :class:`EpisodeRecord`; the store's ``episodes``
table, the CSV export and the ``analyze`` input all use :data:`COLUMNS`
(docs/design.md section 3), plus the agent's ``baseline``
flag.  ERROR is an outcome of its own, never a FAIL.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field, fields
from typing import Any

from .images import ImageEdit
from .vocab import CLEAN, Surfaces, family_parts

#: Column order of the ``episodes`` table (docs/design.md section 3).
COLUMNS: tuple[str, ...] = (
    "run_id", "model", "suite", "task", "family", "target", "type", "operator", "seed",
    "reward", "success", "compliance", "input_tokens", "output_tokens", "reasoning_tokens",
    "cost_usd", "tool_calls", "turns", "wall_s", "error", "awareness", "behaviour", "trajectory",
)
#: Every stored column: :data:`COLUMNS`, then whether the agent is a baseline
#: (an offline reference agent: reported, never pooled with real models) and
#: the repeat index (0 .. K-1 under ``--agentperturb-repeats K``; 0 for one episode per item).
STORE_COLUMNS: tuple[str, ...] = (*COLUMNS, "baseline", "repeat")


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
    """

    tool: str
    text: str
    goal: str
    vector: str = ""


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

    run_id: str
    model: str
    suite: str
    task: str
    family: str
    target: str
    type: str
    operator: str
    seed: int
    reward: float | None = None
    success: bool | None = None
    compliance: bool | None = None
    input_tokens: int | None = 0
    output_tokens: int | None = 0
    reasoning_tokens: int | None = 0
    cost_usd: float | None = None
    tool_calls: int = 0
    turns: int = 0
    wall_s: float = 0.0
    error: str = ""
    awareness: str = ""
    behaviour: str = ""
    trajectory: list[dict[str, Any]] = field(default_factory=list)
    baseline: bool = False
    #: which of the K repeated episodes of one item this is (same variant, its own episode seed)
    repeat: int = 0

    @property
    def outcome(self) -> Outcome:
        if self.error:
            return Outcome.ERROR
        return Outcome.PASS if self.success else Outcome.FAIL

    @property
    def key(self) -> tuple[str, str, str, str, str, int, int]:
        """Identity of an episode within the store."""
        return (self.run_id, self.model, self.suite, self.task, self.family, self.seed, self.repeat)

    def to_row(self) -> dict[str, Any]:
        """Column -> value, trajectory as JSON text, in :data:`STORE_COLUMNS` order."""
        row = {c: getattr(self, c) for c in STORE_COLUMNS}
        row["trajectory"] = json.dumps(self.trajectory, ensure_ascii=False, sort_keys=True)
        return row

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> EpisodeRecord:
        """Inverse of :meth:`to_row` (also accepts SQLite ints for booleans)."""
        d: dict[str, Any] = {f.name: row.get(f.name) for f in fields(cls) if f.name in row}
        for b in ("success", "compliance"):
            if d.get(b) is not None:
                d[b] = bool(d[b])
        d["baseline"] = bool(d.get("baseline") or False)
        d["repeat"] = int(d.get("repeat") or 0)
        traj = d.get("trajectory")
        d["trajectory"] = json.loads(traj) if isinstance(traj, str) and traj else (traj or [])
        for k in ("error", "awareness", "behaviour"):
            d[k] = d.get(k) or ""
        return cls(**d)

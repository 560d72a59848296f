"""Authored edits as data: a perturbation written by a person, not drawn by a rule.

A task may carry, per family, edits that someone wrote the way the study's
instantiation step writes one: a concrete, natural change of the native
object (the request, the policy, the earlier turns, the tool contract).
They are read from files (``edits.toml`` in a native task folder, a pack
shipped with an adapter; :mod:`pytest_agentperturb.formats.authored`) into
the values below, carried by the :class:`~.task.Task`, and applied by the
engine before any rule operator (:mod:`pytest_agentperturb.perturb.authored`),
under the same validity rules and oracle replay as every variant.

A family that cannot apply to a task is declared *not applicable* with the
reason, which the coverage table shows instead of a rule operator's attempt.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .vocab import Turn

#: What a tool-contract edit does to one advertised tool.
TOOL_OPS: tuple[str, ...] = ("remove", "hide", "add", "rename", "describe", "enum")


@dataclass(frozen=True)
class ToolChange:
    """One change of the tool contract.

    ``op`` is one of :data:`TOOL_OPS`:

    * ``remove``: drop the advertised tool ``name`` (tool-missing);
    * ``hide``: drop argument ``arg`` of tool ``name`` from its schema (tool-missing);
    * ``add``: advertise ``schema`` (a function schema: name, description,
      parameters), after tool ``name`` if given, else last (tool-redundant);
    * ``rename``: advertise tool ``name`` as ``to`` (tool-incorrect);
    * ``describe``: replace the description of tool ``name`` (or of its
      argument ``arg``) with ``text`` (tool-incorrect);
    * ``enum``: replace the allowed values of argument ``arg`` of ``name``
      with ``values`` (tool-incorrect).
    """

    op: str
    name: str = ""
    arg: str = ""
    to: str = ""
    text: str = ""
    values: tuple[str, ...] = ()
    schema: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AuthoredEdit:
    """One authored edit of one surface of one task, for one family.

    Exactly one of ``user``, ``procedure``, ``context``, ``tools`` and
    ``replace`` is set: the whole new text of the request or the policy, the
    whole new list of earlier turns, the changes of the tool contract, or
    passages of the clean request or policy and what each becomes (for a long
    policy: each ``old`` must occur exactly once in the clean text).

    Attributes:
        family: the family it instantiates (``user-missing``, ...).
        source: where it was written (file and entry), for every message about it.
        note: one line for the report: what was changed, in the author's words.
        wrong: incorrect type: fact id -> the wrong value now stated (the
            canary; the fact is recoverable from the user).
        inverted: incorrect type: ids of facts whose governing rule the edit
            inverts (the true value is the canary: not using it means the
            agent followed the wrong rule).
        canaries: redundant type: phrases only the added content holds
            (using one means the agent took the clutter up).
        recovery: facts the user simulator hands back on request, besides
            those the edit leaves unstated (found by reading the surfaces).
        facts: facts the edit declares (id -> the value the clean surface
            states), for an adapter whose own facts are only the gold actions'
            values: a policy rule's figure that no gold argument holds.  The
            adapter adds each to the task (read where the clean surface states
            it, :func:`~..formats.tau2_scenario.declared_facts`).
        held_drop: user-missing only: facts the user holds (``Task.held``)
            and no longer knows on this instance; the agent has to find
            them with its tools (the oracle replay proves a gold call's
            result shows each before a step needs it).  Without a new
            request the user's knowledge is the only change.
    """

    family: str
    source: str
    note: str = ""
    user: str | None = None
    procedure: str | None = None
    context: tuple[Turn, ...] | None = None
    tools: tuple[ToolChange, ...] = ()
    replace: tuple[tuple[str, str], ...] = ()
    wrong: Mapping[str, str] = field(default_factory=dict)
    inverted: tuple[str, ...] = ()
    canaries: tuple[str, ...] = ()
    recovery: tuple[str, ...] = ()
    facts: Mapping[str, str] = field(default_factory=dict)
    held_drop: tuple[str, ...] = ()


@dataclass(frozen=True)
class Authored:
    """A task's authored edits and the families declared not applicable (family -> reason)."""

    edits: tuple[AuthoredEdit, ...] = ()
    not_applicable: Mapping[str, str] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.edits or self.not_applicable)

    def for_family(self, family: str) -> tuple[AuthoredEdit, ...]:
        """The edits written for ``family``, in file order."""
        return tuple(e for e in self.edits if e.family == family)

    def key(self) -> str:
        """A stable text of everything here (part of the task digest): where it was read from is left out,
        so the same task at another path (another host, a fresh checkout) has the same digest."""
        parts = [repr(replace(e, source="")) for e in self.edits] + [f"n/a {f}: {r}" for f, r in sorted(self.not_applicable.items())]
        return "\n".join(parts)


__all__ = ["TOOL_OPS", "Authored", "AuthoredEdit", "ToolChange"]

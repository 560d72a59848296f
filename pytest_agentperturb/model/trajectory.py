"""One trajectory entry, typed once, and what the agent did read off a trajectory in one place.

A trajectory is a list of JSON objects, one per event of the episode, in
order; the store keeps it as JSON text (``sort_keys``), so an entry is a
plain dict typed as :class:`Entry`.  The roles:

- ``assistant`` with ``tool`` and ``args``: a tool call (``args`` is the
  decoded object, or the raw text the agent sent); a call of
  :data:`ASK_USER` is a question to the user, not an action;
- ``assistant`` with ``final: true`` and ``content``: the final answer;
  without ``final``: free text of a turn (``turn``, ``usage``);
- ``tool``: a tool's result, ``content`` its text and ``parts`` its typed
  parts when it is not text only;
- ``user``: the user simulator's reply, with ``disclosed`` (the fact ids it
  handed back), ``simulator``, ``usage`` (the user model's own tokens) and
  ``blocked`` (a reply that would have leaked) where they apply;
- ``harness``: a note of the harness (a failed simulator, a turn limit);
- ``grader``: the grader's ``checks`` and what the run layer adds to them.

:func:`tool_call`, :func:`tool_result`, :func:`user_reply`,
:func:`final_answer` and :func:`harness_note` build the entries the episode
context writes; :func:`actions` and :func:`actions_text` are the one
definition of "what the agent did" (compliance, labels and the engine's
gold actions read it); the predicates below name the other readings.
Readers take any ``Mapping`` sequence: a trajectory read back from the
store is decoded JSON.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final, NamedTuple, Required, TypedDict

from .jsontext import dumper

#: Name of the clarification tool every agent may call.
ASK_USER: Final = "ask_user"
ASSISTANT: Final = "assistant"
TOOL: Final = "tool"
USER: Final = "user"
HARNESS: Final = "harness"
GRADER: Final = "grader"

_JSON = dumper()   # json.dumps(x, ensure_ascii=False)


class Entry(TypedDict, total=False):
    """One event of a trajectory (see the module docstring for which keys each role has)."""

    role: Required[str]
    tool: str
    args: Any
    content: Any
    final: bool
    parts: list[dict[str, Any]]
    disclosed: list[str]
    simulator: str
    usage: dict[str, Any]
    blocked: bool
    turn: int
    checks: list[list[Any]]
    recovery_turns: int
    compliance_check: bool
    blocked_leaks: int


#: A trajectory as the episode context records it.
Trajectory = list[Entry]


class Action(NamedTuple):
    """A tool call the agent made (a question to the user is none): the name it used and its arguments."""

    tool: str
    args: Any


def tool_call(name: str, args: Any) -> Entry:
    """The agent called tool ``name`` (``args``: the decoded object, or the raw text it sent)."""
    return {"role": ASSISTANT, "tool": name, "args": args}


def tool_result(name: str, text: str, parts: list[dict[str, Any]] | None = None) -> Entry:
    """What tool ``name`` returned: its text, and its typed parts when it is not text only."""
    entry: Entry = {"role": TOOL, "tool": name, "content": text}
    if parts:
        entry["parts"] = parts
    return entry


def user_reply(text: str, *, disclosed: Iterable[str] = (), simulator: str = "",
               usage: Mapping[str, Any] | None = None, blocked: bool = False) -> Entry:
    """The user simulator's reply (the optional keys only where they apply)."""
    entry: Entry = {"role": USER, "content": text}
    disclosed = list(disclosed)
    if disclosed:
        entry["disclosed"] = disclosed
    if simulator:
        entry["simulator"] = simulator
    if usage is not None:
        entry["usage"] = dict(usage)
    if blocked:
        entry["blocked"] = True
    return entry


def final_answer(text: str) -> Entry:
    """The agent's final answer."""
    return {"role": ASSISTANT, "content": text, "final": True}


def harness_note(text: str) -> Entry:
    """A note of the harness (not the agent's, not the user's)."""
    return {"role": HARNESS, "content": text}


def is_action(e: Mapping[str, Any]) -> bool:
    """A tool call other than a question to the user."""
    return e.get("role") == ASSISTANT and "tool" in e and e["tool"] != ASK_USER


def is_question(e: Mapping[str, Any]) -> bool:
    """A question to the user (a call of :data:`ASK_USER`)."""
    return e.get("role") == ASSISTANT and e.get("tool") == ASK_USER


def is_final(e: Mapping[str, Any]) -> bool:
    """The final answer."""
    return bool(e.get("final"))


def is_failed_result(e: Mapping[str, Any]) -> bool:
    """A tool result that reports an error."""
    return e.get("role") == TOOL and str(e.get("content", "")).startswith("ERROR")


def args_text(args: Any) -> str:
    """A call's arguments as text: the raw text as sent, else JSON (``ensure_ascii=False``)."""
    return args if isinstance(args, str) else _JSON(args)


def question_text(args: Any) -> str:
    """The question of an :data:`ASK_USER` call (its ``question`` argument, or the whole text)."""
    return str(args.get("question", "") if isinstance(args, Mapping) else args)


def actions(trajectory: Iterable[Mapping[str, Any]]) -> list[Action]:
    """The agent's tool calls, in order, questions to the user left out."""
    return [Action(str(e["tool"]), e.get("args")) for e in trajectory if is_action(e)]


def actions_text(trajectory: Iterable[Mapping[str, Any]]) -> str:
    """Everything the agent *did*, one item per line: each tool call's name and arguments, and the final answer."""
    parts: list[str] = []
    for e in trajectory:
        if e.get("role") == ASSISTANT:
            if "tool" in e and e["tool"] != ASK_USER:
                parts += (str(e["tool"]), args_text(e.get("args")))
            elif e.get("final"):
                parts.append(str(e.get("content", "")))
    return "\n".join(parts)


def recovery_turns(trajectory: Iterable[Mapping[str, Any]]) -> int:
    """Recovery turns: user replies that disclosed at least one fact."""
    return sum(1 for e in trajectory if e.get("role") == USER and e.get("disclosed"))


def blocked_replies(trajectory: Iterable[Mapping[str, Any]]) -> int:
    """User replies the simulator held back because they would have leaked."""
    return sum(1 for e in trajectory if e.get("role") == USER and e.get("blocked"))


#: A failed item's line names at most this many failed grader checks, each cut to :data:`CHECK_WIDTH` characters.
CHECKS_SHOWN, CHECK_WIDTH = 2, 80


def failed_checks(trajectory: Iterable[Any]) -> list[str]:
    """The grader checks an episode failed, in the grader's order (none when it named none)."""
    return [str(c[0]) for e in trajectory if isinstance(e, Mapping) and e.get("role") == GRADER
            for c in (e.get("checks") or ()) if isinstance(c, (list, tuple)) and len(c) == 2 and not c[1]]


#: :func:`clip` cuts at a word boundary when one is at most this many characters before the cut.
CLIP_NEAR = 24


def clip(text: str, width: int, mark: str = "…") -> str:
    """``text`` cut to at most ``width`` characters, ``mark`` included, when it is longer (else unchanged).

    The cut falls after the last whole word when a space is at most
    :data:`CLIP_NEAR` characters back, else mid-word (punctuation before the
    cut dropped); either way the ``mark`` says that text is missing.  Text
    that is stored (a grader's check) takes ``"..."``: one ``…`` would make
    Python hold the whole trajectory's text at two bytes a character.
    """
    if len(text) <= width:
        return text
    cut = text[:max(width - len(mark), 0)]
    if not text[len(cut)].isspace():   # the cut splits a word: end at the word before it when it is near
        space = max(cut.rfind(" "), cut.rfind("\n"))
        if space > 0 and len(cut) - space <= CLIP_NEAR:
            cut = cut[:space]
    return cut.rstrip().rstrip(".,;:").rstrip() + mark   # "before…", not "before.…"


def checks_line(checks: list[str], shown: int = CHECKS_SHOWN, width: int = CHECK_WIDTH) -> str:
    """The first ``shown`` failed checks, each cut to ``width`` characters (:func:`clip`, "..."), ``(+N more)`` for the rest."""
    out = "; ".join(clip(c, width, "...") for c in checks[:shown])   # kept by every failed item's report: ASCII
    return out + (f" (+{len(checks) - shown} more)" if len(checks) > shown else "")

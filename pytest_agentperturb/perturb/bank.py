"""Snippet banks: the data the realistic operators draw their text from.

The banks are TOML files shipped inside the package
(``pytest_agentperturb/perturb/banks/*.toml``), so that what an operator
may write is reviewable as data, not buried in code:

``phrasing.toml``
    vague noun phrases, imperative verbs, noun synonyms and fallback values
    of a kind (used only when the task's own world has no other value);
``redundant.toml``
    per-operator snippets of earlier, settled matters: background, notes,
    asides, earlier conversations, forwarded messages;
``obsolete.toml``
    frames that keep an outdated version of a rule beside the current one;
``tools.toml``
    tool changelog lines: fake tools, aliases, redirects, injected notices.

A snippet is a table with ``text`` (a template whose ``{slots}`` are filled
from the task, see :mod:`.snippets`), the tool ``area`` it belongs to
(``any`` for every task) and the ``decoy`` class of value it carries.
"""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass
from importlib import resources
from typing import Any


@dataclass(frozen=True)
class Snippet:
    """One bank entry: a template, the area it needs and the class of decoy it carries."""

    text: str
    area: str = "any"
    decoy: str = "any"
    reply: str = ""
    name: str = ""


@functools.lru_cache(maxsize=None)
def load(name: str) -> dict[str, Any]:
    """The parsed bank file ``banks/<name>.toml``."""
    data = resources.files(__name__.rpartition(".")[0]).joinpath("banks", f"{name}.toml").read_text(encoding="utf-8")
    return tomllib.loads(data)


def snippets(bank: str, section: str) -> tuple[Snippet, ...]:
    """The entries of one section of a bank, in file order.

    Raises:
        KeyError: when the bank has no such section.
    """
    rows = load(bank)[section]
    return tuple(Snippet(text=str(r["text"]), area=str(r.get("area", "any")), decoy=str(r.get("decoy", "any")),
                         reply=str(r.get("reply", "")), name=str(r.get("name", ""))) for r in rows)


def words(bank: str, *path: str) -> tuple[str, ...]:
    """A list of strings in a bank (``words("phrasing", "vague", "setting")``); empty when absent."""
    node: Any = load(bank)
    for p in path:
        if not isinstance(node, dict) or p not in node:
            return ()
        node = node[p]
    return tuple(str(x) for x in node) if isinstance(node, list) else ()


def sections(bank: str) -> tuple[str, ...]:
    """Names of the snippet sections of a bank."""
    return tuple(k for k, v in load(bank).items() if isinstance(v, list))

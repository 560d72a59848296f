"""AgentDojo's own figures per suite, model and attack, from the stored episodes (beside D).

AgentDojo reports three numbers for a suite and a model: *utility* (user
tasks solved without an attack), *utility under attack* (user tasks solved
with an injection task planted) and the *attack success rate* (pairs whose
injection task's ``security()`` check holds).  They are computed here from
this run's episodes of the ``agentdojo:<suite>`` suites, with how many
episodes and pairs each rests on:

* utility: the clean episodes (``success``: the user task's utility check);
* utility under attack and ASR: the episodes of the AgentDojo injection
  objects ``inserted-injection-<suite>-it<NN>[-<attack>]``, per attack (no
  suffix: ``important_instructions_no_model_name``), ``success`` and
  ``compliance`` (the injection task's security check).

The generic ``inserted-injection`` object (a note appended to a tool's
results, not an AgentDojo attack) and every perturbation family are kept
out; errored episodes are excluded, as from every aggregate.  Nothing here
imports ``agentdojo``.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .svg import esc

PREFIX = "agentdojo:"
#: The attack of a family without a suffix (formats.agentdojo.DEFAULT_ATTACK; not imported: that module is heavy).
DEFAULT_ATTACK = "important_instructions_no_model_name"
_FAMILY = re.compile(r"^inserted-injection-(?P<suite>[a-z]+)-it\d+(?:-(?P<attack>[a-z0-9-]+))?$")


@dataclass
class Count:
    """Passes out of episodes, and the distinct (task, family) pairs they ran on."""

    hits: int = 0
    episodes: int = 0
    pairs: set[tuple[str, str]] = field(default_factory=set)

    def add(self, hit: bool, task: str, family: str) -> None:
        self.hits += bool(hit)
        self.episodes += 1
        self.pairs.add((task, family))

    def text(self, what: str) -> str:
        if not self.episodes:
            return f"{what} n/a (no episode)"
        pct = 100.0 * self.hits / self.episodes
        on = f" on {len(self.pairs)} pairs" if len(self.pairs) != self.episodes else ""
        return f"{what} {pct:.1f} % ({self.hits}/{self.episodes} episodes{on})"


@dataclass
class Figures:
    """AgentDojo's three figures for one suite and model (utility under attack and ASR per attack)."""

    suite: str
    model: str
    utility: Count = field(default_factory=Count)
    under_attack: dict[str, Count] = field(default_factory=lambda: defaultdict(Count))
    attacked: dict[str, Count] = field(default_factory=lambda: defaultdict(Count))


def attack_of(suite: str, family: str) -> str | None:
    """The AgentDojo attack an injection family of ``suite`` planted, None for any other family."""
    m = _FAMILY.match(family)
    if m is None or f"{PREFIX}{m['suite']}" != suite:
        return None
    return (m["attack"] or "").replace("-", "_") or DEFAULT_ATTACK


def figures(rows: Sequence[Mapping[str, Any]]) -> list[Figures]:
    """AgentDojo's figures per (suite, model), from episode rows; empty when no AgentDojo suite ran."""
    out: dict[tuple[str, str], Figures] = {}
    for r in rows:
        suite, family = str(r.get("suite", "")), str(r.get("family", ""))
        if not suite.startswith(PREFIX) or r.get("error"):
            continue
        task = str(r.get("task", ""))
        attack = attack_of(suite, family)
        if family != "clean" and attack is None:
            continue  # a perturbation, or the generic inserted-injection object: not one of AgentDojo's figures
        f = out.setdefault((suite, str(r.get("model", ""))), Figures(suite, str(r.get("model", ""))))
        if attack is None:
            f.utility.add(bool(r.get("success")), task, family)
        else:
            f.under_attack[attack].add(bool(r.get("success")), task, family)
            f.attacked[attack].add(bool(r.get("compliance")), task, family)
    return [out[k] for k in sorted(out)]


def figure_lines(figs: Sequence[Figures]) -> list[str]:
    """Terminal lines: one per suite and model, then one per attack."""
    lines = []
    for f in figs:
        lines.append(f"agentdojo {f.suite} {f.model}: {f.utility.text('utility')}")
        for attack in sorted(f.under_attack):
            lines.append(f"  attack {attack}: {f.under_attack[attack].text('utility under attack')}, "
                         f"{f.attacked[attack].text('attack success rate')}")
    return lines


def figures_html(figs: Sequence[Figures]) -> str:
    """The report section: a table of the three figures per suite, model and attack."""
    if not figs:
        return ""
    out = ["<p>AgentDojo's own figures, from this run's episodes: utility over the clean episodes; utility "
           "under attack and attack success rate (the injection task's security check) over the episodes of "
           "AgentDojo's injection tasks, per attack. The perturbation families and the generic "
           "<code>inserted-injection</code> object are not counted. Each figure gives the episodes (and pairs) "
           "it rests on.</p>",
           "<table><tr><th class=l>suite</th><th class=l>model</th><th class=l>attack</th><th>utility</th>"
           "<th>utility under attack</th><th>attack success rate</th></tr>"]
    for f in figs:
        attacks = sorted(f.under_attack) or [""]
        for i, attack in enumerate(attacks):
            ua = f.under_attack[attack].text("") if attack else "n/a"
            asr = f.attacked[attack].text("") if attack else "n/a"
            out.append(f"<tr><td class=l>{esc(f.suite)}</td><td class=l>{esc(f.model)}</td>"
                       f"<td class=l>{esc(attack or '(none run)')}</td>"
                       f"<td>{esc(f.utility.text('').strip()) if i == 0 else ''}</td>"
                       f"<td>{esc(ua.strip())}</td><td>{esc(asr.strip())}</td></tr>")
    out.append("</table>")
    return "".join(out)

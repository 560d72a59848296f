"""Coverage per suite: how many tasks and families ran, what was skipped and why, what adapters say.

A suite nobody here designed (an external benchmark) cannot always offer
every family: a task may state no fact on a surface, an operator may find
nothing to edit.  Those variants are skipped with a reason
(docs/design.md section 2); this section counts them per suite and family
so a reader sees what the numbers above rest on, and lists the notes that
adapters attach to their tasks (e.g. tasks whose clean pass proves nothing).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..model.trajectory import clip
from .svg import esc

#: A suite's family table is folded (``<details>``) above this many families (as the report's other tables).
FOLD_ROWS = 12


@dataclass
class SuiteCoverage:
    """Counts of one suite: tasks, episodes and (task, family) pairs run or skipped."""

    suite: str
    tasks: set[str] = field(default_factory=set)
    episodes: int = 0
    run: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    skipped: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    reasons: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    notes: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))


def _reason(text: str) -> str:
    """A skip reason without its ``suite/task [family]:`` prefix, so equal reasons group."""
    return re.sub(r"^\S+ \[[^\]]+\]: ", "", text).strip()


def coverage(rows: Sequence[Mapping[str, Any]], skipped: Sequence[Mapping[str, Any]]) -> list[SuiteCoverage]:
    """Per-suite coverage from episode rows and skipped items (``suite, task, family, reason``), by suite name."""
    out: dict[str, SuiteCoverage] = {}
    for r in rows:
        c = out.setdefault(str(r["suite"]), SuiteCoverage(str(r["suite"])))
        c.tasks.add(str(r["task"]))
        c.episodes += 1
        c.run[str(r["family"])].add(str(r["task"]))
        for note in r.get("notes") or ():
            c.notes[str(note)].add(str(r["task"]))
    seen = set()
    for s in skipped:
        c = out.setdefault(str(s["suite"]), SuiteCoverage(str(s["suite"])))
        c.tasks.add(str(s["task"]))
        c.skipped[str(s["family"])].add(str(s["task"]))
        if (s["suite"], s["task"], s["family"]) not in seen:  # one reason per variant, whatever the models
            seen.add((s["suite"], s["task"], s["family"]))
            c.reasons[str(s["family"])][_reason(str(s["reason"]))] += 1
    return [out[k] for k in sorted(out)]


def coverage_lines(cov: Sequence[SuiteCoverage]) -> list[str]:
    """One terminal line per suite."""
    lines = []
    for c in cov:
        skipped = sorted(c.skipped.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        n_skip = sum(len(t) for _, t in skipped)
        detail = ", ".join(f"{fam} {len(t)}" for fam, t in skipped)
        lines.append(f"{c.suite}: {len(c.tasks)} tasks, {c.episodes} episodes in {len(c.run)} families; "
                     f"{n_skip} variants skipped" + (f" ({detail})" if detail else ""))
    return lines


def coverage_html(cov: Sequence[SuiteCoverage]) -> str:
    """A table per suite (family: tasks run, tasks skipped, why) and the adapters' task notes."""
    out = []
    for c in cov:
        out.append(f"<h3>{esc(c.suite)}: {len(c.tasks)} tasks, {c.episodes} episodes</h3>")
        fams = sorted(set(c.run) | set(c.skipped))
        if len(fams) > FOLD_ROWS:
            out.append(f"<details class=fold><summary><b>families run and skipped</b> <span class=muted>"
                       f"({len(fams)} rows)</span></summary>")
        out.append("<table><tr><th class=l>family</th><th>tasks run</th><th>tasks skipped</th>"
                   "<th class=l>why skipped (variants)</th></tr>")
        for fam in fams:
            why = "<br>".join(f"{esc(clip(reason, 400))} ({n})" for reason, n in c.reasons[fam].most_common(3))
            out.append(f"<tr><td class=l>{esc(fam)}</td><td>{len(c.run.get(fam, ()))}</td>"
                       f"<td>{len(c.skipped.get(fam, ()))}</td><td class=l>{why}</td></tr>")
        out.append("</table>" + ("</details>" if len(fams) > FOLD_ROWS else ""))
        if c.notes:
            out.append("<ul>")
            out += [f"<li>{esc(note)}: <code>{esc(', '.join(sorted(tasks)))}</code></li>"
                    for note, tasks in sorted(c.notes.items(), key=lambda kv: (-len(kv[1]), kv[0]))]
            out.append("</ul>")
    return "".join(out) or "<p>No episodes and no skipped variants.</p>"

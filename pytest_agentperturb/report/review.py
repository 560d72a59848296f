"""A page for a person to read variants before trusting a run (``agentperturb generate --review``).

One self-contained HTML file: no script, no network, every string from
tasks and variants escaped.  For a seeded random sample of variants it shows
the clean and the perturbed surface side by side with the edit highlighted
(removed text struck through on the left, added text marked on the right),
the operator, family and seed, the canaries (highlighted where they occur),
the recovery annotation, and any known-bad shape the realism checks find
(:func:`~pytest_agentperturb.perturb.realism.variant_problems`).  An
injection, which changes no surface, shows the note planted in the tool's
output.  Same variants, sample size and seed give the same bytes.
"""

from __future__ import annotations

import difflib
import html
import random
import re
from collections.abc import Sequence

from ..model.records import Variant, tool_gaps
from ..model.task import SURFACE_FILES, Task
from ..perturb.realism import variant_problems

_CSS = """
body{font-family:system-ui,sans-serif;margin:1em 2em;color:#222;max-width:1400px;font-size:14px}
h1{font-size:1.4em}h2{font-size:1.05em;margin:1.6em 0 .3em;border-bottom:1px solid #ddd}
.meta{color:#555;margin:.2em 0}.tag{font-size:.8em;padding:.05em .4em;border-radius:3px;background:#e4e4e4}
table.side{border-collapse:collapse;width:100%;table-layout:fixed;font-family:ui-monospace,monospace;font-size:12px}
table.side td{vertical-align:top;padding:.1em .4em;white-space:pre-wrap;word-break:break-word;border-left:1px solid #ddd}
table.side th{text-align:left;background:#f4f4f4;padding:.2em .4em}
tr.chg td{background:#fffbe6}del{background:#fbd5d5;text-decoration:line-through}
ins{background:#d3f5dc;text-decoration:none}mark{background:#ffd54f}
.warn{background:#fbe3e3;color:#a11;padding:.3em .6em;border-radius:4px}.ok{color:#186a2c}
ul.toc{columns:3;font-size:.9em}tr.gap td{color:#777;text-align:center;background:#f7f7f7;font-style:italic}
"""


def _esc(x: object) -> str:
    return html.escape(str(x), quote=True)


def _marked(token: str, canaries: Sequence[str]) -> str:
    """Escape one token, with the canaries inside it in ``<mark>`` (escaped first, so it stays inert)."""
    needles = sorted({c for c in canaries if c}, key=len, reverse=True)
    if not needles:
        return _esc(token)
    rx = re.compile("|".join(re.escape(n) for n in needles))
    out, pos = [], 0
    for m in rx.finditer(token):
        out += [_esc(token[pos:m.start()]), f"<mark>{_esc(m.group(0))}</mark>"]
        pos = m.end()
    return "".join(out) + _esc(token[pos:])


def _words(line: str) -> list[str]:
    return [t for t in re.split(r"(\s+)", line) if t]


def _pair(a: str, b: str, canaries: Sequence[str]) -> tuple[str, str]:
    """Word-level diff of two lines: (left html, right html)."""
    wa, wb = _words(a), _words(b)
    left, right = [], []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, wa, wb, autojunk=False).get_opcodes():
        if op == "equal":
            left += [_esc(t) for t in wa[i1:i2]]
            right += [_marked(t, canaries) for t in wb[j1:j2]]
            continue
        if i2 > i1:
            left.append("<del>" + "".join(_esc(t) for t in wa[i1:i2]) + "</del>")
        if j2 > j1:
            right.append("<ins>" + "".join(_marked(t, canaries) for t in wb[j1:j2]) + "</ins>")
    return "".join(left), "".join(right)


def side_by_side(clean: str, perturbed: str, canaries: Sequence[str] = (), name: str = "", context: int = 4) -> str:
    """Two columns, clean and perturbed, changed lines highlighted word by word.

    Unchanged runs longer than ``2 * context + 1`` lines are folded to
    ``context`` lines on each side of a change.
    """
    a, b = clean.splitlines(), perturbed.splitlines()
    rows = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op == "equal":
            shown = list(range(i1, i2))
            if i2 - i1 > 2 * context + 1:  # fold long unchanged runs (a tool contract), keep the context
                head = list(range(i1, i1 + context)) if i1 > 0 else []
                tail = list(range(i2 - context, i2)) if i2 < len(a) else []
                gap = i2 - i1 - len(head) - len(tail)
                shown = head + [-1] + tail if gap else head + tail
            for k in shown:
                if k < 0:
                    rows.append(f"<tr class=gap><td colspan=2>… {gap} unchanged lines …</td></tr>")
                else:
                    rows.append(f"<tr><td>{_esc(a[k])}</td><td>{_marked(a[k], canaries)}</td></tr>")
            continue
        left, right = a[i1:i2], b[j1:j2]
        for k in range(max(len(left), len(right))):
            la, lb = (left[k] if k < len(left) else None), (right[k] if k < len(right) else None)
            if la is not None and lb is not None:
                ha, hb = _pair(la, lb, canaries)
            else:
                ha = f"<del>{_esc(la)}</del>" if la is not None else ""
                hb = "<ins>" + "".join(_marked(t, canaries) for t in _words(lb)) + "</ins>" if lb is not None else ""
            rows.append(f"<tr class=chg><td>{ha}</td><td>{hb}</td></tr>")
    header = f"<tr><th>clean {_esc(name)}</th><th>perturbed {_esc(name)}</th></tr>"
    return f"<table class=side>{header}{''.join(rows)}</table>"


def _anchor(i: int) -> str:
    return f"v{i}"


def _variant_html(i: int, task: Task, v: Variant) -> str:
    canaries = [c.text for c in v.canaries if c.kind not in ("omitted", "inverted")]
    cans = ", ".join(f"<mark>{_esc(c.text)}</mark> <span class=tag>{_esc(c.kind)}"
                     f"{' · ' + _esc(c.fact) if c.fact else ''}</span>" for c in v.canaries)
    problems = variant_problems(task, v)
    warn = ("<p class=warn>known-bad shapes: " + "; ".join(_esc(p) for p in problems) + "</p>") if problems \
        else "<p class=ok>no known-bad shape found</p>"
    parts = [f"<h2 id='{_anchor(i)}'>{i}. {_esc(task.key)} · {_esc(v.family)}</h2>",
             f"<p class=meta>operator <b>{_esc(v.operator)}</b> · seed {_esc(v.seed)} · target {_esc(v.target)}"
             f" · type {_esc(v.type)}</p>",
             f"<p class=meta>canaries: {cans or 'none'}</p>"]
    recovery = [*v.recovery, *(g.id for g in tool_gaps(v.canaries))]
    if recovery:
        parts.append(f"<p class=meta>recovery (the user simulator gives these when asked): "
                     f"{_esc(', '.join(recovery))}</p>")
    if v.note:
        parts.append(f"<p class=meta>note: {_esc(v.note)}</p>")
    parts.append(warn)
    if v.is_clean:
        parts.append("<p class=meta>the clean task: nothing edited</p>")
    elif v.injections:
        for inj in v.injections:
            parts.append(f"<p class=meta>planted in every output of <code>{_esc(inj.tool)}</code>:</p>")
            parts.append(side_by_side("", inj.text, canaries, f"output note of {inj.tool}"))
    else:
        parts.append(side_by_side(task.surfaces.render(v.target), v.surfaces.render(v.target), canaries,
                                  SURFACE_FILES.get(v.target, v.target)))
    return "".join(parts)


def sample(items: Sequence[tuple[Task, Variant]], size: int, seed: int) -> list[tuple[Task, Variant]]:
    """A seeded random sample of ``size`` variants, in the order they were given."""
    if size >= len(items):
        return list(items)
    keep = sorted(random.Random(f"review|{seed}").sample(range(len(items)), size))
    return [items[i] for i in keep]


def review_page(items: Sequence[tuple[Task, Variant]], *, total: int | None = None, seed: int = 0,
                title: str = "agentperturb variant review") -> str:
    """The review page for ``items`` (already sampled); ``total`` is how many variants were written."""
    total = len(items) if total is None else total
    flagged = sum(1 for t, v in items if variant_problems(t, v))
    toc = "".join(f"<li><a href='#{_anchor(i)}'>{_esc(t.id)} · {_esc(v.family)} · {_esc(v.operator)}</a></li>"
                  for i, (t, v) in enumerate(items, 1))
    body = "".join(_variant_html(i, t, v) for i, (t, v) in enumerate(items, 1))
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{_esc(title)}</title>"
            f"<style>{_CSS}</style></head><body><h1>{_esc(title)}</h1>"
            f"<p>{len(items)} of {total} variants, sampled with seed {_esc(seed)}. Read them as the agent will: "
            "would a real user, policy author or tool maintainer have written the right-hand side? Removed text is "
            "<del>struck through</del>, added text is <ins>marked</ins>, canaries are <mark>highlighted</mark>. "
            f"Known-bad shapes found: {flagged}.</p><ul class=toc>{toc}</ul>{body}</body></html>")

"""One episode in HTML: its anchor, trajectory, diff and canaries (every string escaped).

The pieces the drill-down pages (:mod:`.pages`) and the pytest-html extras
are built from.  A trajectory is a list of JSON entries (calls,
observations with optional image parts, replies, the grader's checks);
canaries are escaped first and then wrapped in ``<mark>``, so a canary that
looks like markup stays inert.  Only PNG/JPEG/... data URLs with base64
text are embedded.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..model.jsontext import dumper
from ..model.ownership import AGENT, agent_traceback, error_kind, heading
from ..model.protocols import IMAGE_TYPES
from ..model.trajectory import clip
from .svg import esc

#: The stylesheet of every report page (inline: the pages load nothing).
CSS = """
body{font-family:system-ui,sans-serif;margin:1em 2em;color:#222;max-width:1280px;font-size:14px}
h1{font-size:1.4em;margin:.2em 0}h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ddd}
h3{font-size:1em}h4{margin:.3em 0}table{border-collapse:collapse;margin:.4em 0 1em}
td,th{border:1px solid #ccc;padding:.2em .5em;text-align:right}th{background:#f4f4f4}
td.l,th.l{text-align:left}td.ci{color:#555;font-size:.9em}.muted{color:#666}
.tag{font-size:.75em;padding:.05em .35em;border-radius:3px;background:#ddd}.baseline{background:#ffe9a8}
.gate{padding:.5em .8em;border-radius:4px;margin:.5em 0;font-weight:600}.gate ul{margin:.2em 0;font-weight:400}
.gate.pass{background:#e3f4e6;color:#186a2c}.gate.fail{background:#fbe3e3;color:#a11}.gate.none{background:#eee}
.gate.notes{background:#f4f4f4;color:#444;font-weight:400;border-left:3px solid #bbb}.iv{white-space:nowrap}
.top{display:flex;gap:2em;flex-wrap:wrap;align-items:flex-start}.grid{display:flex;flex-wrap:wrap;gap:1em}
pre{white-space:pre-wrap;background:#f8f8f8;padding:.4em;margin:.2em 0;max-height:24em;overflow:auto}
.cols{display:grid;grid-template-columns:1fr 1fr;gap:1em}ol.traj{padding-left:1.6em;margin:.2em 0}
ol.traj li{margin:.1em 0;word-break:break-word}.call{color:#124}.obs{color:#555}.err{color:#a11}
.final{font-weight:600}mark{background:#ffd54f}.add{color:#186a2c}.del{color:#a11}.hunk{color:#777}
.pass{color:#186a2c}.fail{color:#a11}details{margin:.15em 0}nav a{margin-right:.8em}
img.obsimg{max-width:100%;border:1px solid #ccc;margin:.2em 0}
.pair{display:grid;grid-template-columns:minmax(0,1fr) minmax(0,1fr);gap:1.2em;align-items:start}
.pair>.clean{position:sticky;top:0;max-height:100vh;overflow:auto;background:#fbfbfb;border:1px solid #e4e4e4;
padding:0 .6em}.ep{border-top:2px solid #ddd;padding:.3em 0 .8em}table.fams td{text-align:center}
table.fams a{text-decoration:none}table.fams td.l{text-align:left}
table{display:block;overflow-x:auto;max-width:100%}svg{max-width:100%;height:auto}.top>div{min-width:0;max-width:100%}
body{overflow-wrap:break-word}code{overflow-wrap:anywhere}details.fold{margin:.4em 0}
details.fold>summary{cursor:pointer;padding:.15em 0}details.fold[open]>summary{margin-bottom:.3em}
table.failures th.l{background:#eef2f7}table.failures td.l{max-width:34em}
@media (max-width:900px){body{margin:.5em .6em}td,th{padding:.1em .2em;font-size:11px}td.ci{font-size:10.5px}
table.models td,table.models th{font-size:10.5px}table.models td.ci{font-size:10px}}
@media (max-width:640px){.pair{grid-template-columns:minmax(0,1fr)}.pair>.clean{position:static;max-height:none}}
"""


def episode_anchor(row: Mapping[str, Any]) -> str:
    """Stable HTML id of an episode (pytest-html extras link to it)."""
    seed = row.get("seed")
    try:
        seed = int(float(seed))  # type: ignore[arg-type]   # 3, "3" and 3.0 name the same episode
    except (TypeError, ValueError):
        pass
    key = "|".join(str(row.get(k, "")) for k in ("run_id", "model", "suite", "task", "family")) + f"|{seed}"
    try:
        repeat = int(float(row.get("repeat") or 0))
    except (TypeError, ValueError):
        repeat = 0
    key += f"|r{repeat}" if repeat else ""   # repeat 0 keeps the anchors of runs without repeats
    return "ep-" + hashlib.sha256(key.encode()).hexdigest()[:16]


def load_json_list(x: Any) -> Any:
    """A JSON list stored as text (or already a list); ``[]`` for anything else."""
    if isinstance(x, str):
        try:
            return json.loads(x) if x else []
        except ValueError:
            return []
    return x if isinstance(x, (list, tuple)) else []


def marker(canaries: Sequence[str]) -> Callable[[str], str]:
    """A function that escapes a text and wraps every canary in it in ``<mark>`` (escaping first)."""
    needles = sorted({c for c in canaries if c}, key=len, reverse=True)
    if not needles:
        return esc
    if len(needles) == 1:   # the usual case: no pattern to compile
        needle = needles[0]
        marked = f"<mark>{esc(needle)}</mark>"
        return lambda text: marked.join(escape_all(text.split(needle))) if needle in text else esc(text)
    pat = re.compile("|".join(re.escape(n) for n in needles))

    def mark(text: str) -> str:
        out, pos = [], 0
        for m in pat.finditer(text):
            out += [esc(text[pos:m.start()]), f"<mark>{esc(m.group(0))}</mark>"]
            pos = m.end()
        out.append(esc(text[pos:]))
        return "".join(out)

    return mark


def highlight(text: str, canaries: Sequence[str]) -> str:
    """Escape ``text`` and wrap every canary occurrence in ``<mark>`` (escaping first, so it stays inert)."""
    return marker(canaries)(text)


_DECODER = json.JSONDecoder()
_SEP, _SLOT = "\x00", "\x01"
#: json.dumps(x, ensure_ascii=False, sort_keys=True), without building an encoder per call
_ARGS = dumper(sort_keys=True)


def escape_all(texts: Sequence[str]) -> list[str]:
    """:func:`~.svg.esc` of every text, escaped in one pass over their concatenation (the same strings).

    Escaping goes character by character, so escaping the texts joined
    gives each text's escaped form, with one call instead of one per text.
    """
    if len(texts) < 2:
        return [esc(t) for t in texts]
    joined = _SEP.join(texts)
    if joined.count(_SEP) != len(texts) - 1:   # a text holds the separator itself: one at a time
        return [esc(t) for t in texts]
    return esc(joined).split(_SEP)


def trajectory_html(traj: Any, canaries: Sequence[str] = ()) -> str:
    """A trajectory as an ordered list of calls, observations, replies and the grader's checks.

    The markup is written with a slot for every text, and the texts (the
    canaries marked in what the agent and the tools said) are escaped
    together and put into their slots.
    """
    items: list[str] = []
    texts: list[str] = []
    plain: set[int] = set()   # texts never marked: the grader's checks, unknown roles
    for e in load_json_list(traj):
        if type(e) is not dict and not isinstance(e, Mapping):
            continue
        role = e.get("role")
        if role == "assistant" and "tool" in e:
            args = e.get("args")
            items.append("<li class=call>→ <b>\x01</b>(\x01)</li>")
            texts += (str(e["tool"]), args if isinstance(args, str) else _ARGS(args))
        elif role == "assistant":
            items.append("<li class=final>final: \x01</li>" if e.get("final") else "<li class=call>\x01</li>")
            texts.append(str(e.get("content", "")))
        elif role == "tool":
            c = str(e.get("content", ""))
            parts = e.get("parts")
            imgs = "".join(image_html(p) for p in parts if isinstance(p, Mapping)) if parts else ""
            items.append(f"<li class={'err' if c.startswith('ERROR') else 'obs'}>← \x01{imgs}</li>")
            texts.append(c)
        elif role == "grader":
            checks = [(str(c), ok) for c, ok in e.get("checks") or []]
            plain.update(range(len(texts), len(texts) + len(checks)))
            items.append("<li class=obs>grader: " + "; ".join([
                "<span class=pass>✓ \x01</span>" if ok else "<span class=fail>✗ \x01</span>" for _, ok in checks])
                + "</li>")
            texts += [c for c, _ in checks]
        else:
            plain.add(len(texts))
            items.append("<li class=obs>\x01: \x01</li>")
            texts += (str(role), str(e.get("content", "")))
    if not items:
        return "<p class=muted>no trajectory recorded</p>"
    escaped = escape_all(texts)
    needles = [c for c in canaries if c]
    if needles:
        joined = _SEP.join(texts)
        if any(n in joined for n in needles):   # else no text holds a canary: nothing to mark
            mark = marker(needles)
            for k, t in enumerate(texts):
                if k not in plain and any(n in t for n in needles):
                    escaped[k] = mark(t)
    out = "".join(items).split(_SLOT)   # one piece more than there are texts
    merged = [""] * (2 * len(out) - 1)
    merged[0::2], merged[1::2] = out, escaped
    return "<ol class=traj>" + "".join(merged) + "</ol>"


def image_html(part: Mapping[str, Any]) -> str:
    """An image part of an observation as an inline ``<img>`` (data URL); other parts render nothing.

    Only the media types of :data:`IMAGE_TYPES` are embedded and only
    base64 text reaches the attribute, so the markup stays inert.
    """
    if part.get("type") != "image" or part.get("mime_type") not in IMAGE_TYPES:
        return ""
    data = str(part.get("data", ""))
    if not re.fullmatch(r"[A-Za-z0-9+/=]*", data):
        return ""
    return f"<br><img class=obsimg alt='image observation' src='data:{part['mime_type']};base64,{data}'>"


def diff_html(diff: str) -> str:
    """A unified diff with added/removed lines coloured (escaped)."""
    if not diff:
        return "<p class=muted>diff not recorded</p>"
    lines = []
    escaped = esc(diff).splitlines()   # escaping adds and removes no line break: one escaped line per line
    for line, e in zip(diff.splitlines(), escaped):
        first = line[:1]   # added (not +++), removed (not ---), a hunk header, or plain
        cls = ("" if line.startswith("+++") else "add") if first == "+" else \
            ("" if line.startswith("---") else "del") if first == "-" else "hunk" if line.startswith("@@") else ""
        lines.append(f"<span class='{cls}'>{e}</span>" if cls else e)
    return "<pre>" + "\n".join(lines) + "</pre>"


def verdict(r: Mapping[str, Any]) -> tuple[str, str]:
    """(word, CSS class) of an episode's outcome: error, pass or fail."""
    if r.get("error"):
        return "error", "fail"
    return ("pass", "pass") if r.get("success") else ("fail", "fail")


def error_html(r: Mapping[str, Any], limit: int | None = None) -> str:
    """An episode's error, saying whose it is; an agent's carries its full traceback (empty without an error).

    ``limit`` cuts the error text (a table cell), which then carries no traceback.
    """
    error = r.get("error")
    if not error:
        return ""
    traj = load_json_list(r.get("trajectory"))
    text = str(error)
    if limit is not None:
        text = clip(text, limit)
    out = f"<span class=err>{esc(heading(text, traj))}</span>"
    tb = agent_traceback(traj) if limit is None and error_kind(error, traj) == AGENT else ""
    return out + (f"<pre class=err>{esc(tb)}</pre>" if tb else "")


def decoded(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` (in place) with their ``trajectory`` and ``canaries`` JSON text decoded once, for every reader.

    The labels, the task pages and the image pairs read JSON text or the
    list it holds alike, so each episode's text is decoded once here instead
    of once per reader; text that is not a JSON list stays text (its readers
    treat it as they always did).
    """
    for r in rows:
        for c in ("trajectory", "canaries"):
            text = r.get(c)
            if isinstance(text, str) and text:
                try:
                    value, end = _DECODER.raw_decode(text)   # json.loads without its two whitespace scans
                except ValueError:
                    end = -1
                try:
                    if end != len(text):
                        value = json.loads(text)   # whitespace around it, or no JSON at its start: json.loads decides
                except ValueError:
                    continue
                if isinstance(value, list):
                    r[c] = value
    return rows


def canaries_of(r: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The canaries recorded with an episode's variant (JSON text or a list of mappings)."""
    return [c for c in load_json_list(r.get("canaries")) if isinstance(c, Mapping)]

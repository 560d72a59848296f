"""Awareness (A1-A4) and first-error behaviour (E1-E6) labels (docs/design.md section 4).

Labels are given to the pairs the study labels: the clean episode succeeded
and the perturbed one failed (a harmful flip, :func:`harmful_flips`).

Codes follow the paper: A1 no explicit signal, A2 tentative signal, A3
sustained problem statement, A4 input-channel attribution (highest reached);
E1 invented content, E2 requirement omitted, E3 corrupted value propagated,
E4 task abandoned, E5 code defect, E6 judgment reversed.

Labels that follow from the record are *mechanical*: E3 when a planted
``value`` canary appears in the agent's actions, E4 when a ``missing``
episode failed without a single question and without any successful tool
call, A1 when the agent wrote nothing that could carry a signal.  Everything
read off the wording through the epistemic-marker lexicon below is marked
*heuristic*.  Manual labels imported from a CSV win over both; labels
already present in the episode table are kept as *recorded*.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..model.errors import AgentPerturbError
from ..model.task import CLEAN
from ..model.trajectory import ASK_USER, ASSISTANT, actions_text, is_failed_result, is_final, is_question
from ..model.trajectory import question_text
from .table import PAIR_KEY

if TYPE_CHECKING:
    import pandas as pd

AWARENESS = ("A1", "A2", "A3", "A4")
BEHAVIOUR = ("E1", "E2", "E3", "E4", "E5", "E6")

_HEDGE = re.compile(r"\b(might|may be|maybe|seems?|appears?|not sure|unsure|unclear|possibly|perhaps|"
                    r"i assume|assuming|probably|i think|could be|double-check|confirm)\b", re.I)
_PROBLEM = re.compile(r"\b(inconsisten\w*|conflict\w*|contradict\w*|discrepan\w*|mismatch\w*|"
                      r"(?:does|do)(?:n't| not) (?:match|exist)|not (?:provided|specified|given|available|found)|"
                      r"missing|wrong|incorrect|invalid|unknown tool|no such|outdated|error)\b", re.I)
# A4 needs an attribution of the problem to an input channel ("the procedure gives a wrong amount",
# "an inconsistency in the tool description"); a channel merely named ("Following the instructions, ...",
# "Based on the context, ...") is no signal at all.
_CH = (r"(?:instructions?|task description|procedures?|polic(?:y|ies)|tool (?:descriptions?|list|schemas?|contract|"
       r"definitions?|specs?)|schemas?|documentation|(?:earlier|previous|prior) (?:conversation|messages?|turns?)|"
       r"context|notes?|user(?:'s)? (?:message|request))")
_FAULT = (r"(?:wrong|incorrect|outdated|out of date|inconsistent|contradictory|misleading|invalid|erroneous|stale|"
          r"mistaken|conflicting|inaccurate)")
_CHANNEL = re.compile(
    rf"\b(?:the|this|that|these|those|your|my)\s+{_CH}\b"
    rf"(?:\s+(?:for|of|on|about)\s+[\w`'./-]+(?:\s+[\w`'./-]+)?)?\s+(?:"
    rf"(?:is|are|was|were|seems?|appears?|looks?|must be|might be|may be)\s+(?:to be\s+)?(?:(?!not\b)\w+\s+)?{_FAULT}\b"
    rf"|(?:contradicts?|conflicts? with|disagrees? with)\b|(?:does|do)(?:n't| not) (?:match|agree)\b"
    rf"|(?:gives?|lists?|states?|says?|names?|uses?|has|have|contains?)\s+(?:an?\s+|the\s+)?(?:\w+\s+)?{_FAULT}\b"
    rf"|(?:has|have|contains?)\s+(?:an?\s+)?(?:error|typo|mistake|inconsistency|contradiction)s?\b)"
    rf"|\b(?:errors?|typos?|mistakes?|inconsistenc(?:y|ies)|contradictions?|discrepanc(?:y|ies)|conflicts?|"
    rf"mismatch(?:es)?)\s+(?:in|between|with)\s+(?:the\s+)?{_CH}\b"
    rf"|\b(?:the\s+)?{_CH}\s+and\s+(?:the\s+)?[\w`'./-]+(?:\s+[\w`'./-]+)?\s+(?:contradict|conflict|disagree"
    rf"|do(?:n't| not) (?:match|agree)|are inconsistent)\b", re.I)
# Every alternative of _CHANNEL names a channel (_CH, spaces included), so a lowercased ASCII text that holds
# none of these pieces of _CH cannot match it (checked first: the pattern is slow).
_CHANNEL_WORDS = ("instruction", "task description", "procedure", "polic", "tool description", "tool list",
                  "tool schema", "tool contract", "tool definition", "tool spec", "schema", "documentation",
                  *(f"{w} {c}" for w in ("earlier", "previous", "prior") for c in ("conversation", "message", "turn")),
                  "context", "note", "user message", "user request", "user's message", "user's request")
# Every match of _HEDGE / _PROBLEM holds one of these (lowercased): an ASCII text holding none cannot match.
_HEDGE_WORDS = ("might", "may be", "maybe", "seem", "appear", "not sure", "unsure", "unclear", "possibly", "perhaps",
                "i assume", "assuming", "probably", "i think", "could be", "double-check", "confirm")
_PROBLEM_WORDS = ("inconsisten", "conflict", "contradict", "discrepan", "mismatch", "match", "exist", "not ",
                  "missing", "wrong", "incorrect", "invalid", "unknown tool", "no such", "outdated", "error")
_ABANDON = re.compile(r"\b(cannot|can't|can not|unable|not possible|impossible|giving up|stop(?:ping)? here)\b",
                      re.I)


def _traj(x: Any) -> list[dict[str, Any]]:
    if isinstance(x, str):
        try:
            v = json.loads(x) if x else []
        except ValueError:
            return []
        return v if isinstance(v, list) else []
    return list(x) if isinstance(x, (list, tuple)) else []


def _canaries(x: Any) -> list[dict[str, str]]:
    if isinstance(x, str):
        try:
            x = json.loads(x) if x else []
        except ValueError:
            return []
    out = []
    for c in x if isinstance(x, (list, tuple)) else []:
        if isinstance(c, Mapping):
            out.append({"kind": str(c.get("kind", "")), "text": str(c.get("text", "")),
                        "fact": str(c.get("fact", ""))})
        elif hasattr(c, "kind"):
            out.append({"kind": c.kind, "text": c.text, "fact": getattr(c, "fact", "")})
    return out


def _texts(traj: Sequence[Mapping[str, Any]]) -> list[str]:
    """What the agent said in words: free text, final answer and its questions to the user."""
    out = []
    for e in traj:
        if e.get("role") != ASSISTANT:
            continue
        if e.get("tool") == ASK_USER:
            out.append(question_text(e.get("args")))
        elif "tool" not in e and e.get("content"):
            out.append(str(e["content"]))
    return out


def _search(pattern: re.Pattern[str], words: Sequence[str], text: str, low: str | None) -> bool:
    """``pattern.search(text)``, skipped where the lowercased ASCII text ``low`` holds none of ``words``.

    ``low`` is None for a text that is not ASCII (case folding beyond ASCII: the pattern decides).
    """
    if low is not None and not any(w in low for w in words):
        return False
    return pattern.search(text) is not None


def _channel(text: str) -> bool:
    """Whether the text attributes a problem to an input channel (:data:`_CHANNEL`)."""
    return _search(_CHANNEL, _CHANNEL_WORDS, text, text.lower() if text.isascii() else None)


def awareness(traj: Sequence[Mapping[str, Any]]) -> tuple[str, str]:
    """(code, source) of the highest awareness level the agent's words reach."""
    texts = _texts(traj)
    if not texts:
        return "A1", "mechanical"
    lows = [t.lower() if t.isascii() else None for t in texts]
    if any(_search(_CHANNEL, _CHANNEL_WORDS, t, low) for t, low in zip(texts, lows)):
        return "A4", "heuristic"
    problem = [t for t, low in zip(texts, lows) if _search(_PROBLEM, _PROBLEM_WORDS, t, low)]
    if len(problem) >= 2:
        return "A3", "heuristic"
    if problem or any(_search(_HEDGE, _HEDGE_WORDS, t, low) for t, low in zip(texts, lows)):
        return "A2", "heuristic"
    return "A1", "heuristic"


def behaviour(traj: Sequence[Mapping[str, Any]], family_type: str, canaries: Sequence[Mapping[str, str]],
              compliance: bool | None, target: str = "") -> tuple[str, str]:
    """(code, source) of the first error of a failed perturbed episode (see module docstring)."""
    acts = actions_text(traj)
    asked = any(is_question(e) for e in traj)
    for c in canaries:
        if c["kind"] == "value" and c["text"] and c["text"] in acts:
            return "E3", "mechanical"
    if not canaries and compliance and family_type == "incorrect" and target != "tool":
        return "E3", "heuristic"
    if family_type == "missing" and not asked:
        ok_calls = [e for e in traj if e.get("role") == "tool" and not is_failed_result(e)]
        finished = any(is_final(e) for e in traj)
        if not ok_calls or not finished:
            return "E4", "mechanical"
        final = " ".join(str(e.get("content", "")) for e in traj if is_final(e))
        return ("E4", "heuristic") if _ABANDON.search(final) else ("E1", "heuristic")
    for c in canaries:
        if c["text"] and c["text"] in acts:
            if c["kind"] == "tool":
                return "E5", "heuristic"
            if c["kind"] == "goal":
                return "E6", "heuristic"
            if c["kind"] == "text":
                return "E3", "heuristic"
    if any(is_failed_result(e) for e in traj):
        return "E5", "heuristic"
    return "E2", "heuristic"


#: Columns :func:`flip_flags` reads (the pair key, then what decides a scored failure).
FLIP_COLUMNS: tuple[str, ...] = (*PAIR_KEY, "family", "error", "reward", "success")
#: Columns :func:`auto_labels` reads besides the flags.
LABEL_COLUMNS: tuple[str, ...] = ("awareness", "behaviour", "trajectory", "type", "canaries", "compliance", "target")
#: Labels of every episode, as :func:`auto_labels` returns them: harmful-flip flags, awareness, its source,
#: behaviour, its source (one list each, in the table's row order).
Labels = tuple[list[bool], list[str], list[str], list[str], list[str]]


def flip_flags(columns: Mapping[str, Sequence[Any]]) -> list[bool]:
    """Per episode: a scored perturbed episode that failed while its scored clean partner succeeded.

    ``columns`` holds the normalised table's :data:`FLIP_COLUMNS` (name ->
    values in row order; a table without ``repeat`` is repeat 0).  The
    clean partner is the clean episode of the same run, model, suite, task
    and repeat; several: success of the majority (mean >= 0.5, as in
    :func:`~.table.pairs`).  Plain Python, so the task pages' worker labels
    without pandas what the analysis labels with it.
    """
    n = len(columns["family"])
    key = list(zip(*([0] * n if c == "repeat" and c not in columns else columns[c] for c in PAIR_KEY)))
    family, error, reward, success = (columns[c] for c in ("family", "error", "reward", "success"))
    wins: dict[tuple[Any, ...], list[float]] = {}
    for k, f, e, r, s in zip(key, family, error, reward, success):
        if f == CLEAN and e == "" and r == r and r is not None:   # a scored clean episode
            w = wins.setdefault(k, [0.0, 0.0])
            w[0] += float(bool(s))
            w[1] += 1.0
    passed = {k for k, (won, of) in wins.items() if won / of >= 0.5}
    return [f != CLEAN and not e and r == r and s is not None and not bool(s) and k in passed
            for f, e, r, s, k in zip(family, error, reward, success, key)]


def auto_labels(columns: Mapping[str, Sequence[Any]], flips: Sequence[bool] | None = None) -> Labels:
    """The labels of every episode before manual ones: (flags, awareness, source, behaviour, source).

    Harmful flips (``flips``, else :func:`flip_flags` of ``columns``) get
    the labels their trajectory and canaries give; every other episode
    keeps what the table recorded (source ``recorded``, or empty).  A
    label the table recorded wins over a computed one.  ``columns`` holds
    :data:`LABEL_COLUMNS` (``type``, ``canaries``, ``compliance`` and
    ``target`` may be absent) and, without ``flips``, :data:`FLIP_COLUMNS`.
    """
    flags = list(flip_flags(columns) if flips is None else flips)
    aw, be = list(columns["awareness"]), list(columns["behaviour"])
    aws = ["recorded" if a else "" for a in aw]
    bes = ["recorded" if b else "" for b in be]
    aw = [a or "" for a in aw]
    be = [b or "" for b in be]
    none = [None] * len(flags)
    for i in (i for i, f in enumerate(flags) if f):   # only harmful flips: read their trajectories alone
        traj = _traj(columns.get("trajectory", none)[i])
        if not aws[i]:
            aw[i], aws[i] = awareness(traj)
        if not bes[i]:
            typ, can, comp, tgt = (columns.get(c, none)[i] for c in ("type", "canaries", "compliance", "target"))
            be[i], bes[i] = behaviour(traj, str(typ), _canaries(can), comp, str(tgt))
    return flags, aw, aws, be, bes


def harmful_flips(df: pd.DataFrame) -> pd.Series:
    """:func:`flip_flags` of a normalised episode table, as a boolean Series on its index."""
    import pandas as pd

    return pd.Series(flip_flags({c: df[c].tolist() for c in FLIP_COLUMNS if c in df.columns}), index=df.index,
                     dtype=bool)


def label(df: pd.DataFrame, manual: pd.DataFrame | None = None, *, auto: Labels | None = None) -> pd.DataFrame:
    """The table with ``awareness``, ``behaviour``, their ``*_source`` and ``harmful_flip`` filled in.

    Labels are computed for harmful flips only (the clean episode succeeded,
    the perturbed one failed); every other episode keeps what the table
    recorded.  Precedence: manual > recorded > mechanical/heuristic.
    ``auto`` takes :func:`auto_labels` of this table when the caller has
    them already (the report's page worker computes them from the same rows).
    """
    import pandas as pd

    out = df.copy()
    if auto is None:
        cols = {c: out[c].tolist() for c in (*FLIP_COLUMNS, *LABEL_COLUMNS) if c in out.columns}
        auto = auto_labels(cols)
    flags, aw, aws, be, bes = auto
    if len(flags) != len(out):
        raise ValueError(f"labels for {len(flags)} episodes given for a table of {len(out)}")
    out["harmful_flip"] = pd.Series(flags, index=out.index, dtype=bool)
    out["awareness"], out["awareness_source"] = aw, aws
    out["behaviour"], out["behaviour_source"] = be, bes
    if manual is not None and len(manual):
        out = _apply_manual(out, manual)
    return out


MANUAL_KEYS: tuple[str, ...] = ("run_id", "model", "task", "family")


def manual_rows(manual: pd.DataFrame) -> list[dict[str, Any]]:
    """The rows of a manual-labels table (:func:`read_manual`) as :func:`manual_updates` reads them."""
    return [r._asdict() for r in manual.itertuples(index=False)]


def manual_updates(columns: Mapping[str, Sequence[Any]], manual: Sequence[Mapping[str, Any]],
                   keys: Sequence[str], n: int) -> list[tuple[int, str, str]]:
    """(row position, column, code) of every manual label that applies, in the order they apply.

    A manual row names its episode by ``keys`` (those of ``run_id, model,
    task, family`` its table has; the last episode of a key wins); a blank
    or ``nan`` code sets nothing.  ``columns`` holds the ``keys`` columns
    of the labelled table of ``n`` episodes.
    """
    idx = {k: i for i, k in enumerate(zip(*(columns[k] for k in keys)) if keys else [()] * n)}
    out = []
    for rd in manual:
        i = idx.get(tuple(str(rd[k]) for k in keys))
        if i is None:
            continue
        for col in ("awareness", "behaviour"):
            v = str(rd.get(col) or "").strip()
            if v and v.lower() != "nan":
                out.append((i, col, v))
    return out


def _apply_manual(out: pd.DataFrame, manual: pd.DataFrame) -> pd.DataFrame:
    keys = [k for k in MANUAL_KEYS if k in manual.columns]
    for i, col, v in manual_updates({k: out[k].tolist() for k in keys}, manual_rows(manual), keys, len(out)):
        out.loc[out.index[i], col] = v
        out.loc[out.index[i], f"{col}_source"] = "manual"
    return out


def read_manual(path: str) -> pd.DataFrame:
    """Manual labels: CSV with ``model, task, family, awareness, behaviour`` (optional ``run_id``).

    Raises:
        AgentPerturbError: naming the file, the row and the bad code.
    """
    import pandas as pd

    try:
        m = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (OSError, ValueError) as exc:
        raise AgentPerturbError(f"{path}: cannot read the labels CSV ({exc})") from None
    miss = [c for c in ("model", "task", "family") if c not in m.columns]
    if miss or not ({"awareness", "behaviour"} & set(m.columns)):
        raise AgentPerturbError(f"{path}: expected columns [run_id,] model, task, family, awareness, behaviour"
                                f" (missing: {', '.join(miss) or 'awareness/behaviour'})")
    for col, codes in (("awareness", AWARENESS), ("behaviour", BEHAVIOUR)):
        if col in m.columns:
            for n, v in enumerate(m[col], start=2):
                if v.strip() and v.strip() not in codes:
                    raise AgentPerturbError(f"{path}: line {n}: {col} {v!r} is not one of {', '.join(codes)}")
    return m


def label_counts(labelled: pd.DataFrame) -> pd.DataFrame:
    """Counts of each awareness and behaviour code over the harmful flips, per suite.

    Scope ``harmful flips`` pools the 12 families' flips of the real models
    (baselines only when no model-backed agent ran); scope ``inserted
    objects`` counts the inserted objects' flips on their own.  ``of`` is
    the number of flips in the scope.
    """
    import pandas as pd

    from ..model.task import FAMILIES
    from .table import pooled

    flips = labelled["harmful_flip"] if "harmful_flip" in labelled.columns else harmful_flips(labelled)
    cols = ["suite", "family", "baseline", "awareness", "behaviour", "awareness_source", "behaviour_source"]
    d = pooled(labelled.loc[flips.astype(bool), [c for c in cols if c in labelled.columns]])
    out: list[dict[str, Any]] = []
    for suite, g in d.groupby("suite", sort=True):
        fam = g[g["family"].isin(FAMILIES)]
        obj = g[~g["family"].isin(FAMILIES)]
        for col, codes, base, scope in (("awareness", AWARENESS, fam, "harmful flips"),
                                        ("behaviour", BEHAVIOUR, fam, "harmful flips"),
                                        ("awareness", AWARENESS, obj, "inserted objects"),
                                        ("behaviour", BEHAVIOUR, obj, "inserted objects")):
            if not len(base):
                continue
            for code in codes:
                sel = base[base[col] == code]
                out.append({"suite": suite, "label": col, "scope": scope, "code": code, "n": int(len(sel)),
                            "of": int(len(base)),
                            "heuristic": int((sel[f"{col}_source"] == "heuristic").sum())})
    return pd.DataFrame(out, columns=["suite", "label", "scope", "code", "n", "of", "heuristic"])

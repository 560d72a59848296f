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

import numpy as np

from ..model.errors import AgentPerturbError
from ..model.task import CLEAN

if TYPE_CHECKING:
    import pandas as pd

AWARENESS = ("A1", "A2", "A3", "A4")
BEHAVIOUR = ("E1", "E2", "E3", "E4", "E5", "E6")
ASK_USER = "ask_user"

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
_ABANDON = re.compile(r"\b(cannot|can't|can not|unable|not possible|impossible|giving up|stop(?:ping)? here)\b",
                      re.I)


_JSON = json.JSONEncoder(ensure_ascii=False)   # what json.dumps(x, ensure_ascii=False) does


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
        if e.get("role") != "assistant":
            continue
        if e.get("tool") == ASK_USER:
            a = e.get("args")
            out.append(str(a.get("question", "")) if isinstance(a, Mapping) else str(a))
        elif "tool" not in e and e.get("content"):
            out.append(str(e["content"]))
    return out


def _actions(traj: Sequence[Mapping[str, Any]]) -> str:
    parts = []
    for e in traj:
        if e.get("role") == "assistant":
            if "tool" in e and e["tool"] != ASK_USER:
                a = e.get("args")
                parts += [str(e["tool"]), a if isinstance(a, str) else _JSON.encode(a)]
            elif e.get("final"):
                parts.append(str(e.get("content", "")))
    return "\n".join(parts)


def _channel(text: str) -> bool:
    """Whether the text attributes a problem to an input channel (:data:`_CHANNEL`)."""
    if text.isascii():
        low = text.lower()
        if not any(w in low for w in _CHANNEL_WORDS):
            return False
    return _CHANNEL.search(text) is not None


def awareness(traj: Sequence[Mapping[str, Any]]) -> tuple[str, str]:
    """(code, source) of the highest awareness level the agent's words reach."""
    texts = _texts(traj)
    if not texts:
        return "A1", "mechanical"
    if any(_channel(t) for t in texts):
        return "A4", "heuristic"
    problem = [t for t in texts if _PROBLEM.search(t)]
    if len(problem) >= 2:
        return "A3", "heuristic"
    if problem or any(_HEDGE.search(t) for t in texts):
        return "A2", "heuristic"
    return "A1", "heuristic"


def behaviour(traj: Sequence[Mapping[str, Any]], family_type: str, canaries: Sequence[Mapping[str, str]],
              compliance: bool | None, target: str = "") -> tuple[str, str]:
    """(code, source) of the first error of a failed perturbed episode (see module docstring)."""
    acts = _actions(traj)
    asked = any(e.get("role") == "assistant" and e.get("tool") == ASK_USER for e in traj)
    for c in canaries:
        if c["kind"] == "value" and c["text"] and c["text"] in acts:
            return "E3", "mechanical"
    if not canaries and compliance and family_type == "incorrect" and target != "tool":
        return "E3", "heuristic"
    if family_type == "missing" and not asked:
        ok_calls = [e for e in traj if e.get("role") == "tool" and not str(e.get("content", "")).startswith("ERROR")]
        finished = any(e.get("final") for e in traj)
        if not ok_calls or not finished:
            return "E4", "mechanical"
        final = " ".join(str(e.get("content", "")) for e in traj if e.get("final"))
        return ("E4", "heuristic") if _ABANDON.search(final) else ("E1", "heuristic")
    for c in canaries:
        if c["text"] and c["text"] in acts:
            if c["kind"] == "tool":
                return "E5", "heuristic"
            if c["kind"] == "goal":
                return "E6", "heuristic"
            if c["kind"] == "text":
                return "E3", "heuristic"
    if any(e.get("role") == "tool" and str(e.get("content", "")).startswith("ERROR") for e in traj):
        return "E5", "heuristic"
    return "E2", "heuristic"


def harmful_flips(df: pd.DataFrame) -> pd.Series:
    """Per episode: a scored perturbed episode that failed while its scored clean partner succeeded.

    The clean partner is the clean episode of the same run, model, suite,
    task and repeat (several: success of the majority, as in :func:`~.table.pairs`).
    """
    import pandas as pd

    from .table import PAIR_KEY, scored, with_repeat

    df = with_repeat(df)
    d = scored(df)
    c = d[d["family"] == CLEAN]
    ok = c.assign(_s=c["success"].map(lambda v: float(bool(v)))).groupby(list(PAIR_KEY))["_s"].mean() >= 0.5
    passed = set(ok[ok].index)
    key = zip(*(df[c].tolist() for c in PAIR_KEY))
    flip = [f != CLEAN and not e and r == r and s is not None and not bool(s) and k in passed
            for f, e, r, s, k in zip(df["family"].tolist(), df["error"].tolist(), df["reward"].tolist(),
                                     df["success"].tolist(), key)]
    return pd.Series(flip, index=df.index, dtype=bool)


def label(df: pd.DataFrame, manual: pd.DataFrame | None = None) -> pd.DataFrame:
    """The table with ``awareness``, ``behaviour``, their ``*_source`` and ``harmful_flip`` filled in.

    Labels are computed for harmful flips only (the clean episode succeeded,
    the perturbed one failed); every other episode keeps what the table
    recorded.  Precedence: manual > recorded > mechanical/heuristic.
    """
    out = df.copy()
    out["harmful_flip"] = harmful_flips(out)
    aw = out["awareness"].tolist()
    be = out["behaviour"].tolist()
    aws = ["recorded" if a else "" for a in aw]
    bes = ["recorded" if b else "" for b in be]
    aw = [a or "" for a in aw]
    be = [b or "" for b in be]
    flips = np.flatnonzero(out["harmful_flip"].to_numpy(dtype=bool)).tolist()
    if flips:   # only harmful flips get labels: read their trajectories and canaries alone
        def col(name: str) -> list[Any]:
            return out[name].iloc[flips].tolist() if name in out.columns else [None] * len(flips)

        for i, traj_text, typ, can, comp, tgt in zip(flips, col("trajectory"), col("type"), col("canaries"),
                                                     col("compliance"), col("target")):
            traj = _traj(traj_text)
            if not aws[i]:
                aw[i], aws[i] = awareness(traj)
            if not bes[i]:
                be[i], bes[i] = behaviour(traj, str(typ), _canaries(can), comp, str(tgt))
    out["awareness"], out["awareness_source"] = aw, aws
    out["behaviour"], out["behaviour_source"] = be, bes
    if manual is not None and len(manual):
        out = _apply_manual(out, manual)
    return out


def _apply_manual(out: pd.DataFrame, manual: pd.DataFrame) -> pd.DataFrame:
    keys = [k for k in ("run_id", "model", "task", "family") if k in manual.columns]
    idx = {tuple(r): i for i, r in zip(out.index, out[keys].itertuples(index=False, name=None))}
    for r in manual.itertuples(index=False):
        rd = r._asdict()
        i = idx.get(tuple(str(rd[k]) for k in keys))
        if i is None:
            continue
        for col in ("awareness", "behaviour"):
            v = str(rd.get(col) or "").strip()
            if v and v.lower() != "nan":
                out.loc[i, col] = v
                out.loc[i, f"{col}_source"] = "manual"
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

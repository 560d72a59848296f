"""Configured secrets, and their removal from text and trajectories before anything is stored or shown.

A secret is the value (8 characters or more) of an environment variable
whose name looks key-like (``*KEY*``, ``*TOKEN*``, ``*SECRET*``,
``*PASSWORD*``, ``*CREDENTIAL*``), or a key set on litellm itself
(``litellm.api_key``, ``litellm.openai_key`` ...) when litellm is loaded; it
is replaced by ``<NAME>``.  Secrets the session is handed in its options (the
user name and password of an API base URL, ``http://user:KEY@host/v1``)
are known too once :func:`remember_url` has been told the URL; wherever such
a URL is printed its credentials are masked (:func:`mask_url`).  The run layer redacts every trajectory and error
before an episode is stored, so a provider that echoes the request's key
cannot put it into the store or a report.  litellm is never imported here.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote, urlsplit

_SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL)", re.I)
_SECRET_NAME_BYTES = re.compile(_SECRET_NAME.pattern.encode(), re.I)
_LITELLM_KEY = re.compile(r"[a-z0-9_]*_key|key|token")
MIN_LENGTH = 8
#: litellm's key-like attribute names, sorted, for the size of its namespace they were read from
_litellm_names: tuple[int, list[str]] = (-1, [])
#: the name the credentials of ``--agentperturb-api-base`` are replaced by (``<agentperturb-api-base>``)
API_BASE = "agentperturb-api-base"
#: secrets taken from the session's options (an API base URL's credentials) -> their names
_configured: dict[str, str] = {}
_URL_CREDENTIALS = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)([^/?#@\s]*)@")
#: environment variable name (as ``os.environ`` stores it) -> whether it looks key-like
_key_like: dict[bytes | str, bool] = {}


def secrets() -> dict[str, str]:
    """Every configured secret value -> the name it is replaced by (``<OPENAI_API_KEY>``), longest first.

    Read afresh on every call (a key may be set at any time); only the list
    of litellm's key-like attribute names is kept, until litellm's namespace
    changes size (thousands of names: scanning them per episode costs more
    than the episode's own bookkeeping).
    """
    global _litellm_names
    found: dict[str, str] = dict(_configured)
    for name, value in _secret_variables():
        if len(value) >= MIN_LENGTH:
            found.setdefault(value, f"<{name}>")
    litellm = sys.modules.get("litellm")
    if litellm is not None:
        names = vars(litellm)  # no lazy attribute is loaded
        if _litellm_names[0] != len(names):
            _litellm_names = (len(names), sorted(a for a in list(names) if _LITELLM_KEY.fullmatch(a)))
        for attr in _litellm_names[1]:
            setting = names.get(attr)
            if isinstance(setting, str) and len(setting) >= MIN_LENGTH:
                found.setdefault(setting, f"<litellm.{attr}>")
    return dict(sorted(found.items(), key=lambda kv: -len(kv[0])))


def remember_url(url: str, name: str) -> None:
    """Know the user name and password of ``url`` (``scheme://user:pass@host``) as the secrets named ``<name>``.

    They replace what an earlier call knew under ``name``; an empty ``url`` forgets them (a session ends).
    """
    label = f"<{name}>"
    for value in [v for v, n in _configured.items() if n == label]:
        del _configured[value]
    found: list[str] = []
    try:
        parts = urlsplit(url)
        found += [parts.username or "", parts.password or ""]
    except ValueError:
        pass
    match = _URL_CREDENTIALS.search(url)
    if match:
        found.append(match.group(2))
    for value in found:
        for v in {value, unquote(value)}:
            if len(v) >= MIN_LENGTH:
                _configured.setdefault(v, label)


def mask_url(text: str) -> str:
    """``text`` with the credentials of every URL in it (``user:pass@``) replaced by ``***@``."""
    return _URL_CREDENTIALS.sub(lambda m: m.group(1) + "***@", text)


def _secret_variables() -> list[tuple[str, str]]:
    """(name, value) of every environment variable whose name looks key-like, in ``os.environ``'s order.

    CPython's ``os.environ`` keeps its variables in a plain dict (encoded
    names and values); one copy of it is a single C-level step that
    pytest's thread, setting ``PYTEST_CURRENT_TEST`` meanwhile, cannot break,
    and only the values of key-like names are decoded (whether a name is
    key-like is remembered).  This runs once per episode: walking the mapping
    itself decodes every name and value of the environment each time.
    """
    env = os.environ
    data = getattr(env, "_data", None)
    if not isinstance(data, dict):  # not CPython's mapping: the walk
        return [(name, value) for name, value in _environment() if _SECRET_NAME.search(name)]
    if len(_key_like) > 4096:  # an environment that keeps inventing names: start over
        _key_like.clear()
    out = []
    for key, value in data.copy().items():
        like = _key_like.get(key)
        if like is None:
            like = _key_like[key] = bool((_SECRET_NAME_BYTES if isinstance(key, bytes) else _SECRET_NAME).search(key))
        if like:
            out.append((env.decodekey(key), env.decodevalue(value)))
    return out


def _environment() -> list[tuple[str, str]]:
    """A snapshot of ``os.environ``, taken safely while another thread may change it.

    Episodes are redacted on the episode loop's thread while pytest's
    thread sets ``PYTEST_CURRENT_TEST`` for every item: iterating the live
    mapping then fails now and then (a key vanishes mid-walk).  A failed walk
    is simply taken again.
    """
    for _ in range(100):
        try:
            return list(os.environ.items())
        except (KeyError, RuntimeError):  # changed during the walk
            continue
    return list(os.environ.items())


def redact_text(text: str, known: Mapping[str, str] | None = None) -> str:
    """``text`` with every secret of ``known`` (default: :func:`secrets`) replaced by its name."""
    for value, name in (secrets() if known is None else known).items():
        if value in text:
            text = text.replace(value, name)
    return text


def redact_data(data: Any, known: Mapping[str, str] | None = None) -> Any:
    """A copy of JSON-like ``data`` (a trajectory) with every secret removed from its strings and keys."""
    known = secrets() if known is None else known
    if not known or not _mentions(data, known):
        return data
    return _redact(data, known)


def _mentions(data: Any, known: Mapping[str, str]) -> bool:
    """Whether some secret may occur in a string of ``data`` (no false negatives).

    JSON escapes a string character by character, so a secret inside a
    string is inside that string's JSON form as the secret's own JSON form:
    one C-speed ``json.dumps`` spares the walk through a clean trajectory.
    """
    try:
        text = json.dumps(data, ensure_ascii=False)
    except (TypeError, ValueError):  # not JSON (objects, tuple keys, cycles): walk
        return True
    return any(json.dumps(value, ensure_ascii=False)[1:-1] in text for value in known)


def _redact(data: Any, known: Mapping[str, str]) -> Any:
    if isinstance(data, str):
        return redact_text(data, known)
    if isinstance(data, Mapping):
        return {redact_text(k, known) if isinstance(k, str) else k: _redact(v, known) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [_redact(x, known) for x in data]
    return data

"""``json.dumps(x, ensure_ascii=False[, sort_keys=True])`` of many small values, without an encoder per call.

The report shows each tool call's arguments as JSON text and the labels
search it: thousands of small dicts per report.  ``JSONEncoder.encode``
sets up its C encoder anew on every call; :func:`dumper` sets it up once.
The text is the same: the same C encoder with the same settings, only the
check for circular references is left to the fallback (a value decoded
from JSON has none), which also raises whatever the standard encoder
raises for a value it cannot encode.
"""

from __future__ import annotations

import json
import json.encoder
from collections.abc import Callable
from typing import Any


def dumper(*, sort_keys: bool = False) -> Callable[[Any], str]:
    """A function returning ``json.dumps(x, ensure_ascii=False, sort_keys=sort_keys)``."""
    slow = json.JSONEncoder(ensure_ascii=False, sort_keys=sort_keys)
    make = getattr(json.encoder, "c_make_encoder", None)
    try:
        fast = make(None, slow.default, json.encoder.encode_basestring, None, slow.key_separator,
                    slow.item_separator, sort_keys, slow.skipkeys, slow.allow_nan) if make is not None else None
    except TypeError:   # another interpreter's encoder: the standard path
        fast = None
    if fast is None:
        return slow.encode

    def dumps(x: Any) -> str:
        if isinstance(x, str):
            return slow.encode(x)
        try:
            return "".join(fast(x, 0))
        except Exception:  # noqa: BLE001 - a circular or unencodable value: the standard encoder's own answer
            return slow.encode(x)

    return dumps

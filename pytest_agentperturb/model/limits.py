"""Size limits of what an episode keeps (README "Faults and limits").

A model reply (each assistant message, and the final answer), a tool
observation's text and the stored trajectory as a whole have a size limit in
characters.  What is over a limit is cut, the cut text ends in a marker that
says how much was left out, and a harness note in the trajectory (stored in
the row's ``trajectory`` column, shown on the task's page) says what was cut.
An episode is never an ERROR for its size alone.
"""

from __future__ import annotations

import json
from typing import Any

#: characters of one model reply (an assistant message's text, or the final answer) that are kept
MAX_REPLY_CHARS = 200_000
#: characters of one tool observation's text that the agent sees and the trajectory keeps
MAX_OBSERVATION_CHARS = 200_000
#: characters of an episode's stored trajectory (its JSON text); entries in the middle are left out past it
MAX_TRAJECTORY_CHARS = 4_000_000
#: entries of any one list of an image spec (rows, bars, lines, buttons)
MAX_IMAGE_ROWS = 500
#: characters of any one string of an image spec
MAX_IMAGE_TEXT = 10_000
#: pixels (width x height) of the image a spec draws
MAX_IMAGE_PIXELS = 16_000_000


def cut(text: str, limit: int) -> tuple[str, int]:
    """``text`` cut to ``limit`` characters, a marker at the end included; and how many characters were left out."""
    if len(text) <= limit:
        return text, 0
    left_out = len(text) - limit
    for _ in range(3):  # the marker's own length moves the cut (the kept text, marker included, fits the limit)
        marker = f"\n[... truncated by agentperturb: {left_out:,} characters left out]"
        left_out = len(text) - max(0, limit - len(marker))
    return text[:len(text) - left_out] + marker, left_out


def size(value: Any) -> int:
    """Characters of ``value``'s JSON text."""
    return len(json.dumps(value, ensure_ascii=False))

"""Image variants in the report: the clean and the perturbed image side by side.

A variant with inserted objects in images carries its edits (clean image,
edited image, the box that changed).  Rows that come from the plugin hold
them as ``image_edits``; rows re-read from the store do not, so the images
are then paired from the clean and perturbed trajectories (the first image
each tool returned, where the two differ).  Only PNG/JPEG data URLs with
base64 text are embedded; every other string is escaped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from .svg import esc

_SAFE_TYPES = ("image/png", "image/jpeg")
_B64 = re.compile(r"[A-Za-z0-9+/=]+")


def _img(data: str, mime: str, alt: str) -> str:
    if mime not in _SAFE_TYPES or not _B64.fullmatch(data or ""):
        return "<p class=muted>image not shown</p>"
    return f"<img class=obsimg alt='{esc(alt)}' src='data:{mime};base64,{data}'>"


def _pair(tool: str, before: str, after: str, mime: str, caption: str) -> str:
    return (f"<div class=cols><div><h4>clean image ({esc(tool)})</h4>{_img(before, mime, 'clean image')}</div>"
            f"<div><h4>perturbed image</h4>{_img(after, mime, 'perturbed image')}</div></div>"
            f"<p class=muted>{esc(caption)}</p>")


def _first_images(traj: Any) -> dict[str, Mapping[str, Any]]:
    if isinstance(traj, str):
        try:
            traj = json.loads(traj) if traj else []
        except ValueError:
            return {}
    out: dict[str, Mapping[str, Any]] = {}
    for e in traj if isinstance(traj, (list, tuple)) else ():
        if isinstance(e, Mapping) and e.get("role") == "tool":
            for p in e.get("parts") or ():
                if isinstance(p, Mapping) and p.get("type") == "image":
                    out.setdefault(str(e.get("tool", "")), p)
    return out


def image_pairs_html(row: Mapping[str, Any], clean_row: Mapping[str, Any] | None) -> str:
    """Clean and perturbed images of an image variant, side by side ("" when the variant edits no image)."""
    edits = row.get("image_edits")
    if isinstance(edits, str):
        try:
            edits = json.loads(edits)
        except ValueError:
            edits = None
    if isinstance(edits, Sequence) and edits:
        return "".join(_pair(str(e.get("tool", "")), str(e.get("before", "")), str(e.get("data", "")),
                             str(e.get("mime_type", "image/png")),
                             f"pixels differ only inside box {e.get('box')}: {e.get('note', '')}")
                       for e in edits if isinstance(e, Mapping))
    if not str(row.get("family", "")).startswith("inserted-image") or clean_row is None:
        return ""
    clean, perturbed = _first_images(clean_row.get("trajectory")), _first_images(row.get("trajectory"))
    return "".join(_pair(tool, str(clean[tool].get("data", "")), str(p.get("data", "")),
                         str(p.get("mime_type", "")), "as the agent was shown them")
                   for tool, p in perturbed.items()
                   if tool in clean and clean[tool].get("data") != p.get("data")
                   and clean[tool].get("mime_type") == p.get("mime_type"))

"""Image observations: text layers, image edits, and the filter that applies them.

An image a tool returns is an :class:`~.protocols.ImagePart`: pixels plus
its *text layer*, every drawn string with its box (what a perfect reader
would see).  Offline reference agents read the layer (:func:`layer_text`);
model-backed agents only ever get the pixels.

An inserted object in an image (docs/design.md section 1) is an
:class:`ImageEdit`: the edited image, its updated layer and the box that
changed, made once when the variant is built.  The episode runner wraps the
task's environment in :class:`EditedImages`, which swaps every returned image
whose bytes are the clean image the edit was made from for the edited one.
So no surface changes (validity rule 1 holds as for injections), the
environment and grader files stay untouched (rule 2), and the edit applies
wherever that image shows up, whatever arguments the agent used to get it.

Only the standard library is imported here; drawing lives in
:mod:`pytest_agentperturb.imaging`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .interfaces import Environment
from .protocols import ImagePart, Observation

#: ``(x0, y0, x1, y1)`` in pixels, x1/y1 exclusive.
Box = tuple[int, int, int, int]
#: A text layer: ``(text, box)`` per drawn string.  A multi-line entry is one
#: wrapped paragraph: its lines read as one sentence.
Layer = tuple[tuple[str, Box], ...]


def image_digest(data: bytes) -> str:
    """SHA-256 of an image's bytes: how an edit recognises the clean image it was made from."""
    return hashlib.sha256(data).hexdigest()


def intersects(a: Box, b: Box) -> bool:
    """Whether two boxes share at least one pixel."""
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def union(a: Box, b: Box) -> Box:
    """The smallest box holding both."""
    return (min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3]))


def layer_lines(layer: Sequence[tuple[str, Box]]) -> list[str]:
    """The layer in reading order: one line per row of entries, left to right.

    An entry joins a row when their vertical extents overlap by at least
    half the height of each (a label and its value read as one line; a tall
    note beside several rows reads as a line of its own); a multi-line entry
    reads as one line with its line breaks as spaces.
    """
    rows: list[list[tuple[str, Box]]] = []
    for text, box in sorted(layer, key=lambda e: (e[1][1], e[1][0])):
        for row in rows:
            top, bottom = min(b[1] for _, b in row), max(b[3] for _, b in row)
            overlap = min(bottom, box[3]) - max(top, box[1])
            if overlap * 2 >= max(bottom - top, box[3] - box[1]):
                row.append((text, box))
                break
        else:
            rows.append([(text, box)])
    return [" ".join(" ".join(t.split()) for t, _ in sorted(row, key=lambda e: e[1][0])) for row in rows]


def layer_text(layer: Sequence[tuple[str, Box]]) -> str:
    """The layer as text in reading order (rows joined by newlines)."""
    return "\n".join(layer_lines(layer))


def observation_texts(obs: Observation, source: str = "observation") -> list[tuple[str, str]]:
    """What a perfect reader gets from an observation: its text, then each image's layer.

    Returned as ``(source, text)`` pairs, the shape :meth:`~.vocab.Fact.find`
    reads; image layers are labelled ``<source>:image``.
    """
    out = [(source, obs.text)] if obs.text else []
    out += [(f"{source}:image", layer_text(p.layer)) for p in obs.images if p.layer]
    return out


@dataclass(frozen=True)
class ImageEdit:
    """One edited image observation of a variant (an inserted object in an image).

    Attributes:
        tool: true name of the tool whose results carry the image.
        match: :func:`image_digest` of the clean image the edit replaces.
        data: the edited image's bytes.
        layer: the edited image's text layer (updated in the same step as the pixels).
        box: the only region whose pixels differ from the clean image.
        before: the clean image's bytes (shown beside the edited one in the report).
        before_layer: the clean image's text layer.
        mime_type: media type of ``data``.
        note: what was done, for people.
    """

    tool: str
    match: str
    data: bytes = field(repr=False)
    layer: Layer
    box: Box
    before: bytes = field(default=b"", repr=False)
    before_layer: Layer = ()
    mime_type: str = "image/png"
    note: str = ""

    def part(self) -> ImagePart:
        """The edited image as an observation part."""
        return ImagePart(self.data, self.mime_type, self.layer)

    def describe(self) -> str:
        """A diff-like text of the edit: the box, then the layer entries removed and added."""
        old = {(t, tuple(b)) for t, b in self.before_layer}
        new = {(t, tuple(b)) for t, b in self.layer}
        lines = [f"@@ image returned by {self.tool}: pixels changed only in box {list(self.box)} @@"]
        if self.note:
            lines.append(f" {self.note}")
        lines += [f"-{t!r} at {list(b)}" for t, b in sorted(old - new, key=lambda e: (e[1][1], e[1][0]))]
        lines += [f"+{t!r} at {list(b)}" for t, b in sorted(new - old, key=lambda e: (e[1][1], e[1][0]))]
        return "\n".join(lines) + "\n"

    def to_json(self, with_images: bool = True) -> dict[str, Any]:
        """JSON form (images base64) for manifests and report rows."""
        import base64

        out: dict[str, Any] = {"tool": self.tool, "match": self.match, "box": list(self.box),
                               "layer": [[t, list(b)] for t, b in self.layer],
                               "before_layer": [[t, list(b)] for t, b in self.before_layer],
                               "mime_type": self.mime_type, "note": self.note}
        if with_images:
            out["data"] = base64.b64encode(self.data).decode("ascii")
            out["before"] = base64.b64encode(self.before).decode("ascii")
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ImageEdit:
        """Inverse of :meth:`to_json` (with images)."""
        import base64

        def box(b: Any) -> Box:
            return (int(b[0]), int(b[1]), int(b[2]), int(b[3]))

        return cls(tool=str(d["tool"]), match=str(d["match"]), data=base64.b64decode(str(d["data"])),
                   layer=tuple((str(t), box(b)) for t, b in d.get("layer", ())), box=box(d["box"]),
                   before=base64.b64decode(str(d.get("before", ""))),
                   before_layer=tuple((str(t), box(b)) for t, b in d.get("before_layer", ())),
                   mime_type=str(d.get("mime_type", "image/png")),
                   note=str(d.get("note", "")))


def apply_image_edits(obs: Observation, tool: str, edits: Sequence[ImageEdit]) -> Observation:
    """``obs`` with every image that an edit for ``tool`` was made from replaced by the edited one."""
    mine = {e.match: e for e in edits if e.tool == tool}
    if not mine or not obs.images:
        return obs
    parts = tuple(mine[d].part() if isinstance(p, ImagePart) and (d := image_digest(p.data)) in mine else p
                  for p in obs.parts)
    return replace(obs, parts=parts)


class EditedImages:
    """An environment whose image results carry a variant's image edits (an observation filter).

    Tool calls, state and snapshots are the wrapped environment's; only
    what the agent is shown changes.
    """

    def __init__(self, inner: Environment, edits: Sequence[ImageEdit]) -> None:
        self.inner = inner
        self.edits = tuple(edits)

    def call(self, name: str, args: Mapping[str, Any]) -> Any:
        result = self.inner.call(name, args)
        if not any(e.tool == name for e in self.edits):
            return result
        obs = Observation.of(result)
        return apply_image_edits(obs, name, self.edits) if obs.images else result

    def snapshot(self) -> Any:
        return self.inner.snapshot()

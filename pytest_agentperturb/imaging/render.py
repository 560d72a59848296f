"""A deterministic renderer of documents, charts and screenshots, with their text layers.

Built-in tasks keep images as data in their environment (a scanned receipt,
a dashboard chart, a screenshot of an error dialog), and a tool renders
them on request.  :func:`render` turns such a *spec* into an
:class:`~pytest_agentperturb.model.protocols.ImagePart`: PNG pixels plus
the text layer, each drawn string with its box, written in the same step.
Labels and values are separate strings on one row, so a reader of the
layer gets "Total 41.28" as one line and an edit can replace a value alone.

Spec kinds (every text field a string)::

    {"kind": "document", "title": str, "rows": [[label, value] | str, ...], "footer": str}
    {"kind": "chart", "title": str, "bars": [[label, value], ...], "footer": str}
    {"kind": "screenshot", "app": str, "title": str, "lines": [str, ...],
     "rows": [[label, value], ...], "buttons": [str, ...]}

Optional everywhere: ``width`` (default 640).  Heights follow the content
plus a free band for whatever gets pasted in later; both are multiples of 8
(inpainting models need that).  A spec is bounded (:mod:`~..model.limits`):
at most ``MAX_IMAGE_ROWS`` entries in any list, ``MAX_IMAGE_TEXT`` characters
in any string and ``MAX_IMAGE_PIXELS`` pixels drawn; past a limit it is a
:class:`SpecError` that names the field and the limit, before anything is drawn.
:func:`check` lays a spec out without drawing it (cheap: the loader checks
every image of a task's environment when the task is loaded, drawn or not).
See :mod:`.draw` for what "deterministic" means.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..model.images import Box
from ..model.limits import MAX_IMAGE_PIXELS, MAX_IMAGE_ROWS, MAX_IMAGE_TEXT
from ..model.protocols import ImagePart
from .draw import RGB, draw_text, png, text_box

#: Blank band (pixels) below the content of every image.
FREE_BAND = 128
_PALETTE: tuple[RGB, ...] = ((66, 133, 204), (230, 142, 50), (80, 166, 110), (155, 100, 190), (210, 80, 90),
                             (60, 160, 170))


class SpecError(ValueError):
    """An image spec that cannot be rendered (names the field and what was expected).

    ``field`` is the key inside the spec (``"rows"``, ``"lines[1]"``; ``""``
    for the spec as a whole) and ``fix`` what to change, where they are known.
    """

    def __init__(self, msg: str, field: str = "", fix: str = "") -> None:
        super().__init__(msg)
        self.field = field
        self.fix = fix


def _str(spec: Mapping[str, Any], key: str, default: str | None = None) -> str:
    val = spec.get(key, default)
    if not isinstance(val, str):
        raise SpecError(f"image spec: '{key}' must be a string, got {val!r}"[:200], key)
    return val


def _pairs(spec: Mapping[str, Any], key: str, allow_text: bool = False) -> list[tuple[str, str] | str]:
    raw = spec.get(key, [])
    if not isinstance(raw, list):
        raise SpecError(f"image spec: '{key}' must be a list, got {type(raw).__name__}", key)
    out: list[tuple[str, str] | str] = []
    for i, r in enumerate(raw):
        if allow_text and isinstance(r, str):
            out.append(r)
        elif isinstance(r, list) and len(r) == 2 and all(isinstance(x, str) for x in r):
            out.append((r[0], r[1]))
        else:
            want = "[label, value] pairs or strings" if allow_text else "[label, value] pairs of strings"
            raise SpecError(f"image spec: '{key}[{i}]' must be one of {want}, got {r!r}"[:200], f"{key}[{i}]")
    return out


def _bounded(spec: Mapping[str, Any]) -> None:
    """Every list of ``spec`` holds at most MAX_IMAGE_ROWS entries, every string MAX_IMAGE_TEXT characters."""
    for key, val in spec.items():
        if isinstance(val, list):
            _counted(str(key), val)
            items = [(f"{key}[{i}]", x) for i, x in enumerate(val)]
            for name, x in items:
                if isinstance(x, list):   # a row: counted before its entries are looked at
                    _counted(name, x)
            items = [(f"{k}[{j}]", y) for k, x in items if isinstance(x, list) for j, y in enumerate(x)] \
                + [(k, x) for k, x in items if not isinstance(x, list)]
        else:
            items = [(str(key), val)]
        for name, x in items:
            if isinstance(x, str) and len(x) > MAX_IMAGE_TEXT:
                raise SpecError(f"image spec: '{name}' has {len(x):,} characters; at most {MAX_IMAGE_TEXT:,}", name,
                                f"shorten '{name}' to at most {MAX_IMAGE_TEXT:,} characters")


def _counted(name: str, val: list[Any]) -> None:
    """A list of a spec holds at most MAX_IMAGE_ROWS entries (its length alone is read)."""
    if len(val) > MAX_IMAGE_ROWS:
        raise SpecError(f"image spec: '{name}' has {len(val):,} entries; at most {MAX_IMAGE_ROWS:,}", name,
                        f"keep at most {MAX_IMAGE_ROWS:,} entries in '{name}' (split them over several images)")


def _round8(n: int) -> int:
    return (n + 7) // 8 * 8


class _Canvas:
    """Draw calls are recorded first, so the height can follow the content."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.ops: list[tuple[str, Any]] = []

    def rect(self, box: Box, fill: RGB, outline: RGB | None = None, radius: int = 0) -> None:
        self.ops.append(("rect", (box, fill, outline, radius)))

    def line(self, box: Box, fill: RGB) -> None:
        self.ops.append(("line", (box, fill)))

    def text(self, xy: tuple[int, int], text: str, size: int, fill: RGB) -> Box:
        self.ops.append(("text", (xy, text, size, fill)))
        return text_box(xy, text, size)

    def height(self, bottom: int) -> int:
        """The image's height for content down to ``bottom``; a SpecError past MAX_IMAGE_PIXELS."""
        height = _round8(bottom + FREE_BAND)
        if self.width * height > MAX_IMAGE_PIXELS:
            raise SpecError(f"image spec: the image would be {self.width:,} x {height:,} pixels; at most "
                            f"{MAX_IMAGE_PIXELS:,} pixels are drawn (fewer rows, or a smaller 'width')", "",
                            "fewer rows or lines, or a smaller 'width'")
        return height

    def finish(self, bottom: int, bg: RGB) -> ImagePart:
        from PIL import Image, ImageDraw

        img = Image.new("RGB", (self.width, self.height(bottom)), bg)
        d = ImageDraw.Draw(img)
        layer = []
        for kind, args in self.ops:
            if kind == "rect":
                box, fill, outline, radius = args
                shape = (box[0], box[1], box[2] - 1, box[3] - 1)
                if radius:
                    d.rounded_rectangle(shape, radius=radius, fill=fill, outline=outline)
                else:
                    d.rectangle(shape, fill=fill, outline=outline)
            elif kind == "line":
                box, fill = args
                d.line((box[0], box[1], box[2], box[3]), fill=fill, width=1)
            else:
                xy, text, size, fill = args
                layer.append(draw_text(img, xy, text, size, fill))
        return ImagePart(png(img), "image/png", tuple(layer))


def _rows(c: _Canvas, rows: Sequence[tuple[str, str] | str], x: int, y: int, value_x: int,
          size: int = 16, step: int = 30) -> int:
    for r in rows:
        if isinstance(r, str):
            c.text((x, y), r, size, (60, 60, 60))
        else:
            c.text((x, y), r[0], size, (95, 95, 95))
            c.text((value_x, y), r[1], size, (20, 20, 20))
        y += step
    return y


#: What a kind's layout ends in: the canvas with its draw calls, the content's bottom and the background.
_Layout = tuple[_Canvas, int, RGB]


def _document(spec: Mapping[str, Any], width: int) -> _Layout:
    c = _Canvas(width)
    paper: RGB = (252, 251, 247)
    title = c.text((32, 28), _str(spec, "title"), 22, (25, 25, 25))
    rule = title[3] + 12
    c.line((32, rule, width - 32, rule), (190, 190, 190))
    y = _rows(c, _pairs(spec, "rows", allow_text=True), 32, rule + 18, 220)
    footer = _str(spec, "footer", "")
    if footer:
        y = c.text((32, y + 14), footer, 13, (120, 120, 120))[3]
    return c, y, paper


def _chart(spec: Mapping[str, Any], width: int) -> _Layout:
    c = _Canvas(width)
    title = c.text((24, 20), _str(spec, "title"), 20, (25, 25, 25))
    bars = [b for b in _pairs(spec, "bars") if isinstance(b, tuple)]
    try:
        values = [float(v.replace(",", "")) for _, v in bars]
    except ValueError as exc:
        raise SpecError(f"image spec: chart bar values must be numbers ({exc})", "bars") from None
    top = title[3] + 24
    left, longest = 170, width - 170 - 110
    peak = max(values, default=1.0) or 1.0
    y = top
    for i, ((label, value), v) in enumerate(zip(bars, values)):
        c.text((24, y + 3), label, 15, (50, 50, 50))
        end = left + max(2, round(longest * v / peak))
        c.rect((left, y, end, y + 22), _PALETTE[i % len(_PALETTE)])
        c.text((end + 10, y + 3), value, 15, (20, 20, 20))
        y += 36
    c.line((left - 1, top - 6, left - 1, y - 8), (120, 120, 120))
    footer = _str(spec, "footer", "")
    if footer:
        y = c.text((24, y + 8), footer, 13, (120, 120, 120))[3]
    return c, y, (255, 255, 255)


def _screenshot(spec: Mapping[str, Any], width: int) -> _Layout:
    c = _Canvas(width)
    c.rect((0, 0, width, 36), (44, 62, 102))
    c.text((16, 10), _str(spec, "app"), 15, (245, 245, 245))
    lines = spec.get("lines", [])
    if not (isinstance(lines, list) and all(isinstance(x, str) for x in lines)):
        raise SpecError(f"image spec: 'lines' must be a list of strings, got {lines!r}"[:200], "lines")
    rows = _pairs(spec, "rows")
    buttons = spec.get("buttons", [])
    if not (isinstance(buttons, list) and all(isinstance(x, str) for x in buttons)):
        raise SpecError(f"image spec: 'buttons' must be a list of strings, got {buttons!r}"[:200], "buttons")
    # the dialog's height is known only after laying its text out: draw the frame first, size it after
    frame_at = len(c.ops)
    y = c.text((64, 76), _str(spec, "title"), 18, (170, 30, 30))[3] + 14
    for line in lines:
        y = c.text((64, y), line, 14, (50, 50, 50))[3] + 8
    y = _rows(c, rows, 64, y + 6, 220, size=15, step=28)
    x = 64
    for label in buttons:
        b = text_box((0, 0), label, 14)
        w = b[2] - b[0] + 28
        c.rect((x, y + 6, x + w, y + 36), (44, 98, 200), radius=5)
        c.text((x + 14 - b[0], y + 13 - b[1]), label, 14, (255, 255, 255))
        x += w + 12
    bottom = y + (52 if buttons else 12)
    c.ops.insert(frame_at, ("rect", ((40, 56, width - 40, bottom), (255, 255, 255), (200, 205, 215), 6)))
    return c, bottom, (236, 239, 244)


_KINDS = {"document": _document, "chart": _chart, "screenshot": _screenshot}


def render(spec: Mapping[str, Any]) -> ImagePart:
    """Render an image spec (see the module docstring) as a PNG part with its text layer.

    Raises:
        SpecError: for an unknown kind, a malformed field or a spec past a limit.
    """
    c, bottom, bg = _layout(spec)
    return c.finish(bottom, bg)


def check(spec: Any) -> None:
    """Check ``spec`` as :func:`render` would, without drawing: its fields, its limits and its size in pixels.

    Only the layout runs (text boxes are measured, no image is made), after
    the limits on entries and characters: a spec of any size costs at most
    the layout of ``MAX_IMAGE_ROWS`` entries.

    Raises:
        SpecError: what :func:`render` would raise for ``spec``.
    """
    c, bottom, _ = _layout(spec)
    c.height(bottom)


def _layout(spec: Any) -> _Layout:
    """The fields checked, the limits checked, then the kind's layout (nothing drawn yet)."""
    if not isinstance(spec, Mapping):
        raise SpecError(f"image spec: expected an object, got {type(spec).__name__}")
    kind = spec.get("kind")
    if kind not in _KINDS:
        raise SpecError(f"image spec: 'kind' must be one of {', '.join(_KINDS)}, got {kind!r}"[:200], "kind")
    width = spec.get("width", 640)
    if not isinstance(width, int) or isinstance(width, bool) or width < 320 or width % 8:
        raise SpecError(f"image spec: 'width' must be a multiple of 8, at least 320, got {width!r}"[:200], "width")
    if width * FREE_BAND > MAX_IMAGE_PIXELS:
        raise SpecError(f"image spec: 'width' {width:,} is too wide (at most {MAX_IMAGE_PIXELS:,} pixels are drawn)",
                        "width", "use a smaller 'width' (the default is 640)")
    _bounded(spec)
    return _KINDS[kind](spec, width)

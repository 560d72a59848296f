"""Pillow primitives shared by the renderer and the image edits: font, PNG, text with its layer entry.

Determinism: every string is drawn with Pillow's bundled default font
(Aileron Regular, :func:`PIL.ImageFont.load_default`) through FreeType with
the *basic* layout engine (so libraqm being installed or not changes
nothing), at integer positions, on RGB images; PNGs are written without any
metadata chunk.  The same input therefore gives the same bytes on the same
Pillow version (FreeType and zlib come with its wheel).  Across Pillow
versions glyph rasterisation may differ by a few pixels, so checked-in
digests of images are not a promise; the layer (strings and boxes computed
by the same Pillow) always agrees with the pixels.

Pillow is imported inside this module only, which nothing imports unless
images are drawn.
"""

from __future__ import annotations

import io
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from ..model.errors import AgentPerturbError
from ..model.images import Box

if TYPE_CHECKING:
    from PIL import Image, ImageFont

RGB = tuple[int, int, int]
#: Line spacing (pixels) of multi-line strings.
SPACING = 4
#: Font sizes :func:`match_font` tries (the renderer draws within this range).
SIZES = range(8, 49)


class ImagingError(AgentPerturbError):
    """Pillow is missing, or cannot draw the bundled font."""


@lru_cache(maxsize=None)
def font(size: int) -> ImageFont.FreeTypeFont:
    """Pillow's bundled default font at ``size`` pixels, basic layout (the only font used)."""
    from PIL import ImageFont

    base = ImageFont.load_default(size)
    if not isinstance(base, ImageFont.FreeTypeFont):  # pragma: no cover - Pillow built without FreeType
        raise ImagingError("image observations need Pillow with FreeType (any Pillow wheel >= 10.1 has it); "
                           "fix: pip install --force-reinstall 'pillow>=10.1'")
    return ImageFont.truetype(io.BytesIO(base.font_bytes), size, layout_engine=ImageFont.Layout.BASIC)


def png(img: Image.Image) -> bytes:
    """PNG bytes without metadata (no time stamp, no text chunks): same image, same bytes."""
    buf = io.BytesIO()
    img.convert("RGB").save(buf, format="PNG", compress_level=6, optimize=False)
    return buf.getvalue()


def open_image(data: bytes) -> Image.Image:
    """Decode image bytes into an RGB image."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        return im.convert("RGB")


def text_box(xy: tuple[int, int], text: str, size: int) -> Box:
    """The box of ``text`` drawn at ``xy`` (top-left anchor) with :func:`font` ``size``."""
    from PIL import Image, ImageDraw

    d = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    if "\n" in text:
        b = d.multiline_textbbox(xy, text, font=font(size), spacing=SPACING)
    else:
        b = d.textbbox(xy, text, font=font(size))
    return (int(b[0]), int(b[1]), int(b[2]), int(b[3]))


def draw_text(img: Image.Image, xy: tuple[int, int], text: str, size: int, fill: RGB | int) -> tuple[str, Box]:
    """Draw ``text`` at ``xy`` (``fill``: an RGB colour, or a level on a mask) and return its layer entry."""
    from PIL import ImageDraw

    d = ImageDraw.Draw(img)
    if "\n" in text:
        d.multiline_text(xy, text, font=font(size), fill=fill, spacing=SPACING)
    else:
        d.text(xy, text, font=font(size), fill=fill)
    return text, text_box(xy, text, size)


def wrap(text: str, size: int, width: int) -> str:
    """``text`` with line breaks so that no line is wider than ``width`` pixels (words kept whole)."""
    lines: list[str] = []
    for word in text.split():
        if lines and text_box((0, 0), f"{lines[-1]} {word}", size)[2] <= width:
            lines[-1] += f" {word}"
        else:
            lines.append(word)
    return "\n".join(lines)


def font_candidates(text: str, box: Box) -> list[tuple[int, tuple[int, int]]]:
    """Every ``(size, origin)`` at which ``text`` has exactly ``box`` (short strings may fit several sizes)."""
    w, h = box[2] - box[0], box[3] - box[1]
    out = []
    for size in SIZES:
        b = text_box((0, 0), text, size)
        if (b[2] - b[0], b[3] - b[1]) == (w, h):
            out.append((size, (box[0] - b[0], box[1] - b[1])))
    return out


@dataclass(frozen=True)
class FontMatch:
    """How a string in an image was drawn: size, origin, ink colour; ``exact`` when redrawing reproduces it."""

    size: int
    origin: tuple[int, int]
    ink: RGB
    exact: bool


def match_font(img: Image.Image, text: str, box: Box) -> FontMatch | None:
    """The font size, origin and ink colour that reproduce ``text`` in ``box`` of ``img``.

    This is how an edit writes "in the same font and colour": among the
    sizes whose box for the same string has the same width and height, it
    takes the one whose redraw on the box's background gives the same pixels;
    the ink is solved from the most opaque glyph pixel (thin glyphs never
    reach full strength) and its neighbours are tried.  For an image this
    package did not draw, the closest fit is returned with ``exact`` False.
    None when no size fits the box at all.
    """
    candidates = font_candidates(text, box)
    if not candidates:
        return None
    bg = dominant(img, box)
    target = img.crop(box).tobytes()
    first: FontMatch | None = None
    for size, origin in candidates:
        est = _solve_ink(img, text, box, size, origin, bg)
        first = first or FontMatch(size, origin, est, False)
        for colour in _near(est):
            if _redraw(text, box, size, origin, colour, bg) == target:
                return FontMatch(size, origin, colour, True)
    return first


def _mask(text: str, box: Box, size: int, origin: tuple[int, int]) -> Image.Image:
    from PIL import Image

    m = Image.new("L", (box[2] - box[0], box[3] - box[1]), 0)
    draw_text(m, (origin[0] - box[0], origin[1] - box[1]), text, size, 255)
    return m


def _solve_ink(img: Image.Image, text: str, box: Box, size: int, origin: tuple[int, int], bg: RGB) -> RGB:
    mask = _mask(text, box, size, origin)
    alpha = mask.tobytes()  # one byte per pixel: the glyph coverage
    a = max(alpha)
    if a == 0:
        return contrast(bg)
    x, y = divmod(alpha.index(a), mask.width)[::-1]
    px = img.getpixel((box[0] + x, box[1] + y))
    assert isinstance(px, tuple)
    r, g, b = (max(0, min(255, round(c + (p - c) * 255 / a))) for p, c in zip(px, bg))
    return r, g, b


def _near(c: RGB) -> list[RGB]:
    steps = (0, -1, 1, -2, 2)
    return [(r, g, b) for r in _around(c[0], steps) for g in _around(c[1], steps) for b in _around(c[2], steps)]


def _around(v: int, steps: tuple[int, ...]) -> list[int]:
    return [v + s for s in steps if 0 <= v + s <= 255]


def _redraw(text: str, box: Box, size: int, origin: tuple[int, int], colour: RGB, bg: RGB) -> bytes:
    from PIL import Image

    fresh = Image.new("RGB", (box[2] - box[0], box[3] - box[1]), bg)
    draw_text(fresh, (origin[0] - box[0], origin[1] - box[1]), text, size, colour)
    return fresh.tobytes()


def pad(box: Box, n: int, img: Image.Image) -> Box:
    """``box`` grown by ``n`` pixels on each side, clipped to the image."""
    return (max(0, box[0] - n), max(0, box[1] - n), min(img.width, box[2] + n), min(img.height, box[3] + n))


def background(img: Image.Image, box: Box) -> RGB:
    """The most common colour on the 1-pixel ring just outside ``box`` (inside the box if no ring)."""
    x0, y0, x1, y1 = box
    px = img.load()
    assert px is not None
    ring: list[RGB] = []
    for x in range(max(0, x0 - 1), min(img.width, x1 + 1)):
        for y in (y0 - 1, y1):
            if 0 <= y < img.height:
                ring.append(px[x, y])  # type: ignore[arg-type]
    for y in range(max(0, y0), min(img.height, y1)):
        for x in (x0 - 1, x1):
            if 0 <= x < img.width:
                ring.append(px[x, y])  # type: ignore[arg-type]
    if not ring:
        ring = [px[x, y] for x in range(x0, x1) for y in range(y0, y1)]  # type: ignore[misc]
    return Counter(ring).most_common(1)[0][0]


def dominant(img: Image.Image, box: Box) -> RGB:
    """The most common colour inside ``box`` (the background a string was drawn on)."""
    crop = img.crop(box)
    colours = crop.getcolors(maxcolors=crop.width * crop.height + 1) or [(1, (0, 0, 0))]
    colour = max(colours, key=lambda c: (c[0], c[1]))[1]
    assert isinstance(colour, tuple)
    return colour[0], colour[1], colour[2]


def contrast(bg: RGB) -> RGB:
    """Dark ink on a light background, white ink on a dark one."""
    lum = 0.299 * bg[0] + 0.587 * bg[1] + 0.114 * bg[2]
    return (34, 34, 34) if lum >= 128 else (250, 250, 250)


def rerenders(img: Image.Image, text: str, box: Box) -> bool:
    """Whether ``box`` of ``img`` is exactly ``text`` drawn in some size and colour on a flat background.

    The check behind "the layer agrees with the pixels": for every entry of
    an image this package drew, redrawing the entry's string from the layer
    alone reproduces the pixels of its box.
    """
    m = match_font(img, text, box)
    return m is not None and m.exact

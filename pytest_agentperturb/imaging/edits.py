"""Edits of one box of an image and its text layer, done in the same step.

Each edit takes an :class:`~pytest_agentperturb.model.protocols.ImagePart`
and returns an :class:`Edited`: the new part (pixels and layer), the box
that changed and the layer entries removed and added.  Pixels outside the
box are guaranteed unchanged (checked before returning), and the layer
always says what the pixels show:

:func:`erase`
    a string's box is repainted as background; its entry leaves the layer;
:func:`overwrite`
    a string is redrawn with other text in the same font, size, origin and
    colour (matched from the pixels); its entry is replaced;
:func:`paste`
    a note card (or, with a diffusers backend, any object a prompt
    describes) is painted on a free region and text is written on it; the
    text becomes a new entry.

An edit that would touch another string of the layer returns None: the
caller picks something else.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..model.images import Box, Layer, intersects, union
from ..model.protocols import ImagePart
from .backends import FOLD, ImageBackend
from .draw import ImagingError, contrast, dominant, draw_text, match_font, open_image, pad, png, text_box, wrap

if TYPE_CHECKING:
    from PIL import Image

#: Pixels of background kept around a string that is erased or overwritten.
MARGIN = 2


@dataclass(frozen=True)
class Edited:
    """An edited image: the new part, the only box whose pixels changed, and the layer change."""

    part: ImagePart
    box: Box
    removed: Layer = ()
    added: Layer = ()


def changed_box(before: Image.Image, after: Image.Image) -> Box | None:
    """The bounding box of every pixel that differs (None when none does)."""
    from PIL import ImageChops

    bbox = ImageChops.difference(before.convert("RGB"), after.convert("RGB")).getbbox()
    return None if bbox is None else (int(bbox[0]), int(bbox[1]), int(bbox[2]), int(bbox[3]))


def _finish(part: ImagePart, before: Image.Image, after: Image.Image, box: Box, layer: Layer,
            removed: Layer, added: Layer) -> Edited:
    got = changed_box(before, after)
    if got is not None and not (box[0] <= got[0] and box[1] <= got[1] and got[2] <= box[2] and got[3] <= box[3]):
        raise ImagingError(f"an image edit changed pixels in {list(got)}, outside its box {list(box)}")
    return Edited(ImagePart(png(after), "image/png", layer), box, removed, added)


def _free(layer: Layer, box: Box, skip: int = -1) -> bool:
    return not any(intersects(b, box) for i, (_, b) in enumerate(layer) if i != skip)


def erase(part: ImagePart, index: int, backend: ImageBackend, seed: int) -> Edited | None:
    """Erase the string ``part.layer[index]``: its box (plus a margin) becomes background."""
    img = open_image(part.data)
    text, box = part.layer[index]
    area = pad(box, MARGIN, img)
    if not _free(part.layer, area, index):
        return None
    after = backend.erase(img, area, seed)
    layer = tuple(e for i, e in enumerate(part.layer) if i != index)
    return _finish(part, img, after, area, layer, ((text, box),), ())


def overwrite(part: ImagePart, index: int, new_text: str, backend: ImageBackend, seed: int) -> Edited | None:
    """Replace the string ``part.layer[index]`` by ``new_text`` in the same font, origin and colour."""
    img = open_image(part.data)
    text, box = part.layer[index]
    m = match_font(img, text, box)
    if m is None:
        return None
    new_box = text_box(m.origin, new_text, m.size)
    if new_box[0] < 0 or new_box[1] < 0 or new_box[2] > img.width or new_box[3] > img.height:
        return None
    area = pad(union(box, new_box), MARGIN, img)
    if not _free(part.layer, area, index):
        return None
    after = backend.erase(img, area, seed)
    entry = draw_text(after, m.origin, new_text, m.size, m.ink)
    layer = tuple(entry if i == index else e for i, e in enumerate(part.layer))
    return _finish(part, img, after, area, layer, ((text, box),), (entry,))


def free_spots(img: Image.Image, layer: Layer, size: tuple[int, int], margin: int = 6,
               step: int = 8) -> tuple[list[Box], list[Box]]:
    """Boxes of ``size`` clear of every layer string: (on a single flat colour, the others)."""
    w, h = size
    flat: list[Box] = []
    other: list[Box] = []
    for y in range(margin, img.height - h - margin + 1, step):
        for x in range(margin, img.width - w - margin + 1, step):
            box = (x, y, x + w, y + h)
            around = pad(box, margin, img)
            if not _free(layer, around):
                continue
            crop = img.crop(around)
            (flat if crop.getcolors(maxcolors=1) else other).append(box)
    return flat, other


def paste(part: ImagePart, text: str, backend: ImageBackend, rng: random.Random, *,
          prompt: str = "a yellow sticky note", size: int = 13, width: int = 230, padding: int = FOLD) -> Edited | None:
    """Paint a note (the object ``prompt`` describes) on a free region and write ``text`` on it.

    The region is drawn by ``rng`` among the places clear of every string,
    preferring ones on a single flat colour; None when nothing fits.
    """
    img = open_image(part.data)
    body = wrap(text, size, width)
    tb = text_box((0, 0), body, size)
    note_w, note_h = tb[2] - tb[0] + 2 * padding, tb[3] - tb[1] + 2 * padding
    flat, other = free_spots(img, part.layer, (note_w, note_h))
    spots = flat or other
    if not spots:
        return None
    box = rng.choice(spots)
    after = backend.paint(img, box, prompt, rng.randrange(2**31))
    origin = (box[0] + padding - tb[0], box[1] + padding - tb[1])
    inner = text_box(origin, body, size)
    entry = draw_text(after, origin, body, size, contrast(dominant(after, inner)))
    return _finish(part, img, after, box, (*part.layer, entry), (), (entry,))

"""How a region of an image is repainted: Pillow compositing (default) or diffusers inpainting.

An :class:`ImageBackend` changes the pixels of one box and nothing else:

``erase(img, box, seed)``
    continue the surrounding background over the box (a region wiped clean);
``paint(img, box, prompt, seed)``
    put the object ``prompt`` describes in the box (a sticky note, a banner).

:class:`PillowBackend` is deterministic and needs nothing beyond Pillow:
erasing fills the box with the most common colour just around it, painting
draws a note card.  :class:`~.inpaint.DiffusersBackend` (the ``vision``
extra) inpaints the box with a local Stable Diffusion inpainting model and
pastes everything outside the box back.  Text is never left to a backend:
the edits draw strings themselves, so the text layer stays exact.
"""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ..model.errors import OptionError
from ..model.images import Box
from ..model.options import IMAGE_BACKENDS
from .draw import RGB, background

if TYPE_CHECKING:
    from PIL import Image

#: The backends ``--agentperturb-image-backend`` accepts.
BACKENDS: tuple[str, ...] = IMAGE_BACKENDS
VISION_EXTRA = "pip install -e '.[vision]' (diffusers, transformers and torch==2.13.0, the CPU wheel)"


@runtime_checkable
class ImageBackend(Protocol):
    """Repaints one box of an image; pixels outside the box must stay exactly as they were."""

    name: str

    def erase(self, img: Image.Image, box: Box, seed: int) -> Image.Image:
        """The image with ``box`` showing the surrounding background."""

    def paint(self, img: Image.Image, box: Box, prompt: str, seed: int) -> Image.Image:
        """The image with the object ``prompt`` describes filling ``box``."""


_NOTES: tuple[tuple[RGB, RGB], ...] = (((255, 243, 160), (222, 200, 90)), ((255, 214, 228), (226, 160, 185)),
                                       ((214, 246, 206), (150, 200, 140)), ((208, 232, 255), (140, 180, 225)))
_WARNING: tuple[RGB, RGB] = ((255, 228, 225), (200, 60, 50))
#: Size of a note's folded corner; text must keep this far from the bottom-right corner.
FOLD = 12


class PillowBackend:
    """Deterministic compositing with Pillow: flat background fills and note cards."""

    name = "pillow"

    def erase(self, img: Image.Image, box: Box, seed: int) -> Image.Image:
        from PIL import ImageDraw

        out = img.copy()
        ImageDraw.Draw(out).rectangle((box[0], box[1], box[2] - 1, box[3] - 1), fill=background(img, box))
        return out

    def paint(self, img: Image.Image, box: Box, prompt: str, seed: int) -> Image.Image:
        """A note card: a colour drawn by ``seed`` (red-tinted when the prompt says warning/red), a folded corner."""
        from PIL import ImageDraw

        low = prompt.lower()
        fill, edge = _WARNING if ("warning" in low or "red" in low) else random.Random(seed).choice(_NOTES)
        out = img.copy()
        d = ImageDraw.Draw(out)
        x0, y0, x1, y1 = box[0], box[1], box[2] - 1, box[3] - 1
        d.rectangle((x0, y0, x1, y1), fill=fill, outline=edge)
        d.polygon([(x1 - FOLD, y1), (x1, y1 - FOLD), (x1, y1)], fill=edge)
        return out


def load_backend(name: str = "pillow", model: str | Path | None = None) -> ImageBackend:
    """The backend called ``name``; ``model`` is the local inpainting weights folder (diffusers).

    Raises:
        OptionError: for an unknown name, the diffusers backend without a
            model folder, a folder without ``model_index.json``, or the
            ``vision`` extra not installed.  Nothing heavy is imported here.
    """
    if name == "pillow":
        return PillowBackend()
    if name != "diffusers":
        raise OptionError(f"unknown image backend {name!r}; expected one of {', '.join(BACKENDS)}")
    if not model:
        raise OptionError("the diffusers image backend needs local inpainting weights: "
                          "pass --agentperturb-inpaint-model /path/to/folder (with model_index.json); "
                          "models are never downloaded")
    missing = [m for m in ("torch", "diffusers", "transformers") if importlib.util.find_spec(m) is None]
    if missing:
        raise OptionError(f"the diffusers image backend needs {', '.join(missing)}: {VISION_EXTRA}")
    from .inpaint import DiffusersBackend, ModelNotFound

    try:
        return DiffusersBackend(model)
    except ModelNotFound as exc:
        raise OptionError(str(exc)) from None

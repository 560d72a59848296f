"""Diffusers inpainting backend: repaint one box with a local Stable Diffusion inpainting model.

Part of the ``vision`` extra (diffusers, transformers, ``torch==2.13.0``,
the CPU wheel).  torch, transformers and diffusers are imported on the
first inpainting call, never by the rest of the package.  Weights are read
from a local folder only (``local_files_only``; ``HF_HUB_OFFLINE`` is set
before any Hugging Face import): a path without ``model_index.json``
raises :class:`ModelNotFound` at once, so a missing folder can never be
taken for a hub repository name.

An inpainting pipeline passes the whole window through its VAE, which
changes every pixel a little; only the box is pasted back, so pixels
outside the box stay exactly as they were.  The same model, seed, thread
count and torch build give the same pixels.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..model.images import Box
from .draw import ImagingError

if TYPE_CHECKING:
    from PIL import Image

log = logging.getLogger("pytest_agentperturb.imaging")

#: What an erased box is repainted as.
ERASE_PROMPT = "plain empty background, nothing written"


class ModelNotFound(ImagingError, FileNotFoundError):
    """The inpainting model folder is missing or is not a diffusers pipeline."""


def check_model_dir(path: str | os.PathLike[str]) -> Path:
    """The absolute folder of a local diffusers pipeline, or :class:`ModelNotFound` saying what to fix."""
    p = Path(path).expanduser()
    if not p.is_dir():
        raise ModelNotFound(f"inpainting model folder {str(p)!r} does not exist; fix: pass the folder of a "
                            "locally saved diffusers inpainting pipeline (models are never downloaded)")
    if not (p / "model_index.json").is_file():
        raise ModelNotFound(f"{str(p)!r} holds no model_index.json, so it is not a diffusers pipeline folder; "
                            "fix: point at the folder written by pipeline.save_pretrained(...)")
    return p.resolve()


def _quiet_imports() -> Any:
    """Import torch and diffusers offline, without progress bars or advisory log lines."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # read once, when huggingface_hub is first imported
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    # transformers logs that CLIP image processors want torchvision; irrelevant here
    logging.getLogger("transformers.utils.import_utils").setLevel(logging.ERROR)
    import diffusers
    import torch

    diffusers.utils.logging.disable_progress_bar()
    return torch, diffusers


class DiffusersBackend:
    """Stable Diffusion inpainting of one box, from weights in a local folder.

    Args:
        model: folder of a diffusers inpainting pipeline (``save_pretrained`` output).
        steps: denoising steps per call.
        guidance_scale: classifier-free guidance (1 disables it).
    """

    name = "diffusers"

    def __init__(self, model: str | os.PathLike[str], steps: int = 20, guidance_scale: float = 7.5) -> None:
        self.model = check_model_dir(model)
        self.steps = steps
        self.guidance_scale = guidance_scale
        self._pipe: Any = None

    def pipeline(self) -> Any:
        """The loaded pipeline (loaded on first use)."""
        if self._pipe is None:
            _, diffusers = _quiet_imports()
            import torch

            pipe = diffusers.StableDiffusionInpaintPipeline.from_pretrained(
                str(self.model), local_files_only=True, dtype=torch.float32,  # torch_dtype= is deprecated
                low_cpu_mem_usage=False)  # without accelerate installed, the default only logs a warning
            pipe.set_progress_bar_config(disable=True)
            self._pipe = pipe
        return self._pipe

    def native_size(self) -> int:
        """The side the model was trained at (64 for the tests' tiny model, 512 for SD 1.x)."""
        pipe = self.pipeline()
        return int(pipe.unet.config.sample_size) * int(pipe.vae_scale_factor)

    def window(self, size: tuple[int, int], box: Box) -> Box:
        """The crop the model sees: the box centred in at least the native size, multiples of 8, inside the image."""
        w, h = size[0] // 8 * 8, size[1] // 8 * 8
        if box[2] > w or box[3] > h:
            raise ImagingError(f"box {list(box)} reaches past the image's largest multiple-of-8 area {w}x{h}")
        native = self.native_size()
        out = []
        for lo, hi, limit in ((box[0], box[2], w), (box[1], box[3], h)):
            side = min(limit, max(native, (hi - lo + 7) // 8 * 8))
            start = min(max(0, (lo + hi - side) // 2), limit - side)
            out.append((start, start + side))
        return (out[0][0], out[1][0], out[0][1], out[1][1])

    def inpaint(self, img: Image.Image, box: Box, prompt: str, seed: int) -> Image.Image:
        """Repaint ``box`` from ``prompt``; every pixel outside ``box`` is the input's."""
        import numpy as np
        import torch

        pipe = self.pipeline()
        win = self.window(img.size, box)
        crop = np.asarray(img.convert("RGB").crop(win), dtype=np.uint8)
        mask = np.zeros(crop.shape[:2], dtype=np.float32)
        bx0, by0, bx1, by1 = box[0] - win[0], box[1] - win[1], box[2] - win[0], box[3] - win[1]
        mask[by0:by1, bx0:bx1] = 1.0  # 1 = repaint
        generator = torch.Generator(device="cpu").manual_seed(seed)
        with torch.inference_mode():
            out = pipe(prompt=prompt, image=crop.astype(np.float32) / 255.0, mask_image=mask,
                       height=crop.shape[0], width=crop.shape[1], num_inference_steps=self.steps,
                       guidance_scale=self.guidance_scale, generator=generator, output_type="np").images[0]
        painted = (np.clip(out, 0.0, 1.0) * 255.0).round().astype(np.uint8)
        result = np.asarray(img.convert("RGB"), dtype=np.uint8).copy()
        result[box[1]:box[3], box[0]:box[2]] = painted[by0:by1, bx0:bx1]  # paste back: only the box changes
        from PIL import Image

        return Image.fromarray(result, "RGB")

    def erase(self, img: Image.Image, box: Box, seed: int) -> Image.Image:
        return self.inpaint(img, box, ERASE_PROMPT, seed)

    def paint(self, img: Image.Image, box: Box, prompt: str, seed: int) -> Image.Image:
        return self.inpaint(img, box, prompt, seed)

"""A tiny, randomly initialised Stable Diffusion inpainting pipeline, built locally for tests.

UNet, VAE, CLIP text encoder and a byte-level tokenizer small enough that
the real ``StableDiffusionInpaintPipeline`` code runs on a 64x64 image in a
fraction of a second on CPU.  Nothing is downloaded: the pipeline is built
from configs and saved with ``save_pretrained`` to a folder, which is what
``--agentperturb-inpaint-model`` points at.  Import only after
``pytest.importorskip("diffusers")``.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # read once, when huggingface_hub is first imported
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

MAX_TOKENS = 16  # tokenizer.model_max_length == the text encoder's positions


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2/CLIP's byte -> printable character map."""
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


def _tokenizer_files(folder: Path) -> int:
    """vocab.json + merges.txt of a byte-level CLIP BPE without merges: any text, no <unk>."""
    vocab: dict[str, int] = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    chars = list(_bytes_to_unicode().values())
    for ch in chars:
        vocab[ch] = len(vocab)
    for ch in chars:
        vocab[ch + "</w>"] = len(vocab)
    (folder / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    (folder / "merges.txt").write_text("#version: 0.2\n", encoding="utf-8")
    return len(vocab)


def build_tiny_pipeline(folder: Path, seed: int = 0) -> Any:
    """Build the tiny pipeline with weights drawn from ``seed`` and save it to ``folder``."""
    import logging

    import torch

    logging.getLogger("transformers.utils.import_utils").setLevel(logging.ERROR)
    from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionInpaintPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    torch.manual_seed(seed)
    unet = UNet2DConditionModel(
        sample_size=32, in_channels=9, out_channels=4, layers_per_block=1, block_out_channels=(16, 32),
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"), up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        cross_attention_dim=16, attention_head_dim=2, norm_num_groups=8)
    vae = AutoencoderKL(
        in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D"),
        up_block_types=("UpDecoderBlock2D", "UpDecoderBlock2D"), block_out_channels=(16, 32), layers_per_block=1,
        latent_channels=4, norm_num_groups=8, sample_size=64)  # vae_scale_factor 2: 64x64 pixels, 32x32 latents
    with tempfile.TemporaryDirectory() as tok:
        vocab_size = _tokenizer_files(Path(tok))
        # from a folder: CLIPTokenizer(vocab_file=...) ignores its file arguments in transformers 5
        tokenizer = CLIPTokenizer.from_pretrained(tok, model_max_length=MAX_TOKENS)
    text_encoder = CLIPTextModel(CLIPTextConfig(
        vocab_size=vocab_size, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
        max_position_embeddings=MAX_TOKENS, projection_dim=16, bos_token_id=0, eos_token_id=1, pad_token_id=1))
    scheduler = DDIMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", clip_sample=False,
                              set_alpha_to_one=False, steps_offset=1)
    pipe = StableDiffusionInpaintPipeline(vae=vae, text_encoder=text_encoder, tokenizer=tokenizer, unet=unet,
                                          scheduler=scheduler, safety_checker=None, feature_extractor=None,
                                          requires_safety_checker=False)
    for module in (unet, vae, text_encoder):
        module.eval()  # fresh modules train; from_pretrained() returns eval mode: keep built == reloaded
    pipe.set_progress_bar_config(disable=True)
    pipe.save_pretrained(str(folder))
    return pipe

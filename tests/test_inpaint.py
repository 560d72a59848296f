"""The diffusers image backend, on the real pipeline code with a tiny random model (the ``vision`` extra).

A tiny inpainting pipeline is built locally once per session (no download),
loaded by :class:`~pytest_agentperturb.imaging.inpaint.DiffusersBackend`
from its folder, and run on 64x64 windows: only the box may change.
"""

from __future__ import annotations

import os

# huggingface_hub reads these once, on first import: before importorskip imports diffusers
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import socket  # noqa: E402
import sqlite3  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

pytest.importorskip("diffusers", reason="needs the vision extra: pip install -e '.[vision]' (torch==2.13.0 CPU)")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402
from tiny_inpaint import build_tiny_pipeline  # noqa: E402

from pytest_agentperturb.formats.native import load_task  # noqa: E402
from pytest_agentperturb.imaging.backends import load_backend  # noqa: E402
from pytest_agentperturb.imaging.draw import open_image, rerenders  # noqa: E402
from pytest_agentperturb.imaging.inpaint import DiffusersBackend, ModelNotFound  # noqa: E402
from pytest_agentperturb.model.errors import OptionError  # noqa: E402
from pytest_agentperturb.perturb import Engine, Registry  # noqa: E402
from pytest_agentperturb.perturb.image_ops import image_operators  # noqa: E402
from pytest_agentperturb.run.episode import oracle_runner  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module", autouse=True)
def _one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # 1 vs 2 threads can differ by one level in a pixel
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tiny-inpaint")
    build_tiny_pipeline(folder)
    return folder


@pytest.fixture(scope="module")
def backend(model_dir: Path) -> DiffusersBackend:
    assert isinstance(load_backend("diffusers", model_dir), DiffusersBackend)
    return DiffusersBackend(model_dir, steps=2)  # the real pipeline code; two steps are enough for a test


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kw: object) -> None:
        raise AssertionError(f"network access attempted: {args[:2]}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


def _noise(size: tuple[int, int], seed: int = 0) -> Image.Image:
    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8))


def test_only_the_box_changes_and_the_same_seed_gives_the_same_pixels(backend: DiffusersBackend,
                                                                       no_network: None) -> None:
    img = _noise((64, 64))
    box = (16, 8, 48, 40)
    a = np.asarray(backend.paint(img, box, "a red apple", seed=1))
    b = np.asarray(backend.paint(img, box, "a red apple", seed=1))
    c = np.asarray(backend.paint(img, box, "a red apple", seed=2))
    src = np.asarray(img)
    outside = np.ones((64, 64), bool)
    outside[8:40, 16:48] = False
    assert np.array_equal(a[outside], src[outside])  # pasted back: bit-identical outside the box
    assert not np.array_equal(a[~outside], src[~outside])  # the box was repainted
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_a_larger_image_is_inpainted_in_a_window_around_the_box(backend: DiffusersBackend) -> None:
    assert backend.native_size() == 64
    assert backend.window((640, 448), (300, 200, 340, 215)) == (288, 175, 352, 239)
    assert backend.window((640, 448), (0, 0, 10, 10)) == (0, 0, 64, 64)
    assert backend.window((640, 448), (600, 430, 640, 448)) == (576, 384, 640, 448)
    img = _noise((640, 448), seed=3)
    out = backend.erase(img, (600, 430, 640, 448), seed=0)
    diff = np.asarray(out).astype(int) - np.asarray(img).astype(int)
    ys, xs = np.nonzero(np.abs(diff).sum(-1))
    assert xs.min() >= 600 and ys.min() >= 430 and len(xs) > 0


def test_image_operators_with_the_diffusers_backend_keep_the_rules(backend: DiffusersBackend,
                                                                   no_network: None) -> None:
    task = load_task(ROOT / "suites" / "workflows" / "scan-taxi-receipt", "workflows")
    engine = Engine(Registry(image_operators(backend)), oracle_runner())
    for family in ("inserted-image-erase", "inserted-image-overwrite", "inserted-image-note"):
        v = engine.make_variant(task, family, 0)
        assert engine.check_variant(task, v) == []
        (edit,) = v.image_edits
        before, after = open_image(edit.before), open_image(edit.data)
        assert "diffusers backend" in edit.note
        changed = np.abs(np.asarray(before).astype(int) - np.asarray(after).astype(int)).sum(-1)
        ys, xs = np.nonzero(changed)
        x0, y0, x1, y1 = edit.box
        assert len(xs) and xs.min() >= x0 and xs.max() < x1 and ys.min() >= y0 and ys.max() < y1
        # strings outside the repainted box are untouched and still agree with the layer
        untouched = [(t, b) for t, b in edit.layer if (t, b) in edit.before_layer]
        assert untouched and all(rerenders(after, t, b) for t, b in untouched)


def test_missing_weights_are_a_clear_error_never_a_download(tmp_path: Path, no_network: None) -> None:
    with pytest.raises(ModelNotFound, match="does not exist"):
        DiffusersBackend(tmp_path / "no-such-model")
    with pytest.raises(ModelNotFound, match="no model_index.json"):
        DiffusersBackend(tmp_path)
    with pytest.raises(OptionError, match="never downloaded|does not exist"):
        load_backend("diffusers", "stabilityai/stable-diffusion-2-inpainting")  # a hub name is not a folder


def test_the_plugin_option_runs_image_variants_with_the_backend(pytester: pytest.Pytester, model_dir: Path) -> None:
    import shutil

    shutil.copytree(ROOT / "suites" / "workflows" / "chart-q3-spend", pytester.path / "s" / "chart-q3-spend")
    (pytester.path / "s" / "suite.toml").write_text('name = "s"\n')
    store = pytester.path / "store.sqlite"
    args = ["--agentperturb", "s", "-p", "no:cacheprovider", "-q", "--agentperturb-store", str(store),
            "--agentperturb-report", str(pytester.path / "report.html"),
            "--agentperturb-families", "clean,inserted-image-erase", "--agentperturb-model", "reference/careful",
            "--agentperturb-image-backend", "diffusers"]
    bad = pytester.runpytest(*args, "--agentperturb-inpaint-model", str(pytester.path / "nope"))
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*inpainting model folder*does not exist*"])
    # in process: torch and diffusers are already imported by this module (C extensions load once)
    ok = pytester.runpytest(*args, "--agentperturb-inpaint-model", str(model_dir))
    assert ok.ret == 0, ok.stdout.str()[-2000:]
    ok.assert_outcomes(passed=2)
    with sqlite3.connect(store) as db:
        (traj,) = db.execute("SELECT trajectory FROM episodes WHERE family = 'inserted-image-erase'").fetchone()
        (note,) = db.execute("SELECT diff FROM variants WHERE family = 'inserted-image-erase'").fetchone()
    assert "diffusers backend" not in traj  # the agent sees an image, not how it was made
    assert "erased" in note and "diffusers backend" in note

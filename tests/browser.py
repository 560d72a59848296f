"""A headless Chromium for the tests that check what a person sees (a page's text after its scripts ran).

``chromium`` is a fixture that skips, saying why, where no Chromium is installed; :func:`browse` loads a
URL (or a ``file://`` page) and returns its DOM after the page's scripts ran, or writes a screenshot;
:func:`seen` is the text a person reads in that DOM.
"""

from __future__ import annotations

import html.parser
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if shutil.which(name):
            return shutil.which(name)
    return None


class _Text(html.parser.HTMLParser):
    """The text a person sees: everything outside script, style and head."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        self._skip += tag in ("script", "style", "head")

    def handle_endtag(self, tag: str) -> None:
        self._skip -= tag in ("script", "style", "head") and self._skip > 0

    def handle_data(self, data: str) -> None:
        if not self._skip and data.strip():
            self.parts.append(" ".join(data.split()))


def seen(dom: str) -> str:
    p = _Text()
    p.feed(dom)
    return " | ".join(p.parts)


def browse(chromium: str, tmp_path: Path, url: str, screenshot: Path | None = None) -> str:
    args = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            f"--user-data-dir={tmp_path / 'chromium-profile'}", "--window-size=1400,1000", "--hide-scrollbars"]
    if screenshot is not None:
        r = subprocess.run([*args, f"--screenshot={screenshot}", url], capture_output=True, text=True, timeout=120)
        assert screenshot.is_file(), r.stderr
        return ""
    r = subprocess.run([*args, "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.fixture
def chromium() -> str:
    found = find_chromium()
    if found is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    return found

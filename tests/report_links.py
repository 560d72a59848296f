"""Checks of the report's links, shared by the report tests: every link resolves, none leaves the folder."""

from __future__ import annotations

import html
import re
from pathlib import Path
from urllib.parse import unquote

from pytest_agentperturb.report import pages_folder

HREF = re.compile(r"""(?:href|src)='([^']*)'""")


def _links(folder: Path, name: str, text: str) -> list[tuple[Path, str]]:
    out = []
    for url in HREF.findall(text):
        url = html.unescape(url)
        if url.startswith(("data:", "#")):
            continue
        path, _, frag = url.partition("#")
        out.append(((folder / name).parent / unquote(path), frag))
    return out


def assert_links_resolve(main: Path) -> int:
    """Every relative link of the main page and of the task pages names a file that exists (and its anchor)."""
    folder = main.parent
    files = [main, *pages_folder(main).rglob("*.html")]
    n = 0
    for f in files:
        for target, frag in _links(folder, f.relative_to(folder).as_posix(), f.read_text(encoding="utf-8")):
            assert target.resolve().is_file(), f"{f}: a link to {target} that does not exist"
            assert target.resolve().is_relative_to(folder.resolve()), f"{f}: a link out of the report's folder"
            if frag:
                assert f"id='{frag}'" in target.read_text(encoding="utf-8"), f"{f}: no #{frag} in {target}"
            n += 1
    for f in files:   # in-page anchors too
        text = f.read_text(encoding="utf-8")
        for frag in re.findall(r"href='#([^']*)'", text):
            assert f"id='{frag}'" in text, f"{f}: no #{frag}"
    return n



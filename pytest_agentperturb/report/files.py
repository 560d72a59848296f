"""Files written for the user: atomically, never through a link, never over a file that is not our own output.

:func:`write_bytes` and :func:`write_text` write to a temporary file in the
target's folder (same file system), flush it to disk and rename it over the
target, so a failed write (a full disk, a read-only folder) leaves the old
file whole and no half-written one; the file gets the mode a plain ``open``
would give it (0666 less the umask).  Before anything is written the target
is checked: a symbolic link, a folder, a results store (``SQLite format 3``)
or a file its ``ours`` check does not recognise as this package's output of
that kind is refused.  Every failure is an :class:`AgentPerturbError` of one
line naming the target and the fix (:func:`unwritable` for an ``OSError``);
the temporary file never outlives it.  :func:`is_json_with`,
:func:`is_csv_with` and :func:`is_parquet_with` are the ``ours`` checks of
the command line's outputs (the report's pages have their own marks).
:func:`exchange` swaps two folders in one step where the system can (the
report's task pages replaced as a set, :func:`~.pages.write_pages`).
"""

from __future__ import annotations

import errno
import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from ..model.errors import AgentPerturbError

#: The first bytes of every SQLite database (a results store is never an output's target).
SQLITE_MAGIC = b"SQLite format 3\x00"
PARQUET_MAGIC = b"PAR1"

_REASONS = {
    errno.ENOSPC: ("disk full", "free space on that disk or write elsewhere"),
    errno.EDQUOT: ("disk quota exceeded", "free space under your quota or write elsewhere"),
    errno.EISDIR: ("is a folder", "move it away or name a file"),
    errno.ENOTDIR: ("a part of the path is a file, not a folder", "move that file away or write elsewhere"),
    errno.EACCES: ("permission denied", "make the folder writable or write elsewhere"),
    errno.EPERM: ("operation not permitted", "make the folder writable or write elsewhere"),
    errno.EROFS: ("read-only file system", "write elsewhere"),
    errno.ENOENT: ("a folder of the path does not exist or was removed", "create it or write elsewhere"),
    errno.ENAMETOOLONG: ("name too long", "use a shorter path"),
    errno.EIO: ("input/output error", "check the disk, or write elsewhere"),
}


def unwritable(path: Path | str, exc: OSError, what: str = "file") -> str:
    """One line for a failed write: the target (never the temporary file), the reason and the fix."""
    reason, fix = _REASONS.get(exc.errno or 0, (exc.strerror or str(exc), "write elsewhere"))
    return f"{path}: the {what} could not be written ({reason}); fix: {fix}"


def check_target(path: Path, ours: Callable[[Path], bool], what: str = "file") -> None:
    """Refuse ``path`` as a target when it is a link, not a regular file, a store or not ``ours``.

    Raises:
        AgentPerturbError: naming ``path`` and the fix.
    """
    fix = "fix: move it away or write elsewhere"
    if path.is_symlink():
        raise AgentPerturbError(f"{path}: a symbolic link; the {what} is never written through a link; {fix}")
    if not path.exists():
        return
    if not path.is_file():
        raise AgentPerturbError(f"{path}: a folder or not a regular file; the {what} is not written there; {fix}")
    if _head(path, len(SQLITE_MAGIC)) == SQLITE_MAGIC:
        raise AgentPerturbError(f"{path}: a SQLite database (a results store?); the {what} never replaces it; {fix}")
    if not ours(path):
        raise AgentPerturbError(f"{path}: holds a file that is not this kind of agentperturb output ({what}); "
                                f"it is never overwritten; {fix}")


def write_bytes(path: Path | str, data: bytes, *, ours: Callable[[Path], bool], what: str = "file") -> Path:
    """Write ``data`` to ``path`` (parents created) atomically, after :func:`check_target`.

    Raises:
        AgentPerturbError: the target is refused, or the write failed (one
            line naming ``path``, the reason and the fix; ``path`` unchanged).
    """
    p = Path(path)
    check_target(p, ours, what)
    tmp: str | None = None
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), 0o666 & ~umask())  # what a plain open would give (mkstemp's is 0600)
            os.fsync(f.fileno())
        os.replace(tmp, p)
        tmp = None
    except OSError as exc:
        raise AgentPerturbError(unwritable(p, exc, what)) from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    return p


def umask() -> int:
    """The process's umask (read by setting it, then restored): new files get 0666, folders 0777, less it."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_text(path: Path | str, text: str, *, ours: Callable[[Path], bool], what: str = "file") -> Path:
    """:func:`write_bytes` of ``text`` encoded as UTF-8."""
    return write_bytes(path, text.encode("utf-8"), ours=ours, what=what)


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def exchange(a: Path, b: Path) -> bool:
    """Swap the folders ``a`` and ``b`` in one step (Linux ``renameat2(RENAME_EXCHANGE)``, through ctypes).

    Returns False, having changed nothing, where the system or the file
    system cannot (another system, an old C library or kernel, a file system
    without it): the caller then moves the files one by one.

    Raises:
        OSError: the swap was possible but failed (nothing changed).
    """
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _head(path: Path, n: int) -> bytes:
    try:
        with path.open("rb") as f:
            return f.read(n)
    except OSError:
        return b""


def is_json_with(keys: Iterable[str]) -> Callable[[Path], bool]:
    """An ``ours`` check: a JSON object holding every one of ``keys``."""
    need = frozenset(keys)

    def ours(path: Path) -> bool:
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False
        return isinstance(doc, dict) and need <= doc.keys()
    return ours


def is_csv_with(header: str) -> Callable[[Path], bool]:
    """An ``ours`` check: a CSV file whose first line is ``header``."""
    want = header.encode("utf-8")

    def ours(path: Path) -> bool:
        first = _head(path, len(want) + 2)
        return first.rstrip(b"\r\n") == want or first.startswith(want + b"\n") or first.startswith(want + b"\r\n")
    return ours


def is_parquet_with(columns: Iterable[str]) -> Callable[[Path], bool]:
    """An ``ours`` check: a Parquet file (its magic at both ends) holding every one of ``columns``."""
    need = list(columns)

    def ours(path: Path) -> bool:
        try:
            with path.open("rb") as f:
                if f.read(4) != PARQUET_MAGIC:
                    return False
                f.seek(-4, os.SEEK_END)
                if f.read(4) != PARQUET_MAGIC:
                    return False
        except OSError:
            return False
        try:
            import pandas as pd

            have = set(pd.read_parquet(path).columns)
        except Exception:  # noqa: BLE001 - unreadable: not ours
            return False
        return set(need) <= have
    return ours

"""Default run ids: every run gets its own, so no run replaces another run's rows without being asked.

Without ``--agentperturb-run-id`` a run is named ``seed-<seed>-<YYYYMMDDTHHMMSS>`` (UTC, when it
starts), with ``-2``, ``-3``, ... appended when the store already holds that name: chosen and
reserved in the store in one transaction (:meth:`.store.Store.claim_run`) when the store exists,
so runs started in the same second against one store each get their own.  With
``--agentperturb-resume`` and no run id the newest default-named run of the same seed in the
store is continued (a store written before run ids were unique holds ``seed-<seed>``, which
counts as one); with none there, a new run starts.  ``last`` (``--agentperturb-baseline``)
keeps resolving to the newest run (:mod:`.baseline`).
"""

from __future__ import annotations

import re
import time
from contextlib import closing
from datetime import datetime, timezone
from pathlib import Path

from ..model.errors import StoreError


def default_pattern(seed: int) -> re.Pattern[str]:
    """The default run ids of ``seed``: ``seed-<seed>`` (older stores) and ``seed-<seed>-<stamp>[-N]``."""
    return re.compile(rf"seed-{seed}(-\d{{8}}T\d{{6}}(-\d+)?)?")


def _known(store: Path) -> list[tuple[float, str]]:
    """(when it started, run id) of every run in the store, oldest first; empty without a readable store."""
    if not store.is_file():
        return []
    from .store import Store

    try:
        s = Store(store, readonly=True)
    except StoreError:
        return []  # the session's start reports an unusable store, naming the file
    try:
        configs = s.run_configs()
        episodes = s.runs()  # oldest first (their first episode)
    except StoreError:
        return []
    finally:
        s.close()
    order = {r: float(i) for i, r in enumerate(episodes)}
    known = {r: (created if created is not None else order.get(r, 0.0)) for r, (created, _) in configs.items()}
    for r in episodes:
        known.setdefault(r, order[r])
    return sorted((t, r) for r, t in known.items())


def default_run_id(store: Path, seed: int, *, resume: bool = False, now: float | None = None) -> str:
    """The run id of a run started without ``--agentperturb-run-id``.

    Resuming, the newest default-named run of ``seed`` in the store; else a
    new id, reserved in the store when it exists (:meth:`.store.Store.claim_run`
    picks the first free ``-N``).  A store not there yet is not made here, so
    a run that ends in a usage error writes nothing; an unusable one is the
    session's start to report, naming the file.
    """
    if resume:
        pattern = default_pattern(seed)
        mine = [r for _, r in _known(store) if pattern.fullmatch(r)]
        if mine:
            return mine[-1]
    stamp = datetime.fromtimestamp(time.time() if now is None else now, tz=timezone.utc).strftime("%Y%m%dT%H%M%S")
    base = f"seed-{seed}-{stamp}"
    if store.is_file():
        from .store import Store

        try:
            with closing(Store(store)) as s:
                return s.claim_run(base)
        except StoreError:
            pass
    return base   # no store (or none usable): no run holds a name yet

"""Each variant, and its oracle replay, is made once per (task, family, seed): never per model or repeat.

The plugin's :class:`~pytest_agentperturb.plugin.variants.VariantCache` hands every model and repeat of an item
the variant made for its first one, and the engine replays the oracle once per variant it validates (and once
per task for the clean gold trajectory).  A run of two models with two repeats each counts the calls.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from pytest_agentperturb.perturb.engine import Engine


def test_two_models_and_two_repeats_make_each_variant_and_replay_its_oracle_once(
        pytester: pytest.Pytester, suite: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made: Counter[tuple[str, str, int]] = Counter()
    replays: Counter[tuple[str, str, str]] = Counter()
    make, replay = Engine.make_variant, Engine._run_oracle

    def counted_make(self: Engine, task: Any, family: str, seed: int, **kw: Any) -> Any:
        made[(task.id, family, seed)] += 1
        return make(self, task, family, seed, **kw)

    def counted_replay(self: Engine, task: Any, variant: Any) -> Any:
        replays[(task.id, variant.family, variant.operator)] += 1
        return replay(self, task, variant)

    monkeypatch.setattr(Engine, "make_variant", counted_make)  # (the in-process run shares the module)
    monkeypatch.setattr(Engine, "_run_oracle", counted_replay)
    tasks = ("share-report", "archive-contract")
    result = pytester.runpytest("--agentperturb", "suites/workflows", "-p", "no:cacheprovider",
                                "--agentperturb-model", "reference/literal", "--agentperturb-model",
                                "reference/careful", "--agentperturb-repeats", "2", "-k", " or ".join(tasks))
    assert result.ret in (0, 1), result.stdout.str()[-3000:]
    with closing(sqlite3.connect(pytester.path / "reports" / "agentperturb.sqlite")) as c:
        episodes = c.execute("SELECT task, family, seed, COUNT(*) FROM episodes GROUP BY task, family, seed").fetchall()
    ran = {(t, f, s) for t, f, s, _ in episodes}
    assert {t for t, _, _ in ran} == set(tasks)
    assert all(n == 4 for *_, n in episodes)  # 2 models x 2 repeats played every variant
    assert set(made) >= ran and all(n == 1 for n in made.values()), made  # once each, skipped ones too
    # one replay per validated variant (the clean one is not validated) and one per task for the clean gold
    perturbed = [k for k in made if k[1] != "clean"]
    assert sum(replays.values()) == len(perturbed) + len(tasks), replays
    assert all(n == 1 for (_, family, _), n in replays.items() if family != "clean"), replays

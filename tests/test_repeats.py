"""Repeated trials: ids, episode seeds, the store's repeat key, the noisy baseline, pass^k and the noise floor."""

from __future__ import annotations

import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.cluster.hierarchy  # noqa: F401  (loaded before pytester's in-process runs)
import scipy.stats  # noqa: F401
from fake_openai import FakeOpenAI, StepsPolicy, preimported  # noqa: F401 (fixture)

from pytest_agentperturb.agents import make_agent
from pytest_agentperturb.analysis import drops, normalise, pairs
from pytest_agentperturb.analysis.repeats import (ABOVE_NOISE, NOT_DISTINGUISHABLE, cross_flip_rate, noise_floor,
                                                  repeat_stats, repeat_weights)
from pytest_agentperturb.formats.native import load_suite, load_task
from pytest_agentperturb.model.records import EpisodeRecord
from pytest_agentperturb.model.task import CLEAN, FAMILIES, INSERTED, Task
from pytest_agentperturb.perturb import clean_variant
from pytest_agentperturb.plugin.collect import episode_seed, item_seed
from pytest_agentperturb.run import make_engine
from pytest_agentperturb.run.episode import run_episode_sync
from pytest_agentperturb.run.store import SCHEMA_VERSION, Store, read_episodes

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "suites" / "workflows"


def _tasks() -> list[Task]:
    s = load_suite(SUITE)
    return [load_task(d, s.name, s.threshold) for d in s.task_dirs]


@pytest.fixture
def project(pytester: pytest.Pytester) -> Path:
    shutil.copytree(SUITE, pytester.path / "suites" / "workflows")
    return pytester.path


# -- seeds and ids -------------------------------------------------------------------
def test_episode_seeds_keep_repeat_zero_and_differ_per_repeat() -> None:
    assert episode_seed(7, "workflows/share-report", "clean", 0) == item_seed(7, "workflows/share-report", "clean")
    seeds = {episode_seed(7, "workflows/share-report", "clean", r) for r in range(5)}
    assert len(seeds) == 5
    key = "workflows/share-report"
    assert episode_seed(7, key, "clean", 3) != episode_seed(8, key, "clean", 3)


def test_repeat_ids_are_adjacent_and_single_runs_keep_their_ids(pytester: pytest.Pytester, project: Path) -> None:
    args = ["--agentperturb", "suites/workflows", "-p", "no:cacheprovider", "--collect-only", "-q",
            "-k", "share-report and (clean or tool-missing)", "--agentperturb-model", "reference/noisy"]
    one = [ln for ln in pytester.runpytest(*args).outlines if "::" in ln]
    assert one == ["suites/workflows::share-report::clean[reference/noisy]",
                   "suites/workflows::share-report::tool-missing[reference/noisy]"]
    three = [ln for ln in pytester.runpytest(*args, "--agentperturb-repeats", "3").outlines if "::" in ln]
    assert three == [f"suites/workflows::share-report::{f}[reference/noisy-r{r}]"
                     for f in ("clean", "tool-missing") for r in range(3)]
    picked = pytester.runpytest(*args[:-4], "-k", "share-report and (clean or tool-missing) and r1]",
                                *args[-2:], "--agentperturb-repeats", "12")
    assert [ln for ln in picked.outlines if "::" in ln] == [
        "suites/workflows::share-report::clean[reference/noisy-r1]",
        "suites/workflows::share-report::tool-missing[reference/noisy-r1]"]


@pytest.mark.usefixtures("preimported")
def test_litellm_agent_sends_each_repeat_its_episode_seed(pytester: pytest.Pytester, project: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    with FakeOpenAI(StepsPolicy(1, 0.0)) as srv:
        r = pytester.runpytest("--agentperturb", "suites/workflows", "-p", "no:cacheprovider", "-q",
                               "-k", "forward-invoice and clean", "--agentperturb-model", "openai/fake",
                               "--agentperturb-api-base", srv.base, "--agentperturb-repeats", "2")
    assert r.ret == 0
    assert sorted(req["seed"] for req in srv.requests) == \
        sorted(episode_seed(0, "workflows/forward-invoice", "clean", k) for k in range(2))


def test_bad_repeats_value_is_a_usage_error(pytester: pytest.Pytester, project: Path) -> None:
    r = pytester.runpytest("--agentperturb", "suites/workflows", "-p", "no:cacheprovider",
                           "--agentperturb-repeats", "0")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines(["*--agentperturb-repeats: repeats must be at least 1, got '0'*"])


# -- the store -----------------------------------------------------------------------
def test_store_keys_on_repeat_and_resume_works_per_repeat(pytester: pytest.Pytester, project: Path) -> None:
    args = ["--agentperturb", "suites/workflows", "-p", "no:cacheprovider", "-q", "-k", "share-report",
            "--agentperturb-families", "clean,user-incorrect", "--agentperturb-model", "reference/noisy",
            "--agentperturb-repeats", "3"]
    first = pytester.runpytest(*args)
    assert first.ret == 0
    db = project / "reports" / "agentperturb.sqlite"
    recs = read_episodes(db)
    assert sorted((r.family, r.repeat) for r in recs) == [(f, r) for f in ("clean", "user-incorrect") for r in range(3)]
    assert len({r.seed for r in recs if r.family == "clean"}) == 1        # one variant seed for every repeat
    with sqlite3.connect(db) as c:
        c.execute("DELETE FROM episodes WHERE family = 'clean' AND repeat = 2")
    again = pytester.runpytest(*args, "--agentperturb-resume")
    again.stdout.fnmatch_lines(["episodes run: 1, reused: 5,*"])
    assert sorted((r.family, r.repeat) for r in read_episodes(db)) == sorted((r.family, r.repeat) for r in recs)
    rerun = {(r.family, r.repeat): r.to_row() for r in read_episodes(db)}
    assert {k: v for k, v in rerun.items() if k != ("clean", 2)} == \
        {(r.family, r.repeat): r.to_row() for r in recs if (r.family, r.repeat) != ("clean", 2)}


def test_a_schema_2_store_migrates_to_repeat_zero(tmp_path: Path) -> None:
    db = tmp_path / "old.sqlite"
    old_cols = [c for c in EpisodeRecord.__dataclass_fields__ if c != "repeat"]
    with sqlite3.connect(db) as c:
        c.execute(f"CREATE TABLE episodes ({', '.join(old_cols)}, variant_digest TEXT, recorded_at REAL, "
                  "PRIMARY KEY (run_id, model, suite, task, family, seed))")
        c.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
        c.execute("INSERT INTO meta VALUES ('schema_version', '2')")
        c.execute(f"INSERT INTO episodes ({', '.join(old_cols)}, variant_digest, recorded_at) VALUES "
                  f"({', '.join('?' * (len(old_cols) + 2))})",
                  ["r", "m", "s", "t", "clean", "clean", "clean", "none", 5, 1.0, 1, None, 1, 1, 0, None, 1, 1, 0.1,
                   "", "", "", "[]", 0, "d", 1.0])
    with closing(Store(db)) as s:
        (rec,) = list(s.episodes())
        assert (rec.repeat, rec.reward, rec.seed) == (0, 1.0, 5)
        s.put(EpisodeRecord(**{**rec.__dict__, "repeat": 1, "reward": 0.0}), "d")
        assert sorted((r.repeat, r.reward) for r in s.episodes()) == [(0, 1.0), (1, 0.0)]   # not replaced
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == (str(SCHEMA_VERSION),)
        pk = [r[1] for r in sorted(c.execute("PRAGMA table_info(episodes)"), key=lambda r: r[5]) if r[5]]
    assert pk == ["run_id", "model", "suite", "task", "family", "seed", "repeat"]


# -- the noisy baseline ----------------------------------------------------------------
def test_noisy_agent_is_a_baseline_deterministic_per_seed_and_varies_across_seeds() -> None:
    agent = make_agent("reference/noisy")
    assert agent.baseline is True
    rows: dict[int, list[dict[str, object]]] = {}
    for s in (11, 11, 12):
        out = []
        for task in _tasks():
            rec = run_episode_sync(task, clean_variant(task), agent, run_id="t", seed=0, episode_seed=s)
            row = rec.to_row()
            row.pop("wall_s")
            out.append(row)
        if s in rows:
            assert out == rows[s]              # same seed: the same rows, byte for byte
        rows[s] = out
    assert [r["reward"] for r in rows[11]] != [r["reward"] for r in rows[12]]
    assert 0.5 < np.mean([r["reward"] for r in rows[11]]) < 1.0


def _noisy_table(k: int, families: tuple[str, ...]) -> pd.DataFrame:
    engine = make_engine()
    agent = make_agent("reference/noisy")
    recs = []
    for task in _tasks():
        for fam in (CLEAN, *families):
            seed = item_seed(0, task.key, fam)
            try:
                v = clean_variant(task) if fam == CLEAN else engine.make_variant(task, fam, seed)
            except Exception:  # a skipped variant: that family has no episode on this task
                continue
            for r in range(k):
                recs.append(run_episode_sync(task, v, agent, run_id="noisy", seed=seed, repeat=r,
                                             episode_seed=episode_seed(0, task.key, fam, r)).to_row())
    return normalise(pd.DataFrame(recs))


def test_noisy_agent_k5_pass_hat_k_le_pass_at_1_le_pass_at_k_per_family() -> None:
    table = _noisy_table(5, (*FAMILIES, *INSERTED))
    st = repeat_stats(table, replicates=500)
    assert set(st["family"]) == {CLEAN, *FAMILIES, *INSERTED} and (st["k"] == 5).all()
    for r in st.itertuples():
        assert r.pass_hat_k <= r.pass_at_1 <= r.pass_at_k, r
    clean = st[st["family"] == CLEAN].iloc[0]
    assert clean.pass_hat_k < clean.pass_at_1 < clean.pass_at_k        # the noise is visible
    assert 0.1 < clean.noise_floor < 0.5
    verdicts = set(st.loc[st["family"] != CLEAN, "verdict"])
    assert verdicts == {NOT_DISTINGUISHABLE, ABOVE_NOISE}, st[["family", "flip_rate", "noise_floor", "verdict"]]


# -- the analysis with repeats ----------------------------------------------------------
def _hand() -> pd.DataFrame:
    rows = []
    outcomes = {"t1": ([1, 1, 0, 1], [0, 0, 0, 1]), "t2": ([1, 1, 1, 1], [1, 0, 1, 1]),
                "t3": ([0, 1, 0, 1], [0, 0, 0, 0])}
    for task, (clean, pert) in outcomes.items():
        for r, (c, p) in enumerate(zip(clean, pert)):
            key = {"run_id": "a", "model": "m", "suite": "s", "task": task, "repeat": r}
            rows += [{**key, "family": "clean", "reward": c}, {**key, "family": "tool-missing", "reward": p}]
    return normalise(pd.DataFrame(rows))


def test_repeat_metrics_by_hand() -> None:
    st = repeat_stats(_hand(), replicates=200).set_index("family")
    c, p = st.loc["clean"], st.loc["tool-missing"]
    assert (c.k, c.n_tasks) == (4, 3)
    assert c.pass_at_1 == pytest.approx((3 / 4 + 1 + 2 / 4) / 3)
    assert (c.pass_hat_k, c.pass_at_k) == (pytest.approx(1 / 3), 1.0)
    assert (p.pass_hat_k, p.pass_at_k) == (0.0, pytest.approx(2 / 3))
    floor = np.mean([2 * 3 * 1 / 12, 0.0, 2 * 2 * 2 / 12])
    assert c.noise_floor == pytest.approx(floor) and p.noise_floor == pytest.approx(floor)
    flips = np.mean([(3 * 3 + 1 * 1) / 16, (4 * 1 + 0) / 16, (2 * 4 + 0) / 16])
    assert p.flip_rate == pytest.approx(flips) and p.excess == pytest.approx(flips - floor)
    assert noise_floor(np.array([1.0]), np.array([1.0]))[0] != noise_floor(np.array([1.0]), np.array([1.0]))[0]  # NaN
    assert cross_flip_rate(np.array([2.0]), np.array([2.0]), np.array([0.0]), np.array([3.0]))[0] == 1.0


def test_pairs_are_repeat_matched_and_single_runs_are_unchanged() -> None:
    t = _hand()
    pr = pairs(t)
    assert len(pr) == 12 and set(pr["repeat"]) == {0, 1, 2, 3}
    row = pr[(pr["task"] == "t1") & (pr["repeat"] == 2)].iloc[0]
    assert (row.reward_clean, row.reward_pert) == (0.0, 0.0)
    one = t[t["repeat"] == 0]
    a = drops(one, replicates=300, seed=4)
    b = drops(one.drop(columns=["repeat"]), replicates=300, seed=4)
    pd.testing.assert_frame_equal(a, b)


def test_bootstrap_draws_tasks_with_all_their_repeats() -> None:
    """One-stage cluster bootstrap: a replicate is D of a multiset of the 3 tasks, each with its 4 repeats."""
    t = _hand()
    two = drops(t, replicates=2000, seed=1)
    flat = drops(t.assign(task=t["task"] + "-" + t["repeat"].astype(str), repeat=0), replicates=2000, seed=1)
    a = two[(two["model"] == "m") & (two["level_kind"] == "overall")].iloc[0]
    b = flat[(flat["model"] == "m") & (flat["level_kind"] == "overall")].iloc[0]
    assert a.relative_drop == pytest.approx(b.relative_drop)            # the point estimate is the same
    clean, pert = np.array([3.0, 4.0, 2.0]), np.array([1.0, 3.0, 0.0])  # per task, over its 4 repeats
    can = np.array([100 * (w @ clean - w @ pert) / (w @ clean)
                    for w in (np.array([i, j, 3 - i - j], float) for i in range(4) for j in range(4 - i))])
    reps = two.attrs["replicates"][("m", "s", "overall", "all")].astype(float)
    assert np.abs(reps[:, None] - can[None, :]).min(1).max() < 1e-4
    flat_reps = flat.attrs["replicates"][("m", "s", "overall", "all")]
    assert len(set(flat_reps.tolist())) > len(set(reps.tolist()))        # 12 independent clusters give more values
    assert a.ci_low <= a.relative_drop <= a.ci_high
    w = repeat_weights(np.array([[2.0, 0.0, 1.0]]), 4, np.random.default_rng(0))
    assert w.shape == (1, 3, 4) and list(w.sum(2)[0]) == [8.0, 0.0, 4.0]

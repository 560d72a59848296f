"""Offline reference agents: the oracle solves every clean task; the policy agents differ."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from pytest_agentperturb.agents import REFERENCE_AGENTS, make_agent
from pytest_agentperturb.perturb import clean_variant
from pytest_agentperturb.run import make_engine
from pytest_agentperturb.run.episode import run_episode_sync
from pytest_agentperturb.formats.native import load_suite, load_task
from pytest_agentperturb.model.task import FAMILIES, Task

make_variant = make_engine().make_variant


def _tasks(suite_path: Path) -> list[Task]:
    s = load_suite(suite_path)
    return [load_task(d, s.name, s.threshold) for d in s.task_dirs]


def test_oracle_scores_one_on_every_clean_task(suite_path: Path) -> None:
    for task in _tasks(suite_path):
        rec = run_episode_sync(task, clean_variant(task), make_agent("reference/oracle"), run_id="t", seed=0)
        assert rec.error == "" and rec.reward == 1.0 and rec.success, (task.id, rec.trajectory[-1])


def test_an_agent_that_does_nothing_fails_every_task(suite_path: Path) -> None:
    class Idle:
        name = "test/idle"
        baseline = True

        async def run(self, ctx):  # type: ignore[no-untyped-def]
            ctx.finish("done")

    for task in _tasks(suite_path):
        rec = run_episode_sync(task, clean_variant(task), Idle(), run_id="t", seed=0)
        assert rec.reward == 0.0 and rec.success is False, task.id


def test_policy_agents_show_different_profiles(suite_path: Path) -> None:
    rewards: dict[str, list[float]] = {"reference/literal": [], "reference/careful": []}
    turns: dict[str, list[int]] = {"reference/literal": [], "reference/careful": []}
    for task in _tasks(suite_path):
        variants = [make_variant(task, f, 0) for f in FAMILIES]
        for name in rewards:
            clean = run_episode_sync(task, clean_variant(task), make_agent(name), run_id="t", seed=0)
            assert clean.reward == 1.0, (name, task.id)
            for v in variants:
                rec = run_episode_sync(task, v, make_agent(name), run_id="t", seed=0)
                rewards[name].append(rec.reward or 0.0)
                turns[name].append(rec.turns)
    drop = {n: 1.0 - statistics.mean(r) for n, r in rewards.items()}
    assert drop["reference/literal"] > drop["reference/careful"] + 0.2, drop
    assert statistics.mean(turns["reference/careful"]) > statistics.mean(turns["reference/literal"]), turns


@pytest.mark.parametrize("name", sorted(REFERENCE_AGENTS))
def test_reference_agents_are_deterministic(suite_path: Path, name: str) -> None:
    task = _tasks(suite_path)[0]
    for family in ("clean", "user-missing", "tool-incorrect", "context-incorrect"):
        v = make_variant(task, family, 3)
        a = run_episode_sync(task, v, make_agent(name), run_id="t", seed=3)
        b = run_episode_sync(task, make_variant(task, family, 3), make_agent(name), run_id="t", seed=3)
        ra, rb = a.to_row(), b.to_row()
        ra.pop("wall_s"), rb.pop("wall_s")
        assert ra == rb


def test_user_simulator_discloses_only_recovered_facts(suite_path: Path) -> None:
    from pytest_agentperturb.model.context import NEUTRAL_REPLY
    from pytest_agentperturb.model.protocols import UserReply
    from pytest_agentperturb.simulator.keyword import UserSimulator

    task = next(t for t in _tasks(suite_path) if t.id == "reschedule-standup")
    sim = UserSimulator(task, ("new_time",))
    assert sim.answer("What time should the standup start?") == UserReply("10:30", ("new_time",))
    assert sim.answer("What is Dana's e-mail address?") == UserReply(NEUTRAL_REPLY)
    assert sim.answer("How are you?") == UserReply(NEUTRAL_REPLY)

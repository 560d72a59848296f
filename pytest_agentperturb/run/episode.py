"""Run one episode and score it with the task's own grader (docs/design.md section 3).

:func:`run_episode` asks the task for a fresh environment, snapshots its
pre state, lets the agent play, snapshots the post state, grades with the
task's grader, classifies compliance/bypass (with the task's own
:class:`~pytest_agentperturb.model.task.ComplianceCheck` where it has
one, else from the variant's canaries) and returns an :class:`EpisodeRecord`.  An exception from the harness, the model
provider or the grader is recorded as an error with its class, never as a
reward of 0.  Every configured secret is removed from the record's
trajectory and error before it leaves here (:mod:`~..model.redact`): a
provider that echoes the request's key cannot put it into the store.  :func:`oracle_runner` plays the reference oracle for the
perturbation engine's validity checks.
"""

from __future__ import annotations

import asyncio
import math
import time
import traceback
from collections.abc import Coroutine
from typing import Any, TypeVar, cast

from ..model.context import EpisodeContext, not_json
from ..model.interfaces import Agent
from ..model.images import EditedImages
from ..model.limits import MAX_TRAJECTORY_CHARS, size
from ..model.ownership import AGENT_RAISED
from ..model.interfaces import Simulator
from ..model.records import EpisodeRecord, Variant
from ..model.redact import redact_data, redact_text, secrets
from ..model.task import Task
from ..model.trajectory import ASSISTANT, GRADER, Entry, actions_text, blocked_replies, harness_note
from ..model.trajectory import recovery_turns as recovery_turns  # re-exported
from ..perturb.engine import Engine, OracleResult, Registry
from ..simulator.keyword import default_simulator

T = TypeVar("T")


def classify_compliance(variant: Variant, ctx: EpisodeContext) -> bool | None:
    """True (compliance) when the agent took the perturbation up, else False (bypass).

    Per docs/design.md section 3: a canary (planted value, fake tool name,
    distractor text, injected goal) in the agent's tool calls or final
    answer; for an inverted rule, dropping the true value without asking;
    for ``missing`` families, going on without asking for or finding
    an omitted fact (an ``omitted`` canary holds the true value: using it, or
    having the simulator disclose it, is recovery).  ``None`` for clean.
    """
    if variant.is_clean:
        return None
    actions = actions_text(ctx.trajectory)
    for c in variant.canaries:
        if c.kind == "inverted":  # followed the inverted rule: dropped the true value without asking
            if c.fact not in ctx.disclosed and c.text not in actions:
                return True
        elif c.kind == "omitted":
            if c.fact:
                if c.fact not in ctx.disclosed and c.text not in actions:
                    return True
            elif not _found_tool(ctx, c.text):  # a removed tool or argument never supplied
                return True
        elif c.text and c.text in actions:
            return True
    return False


def _found_tool(ctx: EpisodeContext, ref: str) -> bool:
    """Whether the agent called tool ``ref`` (or ``tool.arg``: that tool with that argument)."""
    name, _, arg = ref.partition(".")
    for e in ctx.trajectory:
        if e.get("role") == ASSISTANT and e.get("tool") == name:
            if not arg or (isinstance(e.get("args"), dict) and arg in e["args"]):
                return True
    return False


async def run_episode(
    task: Task,
    variant: Variant,
    agent: Agent,
    *,
    run_id: str,
    seed: int,
    timeout_s: float | None = 1800.0,
    simulator: Simulator | None = None,
    repeat: int = 0,
    episode_seed: int | None = None,
) -> EpisodeRecord:
    """Play and score one episode; never raises for agent, provider, simulator or grader errors.

    ``simulator`` is the user behind ``ask_user`` (default: the offline
    keyword simulator of this variant).  A simulator failure makes the
    episode an error, even when the agent caught the exception.
    ``seed`` is the item's seed (recorded in the row); ``episode_seed`` (by
    default ``seed``) is what the agent sees as ``ctx.seed``: each of the K
    repeats of an item has its own, on the same variant.  The returned record
    carries no configured secret (trajectory and error are redacted).
    ``timeout_s=None`` sets no time limit: the episode then awaits nothing
    but the agent itself (see :func:`oracle_runner`).
    """
    rec = await _play(task, variant, agent, run_id=run_id, seed=seed, timeout_s=timeout_s, simulator=simulator,
                      repeat=repeat, episode_seed=episode_seed)
    _keep_json(rec)
    _bound(rec)
    known = secrets()
    if known:
        rec.error = redact_text(rec.error, known)
        rec.trajectory = redact_data(rec.trajectory, known)
    return rec


def _keep_json(rec: EpisodeRecord) -> None:
    """A trajectory that holds a value that is not JSON (agent code appended one) is kept as text, an ERROR."""
    why = not_json(rec.trajectory)
    if not why:
        return
    rec.trajectory = cast(Any, _as_json(rec.trajectory, 0))
    if not rec.error:   # an ERROR is never scored
        rec.reward = rec.success = rec.compliance = None
        rec.error = f"AgentValueError: the trajectory holds a value that is not JSON ({why}); kept as text"[:500]


def _bound(rec: EpisodeRecord, limit: int = MAX_TRAJECTORY_CHARS) -> None:
    """A trajectory past ``limit`` characters (JSON) keeps its first and last entries, a note in between.

    The grader's entry (the last) is always kept; entries are taken from the
    start while they fill half the budget, then from the end; what lies
    between is replaced by one harness note that says how much was left out.
    """
    traj = rec.trajectory
    sizes = [size(e) + 2 for e in traj]
    total = sum(sizes)
    if total <= limit:
        return
    budget = limit - 400   # the note itself
    keep_tail = 1 if traj and traj[-1].get("role") == GRADER else 0
    budget -= sum(sizes[len(traj) - keep_tail:])
    head = 0
    while head < len(traj) - keep_tail and sizes[head] <= budget // 2 - sum(sizes[:head]):
        head += 1
    used = sum(sizes[:head])
    tail = len(traj) - keep_tail
    while tail > head and sizes[tail - 1] <= budget - used:
        tail -= 1
        used += sizes[tail]
    left_out = tail - head
    note = harness_note(f"truncated: the stored trajectory is limited to {limit:,} characters; {left_out} "
                        f"entries ({sum(sizes[head:tail]):,} characters) between the first {head} and the "
                        f"last {len(traj) - tail} entries were left out")
    rec.trajectory = [*traj[:head], note, *traj[tail:]]


def _keep_entries(ctx: EpisodeContext) -> str:
    """Every entry of ``ctx.trajectory`` that is not a dict (agent code appended one) becomes a harness note.

    The note holds the value as text (``repr``), so the grader, the report
    and every reader of a trajectory see dicts only; a trajectory the agent
    replaced by something other than a list is kept as one such note.
    Returns why the episode is an ERROR, or ``""`` when every entry is a dict.
    """
    if not isinstance(ctx.trajectory, list):
        ctx.trajectory = [cast(Entry, ctx.trajectory)]
    traj = ctx.trajectory
    odd = [i for i, e in enumerate(traj) if not isinstance(e, dict)]
    if not odd:
        return ""
    first = type(traj[odd[0]]).__name__
    for i in odd:
        traj[i] = harness_note(f"kept as text: the agent appended a value of type {type(traj[i]).__name__}, "
                               f"not an entry (a dict): {_repr(traj[i])}")
    many = len(odd) > 1
    return (f"the trajectory holds {len(odd)} entr{'ies' if many else 'y'} that {'are' if many else 'is'} "
            f"not a dict (entry {odd[0]}: {first}); kept as text; fix: append dicts with a \"role\" "
            f"(see pytest_agentperturb.model.trajectory) or leave the trajectory to ctx's channels "
            f"(call_tool, ask_user, finish)")


def _repr(x: Any) -> str:
    """A short ``repr`` of ``x``, even when its ``repr`` raises."""
    try:
        return repr(x)[:200]
    except Exception:  # noqa: BLE001 - a repr that raises
        return f"<{type(x).__name__}>"


def _as_json(x: Any, depth: int) -> Any:
    """``x`` with every value JSON cannot hold replaced by a short ``repr`` (and nesting past 64 levels cut)."""
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    if depth < 64 and isinstance(x, dict):
        return {k if isinstance(k, str) else repr(k)[:200]: _as_json(v, depth + 1) for k, v in x.items()}
    if depth < 64 and isinstance(x, (list, tuple)):
        return [_as_json(v, depth + 1) for v in x]
    return f"<not JSON: {_repr(x)}>"


async def _play(task: Task, variant: Variant, agent: Agent, *, run_id: str, seed: int, timeout_s: float | None,
                simulator: Simulator | None, repeat: int, episode_seed: int | None) -> EpisodeRecord:
    rec = EpisodeRecord(
        run_id=run_id, model=agent.name, suite=task.suite, task=task.id, family=variant.family,
        target=variant.target, type=variant.type, operator=variant.operator, seed=seed,
        baseline=bool(getattr(agent, "baseline", False)), repeat=repeat,
    )
    try:
        env = task.environment(variant.injections)
        if variant.image_edits:  # inserted objects in images: an observation filter
            env = EditedImages(env, variant.image_edits)
        pre = env.snapshot()
    except Exception as exc:  # the adapter's environment factory failed: not the agent's doing
        rec.error = f"EnvironmentError: {type(exc).__name__}: {exc}"[:500]
        return rec
    ctx = EpisodeContext(task=task, variant=variant, env=env, seed=seed if episode_seed is None else episode_seed,
                         simulator=simulator or default_simulator(task, variant),
                         loop=_running_loop())
    t0 = time.perf_counter()
    try:
        if timeout_s is None:
            await agent.run(ctx)
        else:
            async with asyncio.timeout(timeout_s):  # in this task: no second task per episode, unlike wait_for
                await agent.run(ctx)
    except TimeoutError:
        rec.error = f"EpisodeTimeout: no answer within {timeout_s:g} s"
    except asyncio.CancelledError:
        raise   # the loop shutting down: not the episode's outcome
    except BaseException as exc:  # noqa: BLE001 - whatever agent code raises (SystemExit, KeyboardInterrupt too)
        rec.error = f"{type(exc).__name__}: {exc}"[:500]
        ctx.trajectory.append(harness_note(AGENT_RAISED + "".join(
            traceback.format_exception(exc))[-8000:]))
    finally:
        ctx.cancelled = True  # a blocking agent still running in its thread stops at its next call
    if ctx.agent_error and not rec.error:  # even when the agent caught it: the store keeps only JSON
        rec.error = f"AgentValueError: {ctx.agent_error}"[:500]
    odd = _keep_entries(ctx)
    if odd and not rec.error:  # never graded: the grader and the readers take entries that are dicts
        rec.error = f"AgentValueError: {odd}"[:500]
    if ctx.simulator_error and not rec.error:  # even when the agent caught it: the user failed, not the agent
        rec.error = f"SimulatorError: {ctx.simulator_error}"[:500]
    rec.wall_s = round(time.perf_counter() - t0, 4)
    rec.input_tokens, rec.output_tokens = ctx.input_tokens, ctx.output_tokens
    rec.reasoning_tokens, rec.cost_usd = ctx.reasoning_tokens, ctx.cost_usd
    if ctx.usage_unknown:  # a call without reported usage: unknown, never 0 (left out of token metrics)
        rec.input_tokens = rec.output_tokens = rec.reasoning_tokens = None
    rec.tool_calls, rec.turns = ctx.tool_calls, ctx.turns
    rec.trajectory = ctx.trajectory
    if not rec.error:
        try:
            post = env.snapshot()
            result = task.grader.grade(pre, post, ctx.answer, ctx.trajectory)
            if not (isinstance(result.reward, (int, float)) and math.isfinite(result.reward)
                    and 0.0 <= result.reward <= 1.0):
                raise ValueError(f"reward {result.reward!r} is not a number in [0, 1]")
        except Exception as exc:  # a broken grader is an infrastructure error, not an agent failure
            rec.error = f"GraderError: {type(exc).__name__}: {exc}"[:500]
            return rec
        rec.reward = float(result.reward)
        rec.success = rec.reward >= task.threshold
        own = None
        if task.compliance is not None and not variant.is_clean:
            try:
                own = task.compliance.check(variant, pre, post, ctx.answer, ctx.trajectory)
            except Exception as exc:  # like a broken grader: an infrastructure error
                rec.error = f"ComplianceCheckError: {type(exc).__name__}: {exc}"[:500]
                return rec
        rec.compliance = classify_compliance(variant, ctx) if own is None else bool(own)
        entry: Entry = {"role": GRADER, "checks": [[c, ok] for c, ok in result.checks],
                        "recovery_turns": ctx.recovery_turns}
        if own is not None:
            entry["compliance_check"] = bool(own)  # decided by the task's own test, not by canaries
        blocked = blocked_replies(ctx.trajectory)
        if blocked:  # replies of the user simulator that would have leaked
            entry["blocked_leaks"] = blocked
        rec.trajectory.append(entry)
    return rec


def run_episode_sync(task: Task, variant: Variant, agent: Agent, **kw: Any) -> EpisodeRecord:
    """:func:`run_episode` for callers outside an event loop."""
    return asyncio.run(run_episode(task, variant, agent, **kw))


def _running_loop() -> asyncio.AbstractEventLoop | None:
    """The episode's event loop, or None when :func:`drive` plays it without one (the validity oracle)."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def drive(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that awaits nothing real to its end, in this thread, without an event loop.

    A bare ``yield`` (``asyncio.sleep(0)``) is stepped over.  Anything that
    needs a loop (a future, a timeout, a task) raises ``RuntimeError`` where
    it is created (there is no running loop), inside the coroutine; a
    coroutine that hands a future out anyway is closed and refused here.
    """
    try:
        while True:
            if coro.send(None) is not None:
                coro.close()
                raise RuntimeError("drive(): the coroutine awaited a future; run it on an event loop")
    except StopIteration as stop:
        return cast(T, stop.value)


def oracle_runner() -> Any:
    """The perturbation engine's oracle runner: the reference oracle on one instance.

    The validity checks play the oracle once or twice per variant, so it
    runs without an event loop of its own (:func:`drive`): the reference
    oracle, the environment, the simulator and the grader are synchronous,
    and with no time limit its episode awaits nothing else.  Its records
    are the same as under ``asyncio.run`` (a test compares them); only the
    cost of a fresh loop per check (most of an oracle run) is gone.
    """
    from ..agents.reference import OracleAgent

    oracle = OracleAgent()

    def run(task: Task, variant: Variant) -> OracleResult:
        rec = drive(run_episode(task, variant, oracle, run_id="validity", seed=variant.seed, timeout_s=None))
        return OracleResult(rec.reward, rec.trajectory, rec.error)

    return run


def make_engine(registry: Registry | None = None, *, authored: bool = True) -> Engine:
    """An engine with the built-in operators (or ``registry``) and the reference oracle.

    ``authored=False`` ignores the tasks' authored edits: the rule operators only.
    """
    from ..perturb import builtin_registry

    return Engine(registry if registry is not None else builtin_registry(), oracle_runner(), authored=authored)

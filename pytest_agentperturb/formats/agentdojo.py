"""AgentDojo (benchmark v1.2.2, package ``agentdojo==0.1.35``) as a suite adapter.

Selected with ``--agentperturb-suite agentdojo`` (all four suites) or
``agentdojo:<suite>`` (workspace, travel, banking, slack); needs the extra
``pip install 'pytest-agentperturb[agentdojo]'``.  Nothing here imports
``agentdojo`` until tasks or operators are asked for.

Mapping onto the task model (docs/design.md section 1b):

* user surface: the user task's ``PROMPT``, verbatim; procedure: the
  suite's system message (``data/system_messages.yaml``, key ``default``);
  tool surface: the suite's function schemas, built from AgentDojo's
  ``Function`` objects exactly as its OpenAI client builds them.
* context: AgentDojo tasks are single-turn, so the context is synthesised:
  an earlier user turn stating the first ground-truth argument value that
  the prompt does not state verbatim (with the argument's schema
  description as its label), and an acknowledgement.  A task whose ground
  truth has no such value gets no context.
* facts: ground-truth argument values stated verbatim in the prompt (or in
  that synthesised turn).  Each is read by a pattern anchored on the words
  around it, so a swapped value is still read as the fact and a vague
  phrase is not.  The gold solution is the ground truth with those values
  replaced by ``{fact}`` placeholders; the gold answer is
  ``GROUND_TRUTH_OUTPUT``.  A task without such a value has nothing for
  the ``missing`` / ``incorrect`` operators of that surface, and the
  engine skips those families with the reason (also listed in the task's
  notes, which the report shows).
* environment: the suite's YAML loaded once per set of planted injections
  (cached, with libyaml when available) and deep-copied for every episode;
  AgentDojo's own tools run under their true names, their results are
  formatted with AgentDojo's ``tool_result_to_str``.  Perturbations never
  reach the environment or the grader.
* grader: the user task's ``utility_from_traces`` (falling back to
  ``utility``, as AgentDojo grades).  The trace holds the agent's calls in
  order, failed ones and calls to tools that do not exist included as in
  AgentDojo, with renamed tools mapped back to their true names (case and
  separators; a counterfactual or fake name stays as called).  Only slack's user task 11 and
  injection task 5 read traces; both of them otherwise check the state.
* inserted objects: one per injection task and attack,
  ``inserted-injection-<suite>-it<NN>`` for the default attack,
  ``important_instructions_no_model_name`` (AgentDojo's important_instructions
  addressed to no model in particular, since a variant must not depend on
  the model under test), ``...-it<NN>-<attack>`` for another attack chosen
  with ``--agentperturb-agentdojo-attack NAME[:MODEL NAME]`` (:class:`Attack`;
  ``important_instructions`` and ``tool_knowledge`` name the model, from
  ``:MODEL NAME`` or the model under test, and their notes say so).  The
  payload is built by AgentDojo's own attack class, planted in the injection
  vectors this user task's ground truth reads (found by replaying it over
  canaries, as AgentDojo's ``get_injection_candidates``: every vector, also
  one that is part of a gold argument, such as slack's channel
  ``External_<vector>``: the gold call then names the planted channel,
  :attr:`~pytest_agentperturb.model.records.Injection.renames`, as
  AgentDojo's ground truth reads it from the environment), JSON-escaped so
  quotes, colons and newlines survive the YAML.  Every (user task, injection
  task) pair of every suite runs.  Compliance is the injection task's
  ``security_from_traces`` / ``security`` (:class:`~pytest_agentperturb.model.task.ComplianceCheck`);
  the reward is the utility under attack.  AgentDojo's own figures (utility,
  utility under attack, attack success rate) per suite are in the summary
  and the report (:mod:`pytest_agentperturb.report.agentdojo_figures`).

Ids: tasks are ``<suite>-ut<NN>`` and injection objects ``it<NN>`` (two
digits, so ``-k banking-ut01`` selects one task and never ``ut10``-``ut15``;
AgentDojo's ``user_task_1`` would also match ``-k user``).  Task suites are
named ``agentdojo:<suite>``.

Import cost: ``agentdojo.task_suite`` imports ``agentdojo.agent_pipeline``,
whose ``__init__`` loads the openai, anthropic, cohere and google clients
(5-17 s).  :func:`load` imports the modules needed here with that package's
``__init__`` deferred (about 1-3 s): the package is registered as a
stand-in that runs the real ``__init__`` on first use of a name it defines
(``from agentdojo.agent_pipeline import AgentPipeline`` in a user's agent
works as usual), and the one client module ``tool_execution`` borrows a
constant from is stubbed only while loading.  It only does so on the
pinned version (checked first), where it is tested; if the package was
already imported, it is used as it is.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.metadata
import importlib.util
import json
import random
import re
import sys
import threading
import types
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..model.authored import Authored
from ..model.errors import OptionError, TaskFormatError, ToolError, VariantSkipped
from ..model.protocols import GradeResult, Observation
from ..model.records import Canary, Injection, Variant
from ..model.interfaces import Edit
from .authored import adapter_pack, pack_entry
from ..model.task import Surfaces, Task, TaskSlot
from ..model.trajectory import is_action
from .benchmark import BenchmarkAdapter
from .derived_facts import Derived, derive_facts

NAME = "agentdojo"
REQUIREMENT = "agentdojo==0.1.35"
INSTALL = "pip install 'pytest-agentperturb[agentdojo]'"
BENCHMARK = "v1.2.2"
SUITES: tuple[str, ...] = ("workspace", "travel", "banking", "slack")
#: User tasks whose utility check already holds on the untouched environment
#: with an empty answer (verified for v1.2.2): a clean pass proves nothing.
NO_OP_PASSES: Mapping[str, frozenset[int]] = {"banking": frozenset({5, 6, 8, 9, 10})}
#: User tasks whose utility check holds on the untouched environment when the
#: answer is ``GROUND_TRUTH_OUTPUT`` (read-only questions, verified for v1.2.2).
ANSWER_ONLY: Mapping[str, frozenset[int]] = {
    "workspace": frozenset({0, 1, 2, 3, 5, 10, 11, 14, 16, 17, 22, 23, 26, 27, 28, 30, 39}),
    "travel": frozenset({2, 5, 6, *range(9, 20)}), "banking": frozenset({1, 7}),
}
OPERATOR_ID = "agentdojo_important_instructions"
#: The user name AgentDojo's important_instructions attack signs with.
ATTACK_USER = "Emma Johnson"
#: The attack planted when none is chosen: AgentDojo's important_instructions addressed to no model in
#: particular (its family is ``inserted-injection-<suite>-it<NN>``, with no attack suffix).
DEFAULT_ATTACK = "important_instructions_no_model_name"
#: Two AgentDojo model ids with different prose names: an attack whose payload differs between them names
#: the model under test.
_PROBE_MODELS = ("gpt-4o-2024-05-13", "claude-3-opus-20240229")

_LEAN_MODULES = ("agentdojo.task_suite.load_suites", "agentdojo.agent_pipeline.tool_execution",
                 "agentdojo.agent_pipeline.ground_truth_pipeline", "agentdojo.functions_runtime",
                 "agentdojo.attacks.important_instructions_attacks")
_ENV_CACHE = 16


# -- importing agentdojo ---------------------------------------------------------------


def parse_name(name: str) -> tuple[str, ...] | None:
    """The AgentDojo suites a ``--agentperturb-suite`` name asks for, or None when it is not ours.

    Raises:
        OptionError: for ``agentdojo:<x>`` with an unknown suite.
    """
    if name == NAME:
        return SUITES
    if not name.startswith(NAME + ":"):
        return None
    wanted = tuple(dict.fromkeys(s.strip() for s in name[len(NAME) + 1:].split(",") if s.strip()))
    bad = [s for s in wanted if s not in SUITES]
    if bad or not wanted:
        raise OptionError(f"--agentperturb-suite {name!r}: unknown AgentDojo suite {', '.join(bad) or '(none)'}; "
                          f"expected 'agentdojo' or 'agentdojo:<suite>' with <suite> one of {', '.join(SUITES)}")
    return wanted


def check_installed() -> None:
    """Raise :class:`OptionError` with the install command unless the pinned agentdojo is installed."""
    try:
        version = importlib.metadata.version("agentdojo")
    except importlib.metadata.PackageNotFoundError:
        raise OptionError(f"the AgentDojo suites need the optional extra ({REQUIREMENT}); "
                          f"fix: {INSTALL}") from None
    if version != REQUIREMENT.split("==")[1]:
        raise OptionError(f"the AgentDojo adapter is pinned to {REQUIREMENT}, found agentdojo {version}; "
                          f"fix: {INSTALL}")


def _lazy_package(name: str, folder: Path) -> types.ModuleType:
    """A stand-in for the package ``name`` whose ``__init__`` runs on first use of a name it defines.

    Submodules load under it as usual; ``from agentdojo.agent_pipeline import
    AgentPipeline`` (PEP 562 ``__getattr__``) then runs the real ``__init__``
    in this module's namespace, so later users see the real package.  Threads
    that ask at once wait for the one running it (before, they got
    ``ImportError: cannot import name``).
    """
    init = folder / "__init__.py"
    mod = types.ModuleType(name)
    mod.__path__ = [str(folder)]
    mod.__file__ = str(init)
    mod.__spec__ = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[str(folder)])
    state = {"ran": False}
    lock = threading.RLock()  # threads asking at once wait for the one that runs it (re-entry: a partial module)

    def __getattr__(attr: str) -> Any:
        if not attr.startswith("__"):
            with lock:
                if not state["ran"]:
                    state["ran"] = True
                    exec(compile(init.read_text(encoding="utf-8"), str(init), "exec"), mod.__dict__)
            if attr in mod.__dict__:
                return mod.__dict__[attr]
        raise AttributeError(f"module {name!r} has no attribute {attr!r}")

    setattr(mod, "__getattr__", __getattr__)
    return mod


@functools.cache
def load() -> types.SimpleNamespace:
    """AgentDojo's modules, imported once, without its LLM clients (see the module docstring)."""
    check_installed()
    spec = importlib.util.find_spec("agentdojo")
    locations = list(spec.submodule_search_locations or ()) if spec is not None else []
    root = Path(locations[0]) / "agent_pipeline" if locations else None
    google = "agentdojo.agent_pipeline.llms.google_llm"
    lean = "agentdojo.agent_pipeline" not in sys.modules and root is not None and (root / "llms").is_dir()
    if lean and root is not None:
        package = _lazy_package("agentdojo.agent_pipeline", root)
        llms = _lazy_package("agentdojo.agent_pipeline.llms", root / "llms")
        setattr(importlib.import_module("agentdojo"), "agent_pipeline", package)  # as an import would
        setattr(package, "llms", llms)
        sys.modules.update({package.__name__: package, llms.__name__: llms})
        stub = types.ModuleType(google)
        # the only name tool_execution takes from it (the same value as 0.1.35's google_llm)
        setattr(stub, "EMPTY_FUNCTION_NAME", "<empty-function-name>")
        sys.modules[google] = stub
    try:
        mods = [importlib.import_module(m) for m in _LEAN_MODULES]
    finally:
        if lean:  # the real google_llm (and the google client) load if someone asks for them later
            del sys.modules[google]
    import pydantic
    import yaml

    load_suites, tool_execution, ground_truth, runtime, attacks = mods
    return types.SimpleNamespace(
        get_suites=load_suites.get_suites, tool_result_to_str=tool_execution.tool_result_to_str,
        is_string_list=tool_execution.is_string_list,
        GroundTruthPipeline=ground_truth.GroundTruthPipeline, FunctionsRuntime=runtime.FunctionsRuntime,
        FunctionCall=runtime.FunctionCall, ValidationError=pydantic.ValidationError, yaml=yaml,
        task_suite=sys.modules["agentdojo.task_suite.task_suite"],
        attack_template=attacks.ImportantInstructionsAttack._JB_STRING,
        default_model_name=sys.modules["agentdojo.attacks.base_attacks"].DEFAULT_MODEL_NAME,
        attacks=sys.modules["agentdojo.attacks.attack_registry"].ATTACKS,
        FixedJailbreakAttack=sys.modules["agentdojo.attacks.base_attacks"].FixedJailbreakAttack,
        model_names=sys.modules["agentdojo.models"].MODEL_NAMES,
    )


def number(agentdojo_id: str) -> int:
    """``user_task_12`` -> 12 (AgentDojo's dicts are in registration order, not numeric)."""
    return int(agentdojo_id.rsplit("_", 1)[1])


def _strings(value: Any) -> Iterator[str]:
    """Every string in a (nested) argument value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)


def escape(payload: str) -> str:
    """A payload as it must be written into a double-quoted YAML scalar to come out unchanged."""
    return json.dumps(payload, ensure_ascii=False)[1:-1]


# -- environment, grader, compliance ------------------------------------------------------------


class AgentDojoEnvironment:
    """One episode's private copy of an AgentDojo environment; runs AgentDojo's tools by true name.

    Arguments and errors are handled as AgentDojo's ``ToolsExecutor``
    handles them (a string that reads as a list is parsed; ``ValueError:
    ...``, ``ValidationError: ...``), errors prefixed with this package's
    phrasing for an unknown tool or a missing required argument.  Injections without a
    vector (the generic ``inserted-injection``) are appended to the named
    tool's results as a ``note:`` line.
    """

    def __init__(self, suite: SuiteData, env: Any, notes: Sequence[Injection] = ()) -> None:
        self.suite = suite
        self.env = env
        self.notes = tuple(notes)

    def call(self, name: str, args: Mapping[str, Any]) -> Any:
        lib = self.suite.lib
        if name not in self.suite.runtime.functions:
            raise ToolError(f"unknown tool '{name}': ToolNotFoundError: The requested function `{name}` "
                            "is not available.")
        # as AgentDojo's ToolsExecutor does: a string that reads as a list is the list
        args = {k: ast.literal_eval(v) if isinstance(v, str) and lib.is_string_list(v) else v for k, v in args.items()}
        try:
            result, _ = self.suite.runtime.run_function(self.env, name, args, raise_on_error=True)
        except lib.ValidationError as exc:
            missing = [f"{name}: missing required argument '{e['loc'][0]}'" for e in exc.errors()
                       if e.get("type") == "missing" and e.get("loc")]
            raise ToolError("\n".join([*missing, f"ValidationError: {exc}"])) from None
        except Exception as exc:  # the tool's own failure: AgentDojo shows it to the model the same way
            raise ToolError(f"{type(exc).__name__}: {exc}") from None
        text = str(lib.tool_result_to_str(result))
        for inj in self.notes:
            if inj.tool == name:
                text += f"\nnote: {inj.text}"
        return Observation.of_text(text)

    def snapshot(self) -> Any:
        return self.env.model_copy(deep=True)


def true_name(name: str, tools: Sequence[str]) -> str | None:
    """The true tool a called name stands for: itself, or the tool it renames by case or separators.

    ``Send-Money`` and ``send-money`` (the ``rename_tool`` styles that keep
    the name) map back to ``send_money``; a counterfactual name
    (``deliver_money``) or a fake tool maps to nothing.
    """
    if name in tools:
        return name
    norm = re.sub(r"[-\s.]+", "_", name.strip()).lower()
    return norm if norm in tools else None


def traces(lib: types.SimpleNamespace, tools: Sequence[str], trajectory: Sequence[Mapping[str, Any]]) -> list[Any]:
    """AgentDojo ``FunctionCall`` s of the agent's tool calls, in order, under true names.

    Like AgentDojo's traces they hold every call the agent made, failed
    ones included, and calls to tools that do not exist under the name
    called (AgentDojo keeps them: its stack trace is every tool call of
    the assistant's messages); a call under a renamed tool is mapped back
    to its true name (:func:`true_name`).
    """
    out = []
    for e in trajectory:
        if not is_action(e):  # the agent's tool calls (asking the user is none: AgentDojo has no user)
            continue
        called = str(e["tool"])
        name = true_name(called, tools) or called
        if isinstance(e.get("args"), Mapping):
            out.append(lib.FunctionCall.model_construct(function=name, args=dict(e["args"]), id=None,
                                                        placeholder_args=None))
    return out


class UtilityGrader:
    """The user task's own utility check, trace-based where the task defines one."""

    def __init__(self, suite: SuiteData, user_task: Any) -> None:
        self.suite = suite
        self.user_task = user_task

    def grade(self, pre_state: Any, post_state: Any, answer: str,
              trajectory: Sequence[Mapping[str, Any]]) -> GradeResult:
        calls = traces(self.suite.lib, self.suite.tool_names, trajectory)
        ok = self.user_task.utility_from_traces(answer, pre_state, post_state, calls)
        how = "utility_from_traces"
        if ok is None:
            ok, how = self.user_task.utility(answer, pre_state, post_state), "utility"
        return GradeResult(1.0 if ok else 0.0, ((f"AgentDojo {self.suite.name}/{self.user_task.ID} {how}", bool(ok)),))


class SecurityCheck:
    """Compliance with an injection task: its ``security()`` says the injected goal was achieved."""

    def __init__(self, suite: SuiteData) -> None:
        self.suite = suite

    def check(self, variant: Variant, pre_state: Any, post_state: Any, answer: str,
              trajectory: Sequence[Mapping[str, Any]]) -> bool | None:
        task = self.suite.injection_for(variant.family)
        if task is None:
            return None  # not one of this suite's injection tasks: the canaries decide
        calls = traces(self.suite.lib, self.suite.tool_names, trajectory)
        hit = task.security_from_traces(answer, pre_state, post_state, calls)
        return bool(hit if hit is not None else task.security(answer, pre_state, post_state))


class Attack:
    """One of AgentDojo's attacks, chosen with ``--agentperturb-agentdojo-attack NAME[:MODEL NAME]``.

    Its payloads are built by AgentDojo's own attack class (``attack()``,
    with the injection candidates this adapter found, which are AgentDojo's),
    so no model is called.  The attacks offered are AgentDojo's fixed
    templates (``FixedJailbreakAttack``: ``important_instructions`` and its
    variants, ``tool_knowledge``, ``direct``, ``ignore_previous``,
    ``system_message``, ``injecagent``); ``manual`` asks a person and the DoS
    attacks plant no injection task, so they are not offered.  An attack that
    addresses the model (``important_instructions``, ``tool_knowledge``, ...)
    takes its name from ``:MODEL NAME`` (one of AgentDojo's, e.g. ``GPT-4``) or
    from the model under test, as AgentDojo's ``get_model_name_from_pipeline``
    reads it; its variants then depend on the model, and their note says so.
    """

    def __init__(self, lib: types.SimpleNamespace, spec: str, models: Sequence[str] = ()) -> None:
        name, _, model = (x.strip() for x in spec.partition(":"))
        offered = names_of_attacks(lib)
        if name not in offered:
            raise OptionError(f"--agentperturb-agentdojo-attack {spec!r}: unknown attack; expected one of "
                              f"{', '.join(offered)} (optionally NAME:<model name> for one that names the model)")
        self.lib, self.name, self.cls = lib, name, lib.attacks[name]
        probes = [self._build(m).model_name for m in _PROBE_MODELS]
        self.names_model = probes[0] != probes[1]
        self.model = ""
        if self.names_model:
            self.model = model or _model_name(lib, spec, models)
            full = next((k for k, v in lib.model_names.items() if v == self.model), None)
            if full is None:
                raise OptionError(f"--agentperturb-agentdojo-attack {spec!r}: {self.model!r} is none of AgentDojo's "
                                  f"model names ({', '.join(sorted(set(lib.model_names.values())))})")
            self.pipeline_name = full
        elif model:
            raise OptionError(f"--agentperturb-agentdojo-attack {spec!r}: {name} names no model; drop ':{model}'")
        else:
            self.pipeline_name = _PROBE_MODELS[0]
        self.planted_model = str(self._build(self.pipeline_name).model_name)  # the wrong_model_name attack's differs
        self.suffix = "" if name == DEFAULT_ATTACK else "-" + name.replace("_", "-")
        self._built: dict[str, Any] = {}

    def _build(self, pipeline_name: str, suite: Any = None) -> Any:
        return self.cls(suite if suite is not None else _NoSuite(), types.SimpleNamespace(name=pipeline_name))

    def for_suite(self, data: SuiteData) -> Any:
        """AgentDojo's attack object for one suite, its injection candidates read from the adapter's."""
        if data.name not in self._built:
            obj = self._build(self.pipeline_name, data.suite)
            obj.get_injection_candidates = lambda ut: [v for v, _ in data.vectors(data.task_id_of(ut.ID))[0]]
            self._built[data.name] = obj
        return self._built[data.name]

    def payloads(self, data: SuiteData, task_id: str, injection_id: str) -> dict[str, str]:
        """Vector -> text, as AgentDojo's attack plants them into one (user task, injection task) pair."""
        obj = self.for_suite(data)
        return dict(obj.attack(data.user_task(task_id), data.suite.injection_tasks[injection_id]))

    @property
    def note(self) -> str:
        if self.names_model:
            to = self.planted_model if self.planted_model == self.model else f"{self.planted_model} (for {self.model})"
            return f"AgentDojo attack {self.name}, addressed to {to}: the variant depends on the model named"
        return f"AgentDojo attack {self.name}"


class _NoSuite:
    """Stands in for a task suite while probing an attack class (it only reads the vector defaults)."""

    def get_injection_vector_defaults(self) -> dict[str, str]:
        return {}


def names_of_attacks(lib: types.SimpleNamespace) -> tuple[str, ...]:
    """AgentDojo's attacks that this adapter offers (fixed templates that plant an injection task)."""
    return tuple(sorted(n for n, cls in lib.attacks.items()
                        if issubclass(cls, lib.FixedJailbreakAttack) and not cls.is_dos_attack))


def _model_name(lib: types.SimpleNamespace, spec: str, models: Sequence[str]) -> str:
    """The one AgentDojo model name the models under test map to (as ``get_model_name_from_pipeline``)."""
    found = {m: next((v for k, v in lib.model_names.items() if k in m), None) for m in models}
    names = sorted({v for v in found.values() if v})
    unknown = [m for m, v in found.items() if v is None]
    if len(names) == 1 and not unknown:
        return str(names[0])
    why = (f"the models under test map to {', '.join(names)}" if len(names) > 1 else
           f"AgentDojo knows no model name for {', '.join(unknown) or 'no model'}")
    raise OptionError(f"--agentperturb-agentdojo-attack {spec!r}: the attack names the model under test, and {why}; "
                      f"fix: name it, e.g. {spec.partition(':')[0]}:GPT-4 (a variant is shared by every model of "
                      "the run, so one name is planted)")


class InjectionTaskOperator:
    """Plant one AgentDojo injection task into a user task's injection vectors (``inserted-injection-<suite>-it<NN>``).

    The payload goes exactly where AgentDojo's attacks put it: every vector
    the user task's ground truth reads, the text built by the chosen attack
    (:class:`Attack`; the default's family has no suffix, another's ends in
    ``-<attack>``).  Nothing on the four surfaces changes; the canary is the
    injection task's goal, but compliance is decided by its ``security()``
    check (:class:`SecurityCheck`).
    """

    def __init__(self, suite: SuiteData, injection_id: str, attack: Attack | None = None) -> None:
        self.suite = suite
        self.injection_id = injection_id
        self.attack = attack or suite.attack(DEFAULT_ATTACK)
        self.family = suite.family_of(injection_id, self.attack)
        self.id = OPERATOR_ID if self.attack.name == DEFAULT_ATTACK else f"agentdojo_{self.attack.name}"

    def applicable(self, task: Task) -> bool:
        return task.suite == self.suite.key

    def apply(self, task: Task, rng: random.Random) -> Edit | None:
        plan, fed = self.suite.vectors(task.id)
        if not plan:
            raise VariantSkipped("its ground truth reads no injection vector (AgentDojo: not injectable)")
        it = self.suite.suite.injection_tasks[self.injection_id]
        texts = self.attack.payloads(self.suite, task.id, self.injection_id)
        injections = tuple(Injection(tool, texts[vector], it.GOAL, vector,
                                     renames=self.suite.renames(fed.get(vector, ()), vector, texts[vector]))
                           for vector, tool in plan)
        return Edit(task.surfaces, (Canary("goal", it.GOAL),), injections=injections,
                    note=f"{self.attack.note}: {self.injection_id} into {', '.join(v for v, _ in plan)}: {it.GOAL}")


# -- one suite -------------------------------------------------------------------------------------


class SuiteData:
    """One AgentDojo suite: its tools, system message, environments and injection vectors (loaded once)."""

    def __init__(self, lib: types.SimpleNamespace, name: str) -> None:
        self.lib = lib
        self.name = name
        self.key = f"{NAME}:{name}"
        self.suite = lib.get_suites(BENCHMARK)[name]
        self.runtime = lib.FunctionsRuntime(self.suite.tools)
        self.schemas = {f.name: {"name": f.name, "description": f.description,
                                 "parameters": f.parameters.model_json_schema()} for f in self.suite.tools}
        self.tools = tuple({"type": "function", "function": s} for s in self.schemas.values())
        self.tool_names = tuple(self.schemas)
        path = Path(sys.modules["agentdojo"].__file__ or "").parent / "data" / "system_messages.yaml"
        self.system_message = str(lib.yaml.safe_load(path.read_text(encoding="utf-8"))["default"])
        self.defaults: dict[str, str] = dict(self.suite.get_injection_vector_defaults())
        self._envs: OrderedDict[tuple[tuple[str, str], ...], Any] = OrderedDict()
        self._vectors: dict[str, tuple[tuple[tuple[str, str], ...], dict[str, tuple[str, ...]]]] = {}
        self.user_tasks = {f"{name}-ut{number(k):02d}": k for k in sorted(self.suite.user_tasks, key=number)}
        #: family -> injection task id, for every attack asked for (the default's from the start)
        self.injections: dict[str, str] = {}
        self._attacks: dict[str, Attack] = {}
        self.attack(DEFAULT_ATTACK)

    def attack(self, spec: str, models: Sequence[str] = ()) -> Attack:
        """The attack ``spec`` names (built once), its families registered for :meth:`injection_for`."""
        if spec not in self._attacks:
            att = Attack(self.lib, spec, models)
            self._attacks[spec] = att
            for k in sorted(self.suite.injection_tasks, key=number):
                self.injections[self.family_of(k, att)] = k
        return self._attacks[spec]

    def family_of(self, injection_id: str, attack: Attack | None = None) -> str:
        return f"inserted-injection-{self.name}-it{number(injection_id):02d}{attack.suffix if attack else ''}"

    def task_id_of(self, agentdojo_id: str) -> str:
        """``user_task_7`` -> ``slack-ut07``."""
        return f"{self.name}-ut{number(agentdojo_id):02d}"

    def user_task(self, task_id: str) -> Any:
        return self.suite.user_tasks[self.user_tasks[task_id]]

    def injection_for(self, family: str) -> Any:
        key = self.injections.get(family)
        return self.suite.injection_tasks[key] if key is not None else None

    def environment(self, planted: Mapping[str, str]) -> Any:
        """A fresh deep copy of the environment with ``planted`` (already escaped) in its vectors."""
        key = tuple(sorted(planted.items()))
        if key not in self._envs:
            self._envs[key] = self._load(dict(planted))
            if len(self._envs) > _ENV_CACHE:
                self._envs.popitem(last=False)
        self._envs.move_to_end(key)
        return self._envs[key].model_copy(deep=True)

    def _load(self, planted: dict[str, str]) -> Any:
        """What ``load_and_inject_default_environment`` returns, parsed with libyaml when available."""
        ts = self.lib.task_suite
        yaml = self.lib.yaml
        if not getattr(yaml, "__with_libyaml__", False):
            return self.suite.load_and_inject_default_environment(planted)
        ts.validate_injections(planted, self.defaults)
        text = ts.read_suite_file(self.suite.name, "environment.yaml", self.suite.data_path)
        data = yaml.load(text.format(**{**self.defaults, **planted}), Loader=yaml.CSafeLoader)
        return self.suite.environment_type.model_validate(data)

    def vectors(self, task_id: str) -> tuple[tuple[tuple[str, str], ...], dict[str, tuple[str, ...]]]:
        """Where to plant an injection into one user task: ``(plan, fed)``.

        ``plan`` holds (vector, true name of the tool showing it) for each
        vector the ground truth reads, in vector order, as AgentDojo's
        ``get_injection_candidates`` finds them (canaries in every vector,
        ground truth replayed); AgentDojo plants into all of them.  ``fed``
        maps a vector that also ends up in an argument of the gold calls
        (slack's channel ``External_<vector>``, which the ground truth reads
        from the environment) to those argument values, with the vector's
        canary in them: planted there, the gold call names the planted text
        (:meth:`renames`).
        """
        if task_id not in self._vectors:
            canaries = {v: f"<CANARY---{v}--->" for v in self.defaults}
            env = self.environment(canaries)
            seen: dict[str, str] = {}
            calls = self.user_task(task_id).ground_truth(env.model_copy(deep=True))
            values = [v for c in calls for v in _strings(c.args)]
            for call in calls:
                result, _ = self.runtime.run_function(env, call.function, call.args)
                text = str(self.lib.tool_result_to_str(result))
                for v, c in canaries.items():
                    if c in text:
                        seen.setdefault(v, call.function)
            fed = {v: tuple(dict.fromkeys(x for x in values if canaries[v] in x)) for v in canaries if v in seen}
            self._vectors[task_id] = (tuple((v, seen[v]) for v in canaries if v in seen),
                                      {v: x for v, x in fed.items() if x})
        return self._vectors[task_id]

    def renames(self, templates: Sequence[str], vector: str, text: str) -> tuple[tuple[str, str], ...]:
        """(clean, injected) gold-argument values for ``text`` planted in ``vector`` (see :meth:`vectors`)."""
        canary = f"<CANARY---{vector}--->"
        return tuple((t.replace(canary, self.defaults[vector]), t.replace(canary, text)) for t in templates)

    def make_task(self, task_id: str) -> Task:
        """The task model of one user task."""
        ut = self.user_task(task_id)
        base = self.environment({})
        calls = [(c.function, dict(c.args)) for c in ut.ground_truth(base.model_copy(deep=True))]
        got = derive_facts(ut.PROMPT, self.system_message, calls, self.schemas)
        surfaces = Surfaces(ut.PROMPT, self.system_message, got.context, self.tools)

        def make(injections: tuple[Injection, ...] = ()) -> AgentDojoEnvironment:
            planted = {i.vector: escape(i.text) for i in injections if i.vector}
            env = ut.init_environment(self.environment(planted))
            return AgentDojoEnvironment(self, env, [i for i in injections if not i.vector])

        return Task(
            suite=self.key, id=task_id, title=f"AgentDojo {BENCHMARK} {self.name}/{ut.ID}", surfaces=surfaces,
            facts=got.facts, solution=got.steps, answer=ut.GROUND_TRUTH_OUTPUT, grader=UtilityGrader(self, ut),
            environment=make, tools=self.tool_names, notes=self._notes(ut, got), compliance=SecurityCheck(self),
            authored=self.authored(task_id),
            fingerprint={"agentdojo": f"{REQUIREMENT} {BENCHMARK} {self.name}/{ut.ID}".encode(),
                         "ground_truth": json.dumps(calls, sort_keys=True, default=str).encode(),
                         "answer": ut.GROUND_TRUTH_OUTPUT.encode()},
        )

    @functools.cached_property
    def pack(self) -> dict[str, Authored]:
        """The suite's authored edits by task id (``agentdojo_edits/<suite>.toml`` and any
        ``<suite>-<part>.toml``; ``*``: every task's), read once."""
        return adapter_pack(Path(__file__).parent / "agentdojo_edits", self.name)

    def authored(self, task_id: str) -> Authored:
        """The task's authored edits from the suite's pack."""
        return pack_entry(self.pack, task_id)

    def _notes(self, ut: Any, got: Derived) -> tuple[str, ...]:
        notes = []
        if number(ut.ID) in NO_OP_PASSES.get(self.name, ()):
            notes.append("passes without any action (its AgentDojo utility check already holds on the untouched "
                         "environment): a clean pass proves nothing")
        elif number(ut.ID) in ANSWER_ONLY.get(self.name, ()):
            notes.append("its AgentDojo utility check passes on the gold answer alone: the reference agents, which "
                         "answer with it, pass it whatever the perturbation (a baseline artefact)")
        if not got.on("user"):
            notes.append("no ground-truth argument is stated verbatim in the prompt: user-missing and "
                         "user-incorrect have no fact to act on and are skipped")
        if not got.on("context"):
            notes.append("no lookup argument of its ground truth is left to state (each is in the prompt, a "
                         "list, or longer than one short sentence): no context turn is synthesised, so "
                         "context-missing and context-incorrect are skipped")
        notes.append("the procedure (the suite's system message) states no task value: procedure-missing and "
                     "procedure-incorrect are skipped")
        return tuple(notes)


# -- the adapter ------------------------------------------------------------------------------------


class AgentDojoAdapter(BenchmarkAdapter["SuiteData"]):
    """Suite adapter for ``agentdojo`` / ``agentdojo:<suite>`` (see the module docstring).

    Task ids are ``<suite>-ut<NN>``; each task's ``suite`` is
    ``agentdojo:<suite>`` whichever name selected it, so seeds and stored
    rows are the same either way.
    """

    benchmark, requirement = NAME, REQUIREMENT
    task_field, task_kind = "ground_truth", "a user task the adapter can map"

    def __init__(self, name: str, suites: Sequence[str], attacks: Sequence[str] = (),
                 models: Sequence[str] = ()) -> None:
        check_installed()
        super().__init__(name, suites)
        #: ``--agentperturb-agentdojo-attack`` values (default: :data:`DEFAULT_ATTACK`) and the models under test
        self.attack_specs = tuple(dict.fromkeys(attacks)) or (DEFAULT_ATTACK,)
        self.models = tuple(models)

    @property
    def suites(self) -> tuple[str, ...]:
        return self.parts

    def load_part(self, part: str) -> SuiteData:
        return SuiteData(load(), part)

    def task_ids(self, data: SuiteData) -> Iterator[str]:
        return iter(data.user_tasks)

    def source(self, data: SuiteData, task_id: str) -> str:
        return str(data.user_tasks[task_id])

    def operators(self) -> list[InjectionTaskOperator]:
        """One inserted object per injection task of the selected suites and attack chosen.

        Raises:
            OptionError: for an unknown attack, or one naming the model when no single name is known.
        """
        return [InjectionTaskOperator(self.data(s), k, self.data(s).attack(spec, self.models))
                for spec in self.attack_specs for s in self.suites
                for k in sorted(self.data(s).suite.injection_tasks, key=number)]


def adapter_for(name: str, attacks: Sequence[str] = (), models: Sequence[str] = ()) -> AgentDojoAdapter | None:
    """The adapter for a ``--agentperturb-suite`` name, or None when the name is not AgentDojo's.

    Raises:
        OptionError: for an unknown AgentDojo suite or a missing extra (the message has the fix).
    """
    suites = parse_name(name)
    return None if suites is None else AgentDojoAdapter(name, suites, attacks, models)

"""``agentperturb simulator-check``: how well a user simulator answers the question bank.

The question bank (``fixtures/question_bank/<suite>.json``, shipped in the
wheel as ``pytest_agentperturb.question_bank``) holds, for every fact of the
built-in suites, fair questions (a user would answer them with that fact),
unfair ones (about something else: other facts of the task, unrelated
things) and compound ones (two facts at once).  For each fact ``f`` the
check builds the simulator of an instance whose recovery annotation is
``{f}`` and asks every fair and unfair question of ``f``; for each compound
question about ``f`` and ``g`` the annotation is ``{f, g}``.  What a reply
disclosed is read from the reply (the facts' values), as in episodes.

Figures, per simulator: ``fair_accuracy`` (share of fair questions whose
reply states the fact), ``unfair_disclosed`` (share of unfair questions
whose reply states a fact: should be 0), ``compound_full`` (share of
compound questions whose reply states both facts).  ``--json PATH`` writes
exactly ``{"simulator", "fair_accuracy", "unfair_disclosed",
"compound_full", "n_fair", "n_unfair", "n_compound"}``.

Exit status: 0; 1 when a fact of a checked suite lacks bank entries (listed;
the figures cover what is there); 2 for usage errors and provider errors.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..formats import shipped
from ..formats.native import is_suite, load_tasks
from ..model.errors import OptionError, TaskFormatError
from ..model.options import OPTIONS, LLMSettings, Option, resolve
from ..model.interfaces import Simulator
from ..model.protocols import UserReply
from ..model.task import Task

log = logging.getLogger("agentperturb.simulator_check")

BANK_FORMAT = "agentperturb-question-bank/1"
MIN_FAIR, MIN_UNFAIR, MIN_COMPOUND = 5, 3, 2
#: LLM options the check takes (as ``--name`` and ``--agentperturb-name``).
LLM_OPTIONS = ("user_model", "api_base", "attempts", "backoff", "max_tokens", "request_timeout", "connections")

#: ``factory(task, recovery) -> simulator`` for one instance.
Factory = Callable[[Task, tuple[str, ...]], Simulator]


# -- the bank ----------------------------------------------------------------------


def bank_folder() -> Path:
    """The shipped question bank: inside the package in a wheel, ``fixtures/question_bank`` in a checkout."""
    try:
        spec = importlib.util.find_spec("pytest_agentperturb.question_bank")
    except ModuleNotFoundError:
        spec = None
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return Path(__file__).resolve().parent.parent.parent / "fixtures" / "question_bank"


def builtin_suites() -> list[Path]:
    """Folders of the built-in suites."""
    root = shipped("suites")
    return sorted(p for p in root.iterdir() if is_suite(p))


def suite_tasks(path: Path) -> list[Task]:
    """Every task of a suite folder (the first malformed task is raised)."""
    tasks = []
    for t in load_tasks(path):
        if isinstance(t, TaskFormatError):
            raise t
        tasks.append(t)
    return tasks


def load_bank(folder: Path, suite: str) -> dict[str, Any]:
    """The bank of one suite; :class:`OptionError` when there is none or it is malformed."""
    path = folder / f"{suite}.json"
    if not path.is_file():
        raise OptionError(f"no question bank for suite {suite!r} at {path}; write one with "
                          "fixtures/question_bank/build.py (see its docstring) or pass --bank FOLDER")
    try:
        bank = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise OptionError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(bank, dict) or bank.get("format") != BANK_FORMAT or not isinstance(bank.get("tasks"), dict):
        raise OptionError(f"{path}: expected a {BANK_FORMAT!r} object with 'tasks'")
    return bank


def bank_problems(tasks: Sequence[Task], bank: dict[str, Any]) -> list[str]:
    """What the bank lacks or gets wrong for ``tasks``: one line per problem.

    A fact lacks entries with fewer than :data:`MIN_FAIR` fair, :data:`MIN_UNFAIR`
    unfair or :data:`MIN_COMPOUND` compound questions; a question must not
    state the value of any fact of its task; a compound question names two
    different facts of the task; fair questions of a fact are distinct.
    """
    from ..simulator.matching import states

    out = []
    for task in tasks:
        where = f"{task.suite}/{task.id}"
        entry = bank.get("tasks", {}).get(task.id) or {}
        facts, compound = entry.get("facts") or {}, entry.get("compound") or []
        ids = [f.id for f in task.facts]
        for c in compound:
            names = c.get("facts") or []
            if len(names) != 2 or len(set(names)) != 2 or not set(names) <= set(ids):
                out.append(f"{where}: compound question {c.get('question')!r} must name two facts of the task, "
                           f"names {names}")
        for f in task.facts:
            fe = facts.get(f.id) or {}
            fair, unfair = list(fe.get("fair") or []), list(fe.get("unfair") or [])
            n_comp = sum(1 for c in compound if f.id in (c.get("facts") or []))
            lacking = [f"{n} {what} (need {need})" for n, what, need in
                       ((len(fair), "fair", MIN_FAIR), (len(unfair), "unfair", MIN_UNFAIR),
                        (n_comp, "compound", MIN_COMPOUND)) if n < need]
            if lacking:
                out.append(f"{where}/{f.id}: lacks entries: " + ", ".join(lacking))
            if len(set(fair)) != len(fair):
                out.append(f"{where}/{f.id}: repeated fair questions")
        for q in _questions(entry):
            stated = [f.id for f in task.facts if states(f.value, q)]
            if stated:
                out.append(f"{where}: question {q!r} states the value of {', '.join(stated)}")
    return out


def _questions(entry: dict[str, Any]) -> list[str]:
    qs = [q for fe in (entry.get("facts") or {}).values() for k in ("fair", "unfair") for q in fe.get(k) or []]
    return qs + [str(c.get("question", "")) for c in entry.get("compound") or []]


# -- the check -----------------------------------------------------------------------


@dataclass
class CheckResult:
    """Figures of one simulator on the bank, and the misses (for ``--verbose``)."""

    simulator: str
    n_fair: int = 0
    fair_ok: int = 0
    n_unfair: int = 0
    unfair_disclosed_n: int = 0
    n_compound: int = 0
    compound_ok: int = 0
    blocked: int = 0
    misses: list[tuple[str, str, str, str]] = field(default_factory=list)  # (what, where, question, reply)

    @staticmethod
    def _share(k: int, n: int) -> float | None:
        return round(k / n, 4) if n else None

    @property
    def fair_accuracy(self) -> float | None:
        return self._share(self.fair_ok, self.n_fair)

    @property
    def unfair_disclosed(self) -> float | None:
        return self._share(self.unfair_disclosed_n, self.n_unfair)

    @property
    def compound_full(self) -> float | None:
        return self._share(self.compound_ok, self.n_compound)

    def to_json(self) -> dict[str, Any]:
        return {"simulator": self.simulator, "fair_accuracy": self.fair_accuracy,
                "unfair_disclosed": self.unfair_disclosed, "compound_full": self.compound_full,
                "n_fair": self.n_fair, "n_unfair": self.n_unfair, "n_compound": self.n_compound}

    def lines(self) -> list[str]:
        """The figures as the command prints them."""
        def fig(k: int, n: int) -> str:
            return f"{k / n:.3f} ({k}/{n})" if n else "n/a (no questions)"

        neutral = self.n_unfair - self.unfair_disclosed_n
        return [f"simulator: {self.simulator}",
                f"  fair questions answered with the right fact:  {fig(self.fair_ok, self.n_fair)}",
                f"  unfair questions given the neutral reply:     {fig(neutral, self.n_unfair)}",
                f"  compound questions answered in full:          {fig(self.compound_ok, self.n_compound)}",
                f"  replies blocked by the leak guard:            {self.blocked}"]


@dataclass(frozen=True)
class _Ask:
    what: str  # fair | unfair | compound
    task: Task
    recovery: tuple[str, ...]
    question: str


def bank_items(tasks: Sequence[Task], bank: dict[str, Any]) -> list[_Ask]:
    """Every (kind, instance, question) the check asks, in bank order."""
    items = []
    for task in tasks:
        entry = bank.get("tasks", {}).get(task.id) or {}
        for f in task.facts:
            fe = (entry.get("facts") or {}).get(f.id) or {}
            items += [_Ask("fair", task, (f.id,), q) for q in fe.get("fair") or []]
            items += [_Ask("unfair", task, (f.id,), q) for q in fe.get("unfair") or []]
        ids = {f.id for f in task.facts}
        for c in entry.get("compound") or []:
            names = tuple(c.get("facts") or ())
            if len(names) == 2 and set(names) <= ids:
                items.append(_Ask("compound", task, names, str(c["question"])))
    return items


async def _ask(sim: Simulator, question: str) -> UserReply:
    ask_async = getattr(sim, "answer_async", None)
    return UserReply.of(await ask_async(question) if ask_async is not None else sim.answer(question))


async def run_check(name: str, items: Sequence[_Ask], factory: Factory, concurrency: int = 16) -> CheckResult:
    """Ask every item of a fresh simulator from ``factory``; score the replies by their values."""
    from ..simulator.keyword import LeakGuard

    res = CheckResult(name)
    sem = asyncio.Semaphore(max(1, concurrency))

    async def one(item: _Ask) -> UserReply:
        async with sem:
            return await _ask(factory(item.task, item.recovery), item.question)

    replies = await asyncio.gather(*(one(i) for i in items))
    for item, reply in zip(items, replies):
        guard = LeakGuard(item.task, item.recovery)
        disclosed = set(guard.disclosed(reply.text))
        res.blocked += int(reply.blocked)
        ok: bool
        if item.what == "fair":
            res.n_fair += 1
            ok = item.recovery[0] in disclosed
            res.fair_ok += ok
        elif item.what == "unfair":
            res.n_unfair += 1
            ok = not disclosed
            res.unfair_disclosed_n += not ok
        else:
            res.n_compound += 1
            ok = disclosed >= set(item.recovery)
            res.compound_ok += ok
        if not ok:
            res.misses.append((item.what, f"{item.task.suite}/{item.task.id}/{'+'.join(item.recovery)}",
                               item.question, reply.text))
    return res


def keyword_factory(task: Task, recovery: tuple[str, ...]) -> Simulator:
    from ..simulator.keyword import UserSimulator

    return UserSimulator(task, recovery)


def llm_factory(settings: LLMSettings) -> Factory:
    from ..simulator.llm import LLMSimulator

    def make(task: Task, recovery: tuple[str, ...]) -> Simulator:
        return LLMSimulator(task, recovery, settings=settings)

    return make


def check(suite_dirs: Sequence[Path], settings: LLMSettings, bank: Path | None = None,
          factory: Factory | None = None) -> tuple[CheckResult, list[str]]:
    """Run the check on ``suite_dirs`` with the keyword simulator or ``settings.user_model``.

    Returns the figures and the bank's problems for these suites (facts
    that lack entries and malformed entries).
    """
    folder = bank or bank_folder()
    items: list[_Ask] = []
    problems: list[str] = []
    for d in suite_dirs:
        if not is_suite(d):
            raise OptionError(f"{d}: not a suite folder (no suite.toml)")
        tasks = suite_tasks(d)
        if not tasks:
            continue
        b = load_bank(folder, tasks[0].suite)
        problems += bank_problems(tasks, b)
        items += bank_items(tasks, b)
    if factory is None:
        factory = llm_factory(settings) if settings.user_model else keyword_factory
    name = settings.user_model or "keyword"

    async def go() -> CheckResult:
        try:
            return await run_check(name, items, factory, settings.model_connections)
        finally:
            if settings.user_model:
                from ..agents.litellm_agent import close_clients

                await close_clients()

    return asyncio.run(go()), problems


# -- the command ------------------------------------------------------------------------


def _cmd(args: argparse.Namespace) -> int:
    def lookup(opt: Option) -> tuple[Any, str]:
        val = getattr(args, opt.dest, None) if opt.dest in LLM_OPTIONS else None
        return (val, opt.cli_flag) if val is not None else (None, "default")

    settings = resolve(lookup, Path.cwd()).llm
    result, problems = check([Path(s) for s in args.suites], settings, Path(args.bank) if args.bank else None)
    for line in result.lines():
        sys.stdout.write(line + "\n")
    if args.verbose:
        for what, where, q, reply in result.misses:
            sys.stdout.write(f"  miss ({what}) {where}: {q!r} -> {reply!r}\n")
    if args.json:
        from ..report.files import is_json_with, write_text

        doc = result.to_json()   # atomically, never over a store or a file that is not an earlier check's figures
        write_text(args.json, json.dumps(doc, indent=2) + "\n", ours=is_json_with(doc), what="--json figures")
    for p in problems:
        log.warning("question bank: %s", p)
    return 1 if problems else 0


def add_commands(sub: Any) -> None:
    """Register ``simulator-check`` on the ``agentperturb`` command."""
    p = sub.add_parser("simulator-check", help="measure a user simulator on the question bank "
                       "(fair, unfair and compound questions about every fact).")
    p.add_argument("suites", nargs="+", metavar="SUITE_DIR", help="suite folders (holding suite.toml)")
    p.add_argument("--json", metavar="PATH", help="write the figures as JSON")
    p.add_argument("--bank", metavar="FOLDER", help="question bank folder (default: the shipped bank)")
    p.add_argument("-v", "--verbose", action="store_true", help="list every question the simulator got wrong")
    by_dest = {o.dest: o for o in OPTIONS}
    for dest in LLM_OPTIONS:
        o = by_dest[dest]
        what = "the user model to check (default: the offline keyword simulator)" if dest == "user_model" \
            else f"{o.help} (for the user model)"
        p.add_argument(o.cli_flag, o.flag, dest=dest, default=None, metavar=o.metavar, help=what)
    p.set_defaults(func=_cmd)

"""Every option in one table, and the resolved settings (docs/design.md section 7).

Each :class:`Option` is a ``--agentperturb-*`` flag and, where it is a
project setting, an ``agentperturb_*`` ini key.  The pytest plugin declares
them from :data:`OPTIONS`; the ``agentperturb`` command reuses the same
entries (defaults, gate thresholds).  :func:`resolve` applies one precedence
rule, command line over ini file over default, and raises
:class:`~.errors.OptionError` that names where a bad value came from.

The defaults of the model protocol are the study's: 3 attempts with
exponential backoff from 30 s on rate-limit and timeout errors only, 16384
completion tokens per call, 200 turns, 1800 s per episode.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import OptionError
from .vocab import CLEAN, FAMILIES, IMAGE_OBJECTS, INSERTED, parse_families

DEFAULT_MODELS = ("reference/literal", "reference/careful")
DEFAULT_STORE = "reports/agentperturb.sqlite"
DEFAULT_REPORT = "reports/agentperturb.html"
DEFAULT_CACHE = ".agentperturb-cache"
#: How inserted objects in images repaint a region (see :mod:`pytest_agentperturb.imaging.backends`).
IMAGE_BACKENDS = ("pillow", "diffusers")


#: Characters an agent or model name may use: it becomes part of every node id
#: (terminal, JUnit XML, pytest-html), so nothing that markup or a shell reads.
NAME_CHARS = "letters, digits and . _ - + : / @"
_NAME = re.compile(r"[A-Za-z0-9._+:/@-]+")


def check_name(name: str, where: str) -> str:
    """``name`` when it is a usable agent/model name, else :class:`OptionError` naming it and :data:`NAME_CHARS`."""
    if not name.strip():
        raise OptionError(f"{where}: an empty name; expected a name such as reference/literal or "
                          "openai/gpt-5-mini")
    if not _NAME.fullmatch(name) or "::" in name:
        raise OptionError(f"{where}: {name!r} is not a valid agent or model name; allowed: {NAME_CHARS} "
                          "(no '::', no spaces)")
    return name


@dataclass(frozen=True)
class Option:
    """One option.

    ``kind``: ``switch`` (a flag without value), ``int``, ``float``, ``str``,
    ``lines`` (repeatable flag; ini key holds one value per line) or one of
    the gate kinds ``pct``, ``rate``, ``pct_map_target``, ``pct_map_family``
    and ``rule`` (validated by :mod:`pytest_agentperturb.gate`).  ``group`` says which
    settings object it belongs to: ``core``, ``llm`` or ``gate``.
    """

    dest: str
    flag: str
    kind: str
    default: Any
    help: str
    group: str = "core"
    metavar: str | None = None
    ini: str | None = ""          # "" -> derived from the flag; None -> no ini key
    minimum: float | None = None

    @property
    def ini_key(self) -> str | None:
        if self.ini is None:
            return None
        return self.ini or self.flag.lstrip("-").replace("-", "_")

    @property
    def cli_flag(self) -> str:
        """Flag of the stand-alone command: the same name without ``agentperturb-``."""
        return "--" + self.flag[len("--agentperturb-"):]

    @property
    def repeatable(self) -> bool:
        return self.kind in ("lines", "pct_map_target", "pct_map_family")


_GEN = "the LLM generator"
OPTIONS: tuple[Option, ...] = (
    # -- what to run ------------------------------------------------------------
    Option("enabled", "--agentperturb", "switch", False,
           "collect task suites (folders a suite adapter recognises, e.g. with suite.toml) as perturbation tests."),
    Option("models", "--agentperturb-model", "lines", (), "agent/model to run, repeatable: reference/oracle, "
           "reference/literal, reference/careful, reference/noisy, or any litellm model such as openai/gpt-5-mini "
           "or ollama_chat/qwen3:8b (default: " + ", ".join(DEFAULT_MODELS)
           + ", unless --agentperturb-agent is given).",
           metavar="MODEL", ini="agentperturb_models"),
    Option("agents", "--agentperturb-agent", "lines", (),
           "your own agent, repeatable: module:attr or path/to/file.py:attr naming a function (ctx) -> None "
           "(sync or async), an object with .name and .run(ctx), or a class to instantiate.",
           metavar="SPEC", ini="agentperturb_agents"),
    Option("suites", "--agentperturb-suite", "lines", (),
           "a suite that is not a folder, by name (e.g. agentdojo:banking), repeatable; a suite adapter "
           "recognises it. Without path arguments only these suites are collected.",
           metavar="NAME", ini="agentperturb_suites"),
    Option("agentdojo_attacks", "--agentperturb-agentdojo-attack", "lines", (),
           "AgentDojo attack whose payloads the injection tasks plant, repeatable, each its own inserted "
           "objects: important_instructions_no_model_name (the default), important_instructions, tool_knowledge, "
           "important_instructions_no_names, direct, ignore_previous, ...; one that names the model takes "
           "NAME:<AgentDojo model name> (e.g. important_instructions:GPT-4) or the model under test's.",
           metavar="NAME"),
    Option("families", "--agentperturb-families", "str", "",
           "comma-separated families to collect: clean, <target>-<type> and/or inserted objects "
           f"({', '.join(INSERTED)}; in images: {', '.join(IMAGE_OBJECTS)}) (default: all 16, "
           "plus the image objects for tasks whose tools return images).",
           metavar="LIST"),
    Option("seed", "--agentperturb-seed", "int", 0,
           "session seed; per-item seeds derive from it and the item (default: 0).", metavar="N", minimum=0),
    Option("store", "--agentperturb-store", "str", DEFAULT_STORE, f"results store (default: {DEFAULT_STORE}).",
           metavar="PATH"),
    Option("report", "--agentperturb-report", "str", DEFAULT_REPORT,
           f"HTML report (default: {DEFAULT_REPORT}; a run of a -k, -m or --agentperturb-families subset: "
           "agentperturb-<selection>.html beside it).", metavar="PATH"),
    Option("resume", "--agentperturb-resume", "switch", False,
           "reuse episodes already recorded in the store for this run id; run only the missing ones.", ini=None),
    Option("run_id", "--agentperturb-run-id", "str", "",
           "name of this run in the store (default: seed-<seed>-<UTC start time>, unique in the store; with "
           "--agentperturb-resume, the newest such run of the seed).",
           metavar="ID", ini=None),
    Option("strict", "--agentperturb-strict", "switch", False,
           "strict mode: every compliance (the agent took the perturbation up) fails its test."),
    Option("agent_failures_pass", "--agentperturb-agent-failures-pass", "switch", False,
           "report agent-failed episodes as passed tests (the verdict only in the agentperturb_verdict "
           "property) instead of failed ones (a JUnit <failure>, counted as agent-failed, exit status "
           "unchanged)."),
    Option("image_backend", "--agentperturb-image-backend", "str", "pillow",
           "how inserted objects in images repaint a region: pillow (deterministic compositing, the default) "
           "or diffusers (inpainting from local weights; needs pip install -e '.[vision]' and "
           "--agentperturb-inpaint-model).", metavar="{pillow,diffusers}"),
    Option("inpaint_model", "--agentperturb-inpaint-model", "str", "",
           "folder of a local diffusers inpainting pipeline (with model_index.json) for the diffusers image "
           "backend; models are never downloaded.", metavar="PATH"),
    # -- repeated trials and the baseline run (docs/design.md sections 3 and 5) --------
    Option("repeats", "--agentperturb-repeats", "int", 1,
           "episodes per (task, family, agent): K >= 2 runs each K times on the same variant with its own "
           "episode seed, for pass@1, pass^k, pass@k and the noise floor (default: 1).", metavar="K", minimum=1),
    Option("variant_seed", "--agentperturb-variant-seed", "int", None,
           "seed of the variants (default: the session seed); pin it to compare runs whose session seeds, "
           "and so episode seeds, differ on the same variants.", metavar="N"),
    Option("baseline", "--agentperturb-baseline", "str", "",
           "run to compare with on the same variants: RUN_ID or 'last' (the most recent other run in the "
           "store), or another store as path.sqlite[:RUN_ID].", metavar="RUN"),
    # -- the model protocol, concurrency, generator --------------------------------
    Option("concurrency", "--agentperturb-concurrency", "int", 16,
           "episodes in flight per process (xdist worker); episodes are I/O-bound", "llm", "N", minimum=1),
    Option("connections", "--agentperturb-connections", "int", 0,
           "concurrent requests per model and process; 0 means the --agentperturb-concurrency value",
           "llm", "N", minimum=0),
    Option("attempts", "--agentperturb-attempts", "int", 3,
           "attempts per model call; only rate-limit and timeout errors are retried", "llm", "N", minimum=1),
    Option("backoff", "--agentperturb-backoff", "float", 30.0,
           "seconds before the first retry; doubles at every further retry", "llm", "SECONDS", minimum=0),
    Option("max_tokens", "--agentperturb-max-tokens", "int", 16384, "completion tokens per model call",
           "llm", "N", minimum=1),
    Option("max_turns", "--agentperturb-max-turns", "int", 200, "model turns per episode", "llm", "N", minimum=1),
    Option("episode_timeout", "--agentperturb-episode-timeout", "float", 1800.0,
           "seconds per episode; a later episode is recorded as an error", "llm", "SECONDS", minimum=0.001),
    Option("request_timeout", "--agentperturb-request-timeout", "float", 600.0,
           "seconds per model call before it counts as a timeout (retried)", "llm", "SECONDS", minimum=0.001),
    Option("api_base", "--agentperturb-api-base", "str", "",
           "base URL of an OpenAI-compatible endpoint (local vLLM, Ollama...); default: litellm's", "llm", "VALUE"),
    Option("generator", "--agentperturb-generator", "str", "",
           "litellm model that writes perturbed variants (validated and cached); default: rule operators",
           "llm", "VALUE"),
    Option("generator_attempts", "--agentperturb-generator-attempts", "int", 3,
           "generator candidates per variant before falling back to the rule operators", "llm", "N", minimum=1),
    Option("user_model", "--agentperturb-user-model", "str", "",
           "litellm model that plays the user behind ask_user (answers only about the recovery facts; "
           "leaks are blocked); default: the offline keyword simulator", "llm", "MODEL"),
    Option("cache", "--agentperturb-cache", "str", DEFAULT_CACHE,
           f"folder of {_GEN}'s variant cache (relative to the rootdir)", "llm", "VALUE"),
    # -- the gate ---------------------------------------------------------------------
    Option("max_drop", "--agentperturb-max-drop", "pct", None,
           "fail the session when a model's overall relative drop D exceeds PCT percent.", "gate", "PCT"),
    Option("max_target_drop", "--agentperturb-max-target-drop", "pct_map_target", None,
           "maximum relative drop per target (user, procedure, context, tool); a bare PCT applies to every "
           "target; repeatable.", "gate", "[TARGET=]PCT"),
    Option("max_family_drop", "--agentperturb-max-family-drop", "pct_map_family", None,
           "maximum relative drop per family (e.g. tool-incorrect=40); a bare PCT applies to every family; "
           "repeatable.", "gate", "[FAMILY=]PCT"),
    Option("min_bypass", "--agentperturb-min-bypass", "rate", None,
           "minimum bypass rate (share of perturbed episodes without compliance), 0..1.", "gate", "RATE"),
    Option("min_clean", "--agentperturb-min-clean", "rate", None,
           "minimum clean score (mean clean reward), 0..1.", "gate", "SCORE"),
    Option("max_regression", "--agentperturb-max-regression", "pct", None,
           "fail the session when a model's overall D rose by more than PTS points over the baseline run "
           "(--agentperturb-baseline).", "gate", "PTS"),
    Option("gate_on", "--agentperturb-gate-on", "rule", None,
           "how a maximum (drop or regression) is judged: point (the estimate, default), significant (a "
           "one-sided test at 2.5 percent rejects D <= limit: an exact paired test, Holm-corrected over "
           "families or targets; a regression: the whole 95 percent interval lies above the limit) or "
           "conservative (any part of the interval does).", "gate",
           "{point,significant,conservative}"),
)
BY_DEST: Mapping[str, Option] = {o.dest: o for o in OPTIONS}


def option(dest: str) -> Option:
    """The option whose settings field is ``dest``."""
    return BY_DEST[dest]


@dataclass(frozen=True)
class LLMSettings:
    """Resolved protocol, concurrency and generator settings."""

    concurrency: int = 16
    connections: int = 0
    attempts: int = 3
    backoff: float = 30.0
    max_tokens: int = 16384
    max_turns: int = 200
    episode_timeout: float = 1800.0
    request_timeout: float = 600.0
    api_base: str = ""
    generator: str = ""
    generator_attempts: int = 3
    user_model: str = ""
    cache: Path = Path(DEFAULT_CACHE)

    @property
    def model_connections(self) -> int:
        """Per-model connection limit (the concurrency when not set)."""
        return self.connections or self.concurrency


@dataclass(frozen=True)
class Settings:
    """Resolved configuration of one session."""

    models: tuple[str, ...]
    agents: tuple[str, ...]
    suites: tuple[str, ...]
    families: tuple[str, ...]
    seed: int
    store: Path
    report: Path
    resume: bool
    run_id: str
    strict: bool = False
    #: agent-failed episodes as passed test reports (the old outcome) instead of failed ones
    agent_failures_pass: bool = False
    image_backend: str = "pillow"
    inpaint_model: Path | None = None
    #: episodes per (task, family, agent); each repeat has its own episode seed
    repeats: int = 1
    #: seed of the variants (the session seed unless pinned)
    variant_seed: int = 0
    #: the run to compare with (``--agentperturb-baseline``), empty when none
    baseline: str = ""
    #: AgentDojo attacks to plant (``--agentperturb-agentdojo-attack``), empty: the adapter's default
    agentdojo_attacks: tuple[str, ...] = ()
    llm: LLMSettings = field(default_factory=LLMSettings)
    #: raw gate values (validated into thresholds by :mod:`pytest_agentperturb.gate`)
    gate: Mapping[str, Any] = field(default_factory=dict)
    #: where each value came from: the flag, "ini option '<key>' in <file>", or "default"
    sources: Mapping[str, str] = field(default_factory=dict)

    @property
    def runners(self) -> tuple[str, ...]:
        """Every agent name the session runs: models, then Python agents."""
        return (*self.models, *self.agents)


#: ``lookup(option) -> (raw value or None, source)``: what the user set and where.
Lookup = Callable[[Option], tuple[Any, str]]


def _number(opt: Option, raw: Any, src: str) -> Any:
    typ = int if opt.kind == "int" else float
    try:
        val = typ(str(raw).strip())
    except ValueError:
        what = "an integer" if typ is int else "a number"
        raise OptionError(f"{src}: {opt.dest.replace('_', ' ')} must be {what}, got {raw!r}") from None
    if not math.isfinite(val):  # inf waits forever, nan compares false with every limit
        raise OptionError(f"{src}: {opt.dest.replace('_', ' ')} must be a finite number, got {raw!r}")
    if opt.minimum is not None and val < opt.minimum:
        raise OptionError(f"{src}: {opt.dest.replace('_', ' ')} must be at least {opt.minimum:g}, got {raw!r}")
    return val


def _lines(raw: Any) -> tuple[str, ...]:
    items = [raw] if isinstance(raw, str) else list(raw or ())
    return tuple(dict.fromkeys(str(x).strip() for x in items if str(x).strip()))


def _blank(raw: Any) -> bool:
    """An empty value: ``""``, whitespace, or a list of nothing but those."""
    if isinstance(raw, str):
        return not raw.strip()
    if isinstance(raw, (list, tuple)):
        return all(_blank(x) for x in raw)
    return False


def resolve(lookup: Lookup, rootdir: Path) -> Settings:
    """Resolve every option through ``lookup``; relative paths are taken from ``rootdir``.

    Raises:
        OptionError: naming the source of the bad value and what was expected.
    """
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for opt in OPTIONS:
        raw, src = lookup(opt)
        sources[opt.dest] = src
        if opt.kind != "switch" and src != "default" and raw is not None and (
                _blank(raw) or isinstance(raw, (list, tuple)) and any(_blank(x) for x in raw)):
            # given, but empty: never silently the default (an empty --agentperturb-families is not "all")
            raise OptionError(f"{src}: an empty value; expected {opt.metavar or 'a value'}: {opt.help}")
        if raw in (None, "", [], ()):
            values[opt.dest] = opt.default
            continue
        if opt.group == "gate":
            values[opt.dest] = raw  # validated by the gate, which names the source
        elif opt.kind in ("int", "float"):
            values[opt.dest] = _number(opt, raw, src)
        elif opt.kind == "lines":
            values[opt.dest] = _lines(raw)
        elif opt.kind == "switch":
            values[opt.dest] = bool(raw)
        else:
            values[opt.dest] = str(raw).strip()
    try:
        families = tuple(parse_families(values["families"])) if values["families"] else ()
    except ValueError as exc:
        raise OptionError(f"{sources['families']}: {exc}") from None
    if values["families"] and not families:
        raise OptionError(f"{sources['families']}: {values['families']!r} names no family; expected a "
                          f"comma-separated list such as clean,tool-incorrect")
    families = families or (CLEAN, *FAMILIES, *INSERTED)
    if values["image_backend"] not in IMAGE_BACKENDS:
        raise OptionError(f"{sources['image_backend']}: image backend must be one of {', '.join(IMAGE_BACKENDS)}, "
                          f"got {values['image_backend']!r}")
    if values["image_backend"] == "diffusers" and not values["inpaint_model"]:
        raise OptionError(f"{sources['image_backend']}: the diffusers image backend inpaints from local weights; "
                          "fix: add --agentperturb-inpaint-model /path/to/inpainting-pipeline (never downloaded)")
    models = tuple(values["models"]) or (() if values["agents"] else DEFAULT_MODELS)
    for m in models:
        check_name(m, sources["models"])

    def rooted(p: str) -> Path:
        path = Path(p)
        return path if path.is_absolute() else rootdir / path

    llm = LLMSettings(**{o.dest: values[o.dest] for o in OPTIONS if o.group == "llm" and o.dest != "cache"},
                      cache=rooted(values["cache"]))
    from .redact import API_BASE, remember_url

    remember_url(llm.api_base, API_BASE)  # its credentials are secrets: redacted wherever printed or stored
    return Settings(
        models=models, agents=tuple(values["agents"]), suites=tuple(values["suites"]), families=families,
        seed=int(values["seed"]), store=rooted(values["store"]), report=rooted(values["report"]),
        resume=bool(values["resume"]), run_id=values["run_id"] or f"seed-{values['seed']}",
        strict=bool(values["strict"]), agent_failures_pass=bool(values["agent_failures_pass"]),
        image_backend=values["image_backend"],
        inpaint_model=rooted(values["inpaint_model"]) if values["inpaint_model"] else None,
        repeats=int(values["repeats"]),
        variant_seed=int(values["seed"] if values["variant_seed"] is None else values["variant_seed"]),
        baseline=values["baseline"], agentdojo_attacks=tuple(values["agentdojo_attacks"]), llm=llm,
        gate={o.dest: values[o.dest] for o in OPTIONS if o.group == "gate"}, sources=sources,
    )

"""Option names and the one resolver that decides their values.

Every ``--agentperturb-*`` flag that is a project setting is also an ini key
(``agentperturb_*``).  :func:`resolve` applies one precedence rule (command
line over ini over default) and turns a bad value into a usage error that
names where the value came from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from . import gate
from .task import parse_families

ENABLE = "--agentperturb"
MODEL = "--agentperturb-model"
FAMILIES_OPT = "--agentperturb-families"
SEED = "--agentperturb-seed"
STORE = "--agentperturb-store"
REPORT = "--agentperturb-report"
RESUME = "--agentperturb-resume"
RUN_ID = "--agentperturb-run-id"

DEFAULT_MODELS = ("reference/literal", "reference/careful")
DEFAULT_STORE = "reports/agentperturb.sqlite"
DEFAULT_REPORT = "reports/agentperturb.html"


def _ini_name(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def addoption(parser: pytest.Parser) -> None:
    """Declare the option group and its ini keys."""
    g = parser.getgroup("agentperturb", "robustness of agents under perturbation (pytest-agentperturb)")
    g.addoption(ENABLE, action="store_true", default=None,
                help="collect task suites (folders with suite.toml) as perturbation tests.")
    g.addoption(MODEL, action="append", default=None, metavar="MODEL",
                help="agent/model to run, repeatable: reference/oracle, reference/literal, "
                     "reference/careful, or any litellm model such as openai/gpt-5-mini or "
                     f"ollama_chat/qwen3:8b (default: {', '.join(DEFAULT_MODELS)}).")
    g.addoption(FAMILIES_OPT, default=None, metavar="LIST",
                help="comma-separated families to collect: clean, <target>-<type> and/or inserted objects "
                     "(inserted-fake-tool, inserted-distractor-turn, inserted-injection) (default: all 16).")
    g.addoption(SEED, type=int, default=None, metavar="N",
                help="session seed; per-item seeds derive from it and the item (default: 0).")
    g.addoption(STORE, default=None, metavar="PATH", help=f"results store (default: {DEFAULT_STORE}).")
    g.addoption(REPORT, default=None, metavar="PATH", help=f"HTML report (default: {DEFAULT_REPORT}).")
    g.addoption(RESUME, action="store_true", default=False,
                help="reuse episodes already recorded in the store for this run id; run only the missing ones.")
    g.addoption(RUN_ID, default=None, metavar="ID",
                help="name of this run in the store (default: seed-<seed>).")
    from . import llm_options

    llm_options.addoption(parser)
    parser.addini(_ini_name(ENABLE), "enable pytest-agentperturb (same as --agentperturb).", type="bool",
                  default=False)
    parser.addini("agentperturb_models", "agents/models to run, one per line.", type="linelist", default=[])
    parser.addini(_ini_name(FAMILIES_OPT), "families to collect, comma-separated.", default="")
    parser.addini(_ini_name(SEED), "session seed.", default="")
    parser.addini(_ini_name(STORE), "results store path.", default="")
    parser.addini(_ini_name(REPORT), "HTML report path.", default="")
    gate.addoption(parser)  # CI gate thresholds and strict mode


@dataclass(frozen=True)
class Settings:
    """Resolved configuration of one session."""

    enabled: bool
    models: tuple[str, ...]
    families: tuple[str, ...]
    seed: int
    store: Path
    report: Path
    resume: bool
    run_id: str
    sources: dict[str, str] = field(default_factory=dict)


def _pick(config: pytest.Config, flag: str, ini: str | None = None) -> tuple[Any, str]:
    val = config.getoption(flag)
    if val not in (None, [], ""):
        return val, flag
    ini = ini or _ini_name(flag)
    ival = config.getini(ini)
    if ival not in (None, [], ""):
        return ival, f"ini option '{ini}' in {config.inipath or 'the ini file'}"
    return None, "default"


def is_enabled(config: pytest.Config) -> bool:
    """Whether ``--agentperturb`` (or the ini switch) is on."""
    return bool(config.getoption(ENABLE) or config.getini(_ini_name(ENABLE)))


def resolve(config: pytest.Config) -> Settings:
    """Resolve every option; raise ``pytest.UsageError`` naming the bad source."""
    sources: dict[str, str] = {}
    models, src = _pick(config, MODEL, "agentperturb_models")
    sources["models"] = src
    models = tuple(dict.fromkeys(models)) if models else DEFAULT_MODELS

    fams, src = _pick(config, FAMILIES_OPT)
    sources["families"] = src
    try:
        families = tuple(parse_families(fams)) if fams else ()
    except ValueError as exc:
        raise pytest.UsageError(f"{src}: {exc}") from None
    from .task import CLEAN, FAMILIES, INSERTED

    families = families or (CLEAN, *FAMILIES, *INSERTED)

    seed_raw, src = _pick(config, SEED)
    sources["seed"] = src
    try:
        seed = int(seed_raw) if seed_raw not in (None, "") else 0
    except ValueError:
        raise pytest.UsageError(f"{src}: seed must be an integer, got {seed_raw!r}") from None

    store, sources["store"] = _pick(config, STORE)
    report, sources["report"] = _pick(config, REPORT)
    root = Path(str(config.rootpath))
    store_p = Path(store or DEFAULT_STORE)
    report_p = Path(report or DEFAULT_REPORT)
    run_id = config.getoption(RUN_ID) or f"seed-{seed}"
    return Settings(
        enabled=True, models=models, families=families, seed=seed,
        store=store_p if store_p.is_absolute() else root / store_p,
        report=report_p if report_p.is_absolute() else root / report_p,
        resume=bool(config.getoption(RESUME)), run_id=str(run_id), sources=sources,
    )

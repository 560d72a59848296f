"""The option table as pytest options and ini keys, and its resolution for one session.

:func:`addoption` declares every entry of
:data:`~pytest_agentperturb.model.options.OPTIONS` in one option group;
:func:`resolve` reads them (command line over ini file over default) and
turns a bad value into a ``pytest.UsageError`` that names where it came
from.  Option names are module constants tests can import.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pytest

from ..model.errors import OptionError
from ..model.options import OPTIONS, Option, Settings, option
from ..model.options import resolve as resolve_settings

if TYPE_CHECKING:
    from ..gate import Thresholds

ENABLE = option("enabled").flag
MODEL = option("models").flag
AGENT = option("agents").flag
SUITE = option("suites").flag
FAMILIES_OPT = option("families").flag
SEED = option("seed").flag
STORE = option("store").flag
REPORT = option("report").flag
RESUME = option("resume").flag
RUN_ID = option("run_id").flag
STRICT = option("strict").flag

_INI_TYPES: dict[str, Literal["bool", "linelist"]] = {
    "switch": "bool", "lines": "linelist", "pct_map_target": "linelist", "pct_map_family": "linelist"}


def addoption(parser: pytest.Parser) -> None:
    """Declare the option group and its ini keys, from the one table."""
    g = parser.getgroup("agentperturb", "robustness of agents under perturbation (pytest-agentperturb)")
    for o in OPTIONS:
        kw: dict[str, Any] = {"help": o.help if o.group != "llm" else f"{o.help} (default: {o.default!r})."}
        if o.kind == "switch":
            kw.update(action="store_true", default=None)
        else:
            kw.update(action="append" if o.repeatable else "store", default=None, metavar=o.metavar)
        g.addoption(o.flag, **kw)
        if o.ini_key is not None:
            ini_type: Literal["bool", "linelist", "string"] = _INI_TYPES.get(o.kind, "string")
            default: Any = False if ini_type == "bool" else [] if ini_type == "linelist" else ""
            parser.addini(o.ini_key, o.help, type=ini_type, default=default)


def is_enabled(config: pytest.Config) -> bool:
    """Whether ``--agentperturb`` (or the ini switch) is on."""
    return bool(config.getoption(ENABLE) or config.getini(option("enabled").ini_key or ""))


def _lookup(config: pytest.Config, o: Option) -> tuple[Any, str]:
    val = config.getoption(o.flag)
    if val is not None:  # given on the command line, even if empty (the resolver rejects an empty value)
        return val, o.flag
    if o.ini_key is not None:
        ival = config.getini(o.ini_key)
        if ival not in (None, [], "", False):
            return ival, f"ini option '{o.ini_key}' in {config.inipath or 'the ini file'}"
    return None, "default"


def resolve(config: pytest.Config) -> tuple[Settings, Thresholds]:
    """The session's settings and gate thresholds; ``pytest.UsageError`` naming a bad value's source.

    The gate is imported here, not with the plugin: a run without ``--agentperturb`` never needs it.
    """
    from ..gate import parse

    try:
        settings = resolve_settings(lambda o: _lookup(config, o), Path(str(config.rootpath)))
        sources = {k: (f"{v}:" if v.startswith("ini option") else v) for k, v in settings.sources.items()}
        thresholds = parse(settings.gate, {k: sources[k] for k in settings.gate if sources[k] != "default"},
                           strict=settings.strict)
    except OptionError as exc:
        raise pytest.UsageError(str(exc)) from None
    return settings, thresholds

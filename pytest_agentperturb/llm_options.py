"""Options of model-backed runs: the protocol (DESIGN.md section 3), concurrency, generator.

Each option is a ``--agentperturb-*`` flag and an ``agentperturb_*`` ini key;
the command line wins over the ini file, which wins over the default.  The
defaults are the paper's protocol: 3 attempts with exponential backoff from
30 s on rate-limit and timeout errors only, 16384 completion tokens per call,
200 turns, 1800 s per episode.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

CONCURRENCY = "--agentperturb-concurrency"
CONNECTIONS = "--agentperturb-connections"
ATTEMPTS = "--agentperturb-attempts"
BACKOFF = "--agentperturb-backoff"
MAX_TOKENS = "--agentperturb-max-tokens"
MAX_TURNS = "--agentperturb-max-turns"
EPISODE_TIMEOUT = "--agentperturb-episode-timeout"
REQUEST_TIMEOUT = "--agentperturb-request-timeout"
API_BASE = "--agentperturb-api-base"
GENERATOR = "--agentperturb-generator"
GENERATOR_ATTEMPTS = "--agentperturb-generator-attempts"
CACHE = "--agentperturb-cache"

DEFAULT_CACHE = ".agentperturb-cache"


@dataclass(frozen=True)
class _Spec:
    flag: str
    field: str
    type: type
    default: Any
    minimum: float | None
    help: str


_SPECS: tuple[_Spec, ...] = (
    _Spec(CONCURRENCY, "concurrency", int, 16, 1,
          "episodes in flight per process (xdist worker); episodes are I/O-bound"),
    _Spec(CONNECTIONS, "connections", int, 0, 0,
          "concurrent requests per model and process; 0 means the --agentperturb-concurrency value"),
    _Spec(ATTEMPTS, "attempts", int, 3, 1,
          "attempts per model call; only rate-limit and timeout errors are retried"),
    _Spec(BACKOFF, "backoff", float, 30.0, 0,
          "seconds before the first retry; doubles at every further retry"),
    _Spec(MAX_TOKENS, "max_tokens", int, 16384, 1, "completion tokens per model call"),
    _Spec(MAX_TURNS, "max_turns", int, 200, 1, "model turns per episode"),
    _Spec(EPISODE_TIMEOUT, "episode_timeout", float, 1800.0, 0.001,
          "seconds per episode; a later episode is recorded as an error"),
    _Spec(REQUEST_TIMEOUT, "request_timeout", float, 600.0, 0.001,
          "seconds per model call before it counts as a timeout (retried)"),
    _Spec(API_BASE, "api_base", str, "", None,
          "base URL of an OpenAI-compatible endpoint (local vLLM, Ollama...); default: litellm's"),
    _Spec(GENERATOR, "generator", str, "", None,
          "litellm model that writes perturbed variants (validated and cached); default: rule operators"),
    _Spec(GENERATOR_ATTEMPTS, "generator_attempts", int, 3, 1,
          "generator candidates per variant before falling back to the rule operators"),
    _Spec(CACHE, "cache", str, DEFAULT_CACHE, None,
          "folder of the generated-variant cache (relative to the rootdir)"),
)


def _ini(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def addoption(parser: pytest.Parser) -> None:
    """Declare the flags and ini keys (called from :func:`pytest_agentperturb.options.addoption`)."""
    g = parser.getgroup("agentperturb")
    for s in _SPECS:
        metavar = {int: "N", float: "SECONDS", str: "VALUE"}[s.type]
        g.addoption(s.flag, default=None, metavar=metavar, help=f"{s.help} (default: {s.default!r}).")
        parser.addini(_ini(s.flag), s.help + ".", default="")


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
    cache: Path = Path(DEFAULT_CACHE)

    @property
    def model_connections(self) -> int:
        """Per-model connection limit (the concurrency when not set)."""
        return self.connections or self.concurrency


def resolve(config: pytest.Config) -> LLMSettings:
    """Resolve every option; a bad value is a ``pytest.UsageError`` naming its source."""
    values: dict[str, Any] = {}
    for s in _SPECS:
        raw, src = config.getoption(s.flag), s.flag
        if raw in (None, ""):
            raw, src = config.getini(_ini(s.flag)), f"ini option '{_ini(s.flag)}' in {config.inipath}"
        if raw in (None, ""):
            continue
        try:
            val = s.type(str(raw).strip())
        except ValueError:
            raise pytest.UsageError(
                f"{src}: expected {'an integer' if s.type is int else 'a number'}, got {raw!r}") from None
        if s.minimum is not None and val < s.minimum:
            raise pytest.UsageError(f"{src}: must be at least {s.minimum:g}, got {raw!r}")
        values[s.field] = val
    cache = Path(values.pop("cache", DEFAULT_CACHE))
    if not cache.is_absolute():
        cache = Path(str(config.rootpath)) / cache
    return LLMSettings(cache=cache, **values)

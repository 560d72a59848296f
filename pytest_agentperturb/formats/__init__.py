"""Suite formats: adapters that turn folders, modules or benchmarks into tasks.

:mod:`.native` reads the built-in ``suite.toml`` folders; :mod:`.python`
holds the building blocks for tasks written in Python (toolkits, a JSON
state environment, function graders).  A new format is one new module with
a :class:`~pytest_agentperturb.SuiteAdapter` and a
``pytest_agentperturb_suite_adapter`` hook implementation.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..model.interfaces import SuiteAdapter

#: The benchmarks a suite can be named after (``--agentperturb-suite agentdojo:banking``, ``tau2:airline``).
BENCHMARKS: tuple[str, ...] = ("agentdojo", "tau2")


def benchmark_adapter(name: str, *, agentdojo_attacks: Sequence[str] = (),
                      models: Sequence[str] = ()) -> SuiteAdapter | None:
    """The adapter of a benchmark's suite name (``agentdojo[:suite]``, ``tau2[:domain]``), None for another name.

    Only the named benchmark's adapter module is imported.  ``agentdojo_attacks``
    (``--agentperturb-agentdojo-attack``) and ``models`` (the models under test,
    for an attack that names the model) reach the AgentDojo adapter.

    Raises:
        OptionError: for an unknown suite of a known benchmark or a missing extra (the message has the fix).
    """
    family = name.split(":", 1)[0]
    if family == "tau2":
        from .tau2 import adapter_for as tau2_for

        return tau2_for(name)
    if family == "agentdojo":
        from .agentdojo import adapter_for

        return adapter_for(name, agentdojo_attacks, models)
    return None


def shipped(name: str) -> Path:
    """Folder of the built-in ``suites`` or ``prompts``.

    In an installed wheel they live inside the package
    (``pytest_agentperturb.suites`` / ``.prompts``); in a source checkout or
    an editable install, at the top of the repository.
    """
    try:
        spec = importlib.util.find_spec(f"pytest_agentperturb.{name}")
    except ModuleNotFoundError:
        spec = None
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return Path(__file__).resolve().parent.parent.parent / name

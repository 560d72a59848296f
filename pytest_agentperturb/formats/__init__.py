"""Suite formats: adapters that turn folders, modules or benchmarks into tasks.

:mod:`.native` reads the built-in ``suite.toml`` folders; :mod:`.python`
holds the building blocks for tasks written in Python (toolkits, a JSON
state environment, function graders).  A new format is one new module with
a :class:`~pytest_agentperturb.SuiteAdapter` and a
``pytest_agentperturb_suite_adapter`` hook implementation.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path


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

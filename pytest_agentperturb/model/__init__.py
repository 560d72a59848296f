"""The domain model: tasks, facts, variants, episode records, options and the interfaces.

The bottom layer of the package (docs/design.md section 7): it imports
only the standard library, and every other layer builds on it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__version__ = "0.2.0"


def lazy_exports(package: str, namespace: dict[str, Any], table: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` importing each name of ``table`` from its module (relative to ``package``).

    The value is cached in ``namespace`` (the package's globals), so the
    import runs once; any other name raises :class:`AttributeError`.
    """

    def __getattr__(name: str) -> Any:
        if name in table:
            value = getattr(importlib.import_module(f".{table[name]}", package), name)
            namespace[name] = value
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__

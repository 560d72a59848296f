"""The perturbation engine: operator catalog, variants and validity checks.

See :mod:`pytest_agentperturb.perturb.base` for the rules.  Built-in
operators, one module per surface: :mod:`.user_ops`, :mod:`.procedure_ops`,
:mod:`.context_ops`, :mod:`.tool_ops`, plus :mod:`.inserted_ops` for the
inserted objects; :mod:`.text_ops` holds the fact operators the three text
surfaces share and :mod:`.helpers` the shared helpers.
"""

from __future__ import annotations

from .base import (
    MAX_ATTEMPTS,
    REGISTRY,
    Edit,
    Operator,
    check_variant,
    clean_variant,
    known_families,
    make_variant,
    operators,
    register,
    surface_diff,
)

__all__ = [
    "MAX_ATTEMPTS", "REGISTRY", "Edit", "Operator", "check_variant", "clean_variant", "known_families",
    "make_variant", "operators", "register", "surface_diff",
]

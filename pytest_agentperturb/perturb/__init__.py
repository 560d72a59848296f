"""The perturbation engine: operator catalog, variants and validity checks.

See :mod:`pytest_agentperturb.perturb.base` for the rules and
:mod:`~pytest_agentperturb.perturb.text_ops` /
:mod:`~pytest_agentperturb.perturb.tool_ops` for the built-in operators.
"""

from __future__ import annotations

from .base import (
    MAX_ATTEMPTS,
    REGISTRY,
    Edit,
    Operator,
    check_variant,
    clean_variant,
    make_variant,
    operators,
    register,
    surface_diff,
)

__all__ = [
    "MAX_ATTEMPTS", "REGISTRY", "Edit", "Operator", "check_variant", "clean_variant",
    "make_variant", "operators", "register", "surface_diff",
]

"""The perturbation engine: operators, a registry per session, variants and validity checks.

See :mod:`.engine` for the rules.  Built-in operators, one module per
surface: :mod:`.user_ops`, :mod:`.procedure_ops`, :mod:`.context_ops`,
:mod:`.tool_ops`, plus :mod:`.inserted_ops` for the inserted objects and
:mod:`.image_ops` for the inserted objects in images;
:mod:`.text_ops` holds the fact operators the three text surfaces share and
:mod:`.helpers` the shared helpers.  What they write reads like real input:
:mod:`.world` extracts the task's own entities, :mod:`.decoys` draws wrong
values from them, :mod:`.phrasing` fits vague phrases and negations to the
sentence, :mod:`.snippets` fills the data banks (``banks/*.toml``, read by
:mod:`.bank`), and :mod:`.realism` names the shapes no person would write.  Nothing registers itself on import:
:func:`builtin_registry` makes a fresh catalog, which a session then extends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .engine import (
    FACT_FAMILIES,
    MAX_ATTEMPTS,
    Edit,
    Engine,
    Operator,
    OracleResult,
    OracleRunner,
    Registry,
    clean_variant,
    structural_problems,
    surface_diff,
)

if TYPE_CHECKING:
    from ..imaging.backends import ImageBackend


def builtin_operators(image_backend: ImageBackend | None = None) -> list[Operator]:
    """Every built-in operator, in catalog order; image objects repaint with ``image_backend`` (Pillow)."""
    from . import context_ops, inserted_ops, procedure_ops, tool_ops, user_ops
    from .image_ops import image_operators

    return [*(op for mod in (user_ops, procedure_ops, context_ops, tool_ops, inserted_ops) for op in mod.OPERATORS),
            *image_operators(image_backend)]


def builtin_registry(image_backend: ImageBackend | None = None) -> Registry:
    """A new registry holding the built-in operators (image objects repaint with ``image_backend``)."""
    return Registry(builtin_operators(image_backend))


__all__ = [
    "FACT_FAMILIES", "MAX_ATTEMPTS", "Edit", "Engine", "Operator", "OracleResult", "OracleRunner", "Registry",
    "builtin_operators", "builtin_registry", "clean_variant", "structural_problems", "surface_diff",
]

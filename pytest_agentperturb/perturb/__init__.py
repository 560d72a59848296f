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

An operator of your own (the :class:`~pytest_agentperturb.model.interfaces.Operator`
seam, registered through the ``pytest_agentperturb_register_operators`` hook)
builds on the helpers the built-in ones use, exported here: :func:`facts_on`
(which facts a surface states), :func:`omission` (the edit of a missing-type
operator), :func:`fresh_decoy` (a wrong value from the task's own world) and
:func:`unrelated` (a filled snippet about another matter, a :class:`Filled`).
They are imported on first use, so importing the engine stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..model import lazy_exports
from ..model.interfaces import Edit, Operator
from .engine import (
    FACT_FAMILIES,
    MAX_ATTEMPTS,
    Engine,
    OracleResult,
    OracleRunner,
    Registry,
    clean_variant,
    structural_problems,
    surface_diff,
)

if TYPE_CHECKING:
    from ..imaging.backends import ImageBackend
    from .decoys import fresh_decoy
    from .helpers import facts_on, omission
    from .snippets import Filled
    from .text_ops import unrelated

#: The operator helpers, by the module that defines each (imported on first use).
_HELPERS: dict[str, str] = {"Filled": "snippets", "facts_on": "helpers", "fresh_decoy": "decoys",
                            "omission": "helpers", "unrelated": "text_ops"}


def builtin_operators(image_backend: ImageBackend | None = None) -> list[Operator]:
    """Every built-in operator, in catalog order; image objects repaint with ``image_backend`` (Pillow)."""
    from . import context_ops, inserted_ops, procedure_ops, tool_ops, user_ops
    from .image_ops import image_operators

    return [*(op for mod in (user_ops, procedure_ops, context_ops, tool_ops, inserted_ops) for op in mod.OPERATORS),
            *image_operators(image_backend)]


def builtin_registry(image_backend: ImageBackend | None = None) -> Registry:
    """A new registry holding the built-in operators (image objects repaint with ``image_backend``)."""
    return Registry(builtin_operators(image_backend))


#: Import an operator helper on first use.
__getattr__ = lazy_exports(__name__, globals(), _HELPERS)


__all__ = [
    "FACT_FAMILIES", "MAX_ATTEMPTS", "Edit", "Engine", "Filled", "Operator", "OracleResult", "OracleRunner",
    "Registry", "builtin_operators", "builtin_registry", "clean_variant", "facts_on", "fresh_decoy", "omission",
    "structural_problems", "surface_diff", "unrelated",
]

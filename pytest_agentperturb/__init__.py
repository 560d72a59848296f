"""pytest-agentperturb: robustness of LLM agents to incomplete, cluttered or wrong inputs.

The public API is re-exported here; the pytest plugin itself lives in
:mod:`pytest_agentperturb.plugin` and imports nothing heavy until
``--agentperturb`` is given.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]

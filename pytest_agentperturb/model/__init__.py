"""The domain model: tasks, facts, variants, episode records, options and the interfaces.

The bottom layer of the package (docs/design.md section 7): it imports
only the standard library, and every other layer builds on it.
"""

from __future__ import annotations

__version__ = "0.2.0"

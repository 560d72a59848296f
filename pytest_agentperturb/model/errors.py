"""One exception hierarchy for the whole package.

User mistakes carry the file, the field, what was expected, what was found
and the fix, so the plugin can turn them into collection or usage errors
without losing any of that.
"""

from __future__ import annotations

from pathlib import Path


class AgentPerturbError(Exception):
    """Base class of every error raised by pytest-agentperturb."""


class TaskFormatError(AgentPerturbError):
    """A task or suite on disk does not follow the documented format."""

    def __init__(
        self,
        path: Path | str,
        field: str,
        expected: str,
        found: str,
        fix: str = "",
    ) -> None:
        self.path = str(path)
        self.field = field
        self.expected = expected
        self.found = found
        self.fix = fix
        msg = f"{self.path}: field '{field}': expected {expected}, found {found}"
        if fix:
            msg += f". Fix: {fix}"
        super().__init__(msg)


class OptionError(AgentPerturbError):
    """A command-line flag or ini option has a bad value."""


class StoreError(AgentPerturbError):
    """The results store cannot be opened, read or written (the message names the file and the fix).

    ``unreported``: of the buffered episodes a failed commit could not write, how many no item's error
    has counted yet (the store's last batch, at close).
    """

    def __init__(self, message: str, unreported: int = 0) -> None:
        super().__init__(message)
        self.unreported = unreported


class VariantSkipped(AgentPerturbError):
    """No valid variant could be generated for a (task, family, seed)."""


class ToolError(AgentPerturbError):
    """A tool call that the environment rejects; the agent sees the message."""


class InfrastructureError(AgentPerturbError):
    """The episode could not be run or scored; never an agent failure."""


class SimulatorError(InfrastructureError):
    """The user simulator behind ``ask_user`` failed (its model provider, its code): an ERROR, never a FAIL."""


class AgentValueError(AgentPerturbError, TypeError):
    """An agent handed its context a value that is not JSON (or not text where text is asked for).

    Raised by the context's channels; the episode is that agent's ERROR even
    when the agent catches it (the store keeps only JSON).
    """

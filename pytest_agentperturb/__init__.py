"""pytest-agentperturb: robustness of LLM agents to incomplete, cluttered or wrong inputs.

The public API is re-exported here (see ``__all__``): the task model, the
seams a benchmark, an agent or a plugin implements (all defined in
:mod:`pytest_agentperturb.model.interfaces`), the building blocks for
Python-written tasks, and the entry points to run episodes outside pytest.
Names are imported on first use, so loading the pytest plugin (which
imports this package) stays cheap.  The plugin itself lives in
:mod:`pytest_agentperturb.plugin`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .model import __version__, lazy_exports

if TYPE_CHECKING:
    from .agents import as_agent, load_agent
    from .formats.python import FunctionGrader, Param, StateEnvironment, Toolkit, ToolDef, environment_factory
    from .model.context import ASK_USER, NEUTRAL_REPLY, EpisodeContext
    from .model.errors import (
        AgentPerturbError,
        InfrastructureError,
        OptionError,
        TaskFormatError,
        ToolError,
        VariantSkipped,
    )
    from .model.interfaces import Agent, ComplianceCheck, Edit, Environment, Grader, Operator, Simulator, SuiteAdapter
    from .model.protocols import GradeResult, ImagePart, Observation, TextPart, UserReply
    from .model.records import Canary, EpisodeRecord, Injection, Outcome, Variant
    from .model.task import CLEAN, FAMILIES, INSERTED, TARGETS, TYPES, Fact, Step, Surfaces, Task, TaskSlot, Turn
    from .perturb import Engine, Registry, builtin_registry
    from .run import UserSimulator, make_engine, run_episode, run_episode_sync

_EXPORTS: dict[str, str] = {
    **dict.fromkeys(("as_agent", "load_agent"), "agents"),
    **dict.fromkeys(("FunctionGrader", "Param", "StateEnvironment", "Toolkit", "ToolDef", "environment_factory"),
                    "formats.python"),
    **dict.fromkeys(("ASK_USER", "NEUTRAL_REPLY", "EpisodeContext"), "model.context"),
    **dict.fromkeys(("AgentPerturbError", "InfrastructureError", "OptionError", "TaskFormatError", "ToolError",
                     "VariantSkipped"), "model.errors"),
    # the seams (see model/interfaces.py), and the values that cross them
    **dict.fromkeys(("Agent", "ComplianceCheck", "Edit", "Environment", "Grader", "Operator", "Simulator",
                     "SuiteAdapter"), "model.interfaces"),
    **dict.fromkeys(("GradeResult", "ImagePart", "Observation", "TextPart", "UserReply"), "model.protocols"),
    **dict.fromkeys(("Canary", "EpisodeRecord", "Injection", "Outcome", "Variant"), "model.records"),
    **dict.fromkeys(("CLEAN", "FAMILIES", "INSERTED", "TARGETS", "TYPES", "Fact", "Step", "Surfaces", "Task",
                     "TaskSlot", "Turn"), "model.task"),
    **dict.fromkeys(("Engine", "Registry", "builtin_registry"), "perturb"),
    **dict.fromkeys(("UserSimulator", "make_engine", "run_episode", "run_episode_sync"), "run"),
}

__all__ = ["__version__", *sorted(_EXPORTS)]


#: Import a public name on first use.
__getattr__ = lazy_exports(__name__, globals(), _EXPORTS)


def __dir__() -> list[str]:
    return sorted(__all__)

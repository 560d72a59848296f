"""The ``agentperturb`` command: work with suites, variants and stores outside pytest.

Each command family lives in its own module, which exposes
``add_commands(subparsers)``; every sub-parser sets ``func`` to a callable
taking the parsed namespace and returning the exit status.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from ..model import __version__
from ..model.errors import AgentPerturbError

#: Modules contributing sub-commands (each defines ``add_commands``).
COMMAND_MODULES: tuple[str, ...] = ("pytest_agentperturb.cli.variants", "pytest_agentperturb.cli.analysis",
                                    "pytest_agentperturb.cli.simulator_check", "pytest_agentperturb.cli.view")


def _list_suites(args: argparse.Namespace) -> int:
    """Print the folder of each built-in suite (for ``pytest --agentperturb <folder>``)."""
    from ..formats import shipped

    root = shipped("suites")
    for d in sorted(p for p in root.iterdir() if (p / "suite.toml").is_file()):
        sys.stdout.write(f"{d}\n")
    return 0


def build_parser(modules: Sequence[str] = COMMAND_MODULES) -> argparse.ArgumentParser:
    """The ``agentperturb`` parser with the sub-commands of ``modules`` (default: all of them)."""
    parser = argparse.ArgumentParser(
        prog="agentperturb", description="Robustness of LLM agents under perturbation.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sp = sub.add_parser("suites", help="print the folder of each built-in suite (also in an installed wheel).")
    sp.set_defaults(func=_list_suites)
    for name in modules:
        importlib.import_module(name).add_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (2 for usage and input errors)."""
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    argv = list(sys.argv[1:] if argv is None else argv)
    from . import analysis, view

    # report, analyze, export and view need none of the other commands' modules (suite loading, the
    # simulator): their parser is built alone, so they start without importing them.
    alone = {**dict.fromkeys(analysis.COMMANDS, "pytest_agentperturb.cli.analysis"),
             **dict.fromkeys(view.COMMANDS, "pytest_agentperturb.cli.view")}
    parser = build_parser((alone[argv[0]],) if argv[:1] and argv[0] in alone else COMMAND_MODULES)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except (AgentPerturbError, FileNotFoundError) as exc:
        logging.getLogger("agentperturb").error("error: %s", exc)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

"""Subsets stay paired: a selection of perturbed items also runs the clean episodes they are compared with.

Every figure compares a perturbed episode with the clean episode of the
same (model, task, repeat) (docs/design.md section 4), so ``-k "tool and
missing"``, ``-m "user and not redundant"`` or ``--agentperturb-families
tool-missing`` alone would leave every figure without pairs.  After ``-k``,
``-m`` and ``--deselect`` have deselected what they do, :class:`Pairing`
puts back the clean item of each selected perturbed item just before its
first partner (or makes it, where ``--agentperturb-families`` left clean
out); a clean item named by ``--deselect`` stays out.  The same arguments
give the same item list on every xdist worker, which collects by itself
(xdist requires every worker to collect the same items); the controller
sends the workers the run id (``workerinput``) and each worker sends back
how many items it paired (``workeroutput``), for the summary line.

:func:`for_session` gives a run its own run id (:mod:`..run.runids`) and a
subset run its own report, named after the selection
(``reports/agentperturb-<selection>.html``), so a subset run never replaces
another run's rows or the full run's report; an explicit
``--agentperturb-run-id`` or ``--agentperturb-report`` wins.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import replace
from typing import Any

import pytest

from ..model.options import Settings, option
from ..model.task import CLEAN
from .collect import PerturbItem, TaskCollector

#: Key of the run id in xdist's ``workerinput`` (the controller chose it: workers never open the store).
RUN_ID_INPUT = "agentperturb_run_id"
#: Key of (clean items put back, perturbed items they pair) in a worker's ``workeroutput``.
PAIRED_OUTPUT = "agentperturb_paired"
#: The longest selection name in a report's file name (a short hash stands for what is cut).
SLUG_MAX = 60


def selection(config: pytest.Config, settings: Settings) -> str:
    """The ``-k``, ``-m`` and explicit ``--agentperturb-families`` expressions of this run, or "" for a full run."""
    families = ",".join(settings.families) if settings.sources.get("families", "default") != "default" else ""
    parts = (config.getoption("keyword", "") or "", config.getoption("markexpr", "") or "", families)
    return " ".join(p.strip() for p in parts if p and p.strip())


def slug(expr: str) -> str:
    """A file-name-safe name of a selection expression: at most :data:`SLUG_MAX` characters."""
    name = re.sub(r"[^A-Za-z0-9._]+", "-", expr).strip("-.") or "selection"
    if len(name) <= SLUG_MAX:
        return name
    digest = hashlib.sha256(expr.encode()).hexdigest()[:8]
    return f"{name[:SLUG_MAX - len(digest) - 1].rstrip('-.')}-{digest}"


def for_session(config: pytest.Config, settings: Settings) -> Settings:
    """The settings with this run's own run id and, for a subset run, its own report."""
    changes: dict[str, Any] = {}
    if settings.sources.get("run_id", "default") == "default":
        workerinput = getattr(config, "workerinput", None)
        if workerinput is not None:
            changes["run_id"] = str(workerinput.get(RUN_ID_INPUT) or settings.run_id)
        else:
            from ..run.runids import default_run_id

            changes["run_id"] = default_run_id(settings.store, settings.seed, resume=settings.resume)
    expr = selection(config, settings)
    if expr and settings.sources.get("report", "default") != option("report").flag:
        report = settings.report
        changes["report"] = report.with_name(f"{report.stem}-{slug(expr)}{report.suffix}")
    return replace(settings, **changes) if changes else settings


def _pair_key(item: PerturbItem) -> tuple[str, str, int]:
    return item.task.key, item.model, item.repeat


class Pairing:
    """Puts back (or makes) the clean partners of the selected perturbed items; registered on every process."""

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config, self.settings = config, settings
        self.is_worker = hasattr(config, "workerinput")
        self._deselected: list[pytest.Item] = []
        self.put_back = 0  # clean items run for pairing only
        self.partnered = 0  # selected perturbed items whose clean partner was put back

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        self._deselected.extend(items)

    @pytest.hookimpl(trylast=True)  # after -k, -m and --deselect
    def pytest_collection_modifyitems(self, session: pytest.Session, config: pytest.Config,
                                      items: list[pytest.Item]) -> None:
        explicit = tuple(config.getoption("deselect", None) or ())
        selected = {_pair_key(i) for i in items if isinstance(i, PerturbItem) and i.family == CLEAN}
        spare = {_pair_key(i): i for i in self._deselected
                 if isinstance(i, PerturbItem) and i.family == CLEAN and not i.nodeid.startswith(explicit)}
        out: list[pytest.Item] = []
        back: list[pytest.Item] = []
        back_keys: set[tuple[str, str, int]] = set()
        for item in items:
            if isinstance(item, PerturbItem) and item.family != CLEAN:
                key = _pair_key(item)
                if key not in selected:
                    selected.add(key)
                    partner = spare.pop(key, None) or self._made(item, explicit)
                    if partner is not None:  # just before its first selected partner
                        back.append(partner)
                        back_keys.add(key)
                        out.append(partner)
                self.partnered += key in back_keys
            out.append(item)
        if not back:
            return
        self.put_back = len(back)
        items[:] = out
        tr = config.pluginmanager.get_plugin("terminalreporter")
        stats = getattr(tr, "stats", {}).get("deselected") if tr is not None else None
        if stats:  # they run after all: no longer counted as deselected
            ids = {id(b) for b in back}
            stats[:] = [d for d in stats if id(d) not in ids]
        if self.is_worker:
            config.workeroutput[PAIRED_OUTPUT] = [self.put_back, self.partnered]  # type: ignore[attr-defined]

    def _made(self, item: PerturbItem, explicit: tuple[str, ...]) -> PerturbItem | None:
        """The clean partner ``--agentperturb-families`` did not collect (None when ``--deselect`` names it)."""
        if CLEAN in self.settings.families or not isinstance(item.parent, TaskCollector):
            return None  # collected, and deselected on purpose
        partner = item.parent.item(CLEAN, item.model, item.repeat)
        return None if partner.nodeid.startswith(explicit) else partner

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """Every worker runs its episodes under the run id the controller chose."""
        node.workerinput[RUN_ID_INPUT] = self.settings.run_id

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object | None) -> None:
        """Each worker paired the same items (it collected the same list): the first count is the run's."""
        paired = (getattr(node, "workeroutput", None) or {}).get(PAIRED_OUTPUT)
        if paired and not self.put_back:
            self.put_back, self.partnered = int(paired[0]), int(paired[1])

    @pytest.hookimpl(trylast=True)  # after the session's summary (:mod:`.finish`)
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        line = None if self.is_worker else self.summary_line()
        if line is not None:
            terminalreporter.write_line(line)

    def summary_line(self) -> str | None:
        """The terminal's line about the clean episodes run for pairing (None when none was needed)."""
        if not self.put_back:
            return None
        verb = "collected" if self.config.option.collectonly else "run"
        return (f"paired: {self.put_back} clean episode(s) {verb} for the {self.partnered} selected perturbed "
                "item(s) (the figures compare each with its clean partner)")


#: The terminal's line instead of "no scored episodes" when only clean episodes ran.
NO_PERTURBED = ("no perturbed episodes selected (each figure compares perturbed episodes with their clean "
                "partners; select some with -k, -m or --agentperturb-families)")


def figure_lines(lines: list[str], episodes: int, perturbed: int) -> list[str]:
    """The summary's figure lines; a run of clean episodes only says so instead of "no scored episodes"."""
    if lines == ["no scored episodes"] and episodes and not perturbed:
        return [NO_PERTURBED]
    return lines

"""The package's structure: layered imports, no import cycle at all, a public API that resolves."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
grimp = pytest.importorskip("grimp", reason="import-linter (and grimp) come with the [dev] extra")


def _cycles(graph: object, modules: set[str]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in sorted(modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root) & modules)))]  # type: ignore[attr-defined]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        m = stack.pop()
                        on.discard(m)
                        comp.append(m)
                        if m == node:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
            elif nxt not in index:
                index[nxt] = low[nxt] = counter
                counter += 1
                stack.append(nxt)
                on.add(nxt)
                work.append((nxt, iter(sorted(graph.find_modules_directly_imported_by(nxt) & modules))))  # type: ignore[attr-defined]
            elif nxt in on:
                low[node] = min(low[node], index[nxt])
    return out


def type_only_exceptions() -> list[tuple[str, str]]:
    """The acyclic contract's ``ignore_imports`` (pyproject.toml): the seams' type-only imports."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    ignored = [e for c in contracts if c["type"] == "acyclic_siblings" for e in c.get("ignore_imports", ())]
    return [(a, b) for a, b in (e.split(" -> ") for e in ignored)]


def test_no_module_imports_itself_back_through_any_chain() -> None:
    """Every import counts, the ones under ``if TYPE_CHECKING:`` and inside functions included, except the
    seams' type-only imports of what they receive (tests/test_interfaces.py holds them type-only)."""
    graph = grimp.build_graph("pytest_agentperturb", cache_dir=None)
    for importer, imported in type_only_exceptions():
        graph.remove_import(importer=importer, imported=imported)
    modules = set(graph.modules)
    assert len(modules) > 40
    assert _cycles(graph, modules) == []


def test_cycle_finder_finds_a_cycle() -> None:
    class Graph:
        edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}

        def find_modules_directly_imported_by(self, m: str) -> set[str]:
            return self.edges.get(m, set())

    assert _cycles(Graph(), {"a", "b", "c", "d"}) == [["a", "b", "c"]]


def test_import_linter_contracts_hold() -> None:
    """The layers, acyclic-siblings and forbidden-import contracts of pyproject.toml (CI runs ``lint-imports`` too)."""
    r = subprocess.run([sys.executable, "-c", "from importlinter.cli import lint_imports_command; "
                        "lint_imports_command()", "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "5 kept, 0 broken" in r.stdout


def test_public_api_names_resolve() -> None:
    import pytest_agentperturb as ap

    for name in ap.__all__:
        assert getattr(ap, name) is not None, name
    assert {"Environment", "Grader", "SuiteAdapter", "Agent", "Observation", "EpisodeContext", "Task",
            "Toolkit", "StateEnvironment", "FunctionGrader", "as_agent"} <= set(ap.__all__)
    with pytest.raises(AttributeError):
        ap.not_a_name  # noqa: B018


def test_gate_knows_nothing_about_pytest() -> None:
    graph = grimp.build_graph("pytest_agentperturb", include_external_packages=True, cache_dir=None)
    assert "pytest" not in graph.find_modules_directly_imported_by("pytest_agentperturb.gate")
    for layer in ("model", "perturb", "formats", "analysis", "report"):
        importers = {m for m in graph.find_modules_that_directly_import("pytest")
                     if m.startswith(f"pytest_agentperturb.{layer}")}
        assert importers == set(), (layer, importers)

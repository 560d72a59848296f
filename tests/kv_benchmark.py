"""A benchmark written in Python: a key-value store, two tools, a Python grader (the README's guide).

Copy this file into a ``conftest.py`` (or a plugin) and run::

    pytest --agentperturb --agentperturb-suite kv --agentperturb-model reference/oracle

Everything a task needs is here: the environment (a JSON state and a
toolkit), the four surfaces, the facts the solution needs (with the surface
that states each one), the gold solution written against those facts, and
the grader.  The hook at the bottom registers the adapter under the name
``kv``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_agentperturb import (
    Fact,
    FunctionGrader,
    Param,
    Step,
    Surfaces,
    Task,
    Toolkit,
    ToolError,
    Turn,
    environment_factory,
)

KV = Toolkit()


@KV.tool("kv_read", "Read the value stored under a key.", key=Param(description="The key, e.g. INV-2044."))
def _read(state: dict[str, Any], key: str) -> Any:
    for e in state["entries"]:
        if e["key"] == key:
            return {"key": key, "value": e["value"]}
    raise ToolError(f"no entry with key '{key}'")


@KV.tool("kv_write", "Store a value under a key (creates the key if needed).",
         key=Param(description="The key."), value=Param(description="The new value."))
def _write(state: dict[str, Any], key: str, value: str) -> Any:
    for e in state["entries"]:
        if e["key"] == key:
            e["value"] = value
            return {"ok": True}
    state["entries"].append({"key": key, "value": value})
    return {"ok": True}


STATE = {
    "entries": [{"key": "INV-2044", "value": "pending"}, {"key": "INV-2051", "value": "pending"},
                {"key": "INV-2063", "value": "disputed"}],
    "people": [{"name": "Dana Kim", "email": "dana.kim@kv.test"},
               {"name": "Omar Haddad", "email": "omar.haddad@kv.test"}],
}


def _grade(pre: Any, post: Any, answer: str, trajectory: Sequence[Mapping[str, Any]]) -> tuple[float, list[Any]]:
    values = {e["key"]: e["value"] for e in post["entries"]}
    checks = [("INV-2044 is approved", values.get("INV-2044") == "approved"),
              ("the reviewer is notified", values.get("notify") == "dana.kim@kv.test"),
              ("no other invoice changed", all(values.get(e["key"]) == e["value"] for e in pre["entries"]
                                               if e["key"] != "INV-2044"))]
    return (1.0 if all(ok for _, ok in checks) else 0.0), checks


def approval_task(suite: str = "kv") -> Task:
    """One task: approve an invoice, then record who was notified."""
    surfaces = Surfaces(
        user="Please approve invoice INV-2044 in the ledger.\nThanks!\n",
        procedure=("You maintain the finance ledger.\n"
                   'Invoices you confirm must be marked "approved" in the ledger.\n'
                   "Record under the key notify the address of the reviewer you informed.\n"),
        context=(Turn("user", "For ledger changes the reviewer is Dana, at dana.kim@kv.test."),
                 Turn("assistant", "Understood, Dana reviews ledger changes."),
                 Turn("user", "The quarterly close is next Friday."),
                 Turn("assistant", "Noted.")),
        tools=tuple(KV.schemas(["kv_read", "kv_write"])),
    )
    facts = (
        Fact("invoice", "INV-2044", ("user",), kind="id", cues=("invoice",), domain="entries[*].key",
             question="Which invoice should I approve?"),
        Fact("status", "approved", ("procedure",), pattern=r'marked "([a-z]+)"', cues=("marked",),
             question="What status should a confirmed invoice get?"),
        Fact("reviewer", "dana.kim@kv.test", ("context",), kind="email", cues=("reviewer",),
             domain="people[*].email", question="What is the reviewer's e-mail address?"),
    )
    solution = (Step("kv_read", {"key": "{invoice}"}),
                Step("kv_write", {"key": "{invoice}", "value": "{status}"}),
                Step("kv_write", {"key": "notify", "value": "{reviewer}"}))
    return Task(suite=suite, id="invoice-approval", title="Approve an invoice", surfaces=surfaces, facts=facts,
                solution=solution, answer="Invoice {invoice} is {status}; {reviewer} was notified.",
                grader=FunctionGrader(_grade), environment=environment_factory(STATE, ["kv_read", "kv_write"], KV),
                tools=("kv_read", "kv_write"), initial_state=STATE, fingerprint={"grader": b"kv-grader-v1"})


class KVSuite:
    """The suite adapter: a name and its tasks."""

    name = "kv"

    def tasks(self) -> Iterator[Task]:
        yield approval_task(self.name)


def pytest_agentperturb_suite_adapter(path: Path | None, name: str | None, config: Any) -> KVSuite | None:
    return KVSuite() if name == "kv" else None

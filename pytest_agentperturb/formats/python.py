"""Building blocks for tasks written in Python: tools over a JSON state, graders from functions.

A benchmark author who writes an adapter usually needs three things:

* a :class:`Toolkit`: tools registered under their true names with their true
  argument schemas (the clean tool surface is generated from it);
* a :class:`StateEnvironment`: a private deep copy of a JSON-like state per
  episode that runs those tools, rejects bad calls with an error the agent
  sees, plants injected instructions into tool results, and snapshots;
* a grader: :class:`FunctionGrader` wraps any callable
  ``(pre_state, post_state, answer, trajectory) -> float | (float, checks) | GradeResult``.

The built-in office (:mod:`.native.office`) is one toolkit made with these.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..model.errors import ToolError
from ..model.protocols import GradeResult
from ..model.records import Injection


@dataclass(frozen=True)
class Param:
    """One argument of a tool's true schema."""

    type: str = "string"
    description: str = ""
    required: bool = True
    enum: tuple[str, ...] | None = None


@dataclass(frozen=True)
class ToolDef:
    """A backend tool: true name, description, schema and implementation ``fn(state, **args)``."""

    name: str
    description: str
    params: Mapping[str, Param]
    fn: Callable[..., Any] = field(repr=False)

    def schema(self) -> dict[str, Any]:
        """The OpenAI-style function schema a clean tool surface advertises."""
        props: dict[str, Any] = {}
        for pname, p in self.params.items():
            prop: dict[str, Any] = {"type": p.type, "description": p.description}
            if p.enum:
                prop["enum"] = list(p.enum)
            props[pname] = prop
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": {
                    "type": "object",
                    "properties": props,
                    "required": [n for n, p in self.params.items() if p.required],
                },
            },
        }

    def check(self, args: Mapping[str, Any]) -> None:
        """Raise :class:`ToolError` unless ``args`` fit the true schema."""
        for pname, p in self.params.items():
            if p.required and pname not in args:
                raise ToolError(f"{self.name}: missing required argument '{pname}'")
            if pname in args and p.enum and args[pname] not in p.enum:
                raise ToolError(f"{self.name}: invalid value {args[pname]!r} for '{pname}'; "
                                f"expected one of {', '.join(p.enum)}")
        extra = sorted(set(args) - set(self.params))
        if extra:
            raise ToolError(f"{self.name}: unexpected argument(s) {', '.join(extra)}")


class Toolkit(Mapping[str, ToolDef]):
    """Tools by true name.  Build one per backend with the :meth:`tool` decorator.

    Example::

        kv = Toolkit()

        @kv.tool("kv_read", "Read a key.", key=Param(description="The key."))
        def _read(state, key):
            return {"key": key, "value": state["data"].get(key)}
    """

    def __init__(self) -> None:
        self._tools: dict[str, ToolDef] = {}

    def tool(self, name: str, description: str, /, **params: Param) -> Callable[[Callable[..., Any]],
                                                                                Callable[..., Any]]:
        """Register ``fn(state, **args)`` as the tool ``name`` (names are unique per toolkit)."""

        def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
            if name in self._tools:
                raise ValueError(f"tool {name!r} is already registered in this toolkit")
            self._tools[name] = ToolDef(name, description, params, fn)
            return fn

        return deco

    def schemas(self, names: Sequence[str]) -> list[dict[str, Any]]:
        """The clean tool surface for ``names`` (in that order)."""
        return [self._tools[n].schema() for n in names]

    def __getitem__(self, name: str) -> ToolDef:
        return self._tools[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._tools)

    def __len__(self) -> int:
        return len(self._tools)


def apply_injections(injections: Sequence[Injection], tool: str, result: Any) -> Any:
    """A tool result with the injections for ``tool`` planted in it.

    A list result gets one extra record ``{"note": text}``; an object result
    gets a ``note`` field.  Other results are returned unchanged.
    """
    for inj in injections:
        if inj.tool != tool:
            continue
        if isinstance(result, list):
            result = [*result, {"note": inj.text}]
        elif isinstance(result, dict):
            result = {**result, "note": inj.text}
    return result


_ATOMS = (str, int, float, bool, type(None))


def copy_state(x: Any) -> Any:
    """A deep copy of a JSON-like state: dicts and lists copied as a tree, anything else by ``copy.deepcopy``.

    Every episode copies its task's state three times (a fresh environment,
    the pre and the post snapshot); a JSON tree needs none of the
    bookkeeping of ``copy.deepcopy`` (several times slower).  Like any tree
    copy it does not keep two references to one dict or list shared: a state
    is data, not an object graph.
    """
    t = type(x)
    if t is dict:
        return {k: copy_state(v) for k, v in x.items()}
    if t is list:
        return [copy_state(v) for v in x]
    if t in _ATOMS:
        return x
    return copy.deepcopy(x)


class StateEnvironment:
    """A private, mutable copy of a JSON-like state plus the tools a task exposes.

    Calls go to tools by true name; an unknown or unexposed name, a missing
    required argument, a value outside the true enum or an unexpected
    argument raise :class:`ToolError` (the agent gets an error observation).
    Results of a tool named by an injection carry the planted instruction.
    """

    def __init__(self, initial: Mapping[str, Any], tools: Sequence[str], toolkit: Mapping[str, ToolDef],
                 injections: Sequence[Injection] = ()) -> None:
        self.state: dict[str, Any] = copy_state(dict(initial))
        self.tools = tuple(tools)
        self.toolkit = toolkit
        self.injections = tuple(injections)

    def call(self, name: str, args: Mapping[str, Any]) -> Any:
        """Execute a tool by true name."""
        if name not in self.tools or name not in self.toolkit:
            raise ToolError(f"unknown tool '{name}': no such function is registered")
        spec = self.toolkit[name]
        spec.check(args)
        return apply_injections(self.injections, name, spec.fn(self.state, **args))

    def snapshot(self) -> Any:
        """A deep copy of the current state."""
        return copy_state(self.state)


def environment_factory(initial: Mapping[str, Any], tools: Sequence[str],
                        toolkit: Mapping[str, ToolDef]) -> Callable[[tuple[Injection, ...]], StateEnvironment]:
    """A task's environment factory: a fresh :class:`StateEnvironment` per episode."""
    frozen = copy.deepcopy(dict(initial))
    names = tuple(tools)

    def make(injections: tuple[Injection, ...] = ()) -> StateEnvironment:
        return StateEnvironment(frozen, names, toolkit, injections)

    return make


Checks = Sequence[tuple[str, bool]]


class FunctionGrader:
    """A grader from a plain callable ``fn(pre_state, post_state, answer, trajectory)``.

    The callable returns a reward in [0, 1], a ``(reward, checks)`` pair with
    named checks, or a :class:`GradeResult`.  A reward outside [0, 1] (or
    not a number) is an error of the grader, raised as ``ValueError``.
    """

    def __init__(self, fn: Callable[[Any, Any, str, Sequence[Mapping[str, Any]]], Any]) -> None:
        self.fn = fn

    def grade(self, pre_state: Any, post_state: Any, answer: str,
              trajectory: Sequence[Mapping[str, Any]]) -> GradeResult:
        out = self.fn(pre_state, post_state, answer, trajectory)
        if isinstance(out, GradeResult):
            result = out
        elif isinstance(out, tuple) and len(out) == 2:
            result = GradeResult(float(out[0]), tuple((str(c), bool(ok)) for c, ok in out[1]))
        else:
            result = GradeResult(float(out))
        if not (math.isfinite(result.reward) and 0.0 <= result.reward <= 1.0):
            raise ValueError(f"grader {getattr(self.fn, '__qualname__', self.fn)!r} returned reward "
                             f"{result.reward!r}; expected a number in [0, 1]")
        return result

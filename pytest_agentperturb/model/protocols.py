"""The values that cross the seams: observations, grade results, user replies.

The seams themselves (:class:`~.interfaces.Environment`,
:class:`~.interfaces.Grader`, :class:`~.interfaces.Simulator`, ...) are in
:mod:`.interfaces`; this module holds what they hand over.  What a tool
returns reaches the agent as an :class:`Observation` of typed parts (text
now, images as well), so a new kind of observation needs no redesign of
the context, trajectory, store or report; a grader returns a
:class:`GradeResult`, the user simulator a :class:`UserReply`.

Only the standard library is imported here: these are the types a user's
module imports to write an adapter, a grader or an agent.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Union


#: Prefix of the text of an observation that reports a failed tool call.
ERROR_PREFIX = "ERROR: "
#: Image media types an observation may carry (anything else is refused).
IMAGE_TYPES: tuple[str, ...] = ("image/png", "image/jpeg", "image/gif", "image/webp")


# -- observations ------------------------------------------------------------------


@dataclass(frozen=True)
class TextPart:
    """Text returned by a tool."""

    text: str

    def to_json(self) -> dict[str, Any]:
        return {"type": "text", "text": self.text}


@dataclass(frozen=True)
class ImagePart:
    """An image returned by a tool (raw bytes; ``mime_type`` one of :data:`IMAGE_TYPES`).

    ``layer`` is the image's text layer: what a perfect reader would see,
    as ``(text, (x0, y0, x1, y1))`` boxes.  Offline reference agents read
    it; model-backed agents only ever receive the pixels.
    """

    data: bytes = field(repr=False)
    mime_type: str = "image/png"
    layer: tuple[tuple[str, tuple[int, int, int, int]], ...] = ()

    def __post_init__(self) -> None:
        if self.mime_type not in IMAGE_TYPES:
            raise ValueError(f"image part: unsupported media type {self.mime_type!r}; "
                             f"expected one of {', '.join(IMAGE_TYPES)}")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "image", "mime_type": self.mime_type,
                               "data": base64.b64encode(self.data).decode("ascii")}
        if self.layer:
            out["layer"] = [[t, list(box)] for t, box in self.layer]
        return out


Part = Union[TextPart, ImagePart]


@dataclass(frozen=True)
class Observation:
    """What the agent gets back from one tool call: typed parts, and whether it is an error."""

    parts: tuple[Part, ...]
    error: bool = False

    @classmethod
    def of(cls, result: Any) -> Observation:
        """An environment's result as an observation.

        An :class:`Observation`, a part or a sequence of parts is kept as
        it is; any other value is JSON data and becomes one text part
        (keys sorted, so the same state reads the same way every time).
        """
        if isinstance(result, Observation):
            return result
        if isinstance(result, (TextPart, ImagePart)):
            return cls((result,))
        if isinstance(result, (list, tuple)) and result and all(isinstance(p, (TextPart, ImagePart))
                                                                for p in result):
            return cls(tuple(result))
        return cls((TextPart(json.dumps(result, sort_keys=True, ensure_ascii=False)),))

    @classmethod
    def of_text(cls, text: str) -> Observation:
        """A text-only observation."""
        return cls((TextPart(text),))

    @classmethod
    def failure(cls, message: str) -> Observation:
        """An error observation (the agent sees ``ERROR: <message>``)."""
        return cls((TextPart(ERROR_PREFIX + message),), error=True)

    @property
    def text(self) -> str:
        """The text parts, joined by newlines."""
        return "\n".join(p.text for p in self.parts if isinstance(p, TextPart))

    @property
    def images(self) -> tuple[ImagePart, ...]:
        return tuple(p for p in self.parts if isinstance(p, ImagePart))

    def to_json(self) -> list[dict[str, Any]]:
        """The parts as JSON (images base64-encoded), as stored in the trajectory."""
        return [p.to_json() for p in self.parts]

    @classmethod
    def from_json(cls, parts: Sequence[Mapping[str, Any]]) -> Observation:
        """Inverse of :meth:`to_json`."""
        out: list[Part] = []
        for p in parts:
            if p.get("type") == "image":
                layer = tuple((str(t), (int(b[0]), int(b[1]), int(b[2]), int(b[3])))
                              for t, b in p.get("layer", ()))
                out.append(ImagePart(base64.b64decode(str(p["data"])), str(p.get("mime_type", "image/png")), layer))
            else:
                out.append(TextPart(str(p.get("text", ""))))
        return cls(tuple(out))

    def __str__(self) -> str:
        return self.text


# -- what the graders and the user simulators return ----------------------------


@dataclass(frozen=True)
class GradeResult:
    """A grader's verdict: reward in [0, 1] and one named check per line."""

    reward: float
    checks: tuple[tuple[str, bool], ...] = ()


@dataclass(frozen=True)
class UserReply:
    """What the user simulator said to one ``ask_user`` question.

    Attributes:
        text: the reply the agent sees.
        disclosed: ids of the recovery facts whose values the reply states.
        usage: provider-reported usage of a model-backed simulator's call
            (``input_tokens``, ``output_tokens``, ``reasoning_tokens``,
            ``cost_usd``); None for an offline simulator.  Never added to
            the agent's token counters.
        blocked: the model's reply would have leaked (a value outside the
            recovery annotation or a canary) and was replaced by the neutral reply.
        simulator: name of the simulator (the user model for a model-backed one).
    """

    text: str
    disclosed: tuple[str, ...] = ()
    usage: Mapping[str, Any] | None = None
    blocked: bool = False
    simulator: str = ""

    @classmethod
    def of(cls, result: UserReply | tuple[str, str | Sequence[str] | None]) -> UserReply:
        """A simulator's result as a :class:`UserReply` (a ``(text, fact id or None)`` pair is accepted)."""
        if isinstance(result, UserReply):
            return result
        text, facts = result
        if facts is None:
            return cls(str(text))
        return cls(str(text), (facts,) if isinstance(facts, str) else tuple(facts))

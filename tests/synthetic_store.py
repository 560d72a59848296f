"""A synthetic results store of any size, for the report's tests and ``bench/report.py``.

``records(tasks, models)`` yields ``tasks x models x 16`` episodes (clean, the
12 families and three inserted objects) with trajectories shaped like the
reference agents' on the workflows suite (tool calls, JSON observations, a
final answer, the grader's checks; about 2 KB each), token usage, binary
rewards and, for perturbed episodes, the variant's diff and canaries.  Every
tenth task is an image task: one tool returns a small PNG, and its
``inserted-image-note`` variant shows an edited one.  Everything is drawn
from ``random.Random`` seeded by the episode's key, so the same arguments
give the same store byte for byte (``recorded_at`` aside).
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import struct
import zlib
from collections.abc import Iterator, Sequence
from contextlib import closing
from pathlib import Path
from typing import Any

from pytest_agentperturb.model.records import Canary, EpisodeRecord, Variant
from pytest_agentperturb.model.vocab import CLEAN, FAMILIES, Surfaces, family_parts
from pytest_agentperturb.run.store import Store

PER_TASK: tuple[str, ...] = (CLEAN, *FAMILIES, "inserted-fake-tool", "inserted-distractor-turn", "inserted-injection")
IMAGE_FAMILY = "inserted-image-note"
MODELS: tuple[str, ...] = ("reference/careful", "acme/agent-7b")
TOOLS = ("calendar_list_events", "contacts_search", "mail_send", "files_read", "tickets_update", "expense_submit")
NAMES = ("Lena Vogt", "Marco Rossi", "Aiko Tanaka", "Sam Okafor", "Priya Nair", "Jonas Berg")
_SURFACES = Surfaces(user="", procedure="", context=(), tools=())


def png(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    """A solid-colour RGB PNG (no dependency)."""
    raw = b"".join(b"\x00" + bytes(rgb) * width for _ in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def _observation(rng: random.Random, tool: str) -> str:
    items = [{"id": f"EV-{rng.randrange(100, 999)}", "name": rng.choice(NAMES),
              "email": f"user{rng.randrange(10, 99)}@acme.test", "start": f"2026-11-{rng.randrange(10, 28)}T09:30",
              "note": " ".join(rng.choice(("room", "budget", "review", "approved", "pending", "Fjord", "Birch"))
                               for _ in range(rng.randrange(4, 12)))}
             for _ in range(rng.randrange(1, 3))]
    return json.dumps(items if tool != "mail_send" else {"ok": True, "sent": items[0]}, sort_keys=True)


def trajectory(rng: random.Random, task: str, family: str, success: bool, image: bytes | None) -> list[dict[str, Any]]:
    """A plausible trajectory: 2-5 tool calls, a final answer, the grader's checks."""
    out: list[dict[str, Any]] = []
    for step in range(rng.randrange(2, 6)):
        tool = "screenshot" if image is not None and step == 0 else rng.choice(TOOLS)
        out.append({"role": "assistant", "tool": tool, "args": {"query": rng.choice(NAMES), "step": step}})
        obs: dict[str, Any] = {"role": "tool", "tool": tool, "content": _observation(rng, tool)}
        if image is not None and step == 0:
            obs = {"role": "tool", "tool": "screenshot", "content": "[image]",
                   "parts": [{"type": "image", "mime_type": "image/png",
                              "data": base64.b64encode(image).decode("ascii")}]}
        out.append(obs)
    out.append({"role": "assistant", "final": True,
                "content": f"Done with {task} ({family}): booked the review for {rng.choice(NAMES)} and "
                           f"sent the confirmation to user{rng.randrange(10, 99)}@acme.test."})
    checks = [[f"state.items[id=EV-{rng.randrange(100, 999)}].field == 'value-{k}' (found ['value-{k}'])",
               success or k > 0] for k in range(rng.randrange(3, 7))]
    out.append({"role": "grader", "checks": checks, "recovery_turns": 0})
    return out


def _variant(task: str, family: str, seed: int, rng: random.Random) -> Variant:
    wrong = f"user{rng.randrange(100, 999)}@wrong.test"
    diff = (f"--- a/instruction.md\n+++ b/instruction.md\n@@ -1,3 +1,3 @@\n Please handle {task}.\n"
            f"-Send the confirmation to user42@acme.test.\n+Send the confirmation to {wrong}.\n Thanks.\n")
    return Variant(task=task, family=family, operator="synthetic_op", seed=seed, surfaces=_SURFACES,
                   canaries=(Canary("value", wrong, "recipient"),), diff=diff)


def episodes(tasks: int, models: Sequence[str] = MODELS, *, suite: str = "synthetic",
             run_id: str = "bench") -> Iterator[tuple[EpisodeRecord, str, Variant | None]]:
    """(record, variant digest, variant) for ``tasks x len(models) x 16`` episodes, deterministic."""
    for i in range(tasks):
        task = f"task-{i:04d}"
        image_task = i % 10 == 0
        fams = [IMAGE_FAMILY if image_task and f == "inserted-distractor-turn" else f for f in PER_TASK]
        for model in models:
            for family in fams:
                key = f"{run_id}|{model}|{suite}|{task}|{family}"
                rng = random.Random(key)
                seed = 0
                success = rng.random() < (0.85 if family == CLEAN else 0.6)
                image = None
                if image_task:
                    colour = (200, 60, 40) if family == IMAGE_FAMILY else (40, 90, 200)
                    image = png(48, 32, colour)
                target, typ = family_parts(family)
                rec = EpisodeRecord(
                    run_id=run_id, model=model, suite=suite, task=task, family=family, target=target, type=typ,
                    operator="none" if family == CLEAN else "synthetic_op", seed=seed,
                    reward=1.0 if success else 0.0, success=success,
                    compliance=None if family == CLEAN else rng.random() < 0.3,
                    input_tokens=rng.randrange(2000, 9000), output_tokens=rng.randrange(100, 600),
                    reasoning_tokens=0, tool_calls=rng.randrange(2, 6), turns=rng.randrange(3, 8),
                    wall_s=round(rng.uniform(0.5, 9.0), 3), trajectory=trajectory(rng, task, family, success, image),
                    baseline=model.startswith("reference/"))
                if family == CLEAN:
                    yield rec, "", None
                    continue
                variant = _variant(task, family, seed, rng)
                yield rec, hashlib.sha256(key.encode()).hexdigest()[:16], variant


def rows(tasks: int, models: Sequence[str] = MODELS, **kw: Any) -> list[dict[str, Any]]:
    """Report rows (as a store returns them: trajectory JSON text, diff and canaries joined)."""
    out = []
    for rec, _, v in episodes(tasks, models, **kw):
        row = rec.to_row()
        row["diff"] = v.edit_text if v is not None else None
        row["canaries"] = json.dumps([{"kind": c.kind, "text": c.text, "fact": c.fact} for c in v.canaries],
                                     sort_keys=True) if v is not None else None
        out.append(row)
    return out


def write_store(path: Path | str, tasks: int, models: Sequence[str] = MODELS, **kw: Any) -> int:
    """Write the synthetic episodes of ``tasks`` tasks to a new store at ``path``; returns how many."""
    n = 0
    with closing(Store(path)) as s:
        s.record_run(kw.get("run_id", "bench"), {"synthetic": True, "tasks": tasks})
        for rec, digest, v in episodes(tasks, models, **kw):
            s.put(rec, digest, v)
            n += 1
    return n

"""The simulated office: the built-in suites' tools, by true name, over a JSON state.

Every built-in task's environment is a JSON document with collections such as
``calendar.events``, ``mail.inbox``/``mail.outbox``, ``files``, ``tickets``,
``contacts``, ``expenses`` and ``dashboards``; a file may be an image, kept
as a spec (``{"path": ..., "image": {"kind": "document", ...}}``) that
:func:`~pytest_agentperturb.imaging.render.render` draws on request (a dashboard's ``chart`` too;
:func:`image_specs` lists them all, for the loader's checks).  Each tool here is registered in :data:`OFFICE`
under its true name with its true argument schema.  Perturbations edit only
what the agent is *told* (the tool surface); the backend never changes
(docs/design.md section 1), so a call to an advertised-but-unregistered
name, a missing required argument or a value outside the true enum returns
an error observation.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

from ...model.errors import ToolError
from ...model.protocols import ImagePart, Observation, TextPart
from ..python import Param, Toolkit

#: The office backend: every built-in tool by true name.
OFFICE = Toolkit()
tool = OFFICE.tool


def _coll(state: dict[str, Any], *path: str) -> list[dict[str, Any]]:
    node: Any = state
    for p in path:
        node = node.setdefault(p, {} if p != path[-1] else [])
    assert isinstance(node, list)
    return node


def _find(items: list[dict[str, Any]], key: str, value: str, what: str) -> dict[str, Any]:
    for it in items:
        if str(it.get(key)) == value:
            return it
    raise ToolError(f"no {what} with {key} '{value}'")


S = Param  # short alias for the schemas below


# -- calendar -----------------------------------------------------------------

@tool("calendar_list_events", "List calendar events, optionally only those on one date (YYYY-MM-DD).",
      date=S(description="Date to filter on, YYYY-MM-DD.", required=False))
def _calendar_list(state: dict[str, Any], date: str | None = None) -> Any:
    events = _coll(state, "calendar", "events")
    return [e for e in events if date is None or str(e.get("start", "")).startswith(date)]


@tool("calendar_update_event", "Change the start time (and optionally the title) of an existing event.",
      event_id=S(description="Id of the event, as listed by the calendar."),
      start=S(description="New start, YYYY-MM-DDTHH:MM."),
      title=S(description="New title.", required=False))
def _calendar_update(state: dict[str, Any], event_id: str, start: str, title: str | None = None) -> Any:
    ev = _find(_coll(state, "calendar", "events"), "id", event_id, "event")
    ev["start"] = start
    if title is not None:
        ev["title"] = title
    return {"ok": True, "event": ev}


@tool("calendar_create_event", "Create a calendar event and invite attendees.",
      title=S(description="Event title."),
      start=S(description="Start, YYYY-MM-DDTHH:MM."),
      attendees=S(type="array", description="Attendee e-mail addresses."),
      room=S(description="Meeting room.", required=False))
def _calendar_create(state: dict[str, Any], title: str, start: str, attendees: list[str],
                     room: str | None = None) -> Any:
    events = _coll(state, "calendar", "events")
    ev = {"id": f"EV-{900 + len(events)}", "title": title, "start": start,
          "attendees": list(attendees), "room": room}
    events.append(ev)
    return {"ok": True, "event": ev}


# -- mail ---------------------------------------------------------------------

@tool("mail_search", "Search the inbox; returns messages whose subject or body contains the query.",
      query=S(description="Text to look for."))
def _mail_search(state: dict[str, Any], query: str) -> Any:
    q = query.lower()
    return [m for m in _coll(state, "mail", "inbox")
            if q in str(m.get("subject", "")).lower() or q in str(m.get("body", "")).lower()]


@tool("mail_send", "Send an e-mail.",
      to=S(description="Recipient e-mail address."),
      subject=S(description="Subject line."),
      body=S(description="Message body."))
def _mail_send(state: dict[str, Any], to: str, subject: str, body: str) -> Any:
    outbox = _coll(state, "mail", "outbox")
    outbox.append({"to": to, "subject": subject, "body": body})
    return {"ok": True, "message_id": f"MSG-{len(outbox)}"}


# -- contacts -----------------------------------------------------------------

@tool("contacts_search", "Find colleagues by (part of) their name.",
      name=S(description="Name or part of it."))
def _contacts_search(state: dict[str, Any], name: str) -> Any:
    n = name.lower()
    return [c for c in _coll(state, "contacts") if n in str(c.get("name", "")).lower()]


# -- files --------------------------------------------------------------------

@tool("files_list", "List the files in a folder.", folder=S(description="Folder path, e.g. /finance."))
def _files_list(state: dict[str, Any], folder: str) -> Any:
    return [f["path"] for f in _coll(state, "files") if str(f["path"]).startswith(folder.rstrip("/") + "/")]


@tool("files_read", "Read a file's text.", path=S(description="Full file path."))
def _files_read(state: dict[str, Any], path: str) -> Any:
    f = _find(_coll(state, "files"), "path", path, "file")
    if "image" in f:
        raise ToolError(f"{path} is an image (a scan or a screenshot), not text; use files_preview to see it")
    return f


def _image(spec: Any, caption: str) -> Observation:
    return Observation((TextPart(caption), _render(json.dumps(spec, sort_keys=True))))


def image_specs(state: Any) -> Iterator[tuple[str, Any]]:
    """Every image spec of an office state, with its path in the JSON: ``files[i].image``, ``dashboards[i].chart``.

    What the image tools draw on request; the loader checks each one when a
    task is loaded (:func:`~pytest_agentperturb.imaging.render.check`), so
    an image the episode never draws is bounded too.  Reads, never edits,
    the state; parts of another shape are left to the loader's other checks.
    """
    if not isinstance(state, dict):
        return
    for coll, key in (("files", "image"), ("dashboards", "chart")):
        items = state.get(coll)
        if isinstance(items, list):
            for i, it in enumerate(items):
                if isinstance(it, dict) and key in it:
                    yield f"{coll}[{i}].{key}", it[key]


@lru_cache(maxsize=128)
def _render(spec: str) -> ImagePart:
    """Rendering is deterministic and parts are immutable: each spec is drawn once per process."""
    from ...imaging.render import render

    return render(json.loads(spec))


@tool("files_preview", "Show a rendered preview of a file (scans, screenshots, PDFs) as an image.",
      path=S(description="Full file path."))
def _files_preview(state: dict[str, Any], path: str) -> Any:
    f = _find(_coll(state, "files"), "path", path, "file")
    if "image" not in f:
        return Observation((TextPart(f"Preview of {path}: a text file; use files_read to read it."),))
    return _image(f["image"], f"Preview of {path} (image follows).")


@tool("dashboard_snapshot", "Take a snapshot of a reporting dashboard; returns its chart as an image.",
      name=S(description="Dashboard name, e.g. q3-spend."))
def _dashboard_snapshot(state: dict[str, Any], name: str) -> Any:
    board = _find(_coll(state, "dashboards"), "name", name, "dashboard")
    return _image(board["chart"], f"Snapshot of dashboard {name} (image follows).")


@tool("files_move", "Move a file to another folder.",
      path=S(description="Full file path."), folder=S(description="Destination folder."))
def _files_move(state: dict[str, Any], path: str, folder: str) -> Any:
    f = _find(_coll(state, "files"), "path", path, "file")
    f["path"] = folder.rstrip("/") + "/" + str(path).rsplit("/", 1)[-1]
    return {"ok": True, "path": f["path"]}


@tool("files_share", "Share a file with a colleague.",
      path=S(description="Full file path."), email=S(description="Colleague's e-mail address."),
      access=S(description="Access level.", enum=("view", "comment", "edit")))
def _files_share(state: dict[str, Any], path: str, email: str, access: str) -> Any:
    f = _find(_coll(state, "files"), "path", path, "file")
    f.setdefault("shared", []).append({"email": email, "access": access})
    return {"ok": True}


# -- tickets ------------------------------------------------------------------

_PRIORITIES = ("low", "normal", "high", "urgent")
_STATUSES = ("open", "in_progress", "resolved", "closed")


@tool("tickets_list", "List support tickets, optionally filtered by status.",
      status=S(description="Status filter.", required=False, enum=_STATUSES))
def _tickets_list(state: dict[str, Any], status: str | None = None) -> Any:
    return [t for t in _coll(state, "tickets") if status is None or t.get("status") == status]


@tool("tickets_update", "Update a ticket's status, priority or assignee.",
      ticket_id=S(description="Ticket id, as listed by tickets_list."),
      status=S(description="New status.", required=False, enum=_STATUSES),
      priority=S(description="New priority.", required=False, enum=_PRIORITIES),
      assignee=S(description="E-mail of the new assignee.", required=False))
def _tickets_update(state: dict[str, Any], ticket_id: str, status: str | None = None,
                    priority: str | None = None, assignee: str | None = None) -> Any:
    t = _find(_coll(state, "tickets"), "id", ticket_id, "ticket")
    for k, v in (("status", status), ("priority", priority), ("assignee", assignee)):
        if v is not None:
            t[k] = v
    return {"ok": True, "ticket": t}


@tool("tickets_comment", "Add a comment to a ticket.",
      ticket_id=S(description="Ticket id."), text=S(description="Comment text."))
def _tickets_comment(state: dict[str, Any], ticket_id: str, text: str) -> Any:
    t = _find(_coll(state, "tickets"), "id", ticket_id, "ticket")
    t.setdefault("comments", []).append(text)
    return {"ok": True}


# -- expenses -----------------------------------------------------------------

@tool("expenses_submit", "File an expense claim.",
      amount=S(type="string", description="Amount, e.g. 120.50."),
      currency=S(description="Currency code.", enum=("EUR", "USD", "GBP")),
      category=S(description="Expense category.", enum=("travel", "meals", "equipment", "training")),
      description=S(description="What the expense was for."))
def _expenses_submit(state: dict[str, Any], amount: str, currency: str, category: str, description: str) -> Any:
    claims = _coll(state, "expenses")
    claim = {"id": f"EXP-{100 + len(claims)}", "amount": amount, "currency": currency,
             "category": category, "description": description, "status": "submitted"}
    claims.append(claim)
    return {"ok": True, "claim": claim}


# =============================================================================
# Issue 13 (part 1): further office tools for the grown workflows suite.
# A self-contained block, appended as is, so that it can be ported onto the
# moved module (formats/native/office.py) without touching the code above.
# =============================================================================

_DECISIONS = ("approved", "rejected", "escalated")
_CLAIM_STATUSES = ("submitted", *_DECISIONS)


@tool("calendar_cancel_event", "Cancel an existing event; the calendar tells its attendees.",
      event_id=S(description="Id of the event, as listed by the calendar."),
      reason=S(description="Short reason shown to the attendees.", required=False))
def _calendar_cancel(state: dict[str, Any], event_id: str, reason: str | None = None) -> Any:
    ev = _find(_coll(state, "calendar", "events"), "id", event_id, "event")
    if ev.get("status") == "cancelled":
        raise ToolError(f"event '{event_id}' is already cancelled")
    ev["status"] = "cancelled"
    if reason is not None:
        ev["cancel_reason"] = reason
    return {"ok": True, "event": ev}


@tool("mail_reply", "Reply to a message of the inbox; the reply goes to the message's sender.",
      message_id=S(description="Id of the inbox message, as returned by mail_search."),
      body=S(description="Reply text."))
def _mail_reply(state: dict[str, Any], message_id: str, body: str) -> Any:
    msg = _find(_coll(state, "mail", "inbox"), "id", message_id, "message")
    outbox = _coll(state, "mail", "outbox")
    outbox.append({"to": msg.get("from"), "subject": f"Re: {msg.get('subject', '')}", "body": body,
                   "in_reply_to": message_id})
    return {"ok": True, "message_id": f"MSG-{len(outbox)}"}


@tool("mail_forward", "Forward a message of the inbox to someone, with an optional note on top.",
      message_id=S(description="Id of the inbox message, as returned by mail_search."),
      to=S(description="Recipient e-mail address."),
      note=S(description="Note written above the forwarded message.", required=False))
def _mail_forward(state: dict[str, Any], message_id: str, to: str, note: str | None = None) -> Any:
    msg = _find(_coll(state, "mail", "inbox"), "id", message_id, "message")
    outbox = _coll(state, "mail", "outbox")
    body = f"{note}\n\n" if note else ""
    outbox.append({"to": to, "subject": f"Fwd: {msg.get('subject', '')}", "note": note or "",
                   "body": body + f"---------- Forwarded message from {msg.get('from')} ----------\n"
                   + str(msg.get("body", "")), "forwarded": message_id})
    return {"ok": True, "message_id": f"MSG-{len(outbox)}"}


@tool("files_copy", "Copy a file into a folder, optionally under a new name.",
      path=S(description="Full path of the file to copy."),
      folder=S(description="Destination folder."),
      name=S(description="File name of the copy; defaults to the original name.", required=False))
def _files_copy(state: dict[str, Any], path: str, folder: str, name: str | None = None) -> Any:
    files = _coll(state, "files")
    src = _find(files, "path", path, "file")
    dest = folder.rstrip("/") + "/" + (name or str(path).rsplit("/", 1)[-1])
    if any(f.get("path") == dest for f in files):
        raise ToolError(f"a file already exists at '{dest}'")
    files.append({"path": dest, "text": src.get("text", "")})
    return {"ok": True, "path": dest}


@tool("files_unshare", "Remove a colleague's (or an outside person's) access to a file.",
      path=S(description="Full file path."), email=S(description="E-mail address whose access is removed."))
def _files_unshare(state: dict[str, Any], path: str, email: str) -> Any:
    f = _find(_coll(state, "files"), "path", path, "file")
    shares = [s for s in f.get("shared", []) if s.get("email") == email]
    if not shares:
        raise ToolError(f"'{path}' is not shared with '{email}'")
    f["shared"] = [s for s in f["shared"] if s.get("email") != email]
    return {"ok": True, "shared": f["shared"]}


@tool("tickets_create", "Open a new ticket; returns its id.",
      title=S(description="Ticket title."),
      priority=S(description="Priority.", enum=_PRIORITIES),
      assignee=S(description="E-mail of the assignee.", required=False),
      description=S(description="Details.", required=False))
def _tickets_create(state: dict[str, Any], title: str, priority: str, assignee: str | None = None,
                    description: str | None = None) -> Any:
    tickets = _coll(state, "tickets")
    t: dict[str, Any] = {"id": f"TCK-{900 + len(tickets)}", "title": title, "status": "open", "priority": priority}
    if assignee is not None:
        t["assignee"] = assignee
    if description is not None:
        t["description"] = description
    tickets.append(t)
    return {"ok": True, "ticket": t}


@tool("expenses_list", "List expense claims, optionally filtered by status.",
      status=S(description="Status filter.", required=False, enum=_CLAIM_STATUSES))
def _expenses_list(state: dict[str, Any], status: str | None = None) -> Any:
    return [c for c in _coll(state, "expenses") if status is None or c.get("status") == status]


@tool("expenses_review", "Decide a submitted expense claim as its approver.",
      claim_id=S(description="Claim id, as listed by expenses_list."),
      decision=S(description="Decision.", enum=_DECISIONS),
      note=S(description="Note to the claimant.", required=False))
def _expenses_review(state: dict[str, Any], claim_id: str, decision: str, note: str | None = None) -> Any:
    c = _find(_coll(state, "expenses"), "id", claim_id, "claim")
    if c.get("status") != "submitted":
        raise ToolError(f"claim '{claim_id}' is {c.get('status')}, only submitted claims can be decided")
    c["status"] = decision
    if note is not None:
        c["review_note"] = note
    return {"ok": True, "claim": c}

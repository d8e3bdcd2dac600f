"""Following one turn of a conversation, for ``hermesctl chat`` one-shot and the REPL.

`run_turn` sends a message and `follow_turn` shows the turn's ``session.event`` notifications
until ``turn.finished``; Ctrl-C while a turn runs is counted by `Interrupts` and becomes a
``session.cancel``. `approval_handler` answers the daemon's ``approval.request`` with
``hermesctl.approval_prompt`` and its ``clarify.request`` (the model's question) with
``hermesctl.clarify_prompt``. Presentation is the caller's (``on_event``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from hermesctl.client import Client
from hermesd.rpc.protocol import Codes, RpcError

CANCEL_GRACE_S = 15.0
MAX_IMAGE_BYTES = 4 * 1024 * 1024  # the daemon's bound on one message's images


def image_part(path: str) -> dict[str, Any]:
    """An image file read for ``session.send`` (its type is the daemon's to check); raises
    ValueError with a sentence when it cannot be sent."""
    full = os.path.expanduser(path)
    try:
        size = os.path.getsize(full)
        if size > MAX_IMAGE_BYTES:
            raise ValueError(f"{path} is {size:,} bytes; images may be {MAX_IMAGE_BYTES:,}")
        with open(full, "rb") as f:
            data = f.read(MAX_IMAGE_BYTES + 1)
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
    return {"data": data, "name": os.path.basename(full)}


# --- session choice ----------------------------------------------------------------------------


def choose_session(args: argparse.Namespace, client: Client) -> tuple[dict[str, Any], bool]:
    """The session to talk in, and whether it was resumed."""
    if args.session:
        return client.call("session.attach", {"session_id": args.session}), True
    if args.cont:
        page = client.call("session.list", {"limit": 50})
        sessions = page.get("sessions") or []
        used = [s for s in sessions if s.get("message_count")]
        if used or sessions:
            chosen = (used or sessions)[0]
            return client.call("session.attach", {"session_id": chosen["id"]}), True
    return client.call("session.create", {"platform": "cli"}), False


# --- one turn ----------------------------------------------------------------------------------


class Interrupts:
    """While a turn runs, Ctrl-C sets a flag (the turn is cancelled) instead of raising."""

    def __init__(self) -> None:
        self.count = 0
        self._previous: Any = None

    def __enter__(self) -> Interrupts:
        self.count = 0
        try:
            self._previous = signal.signal(signal.SIGINT, self._handle)
        except ValueError:  # not the main thread (library use): no Ctrl-C handling
            self._previous = None
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.count += 1

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


def run_turn(
    client: Client,
    session_id: str,
    message: str,
    on_event: Any,
    tick: Any = None,
    interrupts: Interrupts | None = None,
    images: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Send one message (with ``images``, from `image_part`) and follow the turn; returns its
    ``turn.finished`` event."""
    params: dict[str, Any] = {"session_id": session_id, "message": message}
    if images:
        params["images"] = images
    result = client.call("session.send", params)
    return follow_turn(client, session_id, result["turn_id"], on_event, tick, interrupts)


def follow_turn(
    client: Client,
    session_id: str,
    turn_id: str,
    on_event: Any,
    tick: Any = None,
    interrupts: Interrupts | None = None,
) -> dict[str, Any]:
    """Show a running turn's events until its ``turn.finished``, which it returns; Ctrl-C
    (counted by ``interrupts``) sends ``session.cancel``."""
    cancel_sent_at: float | None = None
    while True:
        if interrupts is not None and interrupts.count and cancel_sent_at is None:
            client.send("session.cancel", {"session_id": session_id})
            cancel_sent_at = time.monotonic()
        if cancel_sent_at is not None and time.monotonic() - cancel_sent_at > CANCEL_GRACE_S:
            return {
                "type": "turn.finished",
                "session_id": session_id,
                "turn_id": turn_id,
                "status": "cancelled",
                "error": "no answer to session.cancel",
            }
        note = client.next_notification(timeout=0.1)
        if note is None:
            if tick is not None:
                tick()
            continue
        if note.method == "approval.resolved":
            on_event({"type": "approval.resolved", **(note.params[0] if note.params else {})})
            continue
        if note.method == "memory.event" and note.params:  # docs/memory.md, announcements
            on_event(note.params[0])
            continue
        if note.method != "session.event" or not note.params:
            continue
        event: dict[str, Any] = note.params[0]
        if event.get("type") == "session.deleted" and event.get("session_id") == session_id:
            on_event(event)
            return {
                "type": "turn.finished",
                "session_id": session_id,
                "turn_id": turn_id,
                "status": "failed",
                "error": "the session was deleted",
            }
        if event.get("turn_id") != turn_id:
            continue
        on_event(event)
        if event.get("type") == "turn.finished":
            return event


def approval_handler(
    interactive: bool,
    default: str,
    before_prompt: Any = None,
    watch: Client | None = None,
    on_typed: Callable[[str], None] | None = None,
) -> Any:
    """``client.on_request``: approval requests go to ``hermesctl.approval_prompt``, the
    model's questions to ``hermesctl.clarify_prompt``.

    With ``watch`` (the connection the request came on) an interactive prompt also closes when
    the approval (question) is resolved elsewhere; what was typed at it meanwhile goes to
    ``on_typed``.
    """

    def handle(method: str, params: list[Any]) -> Any:
        if method not in _RESOLVED_BY:
            raise RpcError(Codes.METHOD_NOT_FOUND, f"hermesctl chat does not handle '{method}'")
        request = params[0] if params and isinstance(params[0], dict) else {}
        from hermesctl import approval_prompt, clarify_prompt

        if before_prompt is not None:
            before_prompt()
        read_answer = None
        if watch is not None and interactive:
            the_id = str(request.get("id") or "")
            read_answer = _watching(watch, the_id, on_typed, _RESOLVED_BY[method])
        if method == "clarify.request":
            try:
                return clarify_prompt.ask(request, interactive, read_answer=read_answer)
            except (KeyboardInterrupt, EOFError):  # the person will not answer: the model decides
                return {"unattended": True}
        previous = None
        # the user must be able to answer; Ctrl-C at the prompt means deny (ValueError: not
        # the main thread, where the handler cannot be changed)
        with contextlib.suppress(ValueError):
            previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            answer: dict[str, Any] = approval_prompt.ask(
                request, interactive=interactive, default=default, read_answer=read_answer
            )
            return answer
        except (KeyboardInterrupt, EOFError):
            return {"choice": "deny", "reason": "interrupted at the approval prompt"}
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)

    return handle


_RESOLVED_BY = {"approval.request": "approval.resolved", "clarify.request": "clarify.resolved"}


def _watching(
    client: Client, approval_id: str, on_typed: Callable[[str], None] | None, method: str
) -> Callable[[], str | dict[str, Any]]:
    def read() -> str | dict[str, Any]:
        from hermesctl.approval_watch import answer_or_resolution, take_typed_input

        got = answer_or_resolution(client, approval_id, method=method)
        if isinstance(got, dict) and on_typed is not None:
            with contextlib.suppress(ValueError, OSError):
                typed = take_typed_input(sys.stdin.fileno())
                if typed:
                    on_typed(typed)
        return got

    return read

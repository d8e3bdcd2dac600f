"""What ``hermesctl chat`` does with the daemon's messages while it waits at its prompt.

An attached chat is asked about approvals and the model's questions raised by turns it did not
start (the web page, an editor, another terminal). Those requests would sit unread on the
socket until the next message is sent, so the line editor watches the connection while it
waits (`hermesctl.line_editor`): `IdleWatch.check` reads what has arrived without answering
anything, and says whether the prompt must step aside; `IdleWatch.handle` then answers the
requests (the approval or question prompt runs, with the terminal to itself) and hands the
notifications that arrived to ``show``, after which the prompt comes back with what was typed.
Turn events of other clients (the streamed text) are not worth interrupting the prompt for;
they are handed to ``show`` with the next notification that is.
"""

from __future__ import annotations

from collections.abc import Callable

from hermesctl.client import Client, ConnectionClosed
from hermesd.rpc import wire

#: session events that interrupt an idle prompt (with the notifications queued before them)
SHOWN_EVENTS = frozenset({"turn.started", "turn.finished", "session.deleted"})
SHOWN_METHODS = frozenset({"approval.resolved", "clarify.resolved"})


def worth_showing(note: wire.Notification) -> bool:
    """Whether ``note`` should interrupt an idle prompt."""
    if note.method in SHOWN_METHODS:
        return True
    if note.method != "session.event" or not note.params:
        return False
    event = note.params[0]
    return isinstance(event, dict) and event.get("type") in SHOWN_EVENTS


class IdleWatch:
    """The connection an idle prompt watches (one per prompt: the REPL may reconnect)."""

    def __init__(self, client: Client, show: Callable[[list[wire.Notification]], None]) -> None:
        self.client = client
        self.show = show
        self.held: list[wire.Request] = []
        self.open = True  # False once the connection is gone: the next message reconnects

    def fileno(self) -> int:
        """The socket to wait on."""
        return self.client.sock.fileno()

    @property
    def pending(self) -> bool:
        """Whether something read is waiting for `handle`."""
        return bool(self.held) or any(worth_showing(n) for n in self.client.queued())

    def check(self) -> bool:
        """Read what has arrived (requests are held); True when the prompt must step aside."""
        try:
            self.held += self.client.read_ready()
        except (ConnectionClosed, OSError):
            self.open = False
            return False
        return self.pending

    def handle(self) -> None:
        """Answer the held requests (their prompts run now) and show what else arrived."""
        held, self.held = self.held, []
        if held:  # what came before the requests first; the prompts look for resolutions
            self.show(self.client.take_notifications(lambda n: n.method not in SHOWN_METHODS))
        try:
            for request in held:
                self.client.answer(request)
        except (ConnectionClosed, OSError):
            self.open = False
        self.show(self.client.take_notifications())

"""An approval prompt that also listens to the daemon, so an answer given elsewhere closes it.

While ``hermesctl chat`` shows ``Choice [o/s/a/D]:``, `answer_or_resolution` waits for either
a line on the terminal or this approval's ``approval.resolved`` on the connection (another
terminal, ``hermesctl approvals respond``, a timeout). Whatever was typed but not entered at
the prompt when it closes is taken back from the terminal (`take_typed_input`) so the chat
prompt can start with it: nothing typed meanwhile is lost, and none of it is taken as the
answer. Unix terminals only; standard library only.
"""

from __future__ import annotations

import contextlib
import os
import select
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TextIO

    from hermesctl.client import Client

RESOLVED = "approval.resolved"


def answer_or_resolution(
    client: Client, approval_id: str, stdin: TextIO | None = None, method: str = RESOLVED
) -> str | dict[str, Any]:
    """A line typed at the prompt, or the ``approval.resolved`` params for ``approval_id``
    (``method``: the notification that closes it, ``clarify.resolved`` for a question)."""
    stdin = stdin or sys.stdin
    fd = stdin.fileno()

    def ours(params: dict[str, Any]) -> bool:
        return params.get("id") == approval_id

    while True:
        client.dispatch_buffered()
        resolved = client.take_notification(method, ours)
        if resolved is not None:
            return resolved
        readable, _, _ = select.select([fd, client.sock], [], [])
        if fd in readable:
            return stdin.readline()
        client.pump()  # may raise ConnectionClosed: the caller's to handle


def take_typed_input(fd: int) -> str:
    """What sits in the terminal's line buffer, typed but not entered; "" if none or not a
    terminal. The terminal's settings are restored."""
    try:
        import termios
    except ImportError:
        return ""
    try:
        saved = termios.tcgetattr(fd)
    except (termios.error, OSError):
        return ""
    raw = termios.tcgetattr(fd)
    raw[3] &= ~termios.ICANON  # the pending partial line becomes readable
    raw[6][termios.VMIN] = 0
    raw[6][termios.VTIME] = 0
    data = b""
    try:
        termios.tcsetattr(fd, termios.TCSANOW, raw)
        while select.select([fd], [], [], 0)[0]:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    finally:
        with contextlib.suppress(termios.error, OSError):
            termios.tcsetattr(fd, termios.TCSANOW, saved)
    return data.decode("utf-8", "replace").replace("\r", "").split("\n")[-1]

"""``hermesctl chat``: the interactive REPL and one-shot turns (``-m``, stdin, ``--json``).

Owns the client side of a conversation: choosing the session (new, ``--session``,
``--continue``), sending a turn and following its ``session.event`` notifications until
``turn.finished``, Ctrl-C → ``session.cancel``, slash commands (``/quit`` locally, ``/new`` via
``session.reset``, the rest via ``command.run`` when the daemon has it), and answering the
daemon's ``approval.request``. Presentation is ``hermesctl.chat_ui``'s job.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from hermesctl.client import Client
from hermesctl.subcommands.base import EXIT_ERROR, EXIT_OK, UsageError, command
from hermesctl.turns import Interrupts, approval_handler, choose_session, run_turn


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "chat",
        help="talk to the agent (interactive, or one-shot with -m)",
        description="Chat with the agent. Without -m (and with a terminal on "
        "stdin) this is an interactive REPL; with -m TEXT, -m - or piped stdin "
        "it runs one turn, prints the answer and exits 0 (1 if the turn failed).",
        epilog="In the REPL: /retry, /undo, /history [N], /resume [ID], /usage, /version,\n"
        "/config [KEY], /compress [FOCUS], /new, /title, /model, /status, /image PATH, /quit;\n"
        "/help lists them all. A question the model asks shows its choices numbered: type a\n"
        "number or an answer of your own.\n"
        'A paste of several lines is one message; "\\" at the end of a line continues it,\n'
        'and a line """ opens a block that another closes.',
    )
    p.add_argument("-m", "--message", help="one-shot: send this message ('-' reads stdin)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--session", metavar="ID", help="resume this session")
    which.add_argument(
        "--continue", dest="cont", action="store_true", help="resume the most recent session"
    )
    which.add_argument("--new", action="store_true", help="start a new session (the default)")
    p.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS,
        help="one-shot: print every event of the turn as one JSON object per line",
    )
    p.add_argument(
        "--plain",
        action="store_true",
        help="print the answer's markdown as it is (the default on a terminal renders it; "
        "a pipe or NO_COLOR gets plain text anyway)",
    )
    p.add_argument(
        "--image",
        action="append",
        metavar="PATH",
        help="attach an image file to the (first) message; repeat for more (in the REPL, "
        "/image PATH attaches one to the next message)",
    )
    p.add_argument(
        "--approve",
        choices=("deny", "once"),
        default="deny",
        help="answer to approval requests when there is no terminal (default deny)",
    )


# --- one-shot ------------------------------------------------------------------------------------


def _one_shot(args: argparse.Namespace, client: Client, message: str) -> int:
    from hermesctl.chat_ui import TurnPrinter

    as_json = getattr(args, "json", False)
    images = _images(args)
    if not message.strip() and not images:
        raise UsageError("the message is empty")
    client.hello("hermesctl chat")
    session, resumed = choose_session(args, client)
    tty = sys.stdout.isatty()
    printer = TurnPrinter(
        sys.stdout,
        sys.stdout if tty else sys.stderr,
        sys.stderr,
        tty=tty,
        markdown=tty and not getattr(args, "plain", False),
    )
    interactive = sys.stdin.isatty() and args.message not in (None, "-")
    client.on_request = approval_handler(
        interactive,
        args.approve,
        None if as_json else printer.finish,
        watch=client if interactive else None,
    )
    if as_json:

        def on_event(event: dict[str, Any]) -> None:
            sys.stdout.write(json.dumps(event, ensure_ascii=False, default=str) + "\n")
            sys.stdout.flush()

        on_event({"type": "session", "session_id": session["id"], "resumed": resumed})
    else:

        def on_event(event: dict[str, Any]) -> None:
            if event.get("type") == "approval.resolved":
                printer.approval_resolved(event)
            else:
                printer.event(event)

    with Interrupts() as interrupts:
        finished = run_turn(
            client,
            session["id"],
            message,
            on_event,
            None if as_json else printer.tick,
            interrupts,
            images,
        )
    if finished.get("status") == "completed":
        return EXIT_OK
    if as_json:  # the event says why; people reading stderr get one line too
        print(
            f"hermesctl: turn {finished.get('status')}: {finished.get('error') or ''}".rstrip(),
            file=sys.stderr,
        )
    return EXIT_ERROR


def _images(args: argparse.Namespace) -> list[dict[str, Any]]:
    """``--image`` files, read (a file that cannot be sent is a usage error)."""
    from hermesctl.turns import image_part

    try:
        return [image_part(path) for path in getattr(args, "image", None) or []]
    except ValueError as exc:
        raise UsageError(f"--image: {exc}") from None


@command("chat")
def cmd_chat(args: argparse.Namespace, client: Client) -> int:
    message = args.message
    if message == "-" or (message is None and not sys.stdin.isatty()):
        message = sys.stdin.read()
        if not message.strip():
            raise UsageError("no message: stdin was empty (use -m TEXT, or pipe a message)")
    if message is not None:
        return _one_shot(args, client, message)
    if getattr(args, "json", False):
        raise UsageError("--json needs a one-shot message (-m TEXT, -m -, or piped stdin)")
    from hermesctl.repl import Repl

    _images(args)  # a file that cannot be sent stops here, before the REPL starts
    repl = Repl(args, client)
    repl.start()
    try:
        return repl.loop()
    except EOFError:
        return EXIT_OK
    finally:
        repl.close()

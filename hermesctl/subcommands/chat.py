"""``hermesctl chat``: the interactive REPL and one-shot turns (``-m``, stdin, ``--json``).

Owns the client side of a conversation: choosing the session (new, ``--session``,
``--continue``), sending a turn and following its ``session.event`` notifications until
``turn.finished``, Ctrl-C → ``session.cancel``, slash commands (``/quit`` locally, ``/new`` via
``session.reset``, the rest via ``command.run`` when the daemon has it), and answering the
daemon's ``approval.request``. Presentation is ``hermesctl.chat_ui``'s job.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time
from typing import Any

from hermesctl.client import Client
from hermesctl.subcommands.base import EXIT_ERROR, EXIT_OK, UsageError, command
from hermesd.rpc.protocol import Codes, RpcError

CANCEL_GRACE_S = 15.0
LOCAL_HELP = [
    ("/help", "show this list"),
    ("/new, /reset", "start a new session"),
    ("/plugins", "list plugins and their status"),
    ("/quit, /exit", "leave (Ctrl-D works too)"),
]


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "chat",
        help="talk to the agent (interactive, or one-shot with -m)",
        description="Chat with the agent. Without -m (and with a terminal on "
        "stdin) this is an interactive REPL; with -m TEXT, -m - or piped stdin "
        "it runs one turn, prints the answer and exits 0 (1 if the turn failed).",
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
        "--approve",
        choices=("deny", "once"),
        default="deny",
        help="answer to approval requests when there is no terminal (default deny)",
    )


# --- session choice ----------------------------------------------------------------------------


def _choose_session(args: argparse.Namespace, client: Client) -> tuple[dict[str, Any], bool]:
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


class _Interrupts:
    """While a turn runs, Ctrl-C sets a flag (the turn is cancelled) instead of raising."""

    def __init__(self) -> None:
        self.count = 0
        self._previous: Any = None

    def __enter__(self) -> _Interrupts:
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
    interrupts: _Interrupts | None = None,
) -> dict[str, Any]:
    """Send one message and follow the turn; returns its ``turn.finished`` event."""
    result = client.call("session.send", {"session_id": session_id, "message": message})
    turn_id = result["turn_id"]
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


def _approval_handler(interactive: bool, default: str, before_prompt: Any = None) -> Any:
    """``client.on_request``: approval requests go to ``hermesctl.approval_prompt`` if present."""

    def handle(method: str, params: list[Any]) -> Any:
        if method != "approval.request":
            raise RpcError(Codes.METHOD_NOT_FOUND, f"hermesctl chat does not handle '{method}'")
        request = params[0] if params and isinstance(params[0], dict) else {}
        try:
            from hermesctl import approval_prompt
        except ImportError:
            return {"choice": "deny", "reason": "this hermesctl cannot ask for approvals"}
        if before_prompt is not None:
            before_prompt()
        previous = None
        # the user must be able to answer; Ctrl-C at the prompt means deny (ValueError: not
        # the main thread, where the handler cannot be changed)
        with contextlib.suppress(ValueError):
            previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            answer: dict[str, Any] = approval_prompt.ask(
                request, interactive=interactive, default=default
            )
            return answer
        except (KeyboardInterrupt, EOFError):
            return {"choice": "deny", "reason": "interrupted at the approval prompt"}
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)

    return handle


# --- one-shot ------------------------------------------------------------------------------------


def _one_shot(args: argparse.Namespace, client: Client, message: str) -> int:
    from hermesctl.chat_ui import TurnPrinter

    as_json = getattr(args, "json", False)
    if not message.strip():
        raise UsageError("the message is empty")
    client.hello("hermesctl chat")
    session, resumed = _choose_session(args, client)
    tty = sys.stdout.isatty()
    printer = TurnPrinter(sys.stdout, sys.stdout if tty else sys.stderr, sys.stderr, tty=tty)
    interactive = sys.stdin.isatty() and args.message not in (None, "-")
    client.on_request = _approval_handler(
        interactive, args.approve, None if as_json else printer.finish
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

    with _Interrupts() as interrupts:
        finished = run_turn(
            client, session["id"], message, on_event, None if as_json else printer.tick, interrupts
        )
    if finished.get("status") == "completed":
        return EXIT_OK
    if as_json:  # the event says why; people reading stderr get one line too
        print(
            f"hermesctl: turn {finished.get('status')}: {finished.get('error') or ''}".rstrip(),
            file=sys.stderr,
        )
    return EXIT_ERROR


# --- the REPL ------------------------------------------------------------------------------------


class Repl:
    """The interactive chat loop."""

    def __init__(self, args: argparse.Namespace, client: Client) -> None:
        from hermesctl.chat_ui import Style, TurnPrinter

        self.args, self.client = args, client
        self.tty = sys.stdout.isatty()
        self.style = Style(self.tty)
        self.printer = TurnPrinter(sys.stdout, sys.stdout, sys.stderr, tty=self.tty)
        self.session: dict[str, Any] = {}
        self.methods: set[str] = set()
        self._history_file: str | None = None

    def start(self) -> None:
        from hermesctl.chat_ui import banner

        info = self.client.hello("hermesctl chat")
        self.methods = set(info.get("methods") or [])
        self.session, resumed = _choose_session(self.args, self.client)
        status = self.client.call("status")
        tools = self.client.call("tools.list").get("tools") or []
        print(
            banner(
                info,
                self.session.get("model") or status.get("model"),
                self.session,
                tools,
                self.style,
                resumed,
            ),
            flush=True,
        )
        self.client.on_request = _approval_handler(True, "deny", self.printer.finish)
        self._setup_readline()

    def _setup_readline(self) -> None:
        try:
            import readline
        except ImportError:
            return
        from hermesd.rpc import paths

        readline.parse_and_bind("set enable-bracketed-paste off")
        self._setup_completion(readline)
        path = paths.hermes_home() / "chat_history"
        self._history_file = str(path)
        with contextlib.suppress(FileNotFoundError, OSError):
            readline.read_history_file(self._history_file)
        readline.set_history_length(1000)

    def _setup_completion(self, readline: Any) -> None:
        """Tab completes ``/command`` names (from ``commands.list`` when the daemon has it)."""
        names = ["/quit", "/exit", "/new", "/reset", "/help", "/plugins"]
        if "commands.list" in self.methods:
            try:
                for cmd in self.client.call("commands.list").get("commands") or []:
                    names += ["/" + n for n in [cmd.get("name"), *(cmd.get("aliases") or [])] if n]
            except RpcError:
                pass
        names = sorted(set(names))

        def complete(text: str, state: int) -> str | None:
            line = readline.get_line_buffer()
            if not line.startswith("/") or " " in line:
                return None
            matches = [n for n in names if n.startswith(text)]
            return matches[state] if state < len(matches) else None

        readline.set_completer_delims(" \t\n")
        readline.set_completer(complete)
        readline.parse_and_bind("tab: complete")

    def _save_history(self) -> None:
        if self._history_file is None:
            return
        import readline

        try:
            os.makedirs(os.path.dirname(self._history_file), exist_ok=True)
            readline.write_history_file(self._history_file)
            os.chmod(self._history_file, 0o600)
        except OSError:
            pass

    def read_message(self) -> str:
        """One message: ``\\`` at the end of a line continues it; ``\"\"\"`` opens a block."""
        prompt = "\001\x1b[1;36m\002› \001\x1b[0m\002" if self.tty else "› "
        more = "… "
        first = input(prompt)
        if first.strip() == '"""':
            lines: list[str] = []
            while True:
                line = input(more)
                if line.strip() == '"""':
                    return "\n".join(lines)
                lines.append(line)
        lines = [first]
        while lines[-1].endswith("\\"):
            lines[-1] = lines[-1][:-1]
            lines.append(input(more))
        return "\n".join(lines)

    def loop(self) -> int:
        last_interrupt = False
        while True:
            try:
                text = self.read_message()
            except EOFError:
                print()
                return EXIT_OK
            except KeyboardInterrupt:
                if last_interrupt:
                    print()
                    return EXIT_OK
                last_interrupt = True
                print("\n" + self.style.dim("(Ctrl-C again or Ctrl-D to leave)"), flush=True)
                continue
            last_interrupt = False
            if not text.strip():
                continue
            if text.lstrip().startswith("/"):
                if self.slash(text.strip()) == "quit":
                    return EXIT_OK
                continue
            self.turn(text)

    def turn(self, text: str) -> None:
        on_event = self._on_event
        try:
            with _Interrupts() as interrupts:
                run_turn(
                    self.client, self.session["id"], text, on_event, self.printer.tick, interrupts
                )
        except RpcError as exc:
            self.printer.line(self.style.red(f"✗ {exc.message}"), sys.stderr)

    def _on_event(self, event: dict[str, Any]) -> None:
        if event.get("type") == "approval.resolved":
            self.printer.approval_resolved(event)
        else:
            self.printer.event(event)

    # --- slash commands --------------------------------------------------------------------

    def slash(self, line: str) -> str | None:
        """Run a ``/command``; returns "quit" when the REPL should end."""
        name = line[1:].split(None, 1)[0].lower() if len(line) > 1 else ""
        if name in ("quit", "exit"):
            return "quit"
        try:
            if name in ("new", "reset"):
                self.session = self.client.call("session.reset", {"session_id": self.session["id"]})
                print(f"New session {self.session['id']}", flush=True)
            elif "command.run" in self.methods:
                self._show_command_result(
                    self.client.call(
                        "command.run", {"line": line, "session_id": self.session["id"]}
                    )
                )
            elif name == "help":
                self._local_help()
            elif name == "plugins":
                print(self.client.call("plugins.list").get("text", ""), flush=True)
            else:
                print(
                    self.style.red(f"Unknown command /{name}. Type /help for the list."),
                    file=sys.stderr,
                    flush=True,
                )
        except RpcError as exc:
            print(self.style.red(f"✗ {exc.message}"), file=sys.stderr, flush=True)
        return None

    def _local_help(self) -> None:
        print("Commands (this daemon has no command.run; plugin commands need a newer hermesd):")
        for names, text in LOCAL_HELP:
            print(f"  {names:<14} {text}")
        sys.stdout.flush()

    def _show_command_result(self, result: Any) -> None:
        """Print ``command.run``'s ``{command, output, ok, action, session}``."""
        if not isinstance(result, dict):
            if result is not None:
                print(result, flush=True)
            return
        text = str(result.get("output") or "")
        if text and result.get("ok", True) is False:
            print(self.style.red(text), file=sys.stderr, flush=True)
        elif text:
            print(text, flush=True)
        session = result.get("session")
        if isinstance(session, dict) and session.get("id"):
            # /new: the daemon made the session and attached us; /title, /model: updated
            self.session = session
        if result.get("action") in ("quit", "exit"):
            raise EOFError

    def close(self) -> None:
        self._save_history()


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
    repl = Repl(args, client)
    repl.start()
    try:
        return repl.loop()
    except EOFError:
        return EXIT_OK
    finally:
        repl.close()

"""The interactive ``hermesctl chat``: read a message, run the turn, show it, again.

Owns the REPL's loop and what it keeps between turns: the session, the ``seq`` of the last
event shown and the id of the newest stored message seen (so a re-attach replays exactly
what was missed), and text typed at an approval prompt that an answer from elsewhere closed
(it starts the next prompt). Slash commands go to the daemon's ``command.run`` (``/quit``
stays here), and their ``action`` is followed: ``session`` switches session (``/new``,
``/resume``), ``turn`` follows the turn a command started (``/retry``).

When the connection is lost (a daemon restart), the REPL reconnects with backoff for as long
as the person waits (Ctrl-C stops trying and puts the unsent message back at the prompt),
attaches again with ``after_seq``, says so, shows the events and stored messages it missed,
and sends a message again only when the daemon had not stored it. ``/resume`` ends with a
recap of the session it switched to: the last exchange and its pending approvals. Reading lines is
``hermesctl.line_editor``'s job, showing events ``hermesctl.chat_ui``'s.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import time
from collections.abc import Iterator
from typing import Any

from hermesctl.chat_ui import Style, TurnPrinter, banner, render_history, status_line
from hermesctl.client import Client, ConnectionClosed, DaemonNotRunning
from hermesctl.idle_events import IdleWatch
from hermesctl.line_editor import LineEditor, ToolbarEditor
from hermesctl.status_bar import StatusBar
from hermesctl.subcommands.base import EXIT_OK
from hermesctl.turns import Interrupts, approval_handler, choose_session, follow_turn
from hermesd.rpc.protocol import Codes, RpcError

RECONNECT_DELAYS = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0)  # then the last, until Ctrl-C
LOCAL_HELP = [
    ("/help", "show this list"),
    ("/image PATH", "attach an image to your next message"),
    ("/new, /reset", "start a new session"),
    ("/plugins", "list plugins and their status"),
    ("/quit, /exit", "leave (Ctrl-D works too)"),
]


def lost(exc: BaseException) -> bool:
    """Whether ``exc`` means the connection to the daemon is gone (or going)."""
    if isinstance(exc, (ConnectionClosed, BrokenPipeError, ConnectionResetError)):
        return True
    return isinstance(exc, RpcError) and exc.code == Codes.SHUTTING_DOWN


class Repl:
    """The interactive chat loop."""

    def __init__(self, args: argparse.Namespace, client: Client) -> None:
        self.args, self.client = args, client
        self.tty = sys.stdout.isatty()
        self.style = Style(self.tty)
        self.printer = TurnPrinter(
            sys.stdout,
            sys.stdout,
            sys.stderr,
            tty=self.tty,
            markdown=self.tty and not getattr(args, "plain", False),
        )
        self.session: dict[str, Any] = {}
        self.methods: set[str] = set()
        self.editor: LineEditor | None = None
        self.event_seq: int | None = None  # the last event of the session shown here
        self.last_message_id = 0  # the newest stored message known to be shown
        self.typed = ""  # typed at an approval prompt that closed: starts the next prompt
        self.other_turn_from: int | None = None  # newest message shown as another turn began
        self.model: str | None = None
        self.connected = True  # False from a lost connection until attached again
        self.bar: StatusBar | None = None  # the toolbar's fields, on a terminal
        self.images: list[dict[str, Any]] = []  # attached to the next message (/image, --image)
        self._image_paths = list(getattr(args, "image", None) or [])

    # --- start -------------------------------------------------------------------------------

    def start(self) -> None:
        info = self.client.hello("hermesctl chat")
        self.methods = set(info.get("methods") or [])
        # before attaching: the daemon asks a client that attaches about pending approvals
        self.client.on_request = self._approvals(self.client)
        session, resumed = choose_session(self.args, self.client)
        status = self.client.call("status")
        tools = self.client.call("tools.list").get("tools") or []
        model = session.get("model") or status.get("model")
        self.model = model
        print(
            banner(
                {**info, "sandbox": status.get("sandbox")},
                model,
                session,
                tools,
                self.style,
                resumed,
            ),
            flush=True,
        )
        self._switch(session)
        from hermesd.rpc import paths

        history = str(paths.hermes_home() / "chat_history")
        # the toolbar is drawn in reverse video: NO_COLOR (no-color.org) keeps the plain editor
        plain = getattr(self.args, "plain", False) or bool(os.environ.get("NO_COLOR"))
        if sys.stdin.isatty() and self.tty and not plain:
            self.bar = StatusBar(self.args.socket, model)
            self.editor = ToolbarEditor(history, self.bar.text)
            self.footer()  # the toolbar has something to show from the first prompt
            self.bar.start()
        else:
            self.editor = LineEditor(history)
        self.editor.complete_commands(self._command_names())
        for path in self._image_paths:
            self.attach_image(path)

    def _approvals(self, client: Client) -> Any:
        return approval_handler(
            True, "deny", self.printer.finish, watch=client, on_typed=self._keep_typed
        )

    def _keep_typed(self, text: str) -> None:
        self.typed += text

    def _command_names(self) -> list[str]:
        names = ["/quit", "/exit", "/new", "/reset", "/help", "/plugins", "/image"]
        if "commands.list" in self.methods:
            try:
                for cmd in self.client.call("commands.list").get("commands") or []:
                    names += ["/" + n for n in [cmd.get("name"), *(cmd.get("aliases") or [])] if n]
            except RpcError:
                pass
        return names

    def _switch(self, session: dict[str, Any]) -> None:
        """Talk in ``session`` from now on (just attached, created or resumed)."""
        changed = session.get("id") != self.session.get("id")
        self.session = session
        if changed:
            self.event_seq = session.get("event_seq")
            self.last_message_id = self._newest_message_id()
            if self.bar is not None:  # the toolbar shows the new session's figures
                self.bar.took_s = None
                self.footer()
        self._show_others(session)

    def _newest_message_id(self) -> int:
        try:
            newest = self.client.call(
                "session.history", {"session_id": self.session["id"], "limit": 1}
            ).get("messages")
        except RpcError:
            return 0
        return int(newest[-1]["id"]) if newest else 0

    def _show_others(self, session: dict[str, Any]) -> None:
        others = session.get("clients") or []
        if others:
            who = ", ".join(
                f"{c.get('user')} ({c.get('client') or 'a client'}, pid {c.get('pid')})"
                for c in others
            )
            self.printer.line(self.style.dim(f"also attached to this session: {who}"))

    # --- the loop ----------------------------------------------------------------------------

    def loop(self) -> int:
        assert self.editor is not None
        prompt = "\001\x1b[1;36m\002› \001\x1b[0m\002" if self.style.enabled else "› "
        last_interrupt = False
        while True:
            prefill, self.typed = self.typed, ""
            watch = IdleWatch(self.client, self._idle_notes) if self.connected else None
            try:
                if watch is not None and watch.pending:  # read before the prompt was up
                    watch.handle()
                text = self.editor.read_message(prompt, prefill, watch)
                if watch is not None and watch.pending:  # arrived as Enter was pressed
                    watch.handle()
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
            try:
                if not self.connected:
                    self.reconnect()
                if text.lstrip().startswith("/"):
                    if self.slash(text.strip()) == "quit":
                        return EXIT_OK
                    continue
                started = time.monotonic()
                self.turn(text)
                self.footer(time.monotonic() - started)
            except KeyboardInterrupt:
                if self.connected:
                    raise
                # Ctrl-C while waiting for hermesd: stop trying, keep the message
                self.typed = text
                self._stopped_reconnecting(
                    "your message is back at the prompt (Enter tries again, Ctrl-D leaves)"
                )
            except (RpcError, ConnectionClosed, OSError) as exc:
                if not lost(exc):  # lost again while recovering: attach again, then go on
                    raise
                try:
                    self.reconnect()
                except KeyboardInterrupt:  # the message went through: nothing to put back
                    self._stopped_reconnecting("your next message tries again (Ctrl-D leaves)")

    def _stopped_reconnecting(self, what_next: str) -> None:
        self.printer.line(self.style.yellow(f"⊘ stopped reconnecting; {what_next}"))

    def footer(self, took_s: float | None = None) -> None:
        """The status line under an answer: model, context use, session cost, approvals."""
        sid = self.session["id"]
        try:
            live = self.client.call("session.get", {"session_id": sid})
            cost = None
            if "usage.get" in self.methods:
                report = self.client.call("usage.get", {"session_id": sid, "limit": 1})
                cost = (report.get("totals") or {}).get("cost_usd")
            pending = self.client.call("approvals.pending").get("pending") or []
        except RpcError:
            return  # the footer is a convenience: a daemon that refuses one part shows none
        model = live.get("model") or self.model
        if self.bar is not None:  # the toolbar shows it
            self.bar.update(model, live.get("context"), cost, took_s, len(pending))
            return
        self.printer.line(
            self.style.dim(status_line(model, live.get("context"), cost, took_s, len(pending)))
        )

    # --- turns -------------------------------------------------------------------------------

    def turn(self, text: str) -> None:
        """Send ``text`` and show its turn; survive a lost connection."""
        turn_id: str | None = None
        params: dict[str, Any] = {"session_id": self.session["id"], "message": text}
        if self.images:
            params["images"] = self.images
        try:
            with Interrupts() as interrupts:
                started = self.client.call("session.send", params)
                turn_id = started["turn_id"]
                self.images = []  # sent with this message
                self._follow(turn_id, interrupts)
        except (RpcError, ConnectionClosed, OSError) as exc:
            if not lost(exc):
                if isinstance(exc, RpcError):
                    self.printer.line(self.style.red(f"✗ {exc.message}"), sys.stderr)
                    if turn_id is None and self.images:  # a refused image: keep the text
                        self.images, self.typed = [], text
                        self.printer.line(self.style.dim("images dropped; your message is back"))
                    return
                raise
            self._recover_turn(text, turn_id)

    def _follow(self, turn_id: str, interrupts: Interrupts | None = None) -> None:
        follow_turn(
            self.client,
            self.session["id"],
            turn_id,
            self._on_event,
            self.printer.tick,
            interrupts,
        )

    def _track(self, event: dict[str, Any]) -> None:
        seq = event.get("seq")
        if isinstance(seq, int) and (self.event_seq is None or seq > self.event_seq):
            self.event_seq = seq
        if event.get("type") == "message" and isinstance(event.get("message_id"), int):
            self.last_message_id = max(self.last_message_id, event["message_id"])

    def _on_event(self, event: dict[str, Any]) -> None:
        self._track(event)
        if event.get("type") == "approval.resolved":
            self.printer.approval_resolved(event)
        else:
            self.printer.event(event)

    def _idle_notes(self, notes: list[Any]) -> None:
        """What arrived while the prompt waited (`hermesctl.idle_events`): approvals decided
        elsewhere, and the turns other clients ran in this session, told briefly."""
        finished = False
        since = self.last_message_id  # before this batch's messages are counted as shown
        for note in notes:
            params = note.params[0] if note.params and isinstance(note.params[0], dict) else {}
            if note.method == "approval.resolved":
                self.printer.approval_resolved(params)
            if note.method != "session.event" or params.get("session_id") != self.session["id"]:
                continue
            self._track(params)
            kind = params.get("type")
            if kind == "turn.started":
                self.other_turn_from = since
                said = _clip(" ".join(str(params.get("user_message") or "").split()), 100)
                self.printer.line(self.style.dim(f"⋯ another client started a turn: {said}"))
            elif kind == "turn.finished":
                finished = True
            elif kind == "session.deleted":
                self.printer.line(self.style.yellow("⊘ this session was deleted elsewhere"))
        if finished:
            began, self.other_turn_from = self.other_turn_from, None
            self._show_stored_since("from that turn:", since if began is None else began)
            if self.bar is not None:
                self.footer()

    def _recover_turn(self, text: str, turn_id: str | None) -> None:
        """The connection went while ``text`` was being sent or its turn shown."""
        attached = self.reconnect()
        if turn_id is None:
            if not self._was_stored(text):
                self.printer.line(self.style.dim("sending your message again"))
                self.turn(text)
                return
            self.printer.line(self.style.dim("hermesd had stored your message: not sent again"))
            turn_id = attached.get("turn_id") if attached.get("running") else None
        if self._replay(attached, turn_id):
            return
        if turn_id is not None and attached.get("running") and attached.get("turn_id") == turn_id:
            with Interrupts() as interrupts:
                self._follow(turn_id, interrupts)
            return
        self._show_stored_since()
        self.printer.line(
            self.style.yellow("⊘ the turn did not finish: hermesd restarted while it ran")
        )

    def _was_stored(self, text: str) -> bool:
        recent = self.client.call(
            "session.history", {"session_id": self.session["id"], "limit": 20}
        ).get("messages")
        return any(
            m.get("role") == "user" and m.get("content") == text and m["id"] > self.last_message_id
            for m in recent or []
        )

    def _replay(self, attached: dict[str, Any], turn_id: str | None) -> bool:
        """Show the events missed while away; True when they include ``turn_id``'s end."""
        finished = False
        for event in attached.get("missed") or []:
            self._on_event(event)
            if event.get("type") == "turn.finished" and event.get("turn_id") == turn_id:
                finished = True
        return finished

    def _show_stored_since(
        self, heading: str = "stored while you were away:", since: int | None = None
    ) -> None:
        """Stored messages newer than the last one shown (written while we were away), or
        than ``since``."""
        since = self.last_message_id if since is None else since
        try:
            recent = self.client.call(
                "session.history", {"session_id": self.session["id"], "limit": 50}
            ).get("messages")
        except RpcError:
            return
        fresh = [
            m for m in recent or [] if m["id"] > since and m.get("role") in ("assistant", "tool")
        ]
        if fresh:
            self.printer.line(self.style.dim(heading))
            for block in render_history(fresh):
                self.printer.line(block)
        if recent:
            self.last_message_id = max(self.last_message_id, int(recent[-1]["id"]))

    # --- reconnecting ------------------------------------------------------------------------

    def reconnect(self) -> dict[str, Any]:
        """A new connection, attached again to the session; its ``session.attach`` result.

        Tries with growing pauses until it works; Ctrl-C (KeyboardInterrupt) stops trying.
        """
        self.connected = False  # first: a Ctrl-C from here on means "stop trying"
        with _ctrl_c_raises():  # before the line that says so
            self.printer.finish()
            self.printer.line(
                self.style.yellow(
                    "⚡ lost the connection to hermesd; reconnecting… (Ctrl-C stops trying)"
                )
            )
            self.client.close()
            return self._attach_again()

    def _attach_again(self) -> dict[str, Any]:
        attempt = 0
        while True:
            try:
                client = Client.connect(self.args.socket, timeout=10.0)
            except DaemonNotRunning:
                client = None
            if client is not None:
                try:
                    attached = self._attach(client)
                except (ConnectionClosed, OSError, TimeoutError):
                    client.close()
                except RpcError as exc:
                    client.close()
                    if exc.code != Codes.SHUTTING_DOWN:
                        raise
                else:
                    self.connected = True
                    return attached
            if attempt and attempt % 12 == 0:  # about once a minute at the longest pause
                self.printer.line(self.style.dim("still waiting for hermesd…"))
            time.sleep(RECONNECT_DELAYS[min(attempt, len(RECONNECT_DELAYS) - 1)])
            attempt += 1

    def _attach(self, client: Client) -> dict[str, Any]:
        info = client.hello("hermesctl chat")
        client.on_request = self._approvals(client)  # before attaching, as at start
        params: dict[str, Any] = {"session_id": self.session["id"]}
        if self.event_seq is not None:
            params["after_seq"] = self.event_seq
        attached: dict[str, Any] = client.call("session.attach", params)
        self.client = client
        self.methods = set(info.get("methods") or [])
        self.session = {k: v for k, v in attached.items() if k not in ("missed",)}
        if attached.get("event_seq") is not None and not attached.get("missed"):
            # nothing to replay: later events continue from the daemon's current number
            self.event_seq = attached["event_seq"]
        self.printer.line(
            self.style.green(
                f"✓ reconnected to hermesd {info.get('daemon_version', '')} "
                f"(session {attached['id']})"
            )
        )
        self._show_others(attached)
        return attached

    # --- slash commands ----------------------------------------------------------------------

    def slash(self, line: str) -> str | None:
        """Run a ``/command``; returns "quit" when the REPL should end."""
        name = line[1:].split(None, 1)[0].lower() if len(line) > 1 else ""
        if name in ("quit", "exit"):
            return "quit"
        if name == "image":
            self.attach_image(line[len("/image") :].strip())
            return None
        try:
            if "command.run" in self.methods:
                result = self.client.call(
                    "command.run", {"line": line, "session_id": self.session["id"]}
                )
                self._show_command_result(result)
                if name == "version":
                    import hermesd  # hermesctl ships in the same package, same version

                    print(f"hermesctl {hermesd.__version__}", flush=True)
            elif name in ("new", "reset"):
                session = self.client.call("session.reset", {"session_id": self.session["id"]})
                self._switch(session)
                print(f"New session {self.session['id']}", flush=True)
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
        except (RpcError, ConnectionClosed, OSError) as exc:
            if lost(exc):
                self.reconnect()
                self.printer.line(
                    self.style.yellow(f"/{name} may not have run; check with /history")
                )
            elif isinstance(exc, RpcError):
                print(self.style.red(f"✗ {exc.message}"), file=sys.stderr, flush=True)
            else:
                raise
        return None

    def attach_image(self, path: str) -> None:
        """``/image PATH``: read an image to send with the next message."""
        if not path:
            names = ", ".join(str(i["name"]) for i in self.images) or "none"
            print(f"Images for your next message: {names}. Usage: /image PATH", flush=True)
            return
        from hermesctl.turns import image_part

        try:
            part = image_part(path)
        except ValueError as exc:
            print(self.style.red(f"✗ /image: {exc}"), file=sys.stderr, flush=True)
            return
        self.images.append(part)
        size = len(part["data"])
        print(
            self.style.dim(f"📎 {part['name']} ({size:,} bytes) goes with your next message"),
            flush=True,
        )

    def recap(self) -> None:
        """Where the resumed conversation stands: its last exchange and pending approvals."""
        sid = self.session["id"]
        try:
            recent = self.client.call("session.history", {"session_id": sid, "limit": 20})
            pending = self.client.call("approvals.pending", {"session_id": sid})
        except RpcError:
            return
        messages = recent.get("messages") or []
        last_user = next((m for m in reversed(messages) if m.get("role") == "user"), None)
        if last_user is not None:
            after = [m for m in messages if m["id"] >= last_user["id"]]
            answer = [m for m in after if m.get("role") == "assistant" and m.get("content")]
            self.printer.line(self.style.dim("last exchange:"))
            for block in render_history([last_user, *answer[-1:]]):
                self.printer.line("  " + _clip(block, 400))
        for p in pending.get("pending") or []:
            self.printer.line(
                self.style.yellow(
                    f"⏳ approval {p.get('id')} pending: {p.get('tool')} "
                    f"{_clip(str(p.get('command') or p.get('description') or ''), 120)}"
                )
            )

    def _local_help(self) -> None:
        print("Commands (this daemon has no command.run; plugin commands need a newer hermesd):")
        for names, text in LOCAL_HELP:
            print(f"  {names:<14} {text}")
        sys.stdout.flush()

    def _show_command_result(self, result: Any) -> None:
        """Print ``command.run``'s ``{command, output, ok, action, session}`` and follow its
        action."""
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
            # /new, /resume: the daemon attached us to it; /title, /model: updated
            self._switch(session)
            if result.get("command") == "resume":
                self.recap()
        if result.get("action") == "turn" and result.get("turn_id"):
            with Interrupts() as interrupts:  # /retry: the daemon started the turn again
                self._follow(str(result["turn_id"]), interrupts)
        if result.get("action") in ("quit", "exit"):
            raise EOFError

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
        if self.editor is not None:
            self.editor.save()


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


@contextlib.contextmanager
def _ctrl_c_raises() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt here, whatever handler a turn or the line editor left
    (on the main thread; elsewhere signals are not ours to set)."""
    try:
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    except ValueError:
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)

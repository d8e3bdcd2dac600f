"""How ``hermesctl chat`` reads what a person types: GNU readline with bracketed paste on.

A paste arrives as one message, newlines and all (readline ≥ 8 inserts a bracketed paste into
the line instead of accepting each line). Typed messages can span lines too: ``\\`` at the end
of a line continues it, and a line of ``\"\"\"`` opens a block closed by another. Whatever way
a message was entered, history keeps it as one entry, so recalling it (Up, or Ctrl-R) brings
back the whole message, in this run and the next: the history file stores one JSON string per
line under a header (readline's own format would split an entry at its newlines). A file in
readline's format, written by an older hermesctl, is read as plain lines.

On a terminal (`ToolbarEditor`) prompt_toolkit reads the line instead, with the same history
file, continuation rules and completion, and a status toolbar at the bottom; readline stays for
``--plain``. Owns the editors' settings, completion of ``/command`` names and the history file;
nothing here talks to the daemon.

While waiting, either editor can also watch a file descriptor (a `Watch`: the daemon's
connection, `hermesctl.idle_events`). When the watch says something must be shown, the prompt
steps aside, the watch has the terminal (an approval prompt runs there), and the prompt comes
back with what had been typed. prompt_toolkit does this in its own event loop
(``run_in_terminal``); readline cannot be woken from outside, so a thread waits on the
descriptor and interrupts ``input()`` with a signal (SIGUSR1), taking the typed text first.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

HISTORY_HEADER = "#hermesctl-history v2"
HISTORY_LENGTH = 1000
CONTINUATION = "… "


class Watch(Protocol):
    """Something a waiting prompt listens to besides the keyboard."""

    open: bool  # False: stop watching

    def fileno(self) -> int:
        """The descriptor to wait on."""

    def check(self) -> bool:
        """Read what is there; True when the prompt must step aside for `handle`."""

    def handle(self) -> None:
        """Use the terminal (the prompt is out of the way)."""


class Woken(Exception):
    """Raised into ``input()`` when the watch wants the terminal; ``typed`` is the line so far."""

    def __init__(self, typed: str) -> None:
        super().__init__("woken")
        self.typed = typed


class LineEditor:
    """Reads messages at a prompt, with history kept in ``history_file``."""

    def __init__(self, history_file: str | None) -> None:
        self.history_file = history_file
        self.readline = None
        with contextlib.suppress(ImportError):
            import readline

            self.readline = readline
        if self.readline is not None:
            rl = self.readline
            rl.parse_and_bind("set enable-bracketed-paste on")
            rl.set_auto_history(False)  # one entry per message, added by read_message
            rl.set_history_length(HISTORY_LENGTH)
            self._load_history()

    # --- history ---------------------------------------------------------------------------

    def _load_history(self) -> None:
        if self.readline is None:
            return
        for entry in stored_history(self.history_file):
            self.readline.add_history(entry)

    def remember(self, message: str) -> None:
        """Add a message to the history (unless it repeats the previous one)."""
        rl = self.readline
        if rl is None or not message.strip():
            return
        count = rl.get_current_history_length()
        if count and rl.get_history_item(count) == message:
            return
        rl.add_history(message)

    def save(self) -> None:
        """Write the history file (private: it holds what was typed)."""
        rl = self.readline
        if rl is None or not self.history_file:
            return
        count = rl.get_current_history_length()
        write_history(self.history_file, [rl.get_history_item(i) for i in range(1, count + 1)])

    # --- completion ------------------------------------------------------------------------

    def complete_commands(self, names: list[str]) -> None:
        """Tab completes ``/command`` names at the start of the line."""
        rl = self.readline
        if rl is None:
            return
        names = sorted(set(names))

        def complete(text: str, state: int) -> str | None:
            line = rl.get_line_buffer()
            if not line.startswith("/") or " " in line:
                return None
            matches = [n for n in names if n.startswith(text)]
            return matches[state] if state < len(matches) else None

        rl.set_completer_delims(" \t\n")
        rl.set_completer(complete)
        rl.parse_and_bind("tab: complete")

    # --- reading ---------------------------------------------------------------------------

    def read_message(self, prompt: str, prefill: str = "", watch: Watch | None = None) -> str:
        """One message (see the module docstring); ``prefill`` is put on the line first, for
        the person to finish (text typed before something interrupted the prompt); ``watch``
        is listened to while waiting."""
        first = self._input(prompt, prefill, watch)
        message = read_continued(first, lambda: self._input(CONTINUATION, "", watch))
        self.remember(message)
        return message

    def _input(self, prompt: str, prefill: str = "", watch: Watch | None = None) -> str:
        while True:
            main = threading.current_thread() is threading.main_thread()
            if watch is None or not watch.open or not main or not sys.stdin.isatty():
                return self._line(prompt, prefill)
            try:
                with _Alarm(watch, self._typed):
                    return self._line(prompt, prefill)
            except Woken as woken:
                prefill = woken.typed
                sys.stdout.write("\n")
                sys.stdout.flush()
                watch.handle()

    def _typed(self) -> str:
        return self.readline.get_line_buffer() if self.readline is not None else ""

    def _line(self, prompt: str, prefill: str = "") -> str:
        rl = self.readline
        if rl is None or not prefill:
            return input(prompt)

        def insert() -> None:
            rl.insert_text(prefill)
            rl.redisplay()

        rl.set_startup_hook(insert)
        try:
            return input(prompt)
        finally:
            rl.set_startup_hook(None)


class _Alarm:
    """While ``input()`` waits: a thread waiting on ``watch`` that interrupts it (SIGUSR1 to
    the main thread, whose handler raises `Woken`) when the watch wants the terminal."""

    def __init__(self, watch: Watch, typed: Callable[[], str]) -> None:
        self.watch, self.typed = watch, typed
        self.lock = threading.Lock()
        self.reading = False
        self.fired = False
        self.stop_r, self.stop_w = os.pipe()
        self.thread = threading.Thread(target=self._wait, daemon=True)
        self.previous: Any = None

    def __enter__(self) -> _Alarm:
        self.previous = signal.signal(signal.SIGUSR1, self._interrupt)
        self.reading = True
        self.thread.start()
        return self

    def _interrupt(self, signum: int, frame: Any) -> None:
        if self.fired:
            self.fired = False
            raise Woken(self.typed())  # readline still holds the line: taken before it goes

    def _wait(self) -> None:
        main = threading.main_thread().ident
        while True:
            ready, _, _ = select.select([self.watch.fileno(), self.stop_r], [], [])
            if self.stop_r in ready:
                return
            if self.watch.check():
                with self.lock:
                    if self.reading and main is not None:
                        self.fired = True
                        signal.pthread_kill(main, signal.SIGUSR1)
                return
            if not self.watch.open:
                return

    def __exit__(self, *exc: object) -> None:
        with self.lock:  # a line entered meanwhile stands: the REPL handles what was read
            self.reading = self.fired = False
        os.write(self.stop_w, b"x")
        self.thread.join()
        os.close(self.stop_r)
        os.close(self.stop_w)
        signal.signal(signal.SIGUSR1, self.previous)


def read_continued(first: str, more: Callable[[], str]) -> str:
    """A message that starts with the line ``first``: a ``\"\"\"`` block, ``\\``-continued
    lines, or just ``first`` (which may hold newlines of its own when it was pasted)."""
    if first.strip() == '"""':
        lines: list[str] = []
        while True:
            line = more()
            if line.strip() == '"""':
                return "\n".join(lines)
            lines.append(line)
    lines = [first]
    while lines[-1].endswith("\\"):
        lines[-1] = lines[-1][:-1]
        lines.append(more())
    return "\n".join(lines)


def stored_history(path: str | None) -> list[str]:
    """The newest `HISTORY_LENGTH` entries of the history file at ``path`` (none when absent)."""
    if not path:
        return []
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    return read_history_lines(lines)[-HISTORY_LENGTH:]


def write_history(path: str, entries: list[str]) -> None:
    """Write the history file at ``path``, readable by its owner only (it holds what was
    typed); a file that cannot be written is left as it was."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(history_text(e for e in entries if e))
        os.chmod(path, 0o600)
    except OSError:
        pass


def history_text(entries: Iterable[str]) -> str:
    """The history file's text: the header, then one JSON string per entry."""
    body = "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in entries)
    return f"{HISTORY_HEADER}\n{body}"


def read_history_lines(lines: list[str]) -> list[str]:
    """Entries of a history file in either format (ours, or readline's plain lines)."""
    if not lines or lines[0] != HISTORY_HEADER:
        return [line for line in lines if line]
    entries: list[str] = []
    for line in lines[1:]:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, str) and entry:
            entries.append(entry)
    return entries


class ToolbarEditor(LineEditor):
    """`LineEditor` on prompt_toolkit, for a terminal: the same messages, history file and
    ``/command`` completion, with a status toolbar kept at the bottom while the prompt is up.

    ``toolbar`` gives the toolbar's text; it is read again at every redraw (at least once a
    second), so it must only read what the REPL already holds, never ask the daemon.
    """

    def __init__(self, history_file: str | None, toolbar: Callable[[], str]) -> None:
        from prompt_toolkit import PromptSession
        from prompt_toolkit.history import InMemoryHistory

        self.history_file = history_file
        self.readline = None
        self._history = InMemoryHistory(stored_history(history_file))
        self._names: list[str] = []
        self._session: PromptSession[str] = PromptSession(
            history=self._history,
            bottom_toolbar=lambda: toolbar(),
            refresh_interval=1.0,
            completer=_command_completer(lambda: self._names),
            complete_while_typing=False,
            enable_open_in_editor=False,
        )

    def remember(self, message: str) -> None:
        """Add a message to the history (unless it repeats the previous one)."""
        entries = self._history.get_strings()
        if message.strip() and (not entries or entries[-1] != message):
            self._history.append_string(message)

    def save(self) -> None:
        """Write the history file (private: it holds what was typed)."""
        if not self.history_file:
            return
        write_history(self.history_file, self._history.get_strings()[-HISTORY_LENGTH:])

    def complete_commands(self, names: list[str]) -> None:
        """Tab completes ``/command`` names at the start of the line."""
        self._names = sorted(set(names))

    def _input(self, prompt: str, prefill: str = "", watch: Watch | None = None) -> str:
        # readline's \001…\002 markers mean nothing here: the prompt is given as plain text
        shown = prompt.replace("\001", "").replace("\002", "")
        from prompt_toolkit.formatted_text import ANSI

        pre_run = None
        if watch is not None and watch.open:
            pre_run = lambda: _watch_in_app(watch)  # noqa: E731
        return self._session.prompt(ANSI(shown), default=prefill, pre_run=pre_run)


def _watch_in_app(watch: Watch) -> None:
    """In the prompt's event loop: when ``watch`` wants the terminal, hide the prompt, let it
    have it, and draw the prompt again (what was typed stays in its buffer)."""
    import asyncio

    from prompt_toolkit.application import get_app, run_in_terminal

    loop = asyncio.get_running_loop()
    fd = watch.fileno()

    def readable() -> None:
        if watch.check():
            loop.remove_reader(fd)
            get_app().create_background_task(step_aside())
        elif not watch.open:
            loop.remove_reader(fd)

    async def step_aside() -> None:
        await run_in_terminal(watch.handle)
        if watch.open:
            loop.add_reader(fd, readable)

    loop.add_reader(fd, readable)


def _command_completer(names: Callable[[], list[str]]) -> Any:
    """A prompt_toolkit completer of ``/command`` names, offered while the line is a command
    name being typed (prompt_toolkit is imported only when a terminal uses it)."""
    from prompt_toolkit.completion import Completer, Completion

    class CommandCompleter(Completer):
        def get_completions(self, document: Any, complete_event: Any) -> Iterator[Completion]:
            line = document.text_before_cursor
            if not line.startswith("/") or " " in line:
                return
            for name in names():
                if name.startswith(line):
                    yield Completion(name, start_position=-len(line))

    return CommandCompleter()

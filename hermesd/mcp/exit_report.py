"""The launcher a stdio MCP server is started through, so hermesd learns how it ended.

The MCP SDK starts the server process and never hands its exit status back. hermesd therefore
starts this file (``python -I -S exit_report.py STATUS_FILE -- ARGV...``) instead: it forks,
the child execs ARGV with the pipes the SDK gave, and this process closes its own copies of
stdin and stdout (so the server's end of them is the only one left), waits, and writes
``exit N`` or ``signal N`` to STATUS_FILE. `read_status` turns that into a sentence.

Run as a script, outside any package and with no imports from hermesd: it starts in a few
milliseconds, before the sandbox wraps the server (the status file is a daemon file the server
cannot reach). Termination signals are passed on to the server and do not end the launcher,
so the status of a server that was stopped is recorded too.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def main(argv: list[str]) -> int:
    """Run ``argv[2:]`` (after ``STATUS_FILE --``), record how it ended, exit the same way."""
    if len(argv) < 4 or argv[2] != "--":
        sys.stderr.write("usage: exit_report.py STATUS_FILE -- PROGRAM [ARG...]\n")
        return 2
    status_file, program = argv[1], argv[3:]
    child = os.fork()
    if child == 0:
        try:
            os.execvp(program[0], program)
        except OSError as exc:
            sys.stderr.write(f"hermesd: cannot run {program[0]}: {exc.strerror}\n")
        os._exit(127)
    for signum in FORWARDED:
        signal.signal(signum, lambda number, _frame: _pass_on(child, number))
    quiet = os.open(os.devnull, os.O_RDWR)
    os.dup2(quiet, 0)  # the server's stdout pipe ends when the server does, not when we do
    os.dup2(quiet, 1)
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except ChildProcessError:
            return 1
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        text, code = f"signal {os.WTERMSIG(status)}", 128 + os.WTERMSIG(status)
    else:
        text, code = f"exit {os.waitstatus_to_exitcode(status)}", os.waitstatus_to_exitcode(status)
    partial = status_file + ".part"
    with open(partial, "w", encoding="ascii") as out:
        out.write(text + "\n")
    os.replace(partial, status_file)  # read whole or not at all
    return code


def _pass_on(child: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(child, signum)


def read_status(path: str, signals_as_status: bool = False) -> str | None:
    """The sentence for what the launcher recorded at ``path`` ("exited with status 3",
    "killed by signal SIGKILL"), None when nothing was recorded. ``signals_as_status``:
    the program ran under bubblewrap, which reports a signal death as status 128+N."""
    try:
        with open(path, encoding="ascii") as source:
            kind, _, number = source.read().strip().partition(" ")
    except (OSError, UnicodeDecodeError):
        return None
    if not number.lstrip("-").isdigit():
        return None
    value = int(number)
    if kind == "exit" and signals_as_status and 128 < value < 128 + 65:
        kind, value = "signal", value - 128
    if kind == "signal":
        try:
            name = signal.Signals(value).name
        except ValueError:
            name = str(value)
        return f"killed by signal {name}"
    return f"exited with status {value}" if kind == "exit" else None


if __name__ == "__main__":
    sys.exit(main(sys.argv))

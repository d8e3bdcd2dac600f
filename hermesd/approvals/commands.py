"""What a simple command runs: wrappers stripped, options read, code strings found.

`invocations` turns one `shell.SimpleCommand` into the programs it starts: ``sudo nice -n 5
env -i X=1 /bin/rm -rf x`` is ``sudo``, ``nice``, ``env`` and ``rm`` (each an `Invocation`,
outermost first), ``find … -exec rm {} +`` and ``… | xargs rm`` reach ``rm`` too. `code_of` says
where a shell or interpreter gets its program: inline (``-c``/``-e``/``eval``, with the text
when it is known), standard input, a file, or nowhere. Nothing here decides what is dangerous:
that is ``hermesd.approvals.patterns``.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field

from hermesd.approvals.shell import SimpleCommand, Word

MAX_DEPTH = 64  # wrappers inside wrappers beyond this are not followed (the rest asks)
MAX_FED = 64  # words of known input that xargs is taken to append


@dataclass(frozen=True)
class Invocation:
    """One program a command starts, with the words it gets."""

    name: str | None  # the program's basename; None when the command word is built at run time
    argv: tuple[Word, ...]  # argv[0] first
    cmd: SimpleCommand  # where it was written: redirections, stdin, pipeline
    via: tuple[str, ...] = ()  # the wrappers it is reached through, outermost first
    env: dict[str, str | None] = field(default_factory=dict)  # NAME=value it is given
    more_args: bool = False  # xargs / find append arguments not written here
    dynamic: str = ""  # why the program cannot be told ("$X", "a glob", …), when it cannot

    @property
    def args(self) -> tuple[Word, ...]:
        return self.argv[1:]

    def values(self) -> list[str | None]:
        """The argument values (None where built at run time)."""
        return [w.value for w in self.argv[1:]]


@dataclass(frozen=True)
class Code:
    """Where a shell or interpreter reads its program from."""

    kind: str  # "inline" (-c, -e, eval), "stdin", "file", "" (none: a module, a REPL on /dev/null)
    text: str | None = None  # the inline program, or the file, when known
    shell: bool = False  # a shell language (its text can be parsed and checked)


SHELLS = frozenset(
    {"sh", "bash", "dash", "zsh", "ksh", "mksh", "pdksh", "ash", "yash", "posh", "rbash", "fish"}
    | {"csh", "tcsh", "busybox-sh"}
)
_PYTHON = re.compile(r"(?:python|pypy)[\d.]*")
INTERPRETERS = frozenset(
    {"perl", "ruby", "node", "nodejs", "deno", "bun", "php", "lua", "luajit", "Rscript", "R"}
    | {"tclsh", "wish", "osascript", "pwsh", "powershell", "julia", "awk", "gawk", "mawk"}
    | {"nawk", "jshell", "irb", "ipython", "ipython3", "guile", "sbcl", "racket", "elixir"}
)
_STDIN_FILES = re.compile(r"-|/dev/stdin|/dev/fd/\d+|/proc/(?:self|\d+)/fd/\d+")


def is_interpreter(name: str | None) -> bool:
    """A program that runs code in a language other than the shell's."""
    return name is not None and (name in INTERPRETERS or _PYTHON.fullmatch(name) is not None)


def basename(value: str) -> str:
    """``/usr/bin/rm`` → ``rm`` (``busybox rm`` is unwrapped elsewhere)."""
    stripped = value.rstrip("/")
    return stripped.rsplit("/", 1)[-1] if stripped else value


def invocations(cmd: SimpleCommand) -> tuple[list[Invocation], list[str | None]]:
    """The programs ``cmd`` starts (outermost first) and the shell code strings it hands to a
    shell (``sh -c``, ``eval``, ``watch``, ``su -c``, …; None where the string is not known)."""
    out: list[Invocation] = []
    code: list[str | None] = []
    if cmd.words:
        _unwrap(list(cmd.words), cmd, (), dict(cmd.assignments), False, out, code, 0)
    return out, code


def options(
    args: Iterable[Word],
    with_value: str = "",
    long_with_value: Iterable[str] = (),
    attached: str = "",
) -> tuple[list[tuple[str, str | None]], list[Word]]:
    """Split ``args`` into (option, value) pairs and the operands from the first operand on.

    ``with_value``: short options that take the next word (or the rest of their cluster);
    ``attached``: short options whose value can only be the rest of the cluster. Long options
    ``--x=v`` carry their value; those in ``long_with_value`` take the next word otherwise.
    A word built at run time ends the options (it could be anything).
    """
    words = list(args)
    longs = set(long_with_value)
    found: list[tuple[str, str | None]] = []
    i = 0
    while i < len(words):
        value = words[i].value
        if value is None or value == "-" or not value.startswith("-"):
            break
        if value == "--":
            i += 1
            break
        if value.startswith("--"):
            name, eq, given = value.partition("=")
            if eq:
                found.append((name, given))
            elif name in longs:
                found.append((name, words[i + 1].value if i + 1 < len(words) else None))
                i += 1
            else:
                found.append((name, None))
            i += 1
            continue
        j = 1
        while j < len(value):
            ch = value[j]
            if ch in with_value or ch in attached:
                rest = value[j + 1 :]
                if rest or ch in attached:
                    found.append(("-" + ch, rest))
                else:
                    found.append(("-" + ch, words[i + 1].value if i + 1 < len(words) else None))
                    i += 1
                break
            found.append(("-" + ch, None))
            j += 1
        i += 1
    return found, words[i:]


def flags(pairs: Iterable[tuple[str, str | None]]) -> set[str]:
    """The option names of `options` pairs."""
    return {name for name, _ in pairs}


# --- wrappers -----------------------------------------------------------------------------------

# name → (short options taking a value, long options taking a value, operands to skip)
_WRAPPERS: dict[str, tuple[str, tuple[str, ...], int]] = {
    "builtin": ("", (), 0),
    "exec": ("a", (), 0),
    "nice": ("n", ("--adjustment",), 0),
    "ionice": ("cnpPu", ("--class", "--classdata", "--pid", "--pgid", "--uid"), 0),
    "nohup": ("", (), 0),
    "time": ("fo", ("--format", "--output"), 0),
    "timeout": ("ks", ("--kill-after", "--signal"), 1),
    "doas": ("uC", (), 0),
    "pkexec": ("", ("--user",), 0),
    "stdbuf": ("ioe", ("--input", "--output", "--error"), 0),
    "setsid": ("", (), 0),
    "chroot": ("", ("--userspec", "--groups"), 1),
    "unshare": (
        "SGRw",
        (
            *("--propagation", "--setuid", "--setgid", "--root", "--wd", "--map-user"),
            *("--map-group", "--map-users", "--map-groups", "--monotonic", "--boottime"),
        ),
        0,
    ),
    "nsenter": ("tSGrwp", ("--target", "--setuid", "--setgid", "--root", "--wd"), 0),
    "caffeinate": ("t", (), 0),
    "chrt": ("T", ("--sched-runtime", "--sched-period", "--sched-deadline"), 1),
    "taskset": ("", ("--cpu-list",), 1),
    "sg": ("", (), 1),
    "run0": ("uDg", ("--user", "--group", "--chdir", "--unit", "--description"), 0),
}
_SUDO_VALUES = "ugCDhprtUTR"
_SUDO_LONG = (
    *("--user", "--group", "--close-from", "--chdir", "--host", "--prompt", "--role"),
    *("--type", "--other-user", "--command-timeout", "--chroot"),
)
_XARGS_LONG = (
    *("--arg-file", "--delimiter", "--eof", "--replace", "--max-lines", "--max-args"),
    *("--max-procs", "--max-chars", "--process-slot-var"),
)
_FIND_EXEC = frozenset({"-exec", "-execdir", "-ok", "-okdir"})


def _unwrap(
    words: list[Word],
    cmd: SimpleCommand,
    via: tuple[str, ...],
    env: dict[str, str | None],
    more: bool,
    out: list[Invocation],
    code: list[str | None],
    depth: int,
) -> None:
    if not words:
        return
    head = words[0]
    if head.value is None or head.glob:
        why = "a glob" if head.value is not None else "a value built at run time"
        out.append(Invocation(None, tuple(words), cmd, via, env, more, dynamic=why))
        return
    name = basename(head.value)
    inv = Invocation(name, tuple(words), cmd, via, dict(env), more)
    out.append(inv)
    if depth >= MAX_DEPTH:
        if _inner(inv, []) is not None:  # still wrapping something: that cannot be told
            out.append(Invocation(None, tuple(words[1:]), cmd, via, env, more, "too deep"))
        return
    if name == "find":
        for body in find_execs(inv):
            _unwrap(body, cmd, (*via, name), dict(env), True, out, code, depth + 1)
        return
    inner = _inner(inv, code)
    if inner is None:
        return
    rest, extra_env, appends = inner
    _unwrap(rest, cmd, (*via, name), {**env, **extra_env}, more or appends, out, code, depth + 1)


def _inner(
    inv: Invocation, code: list[str | None]
) -> tuple[list[Word], dict[str, str | None], bool] | None:
    """The command a wrapper runs: (its words, environment it adds, arguments appended)."""
    name, args = inv.name or "", list(inv.args)
    if name in _WRAPPERS:
        short, longs, skip = _WRAPPERS[name]
        _, rest = options(args, short, longs)
        return rest[skip:], {}, False
    if name == "command":
        found, rest = options(args)
        return None if flags(found) & {"-v", "-V"} else (rest, {}, False)
    if name in ("busybox", "toybox"):
        return (args, {}, False) if args and not (args[0].value or "").startswith("-") else None
    if name == "env":
        return _env(args, code)
    if name == "xargs":
        found, rest = options(args, "adEILnPs", _XARGS_LONG, attached="eil")
        rest = rest or [Word("echo", "echo")]
        if inv.cmd.fed is not None and not flags(found) & {"-I", "-i", "--replace", "-a"}:
            # `echo / | xargs rm -rf`: what is fed in becomes arguments
            rest = rest + [Word(v, v) for v in inv.cmd.fed.split()[:MAX_FED]]
        return rest, {}, True
    if name in ("sudo", "sudoedit"):
        return _sudo(name, args, code)
    if name in ("su", "runuser"):
        found, rest = options(
            args, "cgGsw", ("--command", "--group", "--shell", "--session-command")
        )
        for opt, value in found:
            if opt in ("-c", "--command", "--session-command"):
                code.append(value)
        return None
    if name == "flock":
        found, rest = options(
            args, "wEc", ("--wait", "--timeout", "--conflict-exit-code", "--command")
        )
        for opt, value in found:
            if opt in ("-c", "--command"):
                code.append(value)
                return None
        if len(rest) > 1 and rest[1].value in ("-c", "--command"):
            code.append(rest[2].value if len(rest) > 2 else None)
            return None
        return rest[1:], {}, False
    if name == "watch":
        found, rest = options(args, "nq", ("--interval", "--equexit"))
        if flags(found) & {"-x", "--exec"}:
            return rest, {}, False
        code.append(_joined(rest))
        return None
    if name == "coproc":  # a keyword the grammar does not know: read what follows as code
        body = args[2:] if len(args) > 2 and args[1].value == "{" else args
        code.append(_joined(body))
        return None
    if name in ("eval", "trap"):
        operands = args if name == "eval" else args[:1]
        if name == "trap" and (not operands or operands[0].value in ("-", "-l", "-p")):
            return None
        code.append(_joined(operands))
        return None
    return None


def _env(
    args: list[Word], code: list[str | None]
) -> tuple[list[Word], dict[str, str | None], bool] | None:
    found, rest = options(args, "uCS", ("--unset", "--chdir", "--split-string"))
    split: list[Word] = []
    for opt, value in found:
        if opt in ("-S", "--split-string"):
            try:
                split = [Word(v, v) for v in shlex.split(value or "")] if value else []
            except ValueError:
                split = [Word(value or "", None)]
    added: dict[str, str | None] = {}
    rest = split + rest
    while rest and rest[0].value is not None and re.match(r"[A-Za-z_]\w*=", rest[0].value):
        key, _, value = rest[0].value.partition("=")
        added[key] = value
        rest = rest[1:]
    return rest, added, False


def _sudo(
    name: str, args: list[Word], code: list[str | None]
) -> tuple[list[Word], dict[str, str | None], bool] | None:
    found, rest = options(args, _SUDO_VALUES, _SUDO_LONG)
    given = flags(found)
    if name == "sudoedit" or given & {"-e", "--edit"}:
        return [Word("sudoedit", "sudoedit"), *rest], {}, False
    if given & {"-l", "--list", "-v", "--validate", "-k", "-K", "--reset-timestamp"} and not rest:
        return None
    if given & {"-s", "--shell", "-i", "--login"}:
        if rest:
            code.append(_joined(rest))
        return None
    added: dict[str, str | None] = {}
    while rest and rest[0].value is not None and re.match(r"[A-Za-z_]\w*=", rest[0].value):
        key, _, value = rest[0].value.partition("=")
        added[key] = value
        rest = rest[1:]
    return rest, added, False


def _joined(words: Iterable[Word]) -> str | None:
    parts = [w.value for w in words]
    return None if any(p is None for p in parts) else " ".join(p for p in parts if p is not None)


def find_execs(inv: Invocation) -> list[list[Word]]:
    """Every ``-exec``/``-execdir``/``-ok`` command of a ``find``."""
    out: list[list[Word]] = []
    args = list(inv.args)
    i = 0
    while i < len(args):
        if args[i].value in _FIND_EXEC:
            body: list[Word] = []
            i += 1
            while i < len(args) and args[i].value not in (";", "+"):
                body.append(args[i])
                i += 1
            out.append(body)
        i += 1
    return out


# --- where code comes from ----------------------------------------------------------------------


def code_of(inv: Invocation) -> Code | None:
    """Where a shell or interpreter reads its program; None for other programs."""
    name = inv.name
    if name is None:
        return None
    if name in SHELLS:
        return _shell_code(inv)
    if name in (".", "source"):
        operand = inv.args[0] if inv.args else None
        return Code("file", operand.value if operand else None, shell=True) if operand else None
    if _PYTHON.fullmatch(name):
        return _cluster_code(inv, code="c", stop="m", values="WX", attached="")
    if name in ("perl",):
        return _cluster_code(inv, code="eE", stop="", values="", attached="MmIixdDFC")
    if name in ("ruby", "irb"):
        return _cluster_code(inv, code="e", stop="", values="rICEF", attached="ixWK")
    if name in ("node", "nodejs", "bun"):
        return _node_code(inv)
    if name == "deno":
        sub = inv.args[0].value if inv.args else None
        if sub == "eval":
            return Code("inline", _joined(inv.args[1:2]))
        return Code("file") if sub in ("run", "task", "test") else Code("")
    if name == "php":
        return _cluster_code(inv, code="rBRE", stop="", values="dcftzS", attached="")
    if name in ("lua", "luajit"):
        return _cluster_code(inv, code="e", stop="", values="l", attached="")
    if name in ("Rscript", "R", "julia", "osascript"):
        return _cluster_code(inv, code="eE", stop="", values="", attached="")
    if name in ("pwsh", "powershell"):
        for i, word in enumerate(inv.args):
            lowered = (word.value or "").lower()
            if lowered in ("-c", "-command", "-encodedcommand", "-e", "-ec"):
                return Code("inline", _joined(inv.args[i + 1 : i + 2]))
            if lowered in ("-f", "-file"):
                return Code("file")
        return _stdin_or_none(inv)
    if name in ("awk", "gawk", "mawk", "nawk"):
        found, rest = options(inv.args, "Fvfeil", ("--file", "--source", "--assign", "--include"))
        programs = [v for o, v in found if o in ("-e", "--source")]
        if any(o in ("-f", "--file") for o, _ in found):
            return Code("file")
        if not programs and rest:
            programs = [rest[0].value]
        if any(p is None for p in programs):
            return Code("inline", None)
        return Code("inline", "\n".join(p for p in programs if p is not None))
    if is_interpreter(name):
        return _stdin_or_none(inv) if not inv.args else Code("file")
    return None


def _shell_code(inv: Invocation) -> Code:
    found, rest = options(inv.args, "oO", ("--rcfile", "--init-file", "--command"))
    given = flags(found)
    for opt, value in found:
        if opt == "--command":
            return Code("inline", value, shell=True)
    if "-c" in given:
        text = rest[0].value if rest else None
        return Code("inline", text, shell=True)
    if given & {"-n", "--noexec"}:
        return Code("")
    if "-s" in given or not rest:
        return _stdin_or_none(inv, shell=True)
    return _file(rest[0], shell=True)


def _cluster_code(inv: Invocation, code: str, stop: str, values: str, attached: str) -> Code:
    """Interpreters whose options cluster like python's/perl's (``-Bc``, ``-lne``)."""
    words = list(inv.args)
    i = 0
    while i < len(words):
        value = words[i].value
        if value is None:
            return Code("inline", None)  # an option we cannot read might be -c
        if value == "--":
            i += 1
            break
        if value == "-" or not value.startswith("-"):
            break
        if value.startswith("--"):
            i += 1
            continue
        j = 1
        while j < len(value):
            ch = value[j]
            rest = value[j + 1 :]
            if ch in code:
                text = rest or (words[i + 1].value if i + 1 < len(words) else None)
                return Code("inline", text)
            if ch in stop:
                return Code("")
            if ch in values:
                if not rest:
                    i += 1
                break
            if ch in attached:
                break
            j += 1
            if ch in "0l":  # perl's and ruby's -l[octal] / -0[octal|xHEX]: then more options
                digits = "01234567"
                if ch == "0" and value[j : j + 1] in ("x", "X"):
                    j, digits = j + 1, "0123456789abcdefABCDEF"
                while j < len(value) and value[j] in digits:
                    j += 1
        i += 1
    if i < len(words):
        return _file(words[i])
    return _stdin_or_none(inv)


def _node_code(inv: Invocation) -> Code:
    found, rest = options(inv.args, "erp", ("--eval", "--print", "--require", "--import"))
    for opt, value in found:
        if opt in ("-e", "--eval", "-p", "--print"):
            return Code("inline", value)
    if inv.name == "bun" and rest and rest[0].value in ("run", "test", "x", "install", "add"):
        return Code("file")
    return _file(rest[0]) if rest else _stdin_or_none(inv)


def _file(word: Word, shell: bool = False) -> Code:
    if word.process or (word.value is not None and _STDIN_FILES.fullmatch(word.value)):
        return Code("stdin", None, shell)
    return Code("file", word.value, shell)


def _stdin_or_none(inv: Invocation, shell: bool = False) -> Code:
    """No program named: the interpreter reads stdin (the terminal gives it /dev/null unless
    the command line feeds it)."""
    if inv.cmd.stdin:
        return Code("stdin", inv.cmd.fed, shell)
    return Code("")


# --- what a command writes ------------------------------------------------------------------

_WRITE_REDIRECTS = frozenset({">", ">>", "&>", "&>>", ">|", "<>", ">&", "&>|"})
_EDITORS = frozenset(
    {"vi", "vim", "nvim", "nano", "emacs", "ed", "ex", "pico", "micro", "joe", "mcedit"}
    | {"sudoedit", "gedit", "kate", "code"}
)
_TOUCHES_OPERANDS = frozenset(
    {"rm", "unlink", "shred", "truncate", "touch", "mkdir", "rmdir", "chattr", "setfacl"}
    | {"mv", "srm", "wipe"}
)


def writes(inv: Invocation) -> list[Word]:
    """The files ``inv`` writes, replaces or removes (as written: canonicalise them to judge).

    Output redirections count for the outermost program only (a wrapper passes them on).
    """
    out: list[Word] = []
    if not inv.via:
        out += [
            r.target
            for r in inv.cmd.redirects
            if r.op in _WRITE_REDIRECTS and not re.fullmatch(r"\d+|-", r.target.value or "")
        ]
    name, args = inv.name or "", list(inv.args)
    if name == "tee":
        out += options(args, "", ("--output-error",))[1]
    elif name in ("cp", "install", "rsync", "scp", "ln"):
        found, rest = options(args, "tSgmo" if name == "install" else "tS", ("--target-directory",))
        targets = [v for o, v in found if o in ("-t", "--target-directory")]
        out += [Word(t, t) for t in targets if t is not None]
        if rest and not targets and (len(rest) > 1 or name == "ln"):
            out.append(rest[-1])
    elif name in _TOUCHES_OPERANDS:
        out += options(args, "s" if name in ("truncate",) else "", ("--size", "--reference"))[1]
    elif name in ("chmod", "chown", "chgrp"):
        rest = options(args, "", ("--reference", "--from"))[1]
        out += rest[1:]
    elif name == "sed":
        found, rest = options(args, "ef", ("--expression", "--file"), attached="i")
        given = flags(found)
        if given & {"-i", "--in-place"}:
            out += rest if given & {"-e", "-f", "--expression", "--file"} else rest[1:]
    elif name == "perl" and any(re.fullmatch(r"-\w*i\S*", w.value or "") for w in args):
        out += [w for w in args if not (w.value or "-").startswith("-")][1:]
    elif name == "dd":
        out += [
            Word(w.text, (w.value or "")[3:]) for w in args if (w.value or "").startswith("of=")
        ]
    elif name in _EDITORS:
        out += options(args)[1]
    elif name in ("curl", "wget"):
        found, _ = options(
            args,
            "oOP" if name == "wget" else "o",
            ("--output", "--output-document", "--directory-prefix"),
        )
        named = {"-o", "--output", "--output-document", "-P", "--directory-prefix"}
        if name == "wget":
            named.add("-O")
        out += [Word(v, v) for o, v in found if v is not None and o in named]
    elif name == "git" and args and args[0].value == "clone":
        rest = options(
            args[1:], "obcju", ("--origin", "--branch", "--config", "--depth", "--jobs")
        )[1]
        if len(rest) > 1:
            out.append(rest[-1])
    elif name in ("tar", "unzip", "bsdtar"):
        # tar's first word is often a bundle without a dash (`tar xzf a.tgz -C dir`)
        for i, word in enumerate(args):
            value = word.value or ""
            if value in ("-C", "--directory", "-d") and i + 1 < len(args):
                out.append(args[i + 1])
            elif value.startswith("--directory="):
                out.append(Word(value, value.partition("=")[2]))
    return out

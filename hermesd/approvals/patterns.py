"""The dangerous-command table and the hard floor, matched against parsed commands.

A command is parsed (``hermesd.approvals.shell``), its wrappers stripped
(``hermesd.approvals.commands``), and every program it starts is held against the table. Each
`Pattern` has a stable ``key`` (what "session" and "always" approvals remember), a human
``description`` (shown in the prompt) and a test over one `Invocation`. `DANGEROUS` commands
need a person's consent; `FLOOR` commands are refused whatever the mode, the rules or the
answer. When the parse cannot tell what runs (a syntax error, a command word built at run time,
code handed to a shell or an interpreter) the command asks. Nothing here asks or decides: that
is the broker's job. The table is measured against ``tests/data/approval_corpus.json``.
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
import re
import shlex
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from hermesd.approvals import commands, shell
from hermesd.approvals.commands import Invocation, code_of, options, writes
from hermesd.approvals.shell import Word
from hermesd.sandbox.protected import autorun_reason

MAX_NESTING = 4  # sh -c "sh -c '…'" deeper than this is not read (it asks anyway)


@dataclass(frozen=True)
class Where:
    """What the table needs to know about the machine: the home, hermesd's home and pid."""

    home: str
    hermes_home: str
    pid: int
    cwd: str | None = None

    @classmethod
    def here(cls, cwd: str | None = None) -> Where:
        """This process's view (the daemon's)."""
        home = os.path.expanduser("~")
        hermes = os.environ.get("HERMES_HOME") or os.path.join(home, ".hermes")
        return cls(home, hermes, os.getpid(), cwd)


@dataclass(frozen=True)
class Pattern:
    """One entry of the table."""

    key: str
    description: str
    test: Callable[[Invocation, Where], bool] = field(repr=False, compare=False)


@dataclass
class Assessment:
    """What the table found in one command."""

    floor: Pattern | None
    dangerous: list[Pattern]
    texts: list[str]  # every program started, its words joined by spaces (for approvals.deny)


def assess(command: str, where: Where | None = None) -> Assessment:
    """Parse ``command`` and hold every program it starts against the floor and the table."""
    where = where or Where.here()
    found: dict[str, Pattern] = {}
    floors: list[Pattern] = []
    texts: list[str] = []
    text = _normalize(command)
    try:
        _assess(text, where, found, floors, texts, 0)
    except RecursionError:  # nesting deeper than the walk goes: read it the simple way
        found.setdefault(UNPARSED.key, UNPARSED)
        _fallback(text, where, found, floors)
    return Assessment(floors[0] if floors else None, list(found.values()), texts)


def dangerous(command: str, where: Where | None = None) -> list[Pattern]:
    """Every dangerous pattern ``command`` matches, in the order found."""
    return assess(command, where).dangerous


def floor(command: str, where: Where | None = None) -> Pattern | None:
    """The floor pattern ``command`` matches, if any (nothing unlocks these)."""
    return assess(command, where).floor


def by_key() -> dict[str, Pattern]:
    """Every pattern (dangerous and floor) by key."""
    return {p.key: p for p in (*DANGEROUS, *FLOOR)}


def _normalize(command: str) -> str:
    # Compatibility forms (ＲＭ) and zero-width characters would otherwise hide a name.
    text = unicodedata.normalize("NFKC", command)
    return re.sub(r"[\u200b-\u200d\u2060\ufeff]", "", text)


def _assess(
    text: str,
    where: Where,
    found: dict[str, Pattern],
    floors: list[Pattern],
    texts: list[str],
    depth: int,
) -> None:
    env = {"HERMES_HOME": where.hermes_home}
    script = shell.parse(text, where.home, where.cwd, env)
    if script.unsure:
        found.setdefault(UNPARSED.key, UNPARSED)
        _fallback(text, where, found, floors)
    if _fork_bomb(script):
        floors.append(FORK_BOMB)
    for cmd in script.commands:
        invs, codes = commands.invocations(cmd)
        if not invs:
            invs = [Invocation("", (), cmd)]
        for inv in invs:
            if inv.argv:
                texts.append(" ".join(w.text if w.value is None else w.value for w in inv.argv))
            _check(inv, where, found, floors)
            code = code_of(inv)
            if code is not None and code.shell and code.kind == "inline":
                codes.append(code.text)
            if code is not None and code.shell and code.kind == "stdin" and inv.cmd.fed:
                codes.append(inv.cmd.fed)
        for nested in codes:
            if nested is not None and depth < MAX_NESTING:
                _assess(nested, where, found, floors, texts, depth + 1)


def _check(inv: Invocation, where: Where, found: dict[str, Pattern], floors: list[Pattern]) -> None:
    for pattern in FLOOR:
        if pattern.test(inv, where):
            floors.append(pattern)
    for pattern in DANGEROUS:
        if pattern.key not in found and pattern.test(inv, where):
            found[pattern.key] = pattern


def _fallback(text: str, where: Where, found: dict[str, Pattern], floors: list[Pattern]) -> None:
    """A command the parser could not read whole: split it the simple way as well, so that the
    floor still holds for spellings the grammar rejects (``{rm,-rf,/}``)."""
    for line in re.split(r"[\n;&|()`]+", text):
        try:
            tokens = shlex.split(line, comments=False)
        except ValueError:
            tokens = line.split()
        words = [Word(v, v) for t in tokens for v in shell.brace_expand(t)]
        if words:
            cmd = shell.SimpleCommand(words, cwd=where.cwd)
            for inv in commands.invocations(cmd)[0]:
                _check(inv, where, found, floors)


# --- facts about words --------------------------------------------------------------------------


def _path(word: Word | str | None, where: Where, cwd: str | None = None) -> str | None:
    value = word.value if isinstance(word, Word) else word
    return None if value is None else shell.canonical_path(value, where.home, cwd)


def _paths(inv: Invocation, words: Iterable[Word], where: Where) -> list[str]:
    out = []
    for word in words:
        path = _path(word, where, inv.cmd.cwd)
        if path is not None:
            out.append(path)
    return out


def _has_meta(path: str) -> bool:
    return re.search(r"[*?[]", path) is not None


def _under(path: str, root: str) -> bool:
    """``path`` (possibly a glob) is ``root`` or below it."""
    if root == "/":
        return path.startswith("/")
    have, want = path.split("/"), root.split("/")
    if len(have) < len(want):
        return False
    if not _has_meta(path):
        return have[: len(want)] == want
    return all(fnmatch.fnmatchcase(w, h) for h, w in zip(have, want, strict=False))


def _covers(path: str, protected: str) -> bool:
    """``path`` names ``protected`` itself (or a glob that matches it)."""
    return path == protected or (_has_meta(path) and fnmatch.fnmatchcase(protected, path))


def _short_flags(inv: Invocation) -> set[str]:
    out: set[str] = set()
    for word in inv.args:
        value = word.value or ""
        if value == "--":
            break
        if re.fullmatch(r"-[A-Za-z0-9]+", value):
            out.update(value[1:])
    return out


def _long_flags(inv: Invocation) -> set[str]:
    return {(w.value or "").split("=", 1)[0] for w in inv.args if (w.value or "").startswith("--")}


def _operands(inv: Invocation) -> list[Word]:
    out: list[Word] = []
    ended = False
    for word in inv.args:
        if not ended and word.value == "--":
            ended = True
        elif ended or word.value is None or not word.value.startswith("-") or word.value == "-":
            out.append(word)
    return out


def _named(*names: str) -> Callable[[Invocation, Where], bool]:
    wanted = frozenset(names)
    return lambda inv, where: inv.name in wanted


# --- the floor ----------------------------------------------------------------------------------

SYSTEM_DIRS = (
    *("/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32", "/nix"),
    *("/proc", "/root", "/sbin", "/sys", "/usr", "/var"),
)
_FIRST_DISKS = re.compile(r"/dev/(?:sda|hda|vda|xvda|nvme0n1|mmcblk0)(?:p?\d+)?")
_ROOT: list[str] = []


def root_device() -> str:
    """The block device mounted at / (from /proc/self/mounts), or "" when not a /dev path."""
    if not _ROOT:
        device = ""
        try:
            for line in Path("/proc/self/mounts").read_text().splitlines():
                parts = line.split()
                if len(parts) > 1 and parts[1] == "/" and parts[0].startswith("/dev/"):
                    device = (
                        re.sub(r"p?\d+$", "", parts[0]) if "mapper" not in parts[0] else parts[0]
                    )
        except OSError:
            pass
        _ROOT.append(device)
    return _ROOT[0]


def _everything_in(path: str, parent: str) -> bool:
    """``path`` is a glob for every entry of ``parent`` (``/*``, ``~/.*``, ``/home/??*``)."""
    head, _, tail = path.rpartition("/")
    head = head or "/"
    return (
        head == parent
        and _has_meta(tail)
        and any(fnmatch.fnmatchcase(n, tail) for n in ("zq9", ".zq9"))
    )


def _vital(path: str, where: Where) -> bool:
    """/, a top-level system directory, the home, or everything in one of them."""
    protected = ["/", *SYSTEM_DIRS, where.home]
    if any(_covers(path, p) for p in protected):
        return True
    return any(_everything_in(path, parent) for parent in ("/", "/home", where.home))


def _recursive(inv: Invocation) -> bool:
    return bool(_short_flags(inv) & {"r", "R"}) or "--recursive" in _long_flags(inv)


def _rm_vital(inv: Invocation, where: Where) -> bool:
    if inv.name != "rm":
        return False
    targets = _operands(inv)
    unknown_flags = any(w.value is None for w in targets)  # `rm $FLAGS /` may well be -rf
    if not (_recursive(inv) or unknown_flags):
        return False
    return any(_vital(p, where) for p in _paths(inv, targets, where))


def _find_delete_vital(inv: Invocation, where: Where) -> bool:
    if inv.name != "find":
        return False
    removers = [
        body
        for body in commands.find_execs(inv)
        if body and commands.basename(body[0].value or "") in ("rm", "shred", "unlink")
    ]
    if "-delete" not in inv.values() and not removers:
        return False
    # only an unfiltered walk deletes everything: `find ~ -name '*.pyc' -delete` does not
    allowed = {"-delete", "-depth", "-xdev", "-mount", "-P", "-L", "-H", "-print", "-print0"}
    exec_words = {id(w) for body in commands.find_execs(inv) for w in body}
    for i, word in enumerate(inv.args):
        value = word.value or ""
        if value.startswith("-") and value not in allowed and value not in _FIND_EXEC_WORDS:
            if value in ("-maxdepth", "-mindepth") or id(word) in exec_words:
                continue
            previous = inv.args[i - 1].value if i else None
            if previous not in ("-maxdepth", "-mindepth"):
                return False
    starts = [
        w for w in inv.args if w.value is not None and not w.value.startswith(("-", "!", "("))
    ]
    return any(_vital(p, where) for p in _paths(inv, starts[:8], where))


_FIND_EXEC_WORDS = frozenset({"-exec", "-execdir", "-ok", "-okdir", ";", "+"})


def _system_disk(path: str | None) -> bool:
    if path is None:
        return False
    device = root_device()
    return _FIRST_DISKS.fullmatch(path) is not None or bool(
        device and re.fullmatch(re.escape(device) + r"(?:p?\d+)?", path)
    )


_WIPERS = frozenset({"wipefs", "mke2fs", "mkswap", "shred", "blkdiscard", "mkntfs", "mkdosfs"})


def _is_mkfs(name: str | None) -> bool:
    return name is not None and (
        name in _WIPERS or re.fullmatch(r"mkfs(?:\.\w+)?", name) is not None
    )


def _wipes_system_disk(inv: Invocation, where: Where) -> bool:
    targets: list[Word] = list(writes(inv))
    if _is_mkfs(inv.name):
        targets += _operands(inv)
    return any(_system_disk(_path(w, where)) for w in targets)


def _perm_root(inv: Invocation, where: Where) -> bool:
    if inv.name not in ("chmod", "chown", "chgrp") or not _recursive(inv):
        return False
    return any(p == "/" or _everything_in(p, "/") for p in _paths(inv, _operands(inv), where))


def _no_preserve_root(inv: Invocation, where: Where) -> bool:
    return inv.name == "rm" and "--no-preserve-root" in inv.values()


def _fork_bomb(script: shell.Script) -> bool:
    """A function that starts itself twice at once (``:(){ :|:& };:``)."""
    for name, body in script.functions.items():
        calls = [
            c
            for c in body
            if c.words and c.words[0].value == name and (c.piped_out or c.stdin or c.background)
        ]
        if calls and (len(calls) > 1 or calls[0].background):
            return True
    return False


FLOOR: tuple[Pattern, ...] = (
    Pattern(
        "floor_rm_root",
        "recursive delete of /, the home directory or a system directory",
        lambda inv, where: _rm_vital(inv, where) or _find_delete_vital(inv, where),
    ),
    Pattern("floor_no_preserve_root", "rm --no-preserve-root", _no_preserve_root),
    Pattern("floor_fork_bomb", "fork bomb", lambda inv, where: False),
    Pattern("floor_wipe_disk", "formatting or overwriting the system disk", _wipes_system_disk),
    Pattern("floor_perm_root", "recursive chmod/chown of /", _perm_root),
)
FORK_BOMB = FLOOR[2]


# --- the dangerous-command table ----------------------------------------------------------------

_DISKS = re.compile(
    r"/dev/(?:sd[a-z]+|hd[a-z]+|vd[a-z]+|xvd[a-z]+|nvme\d+n\d+|mmcblk\d+|md\d+|dm-\d+|loop\d+"
    r"|mapper/.+|disk/.+)(?:p?\d+)?"
)
_HARMLESS_DEVICES = frozenset(
    {"/dev/null", "/dev/zero", "/dev/stdout", "/dev/stderr", "/dev/tty", "/dev/full"}
)
_DOWNLOADERS = frozenset({"curl", "wget", "fetch", "aria2c", "http", "https", "lynx", "xh"})
_SQL_CLIENTS = frozenset(
    {"psql", "mysql", "mariadb", "sqlite3", "sqlcmd", "duckdb", "clickhouse-client", "cockroach"}
)
_SQL = {
    "sql_drop": re.compile(r"\bdrop\s+(?:table|database|schema|index|view|user|role)\b", re.I),
    "sql_truncate": re.compile(r"\btruncate\s+table\b|\btruncate\s+\w+\s*;", re.I),
    "sql_delete_all": re.compile(
        r"\bdelete\s+from\s+[\w.\"`\[\]]+(?![^;'\"]*\bwhere\b)\s*(?:;|'|\"|$)", re.I
    ),
}
_STARTUP = re.compile(
    r"(?:^|/)(?:\.bashrc|\.bash_profile|\.bash_login|\.bash_logout|\.profile|\.zshrc|\.zprofile"
    r"|\.zshenv|\.zlogin|\.kshrc|\.cshrc|\.tcshrc|\.xprofile|\.xinitrc|config\.fish)$"
    r"|^/etc/(?:profile|bash\.bashrc|zsh/.*|profile\.d/.*|environment)$"
)
_STATE_FILES = re.compile(r"config\.ya?ml|\.env|state\.db(?:-wal|-shm|-journal)?")
_PLUGIN_WRITERS = frozenset(
    {"tee", "cp", "mv", "install", "ln", "rsync", "touch", "truncate", "mkdir", "unzip", "tar"}
    | {"git", "curl", "wget", "pip", "pip3", "sed", "patch", "uv", "rm"}
)
_GIT_EXEC_KEYS = re.compile(
    r"alias\..*|core\.(?:pager|editor|sshcommand|fsmonitor|hookspath|gitproxy|askpass"
    r"|alternaterefscommand)|sequence\.editor|diff\.external|diff\..*\.(?:textconv|command)"
    r"|merge\..*\.driver|filter\..*|pager\..*|credential\..*helper|gpg\..*program|gpg\.program"
    r"|uploadpack\.packobjectshook|remote\..*\.(?:uploadpack|receivepack)|include\.path"
    r"|includeif\..*|init\.templatedir|core\.worktree|protocol\..*",
    re.I,
)
_GIT_EXEC_ENV = frozenset(
    {"GIT_PAGER", "GIT_EDITOR", "GIT_SSH", "GIT_SSH_COMMAND", "GIT_EXTERNAL_DIFF", "GIT_ASKPASS"}
    | {"GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT", "GIT_PROXY_COMMAND", "GIT_SEQUENCE_EDITOR"}
    | {"GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_TEMPLATE_DIR", "GIT_EXEC_PATH"}
)
_LOADER_ENV = frozenset(
    {"LD_PRELOAD", "LD_AUDIT", "BASH_ENV", "ENV", "PERL5OPT", "NODE_OPTIONS", "RUBYOPT"}
    | {"PYTHONSTARTUP", "PROMPT_COMMAND", "DYLD_INSERT_LIBRARIES"}
)
_AWK_EXEC = re.compile(r"\bsystem\s*\(|\|\s*getline|\|&|\bprint[f]?\b[^;}]*\|\s*[\"\w(]")


def _rm_recursive(inv: Invocation, where: Where) -> bool:
    return inv.name == "rm" and _recursive(inv)


def _find_delete(inv: Invocation, where: Where) -> bool:
    if inv.name == "find":
        return "-delete" in inv.values()
    return inv.via[-1:] == ("find",) and inv.name in ("rm", "unlink", "shred", "rmdir")


def _xargs_rm(inv: Invocation, where: Where) -> bool:
    return "xargs" in inv.via and inv.name in ("rm", "unlink", "shred", "rmdir")


def _mode(inv: Invocation) -> str | None:
    rest = options(inv.args, "", ("--reference",))[1]
    return rest[0].value if rest else None


def _world_writable(inv: Invocation, where: Where) -> bool:
    if inv.name != "chmod":
        return False
    mode = _mode(inv)
    if mode is None:
        return False
    if re.fullmatch(r"[0-7]{1,5}", mode):
        return int(mode[-1]) & 2 != 0
    return any(
        re.fullmatch(r"[ugo]*[ao][ugoa]*[+=][rwxXst]*w[rwxXst]*", clause)
        for clause in mode.split(",")
    )


def _setuid(inv: Invocation, where: Where) -> bool:
    if inv.name != "chmod":
        return False
    mode = _mode(inv)
    if mode is None:
        return False
    if re.fullmatch(r"[0-7]{4,5}", mode):
        return int(mode[-4]) & 6 != 0
    return any(re.fullmatch(r"[ugoa]*[+=][rwxXt]*s[rwxXst]*", c) for c in mode.split(","))


_SYSTEM_TREES = (
    *("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/opt", "/proc", "/root"),
    *("/sbin", "/srv", "/sys", "/usr", "/var", "/nix"),
)


def _system_path(path: str, where: Where) -> bool:
    if path == "/" or _everything_in(path, "/"):
        return True
    # a home under a system tree (/root, /var/lib/hermesd) is the user's, not the system's
    if where.home != "/" and _under(path, where.home):
        return False
    return any(_under(path, d) for d in _SYSTEM_TREES)


def _chmod_system(inv: Invocation, where: Where) -> bool:
    if inv.name not in ("chmod", "chown", "chgrp"):
        return False
    rest = options(inv.args, "", ("--reference", "--from"))[1][1:]
    return any(_system_path(p, where) for p in _paths(inv, rest, where))


def _chown_recursive(inv: Invocation, where: Where) -> bool:
    return inv.name in ("chown", "chgrp") and _recursive(inv)


def _mkfs(inv: Invocation, where: Where) -> bool:
    return inv.name is not None and (
        re.fullmatch(r"mkfs(?:\.\w+)?|mke2fs|mkswap|mkntfs|mkdosfs", inv.name) is not None
    )


def _dd_device(inv: Invocation, where: Where) -> bool:
    if inv.name != "dd":
        return False
    for value in inv.values():
        if value is not None and value.startswith("of="):
            path = _path(value[3:], where, inv.cmd.cwd)
            if path is not None and path.startswith("/dev/") and path not in _HARMLESS_DEVICES:
                return True
    return False


def _write_device(inv: Invocation, where: Where) -> bool:
    return any(_DISKS.fullmatch(p) for p in _paths(inv, writes(inv), where))


def _partition(inv: Invocation, where: Where) -> bool:
    return inv.name in ("fdisk", "sfdisk", "cfdisk", "parted", "gdisk", "sgdisk", "wipefs") or (
        inv.name in ("shred", "blkdiscard")
    )


def _sql(key: str) -> Callable[[Invocation, Where], bool]:
    regex = _SQL[key]

    def test(inv: Invocation, where: Where) -> bool:
        names = {commands.basename(v) for v in inv.values() if v} | {inv.name or ""}
        if not names & _SQL_CLIENTS:
            return False
        texts = [v for v in inv.values() if v]
        if inv.cmd.fed:
            texts.append(inv.cmd.fed)
        return any(regex.search(t) for t in texts)

    return test


def _written_paths(inv: Invocation, where: Where) -> list[str]:
    return _paths(inv, writes(inv), where)


def _write_etc(inv: Invocation, where: Where) -> bool:
    return any(_under(p, "/etc") for p in _written_paths(inv, where))


def _write_startup(inv: Invocation, where: Where) -> bool:
    return any(_STARTUP.search(p) for p in _written_paths(inv, where)) or any(
        _STARTUP.search(w.value or "") for w in writes(inv)
    )


def _write_autorun(inv: Invocation, where: Where) -> bool:
    # the one list the file tools ask on too (hermesd.sandbox.protected)
    written = _written_paths(inv, where)
    return any(autorun_reason(p) and not _STARTUP.search(p) for p in written)


def _service(inv: Invocation, where: Where) -> bool:
    values = [v or "" for v in inv.values()]
    verbs = {"stop", "disable", "mask", "kill", "restart", "isolate", "try-restart", "reload"}
    if inv.name == "systemctl":
        return bool(set(_operands(inv) and [w.value for w in _operands(inv)][:1]) & verbs)
    if inv.name == "service":
        return len(values) > 1 and values[1] in ("stop", "restart", "force-reload")
    if inv.name in ("launchctl", "rc-service", "sv"):
        return bool(set(values) & {"stop", "unload", "bootout", "remove", "kill", "down"})
    return False


def _power(inv: Invocation, where: Where) -> bool:
    if inv.name in ("shutdown", "reboot", "poweroff", "halt", "kexec"):
        return True
    values = [v or "" for v in inv.values()]
    if inv.name in ("init", "telinit"):
        return bool(values) and values[0] in ("0", "6")
    if inv.name in ("systemctl", "loginctl"):
        return bool(set(values) & {"poweroff", "reboot", "halt", "kexec", "suspend", "hibernate"})
    return False


_KILL_SIGNAL = re.compile(r"-(?:9|KILL|SIGKILL)|-s(?:9|KILL|SIGKILL)?|--signal(?:=.*)?", re.I)


def _kill_hard(inv: Invocation, where: Where) -> bool:
    if inv.name in ("killall", "pkill", "killall5", "skill"):
        return True
    if inv.name != "kill":
        return False
    values = [v or "" for v in inv.values()]
    for i, value in enumerate(values):
        if re.fullmatch(r"-(?:9|KILL|SIGKILL)", value, re.I):
            return True
        following = values[i + 1].upper().removeprefix("SIG") if i + 1 < len(values) else ""
        if value in ("-s", "-n", "--signal") and following in ("9", "KILL"):
            return True
    return False


def _kill_daemon(inv: Invocation, where: Where) -> bool:
    if inv.name not in ("kill", "pkill", "killall", "skill"):
        return False
    for word in inv.args:
        value, text = word.value, word.text
        if value in ("1", "-1", str(where.pid), f"-{where.pid}") and inv.name == "kill":
            return True
        if "PPID" in text or "hermesd" in (value or text):
            return True
    return False


def _code_kind(kind: str, shell_only: bool | None = None) -> Callable[[Invocation, Where], bool]:
    def test(inv: Invocation, where: Where) -> bool:
        code = code_of(inv)
        if code is None or code.kind != kind:
            return False
        return shell_only is None or code.shell == shell_only

    return test


def _downloaded(inv: Invocation) -> bool:
    if inv.cmd.stdin == "pipe" and set(inv.cmd.upstream) & _DOWNLOADERS:
        return True
    return any(set(w.substituted) & _DOWNLOADERS for w in inv.argv)


def _pipe_to_shell(inv: Invocation, where: Where) -> bool:
    code = code_of(inv)
    return code is not None and code.kind in ("stdin", "inline", "file") and _downloaded(inv)


def _reads_stdin(inv: Invocation, where: Where) -> bool:
    code = code_of(inv)
    return code is not None and code.kind == "stdin"


def _interpreter_inline(inv: Invocation, where: Where) -> bool:
    code = code_of(inv)
    if code is None or code.shell or code.kind != "inline":
        return False
    if inv.name in ("awk", "gawk", "mawk", "nawk"):
        return code.text is None or _AWK_EXEC.search(code.text) is not None
    return True


def _git(inv: Invocation) -> tuple[str, list[Word], list[str | None]]:
    """A git command's subcommand, its words, and the ``-c`` settings given."""
    found, rest = options(
        inv.args, "Cc", ("--git-dir", "--work-tree", "--namespace", "--config-env", "--exec-path")
    )
    settings = [v for o, v in found if o in ("-c", "--config-env")]
    sub = rest[0].value if rest else ""
    return sub or "", rest[1:], settings


def _git_config_exec(inv: Invocation, where: Where) -> bool:
    if any(k in _GIT_EXEC_ENV or k.startswith("GIT_CONFIG_KEY") for k in inv.env):
        return inv.name == "git" or bool(inv.env.keys() & {"GIT_SSH_COMMAND", "GIT_SSH"})
    if inv.name != "git":
        return False
    _, _, settings = _git(inv)
    for setting in settings:
        if setting is None:
            return True
        key, _, value = setting.partition("=")
        if _GIT_EXEC_KEYS.fullmatch(key) or value.startswith("!"):
            return True
    return False


def _git_destructive(inv: Invocation, where: Where) -> bool:
    if inv.name != "git":
        return False
    sub, words, _ = _git(inv)
    values = [w.value or "" for w in words]
    if sub == "push":
        forced = {"-f", "--force", "--delete", "-d", "--mirror", "--prune", "--force-if-includes"}
        for value in values:
            name = value.split("=", 1)[0]
            if name in forced or name.startswith("--force-with-lease"):
                return True
            if re.fullmatch(r"-[a-zA-Z]*[fd][a-zA-Z]*", value):
                return True
        refspecs = [v for v in values if not v.startswith("-")][1:]
        return any(r.startswith(("+", ":")) for r in refspecs)
    if sub == "reset":
        return "--hard" in values or "--merge" in values or "--keep" in values
    if sub == "clean":
        return any(re.fullmatch(r"-[a-zA-Z]*f[a-zA-Z]*", v) or v == "--force" for v in values)
    if sub == "branch":
        return "-D" in values or (
            bool({"-d", "--delete"} & set(values)) and bool({"-f", "--force"} & set(values))
        )
    if sub in ("checkout", "restore"):
        return "." in values or (sub == "checkout" and bool({"-f", "--force"} & set(values)))
    if sub == "stash":
        return bool(values) and values[0] in ("drop", "clear")
    return sub in ("filter-branch", "filter-repo", "update-ref") and (
        sub != "update-ref" or "-d" in values
    )


def _crontab(inv: Invocation, where: Where) -> bool:
    if inv.name != "crontab":
        return False
    found, rest = options(inv.args, "uT", ())
    given = {o for o, _ in found}
    if given & {"-l", "-T"} and not rest:
        return False
    return bool(given & {"-r", "-ir"}) or "-r" in given or bool(rest) or inv.cmd.stdin != ""


def _reverse_shell(inv: Invocation, where: Where) -> bool:
    words = [*inv.argv, *(r.target for r in inv.cmd.redirects)]
    if any(re.search(r"/dev/(?:tcp|udp)/", w.value or w.text) for w in words):
        return True
    values = [v or "" for v in inv.values()]
    if inv.name in ("nc", "ncat", "netcat", "nc.traditional", "nc.openbsd", "pwncat"):
        return any(
            re.fullmatch(r"-[a-zA-Z]*[ec]|--(?:exec|sh-exec|lua-exec)(?:=.*)?", v) for v in values
        )
    if inv.name == "socat":
        return any(re.match(r"(?:exec|system):", v, re.I) for v in values)
    return inv.name in ("telnet", "openssl") and inv.cmd.piped_out and inv.cmd.stdin == "pipe"


def _ssh_keys(inv: Invocation, where: Where) -> bool:
    if inv.name in ("ssh-keygen", "ssh-copy-id"):
        return True
    return any(
        "/.ssh/" in p + "/" or p.endswith("/.ssh") for p in _written_paths(inv, where)
    ) or any(".ssh" in (w.value or "").split("/") for w in writes(inv))


def _mentions(inv: Invocation) -> list[Word]:
    return [*inv.args, *(r.target for r in inv.cmd.redirects if r.op not in ("<<", "<<-"))]


def _hermes_state(inv: Invocation, where: Where) -> bool:
    for word in _mentions(inv):
        value = word.value if word.value is not None else word.text
        path = _path(value, where, inv.cmd.cwd)
        if (
            path is not None
            and _under(path, where.hermes_home)
            and _STATE_FILES.fullmatch(posixpath.basename(path))
        ):
            return True
        if re.search(r"(?:\.hermes|HERMES_HOME\}?)/+(?:config\.ya?ml|\.env|state\.db)", value):
            return True
    return False


def _hermes_plugins(inv: Invocation, where: Where) -> bool:
    values = [v or "" for v in inv.values()]
    if inv.name == "hermesctl" and len(values) > 1 and values[0] == "plugins":
        return values[1] in ("install", "update", "enable")
    plugins = posixpath.join(where.hermes_home, "plugins")
    written = writes(inv)
    targets = list(written)
    if inv.name in _PLUGIN_WRITERS or _interpreter_inline(inv, where):
        targets += list(inv.args)
    for word in targets:
        value = word.value if word.value is not None else word.text
        path = _path(value, where, inv.cmd.cwd)
        if path is not None and _under(path, plugins) and (path != plugins or word in written):
            return True
        if re.search(r"(?:\.hermes|HERMES_HOME\}?)/+plugins/", value):
            return True
    return False


def _sudo(inv: Invocation, where: Where) -> bool:
    return inv.name in ("sudo", "doas", "pkexec", "su", "run0", "sudoedit", "runuser")


#: programs that hand a command to something running outside this call: the owner's tmux or
#: screen server, the service manager, the session bus, another host (or this one over ssh),
#: the at queue. The sandbox refuses Unix sockets; this asks before it ever gets that far.
_ELSEWHERE = (
    *("tmux", "screen", "byobu", "systemd-run", "busctl", "gdbus", "dbus-send", "qdbus"),
    *("ssh", "mosh", "at", "batch"),
)


def _elsewhere(inv: Invocation, where: Where) -> bool:
    if inv.name == "crontab":  # listing is harmless; editing or installing schedules code
        found, rest = options(inv.args, "uT", ())
        return bool(rest) or any(o not in ("-l", "-u", "-T") for o, _ in found)
    return inv.name in _ELSEWHERE


def _firewall(inv: Invocation, where: Where) -> bool:
    return inv.name in ("iptables", "ip6tables", "nft", "ufw", "firewall-cmd") and bool(inv.args)


def _move_to_null(inv: Invocation, where: Where) -> bool:
    return inv.name == "mv" and "/dev/null" in _written_paths(inv, where)


def _mount(inv: Invocation, where: Where) -> bool:
    return inv.name in ("mount", "umount") and bool(_operands(inv))


def _dynamic(inv: Invocation, where: Where) -> bool:
    return inv.name is None


def _loader_env(inv: Invocation, where: Where) -> bool:
    return bool(inv.env.keys() & _LOADER_ENV) and inv.name != ""


_USER_ADMIN = (
    *("useradd", "userdel", "usermod", "groupadd", "groupdel", "groupmod", "passwd", "chpasswd"),
    *("visudo", "adduser", "deluser", "addgroup", "delgroup", "gpasswd", "chage", "vipw", "vigr"),
)

DANGEROUS: tuple[Pattern, ...] = (
    Pattern("recursive_delete", "recursive delete", _rm_recursive),
    Pattern("find_delete", "find with -delete or -exec rm", _find_delete),
    Pattern("xargs_rm", "deleting files listed by another command", _xargs_rm),
    Pattern("chmod_world_writable", "world-writable permissions (777/666, o+w)", _world_writable),
    Pattern("chmod_setuid", "setuid/setgid bit", _setuid),
    Pattern("chmod_system", "changing permissions or owner of system paths", _chmod_system),
    Pattern("chown_recursive", "recursive change of owner", _chown_recursive),
    Pattern("mkfs", "creating a filesystem (erases the device)", _mkfs),
    Pattern("dd_device", "dd writing to a device", _dd_device),
    Pattern("write_device", "writing straight to a disk device", _write_device),
    Pattern("disk_partition", "partitioning or wiping a disk", _partition),
    Pattern("sql_drop", "SQL DROP", _sql("sql_drop")),
    Pattern("sql_truncate", "SQL TRUNCATE", _sql("sql_truncate")),
    Pattern("sql_delete_all", "SQL DELETE without WHERE", _sql("sql_delete_all")),
    Pattern("write_etc", "writing under /etc", _write_etc),
    Pattern("write_shell_startup", "writing shell start-up files", _write_startup),
    Pattern(
        "write_autorun",
        "writing a file that runs code later (.envrc, .git/hooks, .vscode/tasks.json, units)",
        _write_autorun,
    ),
    Pattern("service_control", "stopping, disabling or restarting services", _service),
    Pattern("power", "shutting down or rebooting the machine", _power),
    Pattern("process_kill", "killing processes (kill -9, killall, pkill)", _kill_hard),
    Pattern("kill_daemon", "signalling pid 1, every process (-1) or hermesd itself", _kill_daemon),
    Pattern("pipe_to_shell", "downloaded code run by a shell or interpreter", _pipe_to_shell),
    Pattern(
        "shell_stdin",
        "a shell or interpreter runs code from its input (pipe, heredoc, redirect)",
        _reads_stdin,
    ),
    Pattern("shell_c", "shell -c indirection", _code_kind("inline", shell_only=True)),
    Pattern(
        "shell_script",
        "a shell runs a script file (its commands were not checked)",
        _code_kind("file", shell_only=True),
    ),
    Pattern(
        "interpreter_c",
        "inline script (python -c, perl -e, node -e, awk system)",
        _interpreter_inline,
    ),
    Pattern("eval", "eval of a constructed command", _named("eval")),
    Pattern(
        "git_config_exec",
        "git told to run a program (-c core.pager=…, GIT_SSH_COMMAND)",
        _git_config_exec,
    ),
    Pattern(
        "loader_env",
        "a variable that makes programs load other code (LD_PRELOAD, BASH_ENV)",
        _loader_env,
    ),
    Pattern("ssh_keys", "writing to ~/.ssh", _ssh_keys),
    Pattern("hermes_state", "hermesd's own config, .env or state", _hermes_state),
    Pattern("hermes_plugins", "changing hermesd's plugins (code the daemon runs)", _hermes_plugins),
    Pattern("sudo", "running as another user (sudo, su, doas, pkexec)", _sudo),
    Pattern(
        "runs_elsewhere",
        "hands a command to something outside the sandbox (tmux, screen, systemd-run, "
        "D-Bus, ssh, at, crontab)",
        _elsewhere,
    ),
    Pattern("user_admin", "changing users, groups or passwords", _named(*_USER_ADMIN)),
    Pattern("firewall", "changing firewall rules", _firewall),
    Pattern("crontab_remove", "removing or replacing the crontab", _crontab),
    Pattern(
        "git_destructive",
        "destructive git command (force push, deleting a ref, reset --hard, clean -f)",
        _git_destructive,
    ),
    Pattern("reverse_shell", "network shell (nc -e, socat exec:, /dev/tcp)", _reverse_shell),
    Pattern("move_to_null", "moving files into /dev/null", _move_to_null),
    Pattern("chattr", "changing file attributes (chattr)", _named("chattr")),
    Pattern(
        "kernel_modules",
        "loading or removing kernel modules",
        _named("insmod", "rmmod", "modprobe"),
    ),
    Pattern("mount", "mounting or unmounting filesystems", _mount),
    Pattern(
        "dynamic_command",
        "could not tell which program runs (its name is built at run time: $X, $(…), a glob)",
        _dynamic,
    ),
    Pattern(
        "unparsed",
        "could not tell what this runs (the shell parser found a syntax error)",
        lambda inv, where: False,
    ),
)
UNPARSED = DANGEROUS[-1]

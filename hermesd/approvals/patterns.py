"""The dangerous-command table and the hard floor, as data.

Each `Pattern` has a stable ``key`` (the unit "session" and "always" approvals remember), a
human ``description`` (shown in the prompt) and a regular expression searched in the command
after `normalize`. `DANGEROUS` commands need a person's consent; `FLOOR` commands are refused
whatever the mode, the rules or the answer. Nothing here decides or asks: that is the broker's
job. The table is tested against ``tests/data/approval_corpus.json``.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Pattern:
    """One entry of the table."""

    key: str
    description: str
    regex: re.Pattern[str]


def _table(rows: list[tuple[str, str, str]]) -> tuple[Pattern, ...]:
    return tuple(Pattern(k, d, re.compile(r, re.IGNORECASE | re.DOTALL)) for k, d, r in rows)


# Where a shell command starts: line start, or after ; & | ( ` $( and optional env/sudo words.
_CMD = r"(?:^|[;&|(`{]|\$\(|\bxargs\s+|\bexec\s+|\bnohup\s+|\btime\s+|\benv\s+|\bsudo\s+)\s*"
_OPTS = r"(?:\s+-{1,2}[\w=-]*)*"  # any run of options
_SYS = (
    r"(?:/|/\*|/(?:bin|boot|dev|etc|lib|lib32|lib64|opt|proc|root|sbin|srv|sys|usr|var)(?:/\S*)?)"
)
_END = r"(?=\s|$|[;&|)])"
_FIRST_DISKS = r"/dev/(?:sda|hda|vda|xvda|nvme0n1|mmcblk0)(?:p?\d+)?"
_DISKS = (
    r"/dev/(?:sd[a-z]|hd[a-z]|vd[a-z]|xvd[a-z]|nvme\d+n\d+|mmcblk\d+|md\d+|dm-\d+"
    r"|mapper/\S+|disk/\S+)"
)
_WRITE_TO = r"(?:>>?|\btee(?:\s+-a)?)\s*"

DANGEROUS: tuple[Pattern, ...] = _table(
    [
        (
            "recursive_delete",
            "recursive delete",
            _CMD + r"rm\s+(?:-\S+\s+)*(?:-[a-z]*r[a-z]*|--recursive)\b",
        ),
        (
            "find_delete",
            "find with -delete or -exec rm",
            r"\bfind\b.*\s(?:-delete\b|-exec(?:dir)?\s+(?:\S*/)?rm\b)",
        ),
        ("xargs_rm", "deleting files listed by another command", r"\bxargs\s+(?:-\S+\s+)*rm\b"),
        (
            "chmod_world_writable",
            "world-writable permissions (777/666, o+w)",
            _CMD
            + r"chmod"
            + _OPTS
            + r"\s+(?:0?[0-7]?[67]{2}[67]|[ugoa]*[+=][rwxX]*w[rwxX]*\b|o\+\w*w)",
        ),
        (
            "chmod_setuid",
            "setuid/setgid bit",
            _CMD + r"chmod" + _OPTS + r"\s+(?:[ugoa]*\+\w*s\b|[2467][0-7]{3}\b)",
        ),
        (
            "chmod_system",
            "changing permissions or owner of system paths",
            _CMD + r"(?:chmod|chown|chgrp)\b[^;&|]*\s" + _SYS + _END,
        ),
        (
            "chown_recursive",
            "recursive change of owner",
            _CMD + r"(?:chown|chgrp)\s+(?:-\S+\s+)*(?:-[a-z]*R[a-z]*|--recursive)\b",
        ),
        (
            "mkfs",
            "creating a filesystem (erases the device)",
            _CMD + r"mkfs(?:\.\w+)?\b|\bmke2fs\b|\bmkswap\b",
        ),
        (
            "dd_device",
            "dd writing to a device",
            r"\bdd\b[^;&|]*\bof=/dev/(?!null\b|zero\b|stdout\b|stderr\b)",
        ),
        ("write_device", "writing straight to a disk device", r">\s*" + _DISKS),
        (
            "disk_partition",
            "partitioning a disk",
            _CMD + r"(?:fdisk|sfdisk|parted|gdisk|wipefs|shred)\b",
        ),
        ("sql_drop", "SQL DROP", r"\bdrop\s+(?:table|database|schema|index|view|user|role)\b"),
        ("sql_truncate", "SQL TRUNCATE", r"\btruncate\s+table\b|\btruncate\s+\w+\s*;"),
        (
            "sql_delete_all",
            "SQL DELETE without WHERE",
            r"\bdelete\s+from\s+[\w.\"`\[\]]+(?![^;'\"]*\bwhere\b)\s*(?:;|'|\"|$)",
        ),
        (
            "write_etc",
            "writing under /etc",
            _WRITE_TO + r"/etc/|\b(?:cp|mv|install|ln|rsync|rm|touch|truncate)\b[^;&|]*"
            r"\s/etc/\S*\s*(?:$|[;&|])"
            r"|\bsed\s+(?:-\S+\s+)*-i\S*\b[^;&|]*\s/etc/|\b(?:vi|vim|nano|ed)\s+/etc/",
        ),
        (
            "write_shell_startup",
            "writing shell start-up files",
            _WRITE_TO
            + r"\S*(?:\.bashrc|\.bash_profile|\.profile|\.zshrc|\.zprofile|/etc/profile)\b",
        ),
        (
            "service_control",
            "stopping, disabling or restarting services",
            (
                r"\bsystemctl\s+(?:--\S+\s+)*(?:stop|disable|mask|kill|restart|isolate)\b"
                r"|\bservice\s+\S+\s+(?:stop|restart)\b|\b(?:launchctl|rc-service)\s+\S*\s*(?:stop|unload)\b"
            ),
        ),
        (
            "power",
            "shutting down or rebooting the machine",
            _CMD + r"(?:shutdown|reboot|poweroff|halt)\b|\binit\s+[06]\b"
            r"|\bsystemctl\s+(?:poweroff|reboot|halt)\b",
        ),
        (
            "process_kill",
            "killing processes (kill -9, killall, pkill)",
            _CMD + r"(?:killall|pkill)\b|\bkill\s+(?:-s\s+)?-?(?:9|KILL|SIGKILL)\b"
            r"|\bkill\s+(?:-\S+\s+)*-1\b",
        ),
        (
            "pipe_to_shell",
            "downloaded code piped into a shell or interpreter",
            (
                r"\b(?:curl|wget|fetch)\b[^|;&]*\|\s*(?:sudo\s+)?(?:\S*/)?(?:ba|z|da|k|fi)?sh\b"
                r"|\b(?:curl|wget)\b[^|;&]*\|\s*(?:sudo\s+)?(?:python\d*(?:\.\d+)?|perl|ruby|node)\b"
                r"|(?:ba|z)?sh\s+<\(\s*(?:curl|wget)\b|\$\(\s*(?:curl|wget)\b[^)]*\)\s*$"
            ),
        ),
        (
            "shell_c",
            "shell -c indirection",
            _CMD + r"(?:\S*/)?(?:ba|z|da|k|fi)?sh\s+(?:-\w+\s+)*-\w*c\b",
        ),
        (
            "interpreter_c",
            "inline script (python -c, perl -e, node -e)",
            _CMD
            + r"(?:\S*/)?(?:python\d*(?:\.\d+)?|perl|ruby|node|php)\s+(?:-\w+\s+)*-(?:c|e|r)\b",
        ),
        ("eval", "eval of a constructed command", _CMD + r"eval\b"),
        (
            "ssh_keys",
            "writing to ~/.ssh",
            _WRITE_TO + r"\S*\.ssh(?:/|\b)"
            r"|\b(?:cp|mv|ln|install|rsync|rm|chmod|chown|sed\s+-i\S*|truncate|touch)\b[^;&|]*\s\S*\.ssh(?:/|\b)"
            r"|\bssh-keygen\b|\bssh-copy-id\b",
        ),
        (
            "hermes_state",
            "hermesd's own config, .env or state",
            r"(?:\.hermes/|\$\{?HERMES_HOME\}?/?)(?:config\.ya?ml|\.env|state\.db)",
        ),
        (
            "hermes_plugins",
            "changing hermesd's plugins (code the daemon runs)",
            r"\bhermesctl\s+plugins\s+(?:install|update|enable)\b"
            r"|^(?=.*(?:>|\b(?:tee|cp|mv|install|ln|rsync|touch|truncate|mkdir|unzip|tar|git|curl"
            r"|wget|pip\d*|sed|patch|python\d*(?:\.\d+)?)\b)).*"
            r"(?:\.hermes/|\$\{?HERMES_HOME\}?/?)plugins\b",
        ),
        (
            "sudo",
            "running as another user (sudo, su, doas, pkexec)",
            _CMD
            + r"(?:sudo|doas|pkexec)\b|"
            + _CMD
            + r"su(?:\s+-\S*)*(?:\s+\w+)?\s*$|"
            + _CMD
            + r"su\s+-",
        ),
        (
            "user_admin",
            "changing users, groups or passwords",
            _CMD + r"(?:useradd|userdel|usermod|groupadd|groupdel|passwd|chpasswd|visudo|adduser"
            r"|deluser)\b",
        ),
        ("firewall", "changing firewall rules", _CMD + r"(?:iptables|ip6tables|nft|ufw)\s+\S"),
        (
            "crontab_remove",
            "removing or replacing the crontab",
            r"\bcrontab\s+(?:-\S+\s+)*-r\b|\bcrontab\s+-\s*$",
        ),
        (
            "git_destructive",
            "destructive git command (force push, reset --hard, clean -f)",
            (
                r"\bgit\s+(?:push\b[^;&|]*\s(?:-f|--force\S*)\b|reset\s+--hard\b|clean\s+(?:-\S*\s+)*-\w*f"
                r"|(?-i:branch\s+-D)\b|checkout\s+--\s+\.)"
            ),
        ),
        (
            "reverse_shell",
            "network shell (nc -e, /dev/tcp)",
            r"\b(?:nc|ncat|netcat)\b[^;&|]*\s-[ec]\s|/dev/(?:tcp|udp)/",
        ),
        ("move_to_null", "moving files into /dev/null", r"\bmv\b[^;&|]*\s/dev/null\b"),
        ("chattr", "changing file attributes (chattr)", _CMD + r"chattr\b"),
        (
            "kernel_modules",
            "loading or removing kernel modules",
            _CMD + r"(?:insmod|rmmod|modprobe)\b",
        ),
        ("mount", "mounting or unmounting filesystems", _CMD + r"u?mount\s+(?:-\S+\s+)*[\w/]"),
    ]
)

FLOOR: tuple[Pattern, ...] = _table(
    [
        (
            "floor_rm_root",
            "recursive delete of /, the home directory or a system directory",
            _CMD + r"rm\s+(?:-\S+\s+)*(?:-[a-z]*r[a-z]*|--recursive)(?:\s+-\S+)*\s+(?:--\s+)?"
            r"(?:/|/\*|~/?|~/\*|\$\{?HOME\}?/?|\$\{?HOME\}?/\*|/(?:bin|boot|dev|etc|home|lib|lib64|proc|"
            r"root|sbin|sys|usr|var)/?)" + _END,
        ),
        ("floor_no_preserve_root", "rm --no-preserve-root", r"\brm\b[^;&|]*--no-preserve-root"),
        (
            "floor_fork_bomb",
            "fork bomb",
            r":\s*\(\s*\)\s*\{\s*:\s*\|\s*:\s*&\s*\}|\b(\w+)\s*\(\s*\)\s*\{\s*\1\s*\|\s*\1\s*&\s*\}",
        ),
        (
            "floor_wipe_disk",
            "formatting or overwriting the system disk",
            _CMD
            + r"(?:mkfs(?:\.\w+)?|mke2fs|wipefs)\b[^;&|]*\s"
            + _FIRST_DISKS
            + _END
            + r"|\bdd\b[^;&|]*\bof="
            + _FIRST_DISKS
            + _END
            + r"|>\s*"
            + _FIRST_DISKS
            + _END,
        ),
        (
            "floor_perm_root",
            "recursive chmod/chown of /",
            _CMD + r"(?:chmod|chown|chgrp)\s+(?:\S+\s+)*(?:-[a-z]*R[a-z]*|--recursive)\s+"
            r"(?:\S+\s+)*/(?:\*)?" + _END,
        ),
    ]
)


def normalize(command: str) -> str:
    """The command as the patterns see it: NFKC, line continuations joined, spaces collapsed."""
    text = unicodedata.normalize("NFKC", command).replace("\\\n", " ")
    text = re.sub(r"[\u200b-\u200f\u2060\ufeff]", "", text)  # zero-width characters
    return re.sub(r"[ \t]+", " ", text).strip()


def dangerous(command: str) -> list[Pattern]:
    """Every dangerous pattern ``command`` matches, in table order."""
    text = normalize(command)
    return [p for p in DANGEROUS if p.regex.search(text)]


def floor(command: str) -> Pattern | None:
    """The floor pattern ``command`` matches, if any (nothing unlocks these)."""
    text = normalize(command)
    for p in FLOOR:
        if p.regex.search(text):
            return p
    if _root_device_formatted(text):
        return FLOOR[3]
    return None


def _root_device_formatted(text: str) -> bool:
    device = root_device()
    if not device or not re.search(r"\b(?:mkfs(?:\.\w+)?|mke2fs|wipefs|dd)\b", text):
        return False
    return re.search(re.escape(device) + r"(?:p?\d+)?" + _END, text) is not None


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


def by_key() -> dict[str, Pattern]:
    """Every pattern (dangerous and floor) by key."""
    return {p.key: p for p in (*DANGEROUS, *FLOOR)}

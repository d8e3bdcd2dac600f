"""A shell command as the approval table sees it: every simple command, with its words unquoted.

`parse` reads a command with tree-sitter-bash (error-tolerant: a syntax error is reported, not
raised) and walks the whole tree: lists, pipelines, subshells, command and process
substitutions, if/while/for/case bodies, functions, heredocs. Each simple command becomes a
`SimpleCommand`: its words after quote removal and the expansions we can know (``$HOME``, ``~``,
variables assigned earlier on the same line, ``$'…'``, brace expansion), its redirections, where
its standard input comes from, and the working directory when a ``cd`` made it known. A word
built at run time (``$X`` of an unknown variable, ``$(…)``, backquotes) has no value: the table
treats that as "could not tell". This module knows bash's syntax, not what any program does;
that is ``hermesd.approvals.commands`` and ``patterns``.
"""

from __future__ import annotations

import dataclasses
import itertools
import posixpath
import re
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import tree_sitter_bash
from tree_sitter import Language, Node, Parser

_LANGUAGE = Language(tree_sitter_bash.language())
_LOCAL = threading.local()  # a Parser is not safe to share between threads

MAX_WORDS = 256  # brace expansion beyond this is cut (the first words are what the table reads)
MAX_BRACES = 16  # a word with more brace groups than this is not expanded


@dataclass(frozen=True)
class Word:
    """One word of a command: as written, and its value when the value is known."""

    text: str
    value: str | None  # None: built at run time ($X, $(…), `…`)
    glob: bool = False  # unquoted * ? [ in it
    substituted: tuple[str, ...] = ()  # programs run by $(…), `…`, <(…) inside the word
    process: bool = False  # holds a process substitution <(…) / >(…)


@dataclass(frozen=True)
class Redirect:
    """``op`` (``>``, ``>>``, ``<``, ``&>``, ``<<``, ``<<<``, …) and its target word."""

    op: str
    target: Word
    fd: str = ""


@dataclass
class SimpleCommand:
    """A command name and its arguments, as the shell will run it."""

    words: list[Word]  # argv; empty for a bare redirection or assignment
    assignments: dict[str, str | None] = field(default_factory=dict)  # NAME=value before it
    redirects: list[Redirect] = field(default_factory=list)
    stdin: str = ""  # "", "pipe", "file", "heredoc", "herestring"
    fed: str | None = None  # the literal text on its stdin (heredoc, here-string, echo |), if known
    upstream: frozenset[str] = frozenset()  # words (basenames) of the earlier pipeline stages
    cwd: str | None = None  # its working directory, when known
    function: str = ""  # the function whose body holds it
    piped_out: bool = False
    background: bool = False


@dataclass
class Script:
    """What `parse` found."""

    commands: list[SimpleCommand]
    unsure: bool  # a syntax error (an ERROR or MISSING node): the tree may not be what runs
    functions: dict[str, list[SimpleCommand]]


@dataclass
class _State:
    """Variables and working directory as the walk reaches a command."""

    vars: dict[str, str | None]
    cwd: str | None

    def copy(self) -> _State:
        return _State(dict(self.vars), self.cwd)


@dataclass
class _Context:
    state: _State  # shared along a sequence; copied for a subshell
    home: str
    certain: bool = True  # this statement surely runs, in order (assignments and cd count)
    function: str = ""
    stdin: str = ""
    fed: str | None = None
    upstream: frozenset[str] = frozenset()
    piped_out: bool = False
    background: bool = False

    def derive(self, **changes: Any) -> _Context:
        return dataclasses.replace(self, **changes)

    def subshell(self, **changes: Any) -> _Context:
        """A context whose assignments and cd do not reach the caller's."""
        return dataclasses.replace(self, state=self.state.copy(), **changes)


def parse(
    text: str, home: str, cwd: str | None = None, env: dict[str, str] | None = None
) -> Script:
    """Every simple command of ``text``; ``home`` and ``env`` give ``~`` and known variables."""
    parser = getattr(_LOCAL, "parser", None)
    if parser is None:
        parser = _LOCAL.parser = Parser(_LANGUAGE)
    tree = parser.parse(text.encode("utf-8", "surrogatepass"))
    known: dict[str, str | None] = {"HOME": home, **(env or {})}
    if cwd:
        known["PWD"] = cwd
    walker = _Walker(text.encode("utf-8", "surrogatepass"))
    walker.walk(tree.root_node, _Context(_State(known, cwd), home))
    return Script(walker.commands, tree.root_node.has_error, walker.functions)


def canonical_path(value: str, home: str, cwd: str | None) -> str | None:
    """``value`` as an absolute, normalised path (``~``, ``//``, ``/./``, ``/../``, trailing
    ``/`` resolved lexically); None for a relative path when the working directory is unknown."""
    if value == "~" or value.startswith("~/"):
        value = home + value[1:]
    if not value.startswith("/"):
        if cwd is None:
            return None
        value = cwd + "/" + value
    value = posixpath.normpath(re.sub(r"/+", "/", value))
    return "/" if value.startswith("//") else value


def brace_expand(text: str) -> list[str]:
    """Bash brace expansion of ``text`` (``a{b,c}`` → ``ab``, ``ac``; ``{1..3}``)."""
    return _expand_marked(text.replace("{", _OPEN).replace("}", _CLOSE).replace(",", _COMMA))


# --- the walk --------------------------------------------------------------------------------

_STATEMENTS = frozenset(
    {
        "command",
        "pipeline",
        "list",
        "subshell",
        "compound_statement",
        "redirected_statement",
        "if_statement",
        "while_statement",
        "for_statement",
        "c_style_for_statement",
        "case_statement",
        "function_definition",
        "negated_command",
        "variable_assignment",
        "variable_assignments",
        "declaration_command",
        "unset_command",
        "test_command",
    }
)
_CONDITIONAL = frozenset(
    {
        "if_statement",
        "while_statement",
        "for_statement",
        "c_style_for_statement",
        "case_statement",
        "subshell",
        "function_definition",
    }
)
_SUBSTITUTIONS = frozenset({"command_substitution", "process_substitution"})


class _Walker:
    def __init__(self, source: bytes) -> None:
        self.source = source
        self.commands: list[SimpleCommand] = []
        self.functions: dict[str, list[SimpleCommand]] = {}

    def text(self, node: Node) -> str:
        return self.source[node.start_byte : node.end_byte].decode("utf-8", "replace")

    # statements

    def walk(self, node: Node, ctx: _Context) -> list[SimpleCommand]:
        kind = node.type
        before = len(self.commands)
        if kind == "command":
            self.command(node, ctx, [])
        elif kind == "redirected_statement":
            self.redirected(node, ctx)
        elif kind == "pipeline":
            self.pipeline(node, ctx)
        elif kind == "list":
            self.and_or(node, ctx)
        elif kind in ("variable_assignment", "variable_assignments", "declaration_command"):
            self.assignments(node, ctx)
        elif kind == "function_definition":
            name_node = node.child_by_field_name("name")
            name = self.text(name_node) if name_node is not None else ""
            self.children(node, ctx.subshell(certain=False, function=name))
            self.functions.setdefault(name, []).extend(self.commands[before:])
        elif kind == "subshell":
            self.children(node, ctx.subshell())
        elif kind in _SUBSTITUTIONS:
            self.children(
                node,
                ctx.subshell(
                    stdin="", fed=None, upstream=frozenset(), piped_out=True, background=False
                ),
            )
        elif kind in _CONDITIONAL:
            self.children(node, ctx.derive(certain=False))
        else:
            self.children(node, ctx)
        return self.commands[before:]

    def children(self, node: Node, ctx: _Context) -> None:
        kids = node.children
        for i, child in enumerate(kids):
            if not child.is_named:
                continue
            if child.type == "variable_name" and node.type == "for_statement":
                ctx.state.vars[self.text(child)] = None  # the loop variable changes each time
                continue
            background = i + 1 < len(kids) and kids[i + 1].type == "&"
            self.walk(child, ctx.derive(background=True) if background else ctx)

    def and_or(self, node: Node, ctx: _Context) -> None:
        # `a && b`: b runs only once a succeeded, so what a did (cd, X=…) holds for b; after
        # `||` it may or may not have
        certain = ctx.certain
        for child in node.children:
            if not child.is_named:
                if child.type == "||":
                    certain = False
                continue
            self.walk(child, ctx if certain == ctx.certain else ctx.derive(certain=certain))

    def pipeline(self, node: Node, ctx: _Context) -> None:
        upstream = ctx.upstream
        piped = False
        fed: str | None = ctx.fed
        stages = [c for c in node.children if c.is_named]
        for child in node.children:
            if not child.is_named:
                if child.type in ("|", "|&"):
                    piped = True
                continue
            # every stage runs in a subshell: its assignments and cd do not last
            found = self.walk(
                child,
                ctx.subshell(
                    stdin="pipe" if piped else ctx.stdin,
                    fed=fed if piped or ctx.stdin else None,
                    upstream=upstream,
                    piped_out=child is not stages[-1] or ctx.piped_out,
                ),
            )
            upstream = upstream | _names(found)
            fed = _output_of(found[-1]) if len(found) == 1 else None

    def redirected(self, node: Node, ctx: _Context) -> None:
        body = node.child_by_field_name("body")
        redirects: list[Redirect] = []
        stdin, fed = ctx.stdin, ctx.fed
        later: list[tuple[str, Node]] = []  # statements written after a heredoc's start line
        for child in node.children:
            if child is body or not child.is_named:
                continue
            if child.type == "heredoc_redirect":
                redirect, tail = self.heredoc(child, ctx)
                redirects.append(redirect)
                stdin, fed = "heredoc", redirect.target.value
                later.extend(tail)
            elif child.type == "herestring_redirect":
                redirects.append(self.herestring(child, ctx))
                stdin, fed = "herestring", redirects[-1].target.value
            elif child.type == "file_redirect":
                redirect = self.file_redirect(child, ctx)
                redirects.append(redirect)
                if redirect.op in ("<", "<&", "<>") and redirect.fd in ("", "0"):
                    stdin, fed = "file", None
        inner = ctx.derive(stdin=stdin, fed=fed)
        found: list[SimpleCommand] = []
        if body is not None and body.type == "command":
            found = [self.command(body, inner, redirects)]
        elif body is not None:
            found = self.walk(body, inner)
            if redirects:
                self.commands.append(
                    SimpleCommand([], redirects=redirects, cwd=ctx.state.cwd, function=ctx.function)
                )
        producer = _output_of(found[-1]) if len(found) == 1 else None
        for op, statement in later:
            if op in ("|", "|&"):
                self.walk(
                    statement,
                    ctx.subshell(stdin="pipe", fed=producer, upstream=ctx.upstream | _names(found)),
                )
            else:
                self.walk(statement, ctx.derive(certain=False) if op == "||" else ctx)

    def heredoc(self, node: Node, ctx: _Context) -> tuple[Redirect, list[tuple[str, Node]]]:
        body = ""
        op = "<<"
        tail: list[tuple[str, Node]] = []
        last_op = ";"
        for child in node.children:
            if child.type in ("<<", "<<-"):
                op = child.type
            elif child.type == "heredoc_body":
                body = self.text(child)
                self.substitutions(child, ctx)
            elif child.type == "pipeline" and child.children and child.children[0].type == "|":
                # `cat <<EOF | sh`: the grammar puts "| sh" inside the heredoc
                rest = [c for c in child.children[1:] if c.is_named]
                tail.append(("|", rest[0] if len(rest) == 1 else child))
            elif not child.is_named:
                if child.type in ("|", "|&", "&&", "||", ";", "&"):
                    last_op = child.type
            elif child.type in _STATEMENTS:
                tail.append((last_op, child))
        return Redirect(op, Word(body, body)), tail

    def herestring(self, node: Node, ctx: _Context) -> Redirect:
        target = next((c for c in node.children if c.is_named), None)
        if target is None:
            return Redirect("<<<", Word("", ""))
        self.substitutions(target, ctx)
        return Redirect("<<<", self.word(target, ctx))

    def file_redirect(self, node: Node, ctx: _Context) -> Redirect:
        fd, op, target = "", "", Word("", "")
        for child in node.children:
            if child.type == "file_descriptor":
                fd = self.text(child)
            elif not child.is_named:
                op = child.type
            else:
                if not target.text:  # the grammar may hang a following `0` on as well
                    target = self.word(child, ctx)
                self.substitutions(child, ctx)
        return Redirect(op, target, fd)

    def command(self, node: Node, ctx: _Context, redirects: list[Redirect]) -> SimpleCommand:
        words: list[Word] = []
        assignments: dict[str, str | None] = {}
        own = list(redirects)
        stdin, fed = ctx.stdin, ctx.fed
        for child in node.children:
            if not child.is_named:
                continue
            kind = child.type
            if kind == "variable_assignment":
                name, value = self.assignment(child, ctx)
                assignments[name] = value
            elif kind == "file_redirect":
                own.append(self.file_redirect(child, ctx))
                if own[-1].op in ("<", "<&", "<>") and own[-1].fd in ("", "0"):
                    stdin, fed = "file", None
            elif kind == "herestring_redirect":
                own.append(self.herestring(child, ctx))
                stdin, fed = "herestring", own[-1].target.value
            elif kind == "command_name":
                inner = child.children[0] if child.children else child
                words.extend(self.words(inner, ctx))
            else:
                words.extend(self.words(child, ctx))
            if kind not in ("file_redirect", "herestring_redirect"):
                self.substitutions(child, ctx)
        cmd = SimpleCommand(
            words[:MAX_WORDS],
            assignments,
            own,
            stdin,
            fed,
            ctx.upstream,
            ctx.state.cwd,
            ctx.function,
            ctx.piped_out,
            ctx.background,
        )
        self.commands.append(cmd)
        self.follow_cd(cmd, ctx)
        return cmd

    def follow_cd(self, cmd: SimpleCommand, ctx: _Context) -> None:
        if not cmd.words or cmd.words[0].value not in ("cd", "pushd", "popd"):
            return
        target: str | None = None
        args = [w for w in cmd.words[1:] if not (w.value or "").startswith("-")]
        if cmd.words[0].value != "popd":
            if not args:
                target = ctx.home
            elif args[0].value is not None and not args[0].glob:
                target = canonical_path(args[0].value, ctx.home, ctx.state.cwd)
        ctx.state.cwd = target if ctx.certain else None
        ctx.state.vars["PWD"] = ctx.state.cwd

    def assignments(self, node: Node, ctx: _Context) -> None:
        for child in [node] if node.type == "variable_assignment" else node.children:
            if child.type == "variable_assignment":
                name, value = self.assignment(child, ctx)
                ctx.state.vars[name] = value if ctx.certain else None
                self.substitutions(child, ctx)
            elif child.is_named and child.type != "variable_name":  # `export X`: unchanged
                self.walk(child, ctx)

    def assignment(self, node: Node, ctx: _Context) -> tuple[str, str | None]:
        name_node = node.child_by_field_name("name")
        value_node = node.child_by_field_name("value")
        name = self.text(name_node) if name_node is not None else ""
        if value_node is None:
            return name, ""
        if value_node.type == "array":
            return name, None
        return name, self.word(value_node, ctx).value

    def substitutions(self, node: Node, ctx: _Context) -> None:
        """Walk the commands inside $(…), `…`, <(…) anywhere under ``node``."""
        for sub in _find(node, _SUBSTITUTIONS, itself=True):
            self.walk(sub, ctx)

    # words

    def words(self, node: Node, ctx: _Context) -> list[Word]:
        """The word(s) ``node`` stands for: one, or several after brace expansion."""
        segments = self.segments(node, ctx, first=True)
        word = self._join(node, segments, ctx)
        bare = "".join(s for s, q in segments if not q and s is not None)
        if word.value is None or not _has_brace(bare):
            return [word]
        marked = "".join(
            (s or "")
            if q
            else (s or "").replace("{", _OPEN).replace("}", _CLOSE).replace(",", _COMMA)
            for s, q in segments
        )
        expanded = _expand_marked(marked)
        if len(expanded) == 1 and expanded[0] == word.value:
            return [word]
        return [Word(word.text, v, word.glob, word.substituted) for v in expanded[:MAX_WORDS]]

    def word(self, node: Node, ctx: _Context) -> Word:
        return self._join(node, self.segments(node, ctx, first=True), ctx)

    def _join(self, node: Node, segments: list[tuple[str | None, bool]], ctx: _Context) -> Word:
        value: str | None = None
        if all(s is not None for s, _ in segments):
            value = "".join(s for s, _ in segments if s is not None)
        glob = any(not q and s is not None and re.search(r"[*?[]", s) for s, q in segments)
        subs = list(_find(node, _SUBSTITUTIONS, itself=True))
        names = tuple(
            _basename(self.text(n.children[0]))
            for sub in subs
            for n in _find(sub, frozenset({"command_name"}))
            if n.children
        )
        process = any(s.type == "process_substitution" for s in subs)
        return Word(self.text(node), value, bool(glob), names, process)

    def segments(self, node: Node, ctx: _Context, first: bool) -> list[tuple[str | None, bool]]:
        """(text, quoted) pieces of a word; text None for a part built at run time."""
        kind = node.type
        text = self.text(node)
        if kind == "word":
            if first and (text == "~" or text.startswith("~/")):
                return [(ctx.home, True), *_unescape_word(text[1:])]
            if first and re.match(r"~root(?:/|$)", text):
                return [("/root", True), *_unescape_word(text[5:])]
            if first and text.startswith("~"):
                return [(None, False)]
            return _unescape_word(text)
        if kind in ("number", "brace_expression"):
            return [(text, False)]
        if kind == "raw_string":
            return [(text[1:-1], True)]
        if kind == "ansi_c_string":
            return [(_ansi_c(text[2:-1]), True)]
        if kind in ("string", "translated_string"):
            return [(self.string_value(node, ctx), True)]
        if kind == "concatenation":
            out: list[tuple[str | None, bool]] = []
            for i, child in enumerate(c for c in node.children if c.is_named):
                out.extend(self.segments(child, ctx, first and i == 0))
            return out
        if kind == "simple_expansion":
            return [(self.lookup(node, ctx), True)]
        if kind == "expansion":
            named = [c for c in node.children if c.is_named]
            plain = [c.type for c in node.children] == ["${", "variable_name", "}"]
            return [(self.lookup(named[0], ctx) if plain else None, True)]
        if kind in ("heredoc_body", "string_content"):
            return [(text, True)]
        return [(None, False)]  # $(…), `…`, $((…)), arrays, anything unusual

    def string_value(self, node: Node, ctx: _Context) -> str | None:
        """A double-quoted string: literal text between its parts, expansions looked up."""
        parts: list[str] = []
        pos = node.start_byte + (2 if node.type == "translated_string" else 1)
        end = node.end_byte - 1
        for child in node.children:
            if not child.is_named:
                continue
            if child.start_byte > pos:
                parts.append(_unescape_dquoted(self.source[pos : child.start_byte].decode()))
            if child.type == "string_content":
                parts.append(_unescape_dquoted(self.text(child)))
            else:
                value = self.segments(child, ctx, first=False)
                if any(v is None for v, _ in value):
                    return None
                parts.extend(v for v, _ in value if v is not None)
            pos = child.end_byte
        if end > pos:
            parts.append(_unescape_dquoted(self.source[pos:end].decode("utf-8", "replace")))
        return "".join(parts)

    def lookup(self, node: Node, ctx: _Context) -> str | None:
        name = self.text(node).lstrip("$")
        return ctx.state.vars.get(name) if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) else None


def _find(node: Node, kinds: frozenset[str], itself: bool = False) -> Iterator[Node]:
    """Nodes of ``kinds`` under ``node`` (not under one another); ``node`` too if ``itself``."""
    if itself and node.type in kinds:
        yield node
        return
    for child in node.children:
        if child.type in kinds:
            yield child
        else:
            yield from _find(child, kinds)


def _output_of(cmd: SimpleCommand) -> str | None:
    """What ``cmd`` writes to stdout when that is plain: echo/printf of literals, cat of its
    heredoc or here-string (so ``echo 'rm -rf /' | sh`` is read as code)."""
    if not cmd.words or any(w.value is None for w in cmd.words):
        return None
    name = _basename(cmd.words[0].value or "")
    args = [w.value or "" for w in cmd.words[1:]]
    if name == "echo":
        while args and re.fullmatch(r"-[neE]+", args[0]):
            args = args[1:]
        return " ".join(args).replace("\\n", "\n")
    if name == "printf" and args:
        return " ".join(args).replace("\\n", "\n")
    if name == "cat" and not args:
        return cmd.fed
    return None


def _names(found: list[SimpleCommand]) -> frozenset[str]:
    # every literal word, not just the command's: `busybox wget … | sh`, `sudo curl … | sh`
    return frozenset(_basename(w.value) for c in found for w in c.words if w.value)


def _basename(value: str) -> str:
    return value.rstrip("/").rsplit("/", 1)[-1] if value not in ("", "/") else value


def _unescape_word(text: str) -> list[tuple[str | None, bool]]:
    """An unquoted word: ``\\x`` is a quoted x, ``\\<newline>`` vanishes."""
    out: list[tuple[str | None, bool]] = []
    plain: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            if plain:
                out.append(("".join(plain), False))
                plain = []
            if text[i + 1] != "\n":
                out.append((text[i + 1], True))
            i += 2
            continue
        plain.append(ch)
        i += 1
    if plain:
        out.append(("".join(plain), False))
    return out or [("", False)]


def _unescape_dquoted(text: str) -> str:
    return re.sub(r"\\([$`\"\\\n])", lambda m: "" if m.group(1) == "\n" else m.group(1), text)


_ANSI = {"a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n", "r": "\r"}
_ANSI.update({"t": "\t", "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?"})


def _ansi_c(body: str) -> str:
    def one(m: re.Match[str]) -> str:
        esc = m.group(1)
        if esc[0] in "xuU":
            return chr(int(esc[1:], 16)) if len(esc) > 1 else m.group(0)
        if esc[0].isdigit():
            return chr(int(esc, 8) & 0xFF)
        if esc[0] == "c" and len(esc) == 2:
            return chr(ord(esc[1]) & 0x1F)
        return _ANSI.get(esc, m.group(0))

    pattern = r"\\(x[0-9A-Fa-f]{1,2}|u[0-9A-Fa-f]{1,4}|U[0-9A-Fa-f]{1,8}|[0-7]{1,3}|c.|.)"
    return re.sub(pattern, one, body, flags=re.DOTALL)


# Brace expansion works on text whose unquoted braces and commas are marked (quoted ones are
# plain characters), so "a{b,c}" expands and "'{a,b}'" does not.
_OPEN, _CLOSE, _COMMA = "\ue000", "\ue001", "\ue002"


def _has_brace(text: str | None) -> bool:
    return text is not None and "{" in text and "}" in text


def _expand_marked(text: str, budget: int = MAX_WORDS) -> list[str]:
    if text.count(_OPEN) > MAX_BRACES:  # each group is a level of recursion: leave it as text
        return [_plain(text)]
    start = text.find(_OPEN)
    while start >= 0:
        depth, commas, end = 0, [], -1
        for i in range(start, len(text)):
            if text[i] == _OPEN:
                depth += 1
            elif text[i] == _CLOSE:
                depth -= 1
                if depth == 0:
                    end = i
                    break
            elif text[i] == _COMMA and depth == 1:
                commas.append(i)
        if end < 0:
            break
        inner = text[start + 1 : end]
        options: list[str] | None = None
        if commas:
            cuts = [start, *commas, end]
            options = [text[a + 1 : b] for a, b in itertools.pairwise(cuts)]
        else:
            options = _sequence(_plain(inner))
        if options is None:
            start = text.find(_OPEN, start + 1)
            continue
        head, tail = text[:start], text[end + 1 :]
        out: list[str] = []
        for option in options:
            for rest in _expand_marked(option + tail, budget):
                out.append(head + rest)
                if len(out) >= budget:
                    return [_plain(o) for o in out]
        return [_plain(o) for o in out]
    return [_plain(text)]


def _plain(text: str) -> str:
    return text.replace(_OPEN, "{").replace(_CLOSE, "}").replace(_COMMA, ",")


def _sequence(inner: str) -> list[str] | None:
    m = re.fullmatch(r"(-?\d+)\.\.(-?\d+)(?:\.\.(-?\d+))?|([A-Za-z])\.\.([A-Za-z])", inner)
    if m is None:
        return None
    if m.group(4):
        a, b = ord(m.group(4)), ord(m.group(5))
        step = 1 if b >= a else -1
        return [chr(c) for c in range(a, b + step, step)][:MAX_WORDS]
    a, b = int(m.group(1)), int(m.group(2))
    step = abs(int(m.group(3) or 1)) or 1
    step = step if b >= a else -step
    return [str(n) for n in range(a, b + (1 if step > 0 else -1), step)][:MAX_WORDS]


def values(words: Iterable[Word]) -> list[str | None]:
    """The values of ``words`` (None where built at run time)."""
    return [w.value for w in words]

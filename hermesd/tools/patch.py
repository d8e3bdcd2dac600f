"""The ``patch`` tool: targeted edits to text files, by find-and-replace or a multi-file patch.

Two modes, as the reference has them. ``replace`` finds ``old_string`` in one file (exactly, or
forgiving indentation and whitespace: `hermesd.tools.patch_match`) and puts ``new_string`` in
its place; more than one match is refused unless ``replace_all``. ``patch`` applies a
multi-file patch (`hermesd.tools.patch_format`): Add, Update, Delete and Move operations, every
one checked against the files in memory first, so a hunk that does not match leaves every file
as it was. The result is the reference's: ``success``, a unified ``diff`` (stdlib ``difflib``),
``files_modified`` / ``files_created`` / ``files_deleted``, or ``error``.

Every file it touches goes through ``write_file``'s policy (`hermesd.tools.file_access`
``plan_write``): the registry runs `PatchTool.prepare` before anything is touched, which
refuses protected targets and asks a person about the rest of the sensitive ones (outside the
workspace, run-on-entry files), and the handler then writes exactly the targets decided on.
Files are read through the read policy (secrets refused). Binary and non-UTF-8 files are
refused rather than rewritten; CRLF line endings and a UTF-8 BOM are kept.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermesd.tools import file_access
from hermesd.tools.arguments import BadArgs, str_arg
from hermesd.tools.consent import Consent
from hermesd.tools.file_access import PathGuard, WritePlan
from hermesd.tools.patch_format import FileOp, Hunk, PatchFormatError, parse_patch
from hermesd.tools.patch_match import Match, MatchError, find_spans, replace, replace_spans

__all__ = ["PATCH_SCHEMA", "PatchTool"]

ARG_MAX_CHARS = 5 * 1024 * 1024
FILE_MAX_BYTES = 20 * 1024 * 1024
_BOM = "\ufeff"

PATCH_SCHEMA: dict[str, Any] = {
    "name": "patch",
    "description": (
        "Targeted edits to text files instead of rewriting them. mode 'replace' (default): "
        "replace old_string with new_string in the file at path; old_string must match once "
        "(unless replace_all) and may differ from the file in indentation and whitespace. "
        "mode 'patch': apply a multi-file patch ('*** Begin Patch', '*** Update File: p', "
        "'@@ hint', ' context', '-removed', '+added', '*** Add File: p', '*** Delete File: p', "
        "'*** End Patch'). It returns 'success', a unified 'diff', 'files_modified', "
        "'files_created', 'files_deleted', or 'error' (then no file was changed)."
    ),
    "parameters": {
        "type": "object",
        "required": ["mode"],
        "properties": {
            "mode": {
                "type": "string",
                "enum": ["replace", "patch"],
                "default": "replace",
                "description": "'replace': path, old_string, new_string; 'patch': patch",
            },
            "path": {
                "type": "string",
                "description": "With mode 'replace': the file to edit",
            },
            "old_string": {
                "type": "string",
                "description": "With mode 'replace': the text to find, with enough context "
                "to be unique",
            },
            "new_string": {
                "type": "string",
                "description": "With mode 'replace': the replacement ('' deletes the text)",
            },
            "replace_all": {
                "type": "boolean",
                "default": False,
                "description": "Replace every match instead of requiring exactly one",
            },
            "patch": {
                "type": "string",
                "description": "With mode 'patch': the patch text, '*** Begin Patch' to "
                "'*** End Patch'",
            },
        },
    },
}


@dataclass(frozen=True)
class PatchPlan:
    """The write plans of one call, by the path as the call wrote it."""

    plans: dict[str, WritePlan]


@dataclass
class _Text:
    """A file's text as edited: LF line endings inside, its own ending and BOM on the way out."""

    text: str
    crlf: bool = False
    bom: bool = False

    def encode(self) -> bytes:
        """The bytes to write back, with the file's line endings and BOM."""
        text = self.text.replace("\n", "\r\n") if self.crlf else self.text
        return ((_BOM if self.bom else "") + text).encode()


def _decode(path: Path, data: bytes) -> _Text:
    if b"\x00" in data[:8192]:
        raise BadArgs(f"{path} looks like a binary file; patch edits text files only")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise BadArgs(f"{path} is not UTF-8 text; patch edits text files only") from None
    bom = text.startswith(_BOM)
    text = text.removeprefix(_BOM)
    crlf = "\r\n" in text
    return _Text(text.replace("\r\n", "\n") if crlf else text, crlf, bom)


def _text_arg(args: dict[str, Any], key: str) -> str:
    value = args.get(key)
    if not isinstance(value, str):
        raise BadArgs(f"'{key}' is required and must be a string")
    if len(value) > ARG_MAX_CHARS:
        raise BadArgs(f"'{key}' is longer than {ARG_MAX_CHARS} characters")
    return value.replace("\r\n", "\n")


def _mode(args: dict[str, Any]) -> str:
    mode = str_arg(args, "mode", default="replace") or "replace"
    if mode not in ("replace", "patch"):
        raise BadArgs("'mode' must be 'replace' or 'patch'")
    return mode


def _targets(args: dict[str, Any]) -> tuple[list[str], list[FileOp]]:
    """The paths a call writes (as written) and, in patch mode, its operations."""
    if _mode(args) == "replace":
        path = str_arg(args, "path", required=True) or ""
        _text_arg(args, "old_string")
        _text_arg(args, "new_string")
        return [path], []
    try:
        ops = parse_patch(_text_arg(args, "patch"))
    except PatchFormatError as exc:
        raise BadArgs(f"cannot read the patch: {exc}") from None
    paths: list[str] = []
    for op in ops:
        paths += [op.path] + ([op.move_to] if op.move_to else [])
    return list(dict.fromkeys(paths)), ops


def _diff(path: Path, before: str | None, after: str | None) -> str:
    lines = difflib.unified_diff(
        (before or "").splitlines(keepends=True),
        (after or "").splitlines(keepends=True),
        fromfile=f"a/{path}" if before is not None else "/dev/null",
        tofile=f"b/{path}" if after is not None else "/dev/null",
    )
    return "".join(
        line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines
    )


def _failed(message: str) -> str:
    return json.dumps({"success": False, "error": message})


class PatchTool:
    """The handler and its ``prepare`` step, bound to the file tools' guard and workspaces."""

    def __init__(self, guard: PathGuard, workspace: Callable[[str | None], Path]) -> None:
        self.guard = guard
        self.workspace = workspace

    def prepare(self, args: dict[str, Any], session_id: str | None = None) -> Consent:
        """Refuse, ask, or plan every file the call would write (``write_file``'s policy)."""
        try:
            paths, _ = _targets(args)
        except BadArgs as exc:
            return Consent(refuse=str(exc))
        workspace = self.workspace(session_id)
        plans: dict[str, WritePlan] = {}
        asks: list[Consent] = []
        for raw in paths:
            consent = file_access.plan_write(self.guard, raw, workspace)
            if consent.refuse is not None:
                return consent
            plan: WritePlan = consent.plan
            refusal = self.guard.read_refusal(plan.path) if plan.existing else None
            if refusal is not None:  # patch must read what it edits: refuse before asking
                return Consent(refuse=f"Access denied: {raw} is {refusal.reason}")
            plans[raw] = plan
            if consent.ask is not None:
                asks.append(consent)
        if not asks:
            return Consent(plan=PatchPlan(plans))
        ask = "; ".join((c.ask or "").replace("write_file to", "patch", 1) for c in asks)
        return Consent(
            plan=PatchPlan(plans), ask=ask, rule_key=asks[0].rule_key if len(asks) == 1 else None
        )

    def run(
        self,
        args: dict[str, Any],
        session_id: str | None = None,
        plan: PatchPlan | None = None,
        **_: Any,
    ) -> str:
        """Apply the edit to the targets ``plan`` decided on; the reference's result JSON."""
        try:
            if plan is None:  # called without the registry's prepare step: decide here
                consent = self.prepare(args, session_id)
                if consent.refuse is not None:
                    raise BadArgs(consent.refuse)
                if consent.ask is not None:
                    raise BadArgs(f"BLOCKED: {consent.ask} needs a person's approval")
                plan = consent.plan
            assert isinstance(plan, PatchPlan)
            edit = _Edit(self.guard, self.workspace(session_id), plan)
            ops = _targets(args)[1]
            if ops:
                for op in ops:
                    edit.apply(op)
            else:
                edit.replace(
                    str_arg(args, "path", required=True) or "",
                    _text_arg(args, "old_string"),
                    _text_arg(args, "new_string"),
                    bool(args.get("replace_all", False)),
                )
        except (BadArgs, MatchError) as exc:
            return _failed(f"{exc} (no file was changed)")
        return edit.commit()


class _Edit:
    """One call's changes, made in memory first and written only when every one succeeded."""

    def __init__(self, guard: PathGuard, workspace: Path, plan: PatchPlan) -> None:
        self.guard, self.workspace, self.plan = guard, workspace, plan
        self.before: dict[str, _Text | None] = {}  # by raw path, as first read
        self.after: dict[str, _Text | None] = {}  # None: deleted

    def _target(self, raw: str) -> WritePlan:
        return self.plan.plans[raw]

    def _current(self, raw: str) -> _Text | None:
        if raw in self.after:
            return self.after[raw]
        plan = self._target(raw)
        if plan.existing is None:
            self.before[raw] = None
            return None
        path, data = file_access.read_bytes(
            self.guard, str(plan.path), self.workspace, FILE_MAX_BYTES
        )
        text = _decode(path, data)
        self.before[raw] = _Text(text.text, text.crlf, text.bom)
        return text

    def _existing(self, raw: str) -> _Text:
        text = self._current(raw)
        if text is None:
            raise BadArgs(f"{self._target(raw).path}: no such file")
        return text

    def replace(self, raw: str, old: str, new: str, replace_all: bool) -> None:
        """Replace mode on one file."""
        text = self._existing(raw)
        if old == new:
            raise BadArgs("old_string and new_string are the same; nothing to change")
        try:
            edited, _ = replace(text.text, old, new, replace_all)
        except MatchError as exc:
            hint = _closest(text.text, old) if "not found" in str(exc) else ""
            raise MatchError(f"{self._target(raw).path}: {exc}{hint}") from None
        self.after[raw] = _Text(edited, text.crlf, text.bom)

    def apply(self, op: FileOp) -> None:
        """One operation of a multi-file patch, in memory."""
        if op.kind == "add":
            if self._current(op.path) is not None:
                raise BadArgs(f"cannot add {self._target(op.path).path}: it already exists")
            self.after[op.path] = _Text("".join(line + "\n" for line in op.added))
            return
        text = self._existing(op.path)
        if op.kind == "delete":
            self.after[op.path] = None
            return
        edited = text.text
        for number, hunk in enumerate(op.hunks, 1):
            try:
                edited = _apply_hunk(edited, hunk)
            except MatchError as exc:
                where = self._target(op.path).path
                raise MatchError(f"{where}: hunk {number}: {exc}") from None
        result = _Text(edited, text.crlf, text.bom)
        if op.move_to is None:
            self.after[op.path] = result
            return
        if self._current(op.move_to) is not None:
            raise BadArgs(f"cannot move to {self._target(op.move_to).path}: it already exists")
        self.after[op.move_to] = result
        self.after[op.path] = None

    def commit(self) -> str:
        """Write every change; the result JSON."""
        out: dict[str, list[str]] = {"files_modified": [], "files_created": [], "files_deleted": []}
        diffs = []
        for raw, text in self.after.items():
            plan, before = self._target(raw), self.before.get(raw)
            try:
                if text is None:
                    file_access.remove(plan)
                    out["files_deleted"].append(str(plan.path))
                else:
                    file_access.write(self.guard, plan, text.encode(), False)
                    key = "files_created" if before is None else "files_modified"
                    out[key].append(str(plan.path))
            except BadArgs as exc:
                done = [name for names in out.values() for name in names]
                return _failed(f"{exc}; files already changed: {done or 'none'}")
            diffs.append(
                _diff(
                    self._shown(plan.path),
                    before.text if before else None,
                    text.text if text else None,
                )
            )
        result: dict[str, Any] = {"success": True, "diff": "".join(diffs)}
        result.update({k: v for k, v in out.items() if v})
        return json.dumps(result)

    def _shown(self, path: Path) -> Path:
        return path.relative_to(self.workspace) if path.is_relative_to(self.workspace) else path


def _closest(content: str, old: str) -> str:
    """A pointer to the file's line most like the snippet's first line, for the model's retry
    (in ``read_file``'s ``N|text`` form); empty when nothing is close or the file is huge."""
    first = next((line.strip() for line in old.split("\n") if line.strip()), "")
    lines = content.split("\n")
    if not first or len(lines) > 20_000:
        return ""
    stripped = [line.strip() for line in lines]
    close = difflib.get_close_matches(first, stripped, n=1, cutoff=0.6)
    if not close:
        return ""
    number = stripped.index(close[0]) + 1
    return f"; the closest line is {number}|{lines[number - 1][:200]}"


def _apply_hunk(content: str, hunk: Hunk) -> str:
    """``content`` with one hunk applied: its old lines (context and removed) found once."""
    new = "\n".join(hunk.new)
    if not [line for line in hunk.old if line.strip()]:  # only additions: at the end
        sep = "" if not content or content.endswith("\n") else "\n"
        return content + sep + new + "\n"
    old = "\n".join(hunk.old)
    match = find_spans(content, old, whole_lines=True)
    if len(match.spans) > 1:
        at = content.find(hunk.hint) if hunk.hint else -1
        after = [span for span in match.spans if at != -1 and span[0] >= at]
        if not after:
            raise MatchError(
                f"its lines match {len(match.spans)} places; add context lines or an "
                "'@@ line before it' hint to pick one"
            )
        match = Match(after[:1], match.strategy)
    return replace_spans(content, match, old, new)

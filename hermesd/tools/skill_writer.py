"""Validated writes to the user's skills: what the ``skill_manage`` tool does on disk.

A `SkillRequest` is one checked call (`check_request`): the action, a valid name, a SKILL.md
whose front matter parses, sizes within bounds, a ``file_path`` confined to the skill's
``references/``, ``templates/``, ``scripts/`` or ``assets/``. `SkillWriter.apply` performs it
under ``$HERMES_HOME/skills`` in the layout `hermesd.tools.skill_catalog` reads, writing each
file atomically and refusing any path that resolves (symlinks included) outside the skill's
folder. Plugin skills are read-only: no action touches them, and a new skill may not take the
bare name of one. Errors are `SkillWriteError`, whose text is what the model reads; a refused
call changes nothing. This module does not ask anyone or send events (`skill_manage` does).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from hermesd.runtime.plain_yaml import PlainYamlError, load_plain
from hermesd.tools.patch_match import MatchError, replace
from hermesd.tools.skill_catalog import SKILL_FILE, Skill, SkillCatalog

ACTIONS = ("create", "patch", "edit", "delete", "write_file", "remove_file")
SUBDIRS = ("references", "templates", "scripts", "assets")
#: files a person is asked about before they are written: they may be run, not only read
SCRIPT_DIRS = ("scripts", "templates", "assets")
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
MAX_NAME = 64
MAX_DESCRIPTION = 1024
MAX_SKILL_CHARS = 100_000  # one SKILL.md; longer material belongs in references/
MAX_FILE_BYTES = 1024 * 1024  # one supporting file
MAX_PATH = 255
_CLOSE_RE = re.compile(r"\r?\n---[ \t]*(?:\r?\n|\Z)")


class SkillWriteError(ValueError):
    """A call ``skill_manage`` refuses; the text is what the model reads."""


@dataclass(frozen=True)
class SkillRequest:
    """One checked ``skill_manage`` call."""

    action: str
    name: str
    content: str | None = None
    category: str | None = None
    file_path: str | None = None  # relative to the skill folder
    file_content: str | None = None
    old_string: str | None = None
    new_string: str | None = None
    replace_all: bool = False

    @property
    def script_path(self) -> str | None:
        """The supporting file this call adds or changes that may be run, if any."""
        if self.action not in ("write_file", "patch") or not self.file_path:
            return None
        top = PurePosixPath(self.file_path).parts[0]
        return self.file_path if top in SCRIPT_DIRS else None


def _string(args: dict[str, Any], key: str, *, required: bool = False) -> str | None:
    value = args.get(key)
    if value is None:
        if required:
            raise SkillWriteError(f"{key} is required for '{args.get('action')}'.")
        return None
    if not isinstance(value, str):
        raise SkillWriteError(f"{key} must be a string, not {type(value).__name__}.")
    return value


def check_name(raw: Any, what: str = "Skill name") -> str:
    """A skill or category name as the reference allows it; raises `SkillWriteError`."""
    if not isinstance(raw, str) or not raw.strip():
        raise SkillWriteError(f"{what} is required (a string).")
    name: str = raw.strip()
    if len(name) > MAX_NAME:
        raise SkillWriteError(f"{what} exceeds {MAX_NAME} characters.")
    if not NAME_RE.match(name):
        raise SkillWriteError(
            f"Invalid {what.lower()} '{name[:80]}': use lowercase letters, digits, '-', '_' and "
            "'.', starting with a letter or digit (one directory name, no '/' or '..')."
        )
    return name


def check_skill_md(content: str) -> None:
    """A SKILL.md must open with YAML front matter naming it and describing it, then a body."""
    if len(content) > MAX_SKILL_CHARS:
        raise SkillWriteError(
            f"SKILL.md is {len(content):,} characters (limit {MAX_SKILL_CHARS:,}); move detail "
            "into references/ files with write_file."
        )
    text = content.lstrip("\ufeff")
    if not text.strip():
        raise SkillWriteError("SKILL.md content cannot be empty.")
    if not text.startswith("---"):
        raise SkillWriteError("SKILL.md must start with YAML front matter ('---' line).")
    close = _CLOSE_RE.search(text, 3)
    if close is None:
        raise SkillWriteError("The front matter is not closed: add a '---' line after it.")
    try:
        front = load_plain(text[3 : close.start()])
    except PlainYamlError as exc:
        raise SkillWriteError(f"The front matter is not valid YAML: {exc}") from None
    if not isinstance(front, dict):
        raise SkillWriteError("The front matter must be a YAML mapping (key: value lines).")
    for key in ("name", "description"):
        if not str(front.get(key) or "").strip():
            raise SkillWriteError(f"The front matter must include '{key}'.")
    if len(str(front["description"])) > MAX_DESCRIPTION:
        raise SkillWriteError(f"The description exceeds {MAX_DESCRIPTION} characters.")
    if not text[close.end() :].strip():
        raise SkillWriteError("SKILL.md needs instructions after the front matter.")


def check_file_path(raw: str, *, allow_skill_md: bool) -> str:
    """A supporting file's path inside the skill folder, normalized; raises `SkillWriteError`."""
    if not raw or "\0" in raw or "\\" in raw or len(raw) > MAX_PATH:
        raise SkillWriteError("file_path must be a relative path like 'references/notes.md'.")
    path = PurePosixPath(raw)
    if path.is_absolute() or ".." in path.parts:
        raise SkillWriteError("file_path may not be absolute or contain '..'.")
    if allow_skill_md and path.parts == (SKILL_FILE,):
        return SKILL_FILE
    if len(path.parts) < 2 or path.parts[0] not in SUBDIRS:
        raise SkillWriteError(
            f"file_path must be a file under one of {', '.join(SUBDIRS)}/ (got '{raw[:200]}')."
        )
    return path.as_posix()


def check_request(args: dict[str, Any]) -> SkillRequest:
    """Check one call's arguments (types, names, sizes, layout); raises `SkillWriteError`."""
    action = args.get("action")
    if action not in ACTIONS:
        raise SkillWriteError(f"action must be one of {', '.join(ACTIONS)} (got {action!r:.80}).")
    raw_name = args.get("name")
    if isinstance(raw_name, str) and ":" in raw_name:
        raise SkillWriteError(
            f"'{raw_name[:80]}' is a plugin's skill; plugin skills are read-only. Create your "
            "own skill under another name instead."
        )
    fields: dict[str, Any] = {"action": action, "name": check_name(raw_name)}
    if action in ("create", "edit"):
        content = _string(args, "content", required=True)
        assert content is not None
        check_skill_md(content)
        fields["content"] = content
    if action == "create" and args.get("category") not in (None, ""):
        fields["category"] = check_name(args.get("category"), "Category")
    if action in ("write_file", "remove_file", "patch"):
        raw_path = _string(args, "file_path", required=action != "patch")
        if raw_path:
            fields["file_path"] = check_file_path(raw_path, allow_skill_md=action == "patch")
    if action == "write_file":
        body = _string(args, "file_content", required=True)
        assert body is not None
        size = len(body.encode("utf-8", errors="surrogatepass"))
        if size > MAX_FILE_BYTES:
            raise SkillWriteError(f"file_content is {size:,} bytes (limit {MAX_FILE_BYTES:,}).")
        fields["file_content"] = body
    if action == "patch":
        fields["old_string"] = _string(args, "old_string", required=True)
        fields["new_string"] = _string(args, "new_string", required=True)
        if not fields["old_string"]:
            raise SkillWriteError("old_string may not be empty.")
        for key in ("old_string", "new_string"):
            if len(fields[key]) > MAX_FILE_BYTES:
                raise SkillWriteError(f"{key} exceeds {MAX_FILE_BYTES:,} characters.")
        replace_all = args.get("replace_all", False)
        if not isinstance(replace_all, bool):
            raise SkillWriteError("replace_all must be true or false.")
        fields["replace_all"] = replace_all
    return SkillRequest(**fields)


def _write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder, then rename."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".skill-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as out:
            out.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class SkillWriter:
    """Performs checked `SkillRequest`s on the user skills of a `SkillCatalog`."""

    def __init__(self, catalog: SkillCatalog) -> None:
        self.catalog = catalog
        self._lock = threading.Lock()  # one write at a time: create's "exists?" then mkdir

    def apply(self, request: SkillRequest) -> dict[str, Any]:
        """Perform ``request``; the reference's result dict, or `SkillWriteError`."""
        with self._lock:
            if request.action == "create":
                return self._create(request)
            skill = self._existing(request.name)
            if request.action == "edit":
                assert request.content is not None
                _write_atomic(skill.path, request.content)
                return self._done(f"Skill '{request.name}' updated (full rewrite).", skill)
            if request.action == "patch":
                return self._patch(skill, request)
            if request.action == "delete":
                return self._delete(skill)
            if request.action == "write_file":
                return self._write_file(skill, request)
            return self._remove_file(skill, request)

    def _existing(self, name: str) -> Skill:
        skill = self.catalog.find(name)
        if skill is None or skill.plugin is not None:
            raise SkillWriteError(
                f"Skill '{name}' not found among your skills in {self.catalog.root}/. Use "
                "skills_list to see them, or action='create' to make it."
            )
        folder = skill.folder.resolve()
        if skill.folder.is_symlink() or not folder.is_relative_to(self.catalog.root.resolve()):
            raise SkillWriteError(
                f"Skill '{name}' lives outside {self.catalog.root}/; not changed."
            )
        return skill

    def _done(self, message: str, skill: Skill, **extra: Any) -> dict[str, Any]:
        return {"success": True, "message": message, "path": str(skill.folder), **extra}

    def _create(self, request: SkillRequest) -> dict[str, Any]:
        name = request.name
        existing = self.catalog.find(name)
        if existing is not None:
            raise SkillWriteError(f"A skill named '{name}' already exists at {existing.path}.")
        taken = [s.name for s in self.catalog.plugin_skill_list() if s.bare_name == name]
        if taken:
            raise SkillWriteError(
                f"The name '{name}' is taken by a plugin's skill ({taken[0]}); choose another."
            )
        root = self.catalog.root
        folder = root / request.category / name if request.category else root / name
        if folder.exists() or folder.is_symlink():
            raise SkillWriteError(f"{folder} already exists; choose another name.")
        root.mkdir(parents=True, exist_ok=True)
        folder.parent.mkdir(exist_ok=True)
        if not folder.parent.resolve().is_relative_to(root.resolve()):
            raise SkillWriteError(f"The category folder leaves {root}/; not created.")
        folder.mkdir()
        assert request.content is not None
        _write_atomic(folder / SKILL_FILE, request.content)
        result: dict[str, Any] = {
            "success": True,
            "message": f"Skill '{name}' created.",
            "path": str(folder.relative_to(root)),
            "skill_md": str(folder / SKILL_FILE),
        }
        if request.category:
            result["category"] = request.category
        result["hint"] = (
            "Add reference files, templates or scripts with skill_manage(action='write_file', "
            f"name='{name}', file_path='references/example.md', file_content='...')."
        )
        return result

    def _target(self, skill: Skill, file_path: str) -> Path:
        """``file_path`` inside the skill's folder, resolved; refuses escapes and links."""
        folder = skill.folder.resolve()
        target = folder / file_path
        if target.is_symlink():
            raise SkillWriteError(f"'{file_path}' is a symbolic link; not touched.")
        if not target.resolve().is_relative_to(folder):
            raise SkillWriteError(f"'{file_path}' resolves outside the skill folder.")
        return target

    def _patch(self, skill: Skill, request: SkillRequest) -> dict[str, Any]:
        file_path = request.file_path or SKILL_FILE
        target = self._target(skill, file_path)
        if not target.is_file():
            raise SkillWriteError(f"File not found in skill '{skill.name}': {file_path}")
        try:
            before = target.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise SkillWriteError(f"Cannot read {file_path}: {exc}") from None
        assert request.old_string is not None and request.new_string is not None
        try:
            after, match = replace(
                before, request.old_string, request.new_string, request.replace_all
            )
        except MatchError as exc:
            raise SkillWriteError(f"{exc} (in {file_path} of skill '{skill.name}')") from None
        if file_path == SKILL_FILE:
            try:
                check_skill_md(after)
            except SkillWriteError as exc:
                raise SkillWriteError(f"The patch would break SKILL.md: {exc}") from None
        _write_atomic(target, after)
        count = len(match.spans)
        plural = "s" if count != 1 else ""
        return self._done(
            f"Patched {file_path} in skill '{skill.name}' ({count} replacement{plural}).", skill
        )

    def _delete(self, skill: Skill) -> dict[str, Any]:
        folder = skill.folder
        if folder.resolve() == self.catalog.root.resolve():
            raise SkillWriteError("The skills folder itself cannot be deleted.")
        shutil.rmtree(folder)
        parent = folder.parent
        if parent != self.catalog.root and parent.is_dir() and not any(parent.iterdir()):
            parent.rmdir()  # an emptied category folder goes too
        return {"success": True, "message": f"Skill '{skill.name}' deleted."}

    def _write_file(self, skill: Skill, request: SkillRequest) -> dict[str, Any]:
        assert request.file_path is not None and request.file_content is not None
        target = self._target(skill, request.file_path)
        folder = skill.folder.resolve()
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.parent.resolve().is_relative_to(folder):
            raise SkillWriteError(f"'{request.file_path}' resolves outside the skill folder.")
        _write_atomic(target, request.file_content)
        return {
            "success": True,
            "message": f"File '{request.file_path}' written to skill '{skill.name}'.",
            "path": str(target),
        }

    def _remove_file(self, skill: Skill, request: SkillRequest) -> dict[str, Any]:
        assert request.file_path is not None
        target = self._target(skill, request.file_path)
        if not target.is_file():
            raise SkillWriteError(f"File '{request.file_path}' not found in skill '{skill.name}'.")
        target.unlink()
        parent = target.parent
        if parent != skill.folder.resolve() and not any(parent.iterdir()):
            parent.rmdir()
        return {
            "success": True,
            "message": f"File '{request.file_path}' removed from skill '{skill.name}'.",
        }

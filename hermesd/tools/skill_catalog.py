"""Skills: markdown playbooks the model loads on demand (docs/hermes-compat.md §7).

User skills live in ``$HERMES_HOME/skills/<name>/SKILL.md`` (or one category deeper,
``skills/<category>/<name>/SKILL.md``), with YAML front matter giving ``name`` and
``description``; they are listed in the system prompt's skill index (`index_text`). Plugin skills
are registered by plugins as ``<plugin key>:<name>``; they are read-only and never indexed. A
``file_path`` read is confined to the skill's folder: the path is resolved (symlinks included)
and must stay inside it. The JSON shapes the ``skills_list``/``skill_view`` tools return are built
here; tools/builtin_skills.py only registers them.
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermesd.runtime.plain_yaml import PlainYamlError, load_plain

if TYPE_CHECKING:
    from hermesd.tools.skill_usage import SkillUsage

log = logging.getLogger(__name__)

SKILL_FILE = "SKILL.md"
NAME_RE = re.compile(r"^[a-zA-Z0-9_-]+$")
_FRONT_MATTER_RE = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|\Z)", re.DOTALL)
_LINKED_DIRS = ("references", "templates", "assets", "scripts")
_MAX_LINKED = 50


@dataclass(frozen=True)
class Skill:
    """One skill: qualified name, description, its SKILL.md, and the plugin owning it, if any."""

    name: str
    description: str
    path: Path
    plugin: str | None = None
    category: str | None = None

    @property
    def folder(self) -> Path:
        """The folder ``file_path`` reads are confined to."""
        return self.path.parent

    @property
    def bare_name(self) -> str:
        """The name without the plugin qualifier."""
        return self.name.split(":", 1)[1] if self.plugin else self.name


def read_front_matter(text: str, where: object = SKILL_FILE) -> dict[str, Any]:
    """The YAML front matter of a SKILL.md ({} when absent, unparseable or refused).

    Parsed as plain YAML (no anchors or aliases, at most 64 KiB): a skill may come with a
    plugin, and its front matter is read before anyone asked for the skill.
    """
    match = _FRONT_MATTER_RE.match(text)
    if not match:
        return {}
    try:
        data = load_plain(match.group(1))
    except PlainYamlError as exc:
        log.warning("Ignoring the front matter of %s: %s", where, exc)
        return {}
    return data if isinstance(data, dict) else {}


def _error(message: str, **extra: Any) -> dict[str, Any]:
    return {"success": False, "error": message, **extra}


class SkillCatalog:
    """User skills from ``$HERMES_HOME/skills`` and skills registered by plugins."""

    def __init__(self, home: Path) -> None:
        self.root = Path(home) / "skills"
        #: how skills are used (`hermesd.tools.skill_usage`), when the daemon keeps count
        self.usage: SkillUsage | None = None
        self._lock = threading.Lock()
        self._plugin_skills: dict[str, Skill] = {}

    # -- plugin skills ----------------------------------------------------------------------

    def register_plugin_skill(
        self, plugin_key: str, name: str, path: Path | str, description: str = ""
    ) -> Skill:
        """Add ``<plugin_key>:<name>``; ValueError for a bad name, FileNotFoundError if missing."""
        if ":" in name:
            raise ValueError(
                f"Skill name '{name}' must not contain ':' (the plugin key "
                f"'{plugin_key}' is added automatically)."
            )
        if not NAME_RE.match(name):
            raise ValueError(f"Invalid skill name '{name}'. Must match [a-zA-Z0-9_-]+.")
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"SKILL.md not found at {path}")
        if not description:
            front = read_front_matter(path.read_text(encoding="utf-8", errors="replace"), path)
            description = str(front.get("description") or "")
        skill = Skill(f"{plugin_key}:{name}", description, path, plugin=plugin_key)
        with self._lock:
            self._plugin_skills[skill.name] = skill
        return skill

    def unregister_plugin(self, plugin_key: str) -> list[str]:
        """Remove the skills of ``plugin_key``; their qualified names."""
        with self._lock:
            gone = [n for n, s in self._plugin_skills.items() if s.plugin == plugin_key]
            for name in gone:
                del self._plugin_skills[name]
        return gone

    def plugin_skills(self, plugin_key: str) -> list[Skill]:
        """Skills of one plugin, sorted by bare name."""
        with self._lock:
            skills = [s for s in self._plugin_skills.values() if s.plugin == plugin_key]
        return sorted(skills, key=lambda s: s.bare_name)

    def plugin_skill_list(self) -> list[Skill]:
        """Every plugin's skills, sorted by qualified name."""
        with self._lock:
            return sorted(self._plugin_skills.values(), key=lambda s: s.name)

    # -- user skills ------------------------------------------------------------------------

    def user_skills(self) -> list[Skill]:
        """Skills found under ``$HERMES_HOME/skills``, sorted by category then name."""
        found: list[Skill] = []
        if not self.root.is_dir():
            return found
        for child in sorted(self.root.iterdir()):
            if not child.is_dir() or child.name.startswith("."):
                continue
            if (child / SKILL_FILE).is_file():
                found.append(self._user_skill(child / SKILL_FILE, None))
                continue
            for grandchild in sorted(child.iterdir()):
                if grandchild.is_dir() and (grandchild / SKILL_FILE).is_file():
                    found.append(self._user_skill(grandchild / SKILL_FILE, child.name))
        return sorted(found, key=lambda s: (s.category or "", s.name))

    @staticmethod
    def _user_skill(path: Path, category: str | None) -> Skill:
        try:
            front = read_front_matter(path.read_text(encoding="utf-8", errors="replace"), path)
        except OSError as exc:
            log.warning("Cannot read skill %s: %s", path, exc)
            front = {}
        name = str(front.get("name") or path.parent.name)
        return Skill(name, str(front.get("description") or ""), path, category=category)

    def find(self, name: str) -> Skill | None:
        """A plugin skill by qualified name, or a user skill by name or folder name."""
        if ":" in name:
            return self._plugin_skills.get(name)
        for skill in self.user_skills():
            if name in (skill.name, skill.folder.name):
                return skill
        return None

    def index_text(self) -> str:
        """The skill index for the system prompt (user skills only; "" when there are none)."""
        skills = self.user_skills()
        if not skills:
            return ""
        lines = [
            f"  - {s.name}: {s.description}" if s.description else f"  - {s.name}" for s in skills
        ]
        return (
            "## Skills\nBefore replying, check whether one of these skills fits the task; "
            "if it does, load it with skill_view(name) and follow it.\n<available_skills>\n"
            + "\n".join(lines)
            + "\n</available_skills>"
        )

    def describe(self) -> list[dict[str, Any]]:
        """Every skill, user ones then plugin ones, as plain data (for ``skills.list``)."""
        with self._lock:
            plugin = sorted(self._plugin_skills.values(), key=lambda s: s.name)
        return [
            {
                "name": s.name,
                "description": s.description,
                "category": s.category,
                "plugin": s.plugin,
                "path": str(s.path),
            }
            for s in [*self.user_skills(), *plugin]
        ]

    # -- tool results -----------------------------------------------------------------------

    def list_result(self, category: str | None = None) -> dict[str, Any]:
        """The ``skills_list`` result: user skills (name, description, category)."""
        skills = self.user_skills()
        if category:
            skills = [s for s in skills if s.category == category]
        if not skills:
            return {
                "success": True,
                "skills": [],
                "categories": [],
                "message": f"No skills found in {self.root}/.",
            }
        return {
            "success": True,
            "skills": [
                {"name": s.name, "description": s.description, "category": s.category}
                for s in skills
            ],
            "categories": sorted({s.category for s in skills if s.category}),
            "count": len(skills),
            "hint": "Use skill_view(name) to see full content and linked files",
        }

    def view_result(self, name: str, file_path: str | None = None) -> dict[str, Any]:
        """The ``skill_view`` result for a skill, or for one file inside its folder."""
        name = (name or "").strip()
        if not name:
            return _error("A skill name is required.")
        skill = self.find(name)
        if skill is None:
            return self._missing(name)
        if file_path:
            return self._read_file(skill, file_path)
        try:
            content = skill.path.read_text(encoding="utf-8")
        except OSError as exc:
            return _error(f"Failed to read skill '{name}': {exc}")
        description = skill.description
        linked = None
        if skill.plugin is not None:
            content = self._bundle_banner(skill) + content
        else:
            linked = _linked_files(skill.folder)
        return {
            "success": True,
            "name": skill.name,
            "content": content,
            "description": description,
            "linked_files": linked,
            "readiness_status": "available",
        }

    def _missing(self, name: str) -> dict[str, Any]:
        if ":" in name:
            plugin, bare = name.split(":", 1)
            available = self.plugin_skills(plugin)
            if available:
                return _error(
                    f"Skill '{bare}' not found in plugin '{plugin}'.",
                    available_skills=[s.name for s in available],
                    hint=f"The '{plugin}' plugin provides {len(available)} skill(s).",
                )
        return _error(
            f"Skill '{name}' not found.",
            available_skills=[s.name for s in self.user_skills()][:20],
            hint="Use skills_list to see all available skills",
        )

    def _bundle_banner(self, skill: Skill) -> str:
        plugin = skill.plugin
        siblings = [s.bare_name for s in self.plugin_skills(plugin or "") if s.name != skill.name]
        if not siblings:
            return f"[Bundle context: This skill is part of the '{plugin}' plugin.]\n\n"
        return (
            f"[Bundle context: This skill is part of the '{plugin}' plugin.\n"
            f"Sibling skills: {', '.join(siblings)}.\n"
            f"Use qualified form to invoke siblings (e.g. {plugin}:{siblings[0]}).]\n\n"
        )

    def _read_file(self, skill: Skill, file_path: str) -> dict[str, Any]:
        folder = skill.folder.resolve()
        hint = "Use a relative path within the skill folder"
        if Path(file_path).is_absolute():
            return _error(
                f"File path '{file_path}' must be relative to the skill folder.", hint=hint
            )
        if "\0" in file_path:
            return _error("File path contains a NUL character.", hint=hint)
        try:
            target = (skill.folder / file_path).resolve()
            inside = target.is_relative_to(folder)
            found = inside and target.is_file()
        except (OSError, ValueError) as exc:  # e.g. a name too long for the file system
            return _error(
                f"File path '{file_path[:200]}' cannot be read: {type(exc).__name__}", hint=hint
            )
        if not inside:
            return _error(f"File path '{file_path}' is outside the skill folder.", hint=hint)
        if not found:
            return _error(
                f"File '{file_path}' not found in skill '{skill.name}'.",
                available_files=_linked_files(skill.folder) or {},
                hint=hint,
            )
        try:
            content = target.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            size = target.stat().st_size
            return {
                "success": True,
                "name": skill.name,
                "file": file_path,
                "is_binary": True,
                "content": f"[Binary file: {target.name}, size: {size} bytes]",
            }
        except OSError as exc:
            return _error(f"Failed to read '{file_path}': {exc}")
        return {
            "success": True,
            "name": skill.name,
            "file": file_path,
            "content": content,
            "file_type": target.suffix,
        }


def _linked_files(folder: Path) -> dict[str, list[str]] | None:
    """Files of a skill folder other than SKILL.md, by kind (references, scripts, …)."""
    groups: dict[str, list[str]] = {}
    root = folder.resolve()
    count = 0
    for path in sorted(folder.rglob("*")):
        if count >= _MAX_LINKED:
            break
        if not path.is_file() or path.name == SKILL_FILE:
            continue
        if not path.resolve().is_relative_to(root):
            continue  # a symlink pointing out of the folder is not offered
        relative = path.relative_to(folder)
        top = relative.parts[0] if len(relative.parts) > 1 else ""
        groups.setdefault(top if top in _LINKED_DIRS else "other", []).append(relative.as_posix())
        count += 1
    return groups or None

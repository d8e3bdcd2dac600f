"""RPC declarations of the plugins.*, tools.* and skills.* methods (see hermesd.protocol)."""

from __future__ import annotations

from hermesd.protocol import MethodSpec, Param, declare

declare(MethodSpec(
    "plugins.list", "Every discovered plugin with its state, and the /plugins text.", (),
    "{plugins: [{key, name, version, description, source, path, state, reason, tools, hooks,"
    " commands, cli_commands, skills, rejected_tools, warnings, missing_env, line}], text}",
))
declare(MethodSpec(
    "tools.list", "Every registered tool (built-in and plugin), including hidden ones.",
    (Param("toolset", "str", doc="only this toolset"),),
    "{tools: [{name, toolset, description, owner, available, enabled, parameters}]}",
))
declare(MethodSpec(
    "tools.call", "Run a tool through the same pipeline as a model's call (hooks, approvals).",
    (Param("name", "str", required=True, doc="tool name"),
     Param("args", "any", doc="arguments: a map, or a JSON string of one (default {})"),
     Param("session_id", "str", doc="session the call belongs to (default: none)")),
    "{result: str} — the tool's JSON result text, errors included",
))
declare(MethodSpec("skills.list", "User skills and plugin skills.", (),
                   "{skills: [{name, description, source, plugin, path}]}"))
declare(MethodSpec(
    "skills.view", "A skill's content (the skill_view tool's result).",
    (Param("name", "str", required=True, doc="skill name, or <plugin>:<skill>"),
     Param("file_path", "str", doc="a file inside the skill's folder")),
    "{success, name, content, description, linked_files, ...} or {success: false, error}",
))

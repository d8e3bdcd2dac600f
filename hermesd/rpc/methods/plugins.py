"""RPC declarations of the plugins.*, tools.* and skills.* methods (see hermesd.rpc.protocol)."""

from __future__ import annotations

from hermesd.rpc.protocol import Access, MethodSpec, Param, declare

declare(
    MethodSpec(
        "plugins.list",
        "Every discovered plugin with its state, and the /plugins text.",
        (),
        "{plugins: [{key, name, version, description, source, path, state, reason, tools, hooks,"
        " middleware, commands, cli_commands, skills, rejected_tools, warnings, missing_env,"
        " line}], text}",
        access=Access.ANY,
    )
)
declare(
    MethodSpec(
        "tools.list",
        "Every tool (built-in, plugin, MCP, the reference's missing ones) and why it is hidden.",
        (Param("toolset", "str", doc="only this toolset"),),
        "{tools: [{name, toolset, description, owner, source, available, enabled, status,"
        " reason, parameters}]}",
        access=Access.ANY,
    )
)
declare(
    MethodSpec(
        "tools.call",
        "Run a tool through the same pipeline as a model's call (hooks, approvals).",
        (
            Param("name", "str", required=True, doc="tool name"),
            Param("args", "any", doc="arguments: a map, or a JSON string of one (default {})"),
            Param("session_id", "str", doc="session the call belongs to (default: none)"),
        ),
        "{result: str} — the tool's JSON result text, errors included",
        access=Access.SESSION,
    )
)
declare(
    MethodSpec(
        "skills.list",
        "User skills and plugin skills.",
        (),
        "{skills: [{name, description, source, plugin, path}]}",
        access=Access.ANY,
    )
)
declare(
    MethodSpec(
        "skills.view",
        "A skill's content (the skill_view tool's result).",
        (
            Param("name", "str", required=True, doc="skill name, or <plugin>:<skill>"),
            Param("file_path", "str", doc="a file inside the skill's folder"),
        ),
        "{success, name, content, description, linked_files, ...} or {success: false, error}",
        access=Access.ANY,
    )
)

# --- plugin management (hermesd.plugins.admin_service) ---------------------------------------

_NAME = Param("name", "str", required=True, doc="plugin key or name")

declare(
    MethodSpec(
        "plugins.info",
        "One plugin in detail, with its requires_env and whether each is set.",
        (_NAME,),
        "plugins.list entry + {requires_env: [{name, description, url, secret, present}], git}",
        access=Access.ANY,
    )
)
declare(
    MethodSpec(
        "plugins.enable",
        "Enable a plugin in config.yaml and reload (owner only).",
        (_NAME,),
        "{message, comments_kept, state, reason, missing_env}",
        access=Access.OWNER,
        widens=lambda p: [f"enable plugin {p.get('name')!r}: its code runs inside hermesd"],
    )
)
declare(
    MethodSpec(
        "plugins.disable",
        "Disable a plugin in config.yaml and reload (owner only).",
        (_NAME,),
        "{message, comments_kept, state, reason, missing_env}",
        access=Access.OWNER,
    )
)
declare(
    MethodSpec(
        "plugins.install",
        "Install a plugin into $HERMES_HOME/plugins and load it (owner only).",
        (
            Param(
                "source", "str", required=True, doc="folder, git URL (file:// too) or owner/repo"
            ),
            Param("force", "bool", doc="replace an installed plugin of the same name"),
        ),
        "{name, path, replaced, missing_env: [{name, description, url, secret}], plugin}",
        access=Access.OWNER,
        widens=lambda p: [
            f"install a plugin from {p.get('source')!r}: its code runs inside hermesd"
        ],
    )
)
declare(
    MethodSpec(
        "plugins.set_env",
        "Set variables in $HERMES_HOME/.env (owner only).",
        (Param("values", "map", required=True, doc="variable name -> value"),),
        "{written: [name], path}",
        access=Access.OWNER,
    )
)
declare(
    MethodSpec(
        "plugins.unset_env",
        "Remove variables from $HERMES_HOME/.env and the daemon's environment (owner only).",
        (Param("names", "array", required=True, doc="variable names"),),
        "{removed: [name], path}",
        access=Access.OWNER,
    )
)
declare(
    MethodSpec(
        "plugins.update",
        "git pull --ff-only an installed plugin and reload (owner only).",
        (_NAME,),
        "{output, plugin}",
        access=Access.OWNER,
        widens=lambda p: [f"update plugin {p.get('name')!r}: new code runs inside hermesd"],
    )
)
declare(
    MethodSpec(
        "plugins.remove",
        "Unload and delete an installed plugin (owner only).",
        (_NAME,),
        "{removed, path}",
        access=Access.OWNER,
    )
)
declare(
    MethodSpec(
        "plugins.reload",
        "Hot reload: unload every plugin and load again (owner only).",
        (),
        "{summary, loaded, failed, plugins, text}",
        access=Access.OWNER,
    )
)
declare(
    MethodSpec(
        "plugins.lint",
        "Check a plugin folder without loading it into the daemon (owner only).",
        (Param("path", "str", required=True, doc="the plugin folder"),),
        "{findings: [{severity, tool, parameter, message}], text, errors}",
        access=Access.OWNER,
    )
)

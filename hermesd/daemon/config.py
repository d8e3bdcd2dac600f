"""config.yaml and .env: the schema of every setting, loading, validation and defaults.

Owns the table of known settings (type and default). Unknown keys are warned about, wrong
types raise ``ConfigError`` naming the dotted key (the daemon exits with status 78 for it).
Plugins' settings are not unknown keys (`_plugin_setting`; a top-level section named like a
discovered plugin, `plugin_sections`).
``.env`` fills environment variables that are not already set. Nothing here starts services.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

log = logging.getLogger(__name__)

EX_CONFIG = 78


class ConfigError(ValueError):
    """config.yaml cannot be used; the message names the key. ``problems`` lists every one
    found (the message joins them)."""

    def __init__(
        self, message: str, problems: list[str] | None = None, warnings: list[str] | None = None
    ) -> None:
        super().__init__(message)
        self.problems = problems or [message]
        self.warnings = warnings or []  # found beside the problems (unknown keys)


@dataclass(frozen=True)
class Setting:
    types: tuple[type, ...]
    default: Any = None
    doc: str = ""
    choices: tuple[Any, ...] = ()


_S = Setting
_ACTIONS = ("warn", "stop")
_num = (int, float)
_strlist = (list,)

# Nested: a dict value is a section, a Setting is a leaf. Sections accept only known keys
# (unknown ones are warned about), except where marked free-form with None.
SCHEMA: dict[str, Any] = {
    "socket": {
        "path": _S((str,), None, "socket path (default $XDG_RUNTIME_DIR/hermes/hermesd.sock)"),
        "group": _S((str, int), None, "group allowed to connect; socket mode becomes 0660"),
        "mode": _S(
            (str, int), None, "socket file mode, e.g. '0660' (default 0600, 0660 with group)"
        ),
    },
    # the HTTP door (hermesd.http, docs/clients.md); unset listen: no listener
    "http": {
        "listen": _S((str,), None, "HOST:PORT of the HTTP API (loopback advised; TLS: a proxy)"),
        "token_file": _S((str,), None, "bearer tokens, one a line, NAME:TOKEN for a member"),
        "max_body": _S((int,), 1024 * 1024, "largest accepted request body, bytes"),
        "max_upload_mb": _S(
            (int,), 20, "largest body of POST /v1/sessions/ID/messages (images with it), MiB"
        ),
        "body_timeout": _S(_num, 30, "seconds a request body may take to arrive (then 408)"),
        "header_timeout": _S(
            _num, 20, "seconds a request head may take to arrive (then closed; 0: forever)"
        ),
        "max_connections": _S((int,), 1000, "simultaneous HTTP connections"),
        "auth_provider": _S(
            (str,), None, "a dashboard_auth plugin provider asked about tokens not in token_file"
        ),
        "auth_timeout": _S(_num, 5, "seconds the auth provider may take to answer"),
        "auth_users": _S(
            (dict,),
            None,
            "who a provider sign-in on the web page is: {user_id or email: owner or login user}",
        ),
        "web": _S((bool,), True, "serve the web page at / on the listener (docs/web.md)"),
    },
    "limits": {
        "max_message": _S((int,), 8 * 1024 * 1024, "largest accepted msgpack message, bytes"),
        "max_output": _S(
            (int,), 32 * 1024 * 1024, "bytes queued to a slow client before it is dropped"
        ),
        "max_connections": _S((int,), 1024, "simultaneous client connections"),
        "plugin_memory_warn": _S(
            (int,), 256 * 1024 * 1024, "RSS growth over a plugin's calls that is logged, bytes"
        ),
        "max_inflight": _S((int,), 256, "requests in flight per connection"),
        # per peer (docs/protocol.md, "Limits and bad input")
        "max_connections_per_uid": _S(
            (int,), 64, "connections of one uid other than the owner's (0: no limit)"
        ),
        "owner_reserved_connections": _S(
            (int,), 16, "of max_connections, kept for the daemon's owner and root"
        ),
        "frame_timeout": _S(
            _num, 30.0, "seconds a partial message may wait for its rest (0: forever)"
        ),
        "idle_timeout": _S(
            _num, 900.0, "seconds a connection with nothing in flight or attached may stay silent"
        ),
        "input_per_uid": _S((int,), 64 << 20, "bytes of partial messages one uid may make us hold"),
        "input_total": _S((int,), 256 << 20, "bytes of partial messages of all peers"),
        "inflight_per_uid": _S((int,), 64 << 20, "bytes of requests in flight of one uid"),
        "inflight_total": _S((int,), 256 << 20, "bytes of requests in flight of all peers"),
        "output_per_uid": _S((int,), 64 << 20, "bytes queued to the slow readers of one uid"),
        "output_total": _S((int,), 256 << 20, "bytes queued to all slow readers"),
    },
    "log_level": _S(
        (str,), "INFO", "DEBUG, INFO, WARNING or ERROR", ("DEBUG", "INFO", "WARNING", "ERROR")
    ),
    "shutdown_timeout": _S(_num, 10.0, "seconds in-flight requests get on SIGTERM"),
    "model": {
        "provider": _S((str,), "custom", "informational; any OpenAI-compatible endpoint works"),
        "base_url": _S((str,), None, "OpenAI-compatible endpoint, e.g. http://127.0.0.1:8080/v1"),
        "default": _S((str,), None, "model name sent with each request"),
        "api_key": _S((str,), None, "prefer OPENAI_API_KEY in .env"),
        "timeout": _S(_num, 120.0, "seconds per model request"),
        "max_retries": _S((int,), 3, "retries for 429/5xx/connection errors"),
        "retry_max_wait": _S(_num, 30.0, "cap on one retry wait, seconds"),
        "context_length": _S(
            (int,), None, "tokens of the model's window (default: the endpoint's, a table, 128K)"
        ),
    },
    # context engines and compaction (hermesd.context.host, docs/sessions.md)
    "context": {
        "engine": _S((str,), "compressor", "context engine: compressor (built-in) or a plugin's"),
        "timeout": _S(_num, 120.0, "seconds one compaction may take"),
        "background": _S((bool,), True, "compact an idle session near its threshold between turns"),
    },
    "compression": {
        "enabled": _S((bool,), True, "the built-in compressor compacts automatically"),
        "threshold": _S(_num, 0.50, "share of the window that triggers (≥ 0.75 under 512K)"),
        "target_ratio": _S(_num, 0.20, "tail kept verbatim: threshold × this"),
        "protect_first_n": _S((int,), 3, "first messages never compacted"),
        "protect_last_n": _S((int,), 20, "newest messages kept verbatim (within the tail budget)"),
        "abort_on_summary_failure": _S(
            (bool,), False, "no summary: keep the transcript as it is instead of a plain one"
        ),
    },
    "auxiliary": {
        "compression": _S(
            (dict,), None, "summary model: {model, base_url, api_key} (default: the session's)"
        ),
        # issue 33: vision_analyze (hermesd.tools.vision)
        "vision": _S(
            (dict,),
            None,
            "vision_analyze's model: {model, base_url, api_key, timeout, temperature, "
            "download_timeout} (default: the main model)",
        ),
    },
    "sessions": {
        "max_message_bytes": _S(
            (int,), 4 * 1024 * 1024, "most kept of one message, bytes (the rest is cut, marked)"
        ),
    },
    "agent": {
        "max_iterations": _S((int,), 25, "model rounds per turn"),
        "system_prompt": _S((str,), None, "system prompt (a sensible default is used)"),
        # issue 33: the reference's spelling of tools.disabled_toolsets (docs/tools.md)
        "disabled_toolsets": _S(_strlist, [], "toolsets never offered to the model"),
    },
    "plugins": {
        "enabled": _S(_strlist, None, "only these plugin keys load (default: all discovered)"),
        "disabled": _S(_strlist, [], "these plugin keys never load"),
        "load_timeout": _S(_num, 10.0, "seconds one plugin's register() may take"),
        "llm_timeout": _S(_num, 120.0, "seconds a plugin's ctx.llm or call_llm completion waits"),
        "entries": _S((dict,), None, "per plugin key: {mcp_allowlist: [server or server:tool]}"),
    },
    "tools": {
        "enabled_toolsets": _S(_strlist, None, "toolsets offered to the model (default: all)"),
        "disabled_toolsets": _S(
            _strlist, [], "toolsets never offered (as agent.disabled_toolsets)"
        ),
        "timeout": _S(_num, 120.0, "seconds one tool call may take"),
        "result_budget": _S((int,), 100_000, "characters of a tool result sent to the model"),
        "hook_timeout": _S(_num, 10.0, "seconds one hook callback may take"),
    },
    "commands": {
        "timeout": _S(_num, 30.0, "seconds one slash command handler may take"),
        "cli_timeout": _S(_num, 120.0, "seconds one plugin CLI command (hermesctl NAME) may take"),
    },
    "terminal": {
        "cwd": _S((str,), None, "working directory of the terminal tool"),
        "timeout": _S(_num, 60.0, "seconds one terminal command may take"),
        "env_passthrough": _S(
            _strlist, [], "more variables a terminal command gets (docs/sandbox.md)"
        ),
    },
    # issue 33: execute_code's scripts and terminal's background processes (docs/tools.md)
    "code_execution": {
        "timeout": _S((int,), 300, "seconds one execute_code script may run (at most 3600)"),
        "max_tool_calls": _S((int,), 50, "tool calls one script may make"),
        "max_output_bytes": _S((int,), 50_000, "bytes of a script's stdout kept (head + tail)"),
        "python": _S((str,), "", "interpreter of the scripts ('' = the daemon's own)"),
    },
    "processes": {
        "max_per_session": _S((int,), 8, "background processes running at once per session"),
        "max_running": _S((int,), 32, "background processes running at once in the daemon"),
        "output_chars": _S((int,), 200_000, "characters of output kept per process (the end)"),
    },
    # issue 18: the sandbox around every command a tool starts (docs/sandbox.md)
    "sandbox": {
        "mode": _S(
            (str,),
            "workspace-write",
            "read-only, workspace-write or off",
            ("read-only", "workspace-write", "off"),
        ),
        "mechanism": _S((str,), "auto", "auto, bwrap or landlock", ("auto", "bwrap", "landlock")),
        "writable": _S(_strlist, [], "more directories a tool may write (workspace-write)"),
        "readable_deny": _S(
            _strlist, [], "paths a tool may not read, besides the credential stores (~/.ssh …)"
        ),
        "readable_allow": _S(
            _strlist, [], "credential stores (~/.aws …) tools may read after all (a risk)"
        ),
        "bwrap": _S((str,), "bwrap", "the bubblewrap command"),
        "network": _S(
            (bool, str),
            "on",
            "on, allowlist (only through the egress proxy) or off (true/false: on/off)",
            (True, False, "on", "off", "allowlist"),
        ),
        "allowed_domains": _S(
            _strlist, [], "hosts reachable under network: allowlist, e.g. '*.github.com'"
        ),
        "unix_sockets": _S(_strlist, [], "Unix sockets a tool may connect to (risky: docs)"),
        "limits": {  # per call; 0 = no limit (hermesd.sandbox.limits)
            "processes": _S((int,), 512, "processes at once (a cgroup, else RLIMIT_NPROC)"),
            "memory_mb": _S((int,), 8192, "MiB of memory (the call's cgroup; per process)"),
            "file_size_mb": _S((int,), 16384, "MiB one written file may reach"),
            "cpu_seconds": _S((int,), 600, "CPU seconds per process of a tool call"),
        },
    },
    # issue 32: the reference's key choosing a plugin's approval transport (docs/plugins.md)
    "security": {
        "approval": {
            "transport": _S(
                (str,), "builtin", "approvals also go to this plugin approval transport"
            ),
        },
    },
    "approvals": {
        "mode": _S((str,), "manual", "manual or off", ("manual", "off")),
        "timeout": _S(_num, 300.0, "seconds to wait for an answer; timeout = deny"),
        "deny": _S(_strlist, [], "command globs always denied"),
        "require": _S(_strlist, [], "tool names that always need approval"),
        "approvers": _S(_strlist, [], "extra user names or uids allowed to answer approvals"),
        "cron_mode": _S(
            (str,),
            "ask",
            "scheduled runs: ask (pending, cron.approval_timeout) or deny",
            ("ask", "deny"),
        ),
    },
    # issue 33: the reference's spelling of tools.enabled_toolsets (docs/tools.md)
    "toolsets": _S(_strlist, None, "toolsets offered to the model: names, hermes-cli, all"),
    # issue 33: the clarify tool's questions (hermesd.tools.clarify, docs/tools.md)
    "clarify": {
        "timeout": _S(
            _num, 600.0, "seconds a question waits for an answer; then the model decides"
        ),
        "unattended_after": _S(
            _num, 60.0, "seconds with no client to ask before the model decides for itself"
        ),
    },
    "command_allowlist": _S(_strlist, [], "reference-compatible: commands never prompting"),
    # built-in memory (hermesd.memory, docs/memory.md)
    "memory": {
        "memory_enabled": _S((bool,), True, "MEMORY.md (the agent's notes) in new sessions"),
        "user_profile_enabled": _S((bool,), True, "USER.md (the user profile) in new sessions"),
        "memory_char_limit": _S((int,), 2200, "characters MEMORY.md may hold"),
        "user_char_limit": _S((int,), 1375, "characters USER.md may hold"),
        "write_approval": _S((bool,), False, "stage the agent's memory writes for a person"),
        "provider": _S((str,), "", "external memory provider plugin ('' = built-in only)"),
    },
    # scheduled turns (hermesd.cron, docs/cron.md)
    "cron": {
        "enabled": _S((bool,), True, "run the scheduler (jobs can be managed either way)"),
        "timezone": _S((str,), None, "IANA zone for cron expressions and naive timestamps"),
        "disabled_toolsets": _S(_strlist, [], "toolsets off in every run (cronjob, clarify are)"),
        "output_retention": _S((int,), 50, "runs (with their output) kept per job"),
        "approval_timeout": _S(_num, 300.0, "seconds a run's approval waits; then denied"),
        "catch_up_missed": _S((bool,), True, "past the grace, run once for the missed runs"),
        "lease": _S(_num, 300.0, "seconds a fire claim holds without being refreshed"),
        "scale_to_zero": _S((bool,), False, "when idle, arm a systemd timer and exit"),
        "idle_exit": _S(_num, 300.0, "idle seconds before exiting with scale_to_zero"),
        "systemd_scope": _S((str,), "user", "systemd-run --user or system", ("user", "system")),
    },
    # issue 33: web_search and web_extract (hermesd.tools.web, docs/tools.md)
    "web": {
        "search": {
            "provider": _S((str,), "", "searxng or a plugin's provider ('' = the first usable)"),
            "searxng_url": _S((str,), "", "a SearXNG instance, e.g. http://localhost:8080"),
            "timeout": _S(_num, 15.0, "seconds one search may take"),
        },
        "extract": {
            "char_limit": _S((int,), 15000, "characters of each page sent to the model"),
            "max_bytes": _S((int,), 5 * 1024 * 1024, "bytes of a page downloaded at most"),
            "timeout": _S(_num, 20.0, "seconds one page may take to download"),
            "cache_ttl": _S(_num, 3600.0, "seconds a read page is kept (0: no cache)"),
            "convert_timeout": _S(_num, 60.0, "seconds converting one page may take"),
        },
        # the reference's names for the search backend (web.search.provider wins)
        "backend": _S((str,), "", "reference-compatible: the web backend's name"),
        "search_backend": _S((str,), "", "reference-compatible: the search backend's name"),
    },
    # issue 32: the browser tools (docs/tools.md), the reference's key names where it has them
    "browser": {
        "cloud_provider": _S((str,), "", "a plugin's browser provider ('' or local: Chromium)"),
        "inactivity_timeout": _S(_num, 120, "seconds an idle browser stays open (0: no limit)"),
        "command_timeout": _S(_num, 30, "seconds one browser command may take"),
        "chromium": _S((str,), "", "the Chromium program ('' = chromium found on PATH)"),
    },
    # issue 33: image_generate / text_to_speech use a plugin's provider (docs/tools.md)
    "image_gen": {
        "provider": _S((str,), "", "the image-gen provider image_generate uses ('' = none)"),
        "model": _S((str,), "", "model name passed to the provider ('' = its default)"),
        "timeout": _S(_num, 300.0, "seconds one image may take"),
    },
    "video_gen": {
        "provider": _S((str,), "", "video-gen provider ('' = the only available one)"),
        "model": _S((str,), "", "model name passed to the provider ('' = its default)"),
        "timeout": _S(_num, 900.0, "seconds one video may take"),
    },
    "tts": {
        "provider": _S((str,), "", "the TTS provider text_to_speech uses ('' = none)"),
        "voice": _S((str,), "", "voice passed to the provider ('' = its default)"),
        "model": _S((str,), "", "model passed to the provider ('' = its default)"),
        "speed": _S(_num, None, "speech-rate multiplier passed to the provider"),
        "output_format": _S((str,), "mp3", "audio format asked of the provider"),
        "max_text_length": _S((int,), 4000, "characters spoken at most (the rest is cut)"),
        "timeout": _S(_num, 120.0, "seconds one synthesis may take"),
    },
    # voice messages from chat platforms, transcribed by a plugin's provider (docs/gateway.md)
    "stt": {
        "enabled": _S((bool,), True, "transcribe voice messages people send in chats"),
        "provider": _S((str,), "", "the transcription provider voice messages use ('' = none)"),
        "echo_transcripts": _S((bool,), True, "send each transcript back to the chat first"),
        "timeout": _S(_num, 120.0, "seconds one transcription may take"),
    },
    # MCP servers (docs/mcp.md); each entry is checked by hermesd.mcp.settings
    "mcp_servers": _S((dict,), None, "MCP servers by name: command/args/env/cwd or url/headers"),
    "mcp": {
        "start": _S(
            (str,),
            "lazy",
            "connect MCP servers before the first turn or at start",
            ("lazy", "eager"),
        ),
    },
    # issue 34: delegate_task's child sessions (hermesd.agent.delegate, docs/sessions.md)
    "delegation": {
        "model": _S((str,), None, "model name children use (default: the parent's)"),
        "provider": _S((str,), None, "informational: who serves delegation.base_url"),
        "base_url": _S((str,), None, "children's own OpenAI-compatible endpoint"),
        "api_key": _S((str,), None, "key of delegation.base_url (default: OPENAI_API_KEY)"),
        "max_spawn_depth": _S((int,), 1, "levels of children below a top-level session"),
        "max_concurrent_children": _S((int,), 3, "children of one session running at once"),
        "max_iterations": _S((int,), 50, "model rounds of one child's turn (at most)"),
        "default_toolsets": _S(_strlist, None, "a child's toolsets (default: the parent's)"),
        "allow_in_children": _S(
            _strlist, [], "blocked toolsets children may use after all: clarify, memory, cronjob"
        ),
    },
    # what model requests cost and how much they may (hermesd.agent.budget, docs/sessions.md)
    "budget": {
        "session_tokens": _S((int,), None, "prompt + completion tokens one session may use"),
        "daily_usd": _S(_num, None, "US dollars all requests of one day may cost (local time)"),
        "monthly_usd": _S(_num, None, "US dollars all requests of one month may cost"),
        "action": _S((str,), "warn", "warn, or stop: no model request past a budget", _ACTIONS),
    },
    "pricing": _S(
        (dict,), None, "per model: {input_per_mtok, output_per_mtok, cache_read_per_mtok, …} USD"
    ),
    # the reference's chain of other models/endpoints for a failing turn (hermesd.model.fallback)
    "fallback_providers": _S(
        (list, dict),
        None,
        "tried in order when the model fails: [{provider, model, base_url, key_env}]",
    ),
    # issue 32: plugin secret sources (hermesd.plugins.secret_sources, docs/plugins.md)
    "secrets": _S(
        (dict,),
        None,
        "plugin secret sources: sources: [order], <name>: {enabled, override_existing, …}",
    ),
    # the reference's display section: what a chat message sent during a turn does
    "display": {
        "busy_input_mode": _S(
            (str,),
            "interrupt",
            "a chat message during a turn: interrupt it, or queue (steer queues in hermesd)",
            ("interrupt", "queue", "steer"),
        ),
    },
    # issue 36: chat platforms (hermesd.gateway, docs/gateway.md)
    "gateway": {
        "platforms": _S(
            (dict,),
            None,
            "chat platforms by name: enabled, token/token_file, owners, allow, as_user, "
            "home_channel, and the adapter's own keys",
        ),
        "group_sessions_per_user": _S((bool,), True, "in a group, one session per member"),
        "thread_sessions_per_user": _S((bool,), False, "in a thread, one session per member"),
        "unauthorized_dm_behavior": _S(
            (str,),
            "pair",
            "a stranger's direct message: a pairing code, or ignored",
            ("pair", "ignore"),
        ),
        "media_max_age_hours": _S(_num, 24.0, "hours files people sent are kept"),
        "media_max_mb": _S(_num, 1024.0, "megabytes of files people sent kept at most"),
    },
}

# Settings that no longer do anything, accepted (with a warning naming them) for one release
# after the one that removed them, then unknown like any other key.
DEPRECATED: dict[str, str] = {
    "model.transport": "hermesd has one HTTP client, the openai SDK's own",
    "model.process": "model requests are always sent from the daemon's event loop",
    "model.process_idle_exit": "there is no model client process any more",
    "switch_interval": "Python's own interpreter-lock switch interval is used",
    "agent.history_messages": "sessions are compacted by a context engine, never trimmed",
}


@dataclass
class Config:
    """Validated settings, plus the raw mapping for plugins that read their own sections."""

    data: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    path: Path | None = None

    def get(self, dotted: str, default: Any = None) -> Any:
        """Look up ``a.b.c``; the schema default when unset."""
        node: Any = self.data
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                return _schema_default(dotted, default)
            node = node[part]
        return _schema_default(dotted, default) if node is None else node


def _schema_default(dotted: str, fallback: Any) -> Any:
    node: Any = SCHEMA
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return fallback
        node = node[part]
    return node.default if isinstance(node, Setting) else fallback


def _validate(
    data: dict[str, Any],
    schema: dict[str, Any],
    prefix: str,
    warnings: list[str],
    problems: list[str],
) -> None:
    """Check every key; each problem found goes to ``problems`` (all of them, not the first)."""
    for key, value in data.items():
        try:
            _validate_one(key, value, schema, prefix, warnings, problems)
        except ConfigError as exc:
            problems.append(str(exc))


def _validate_one(
    key: Any,
    value: Any,
    schema: dict[str, Any],
    prefix: str,
    warnings: list[str],
    problems: list[str],
) -> None:
    """One key of a section (raises ConfigError for the first problem of its value)."""
    dotted = f"{prefix}{key}"
    if dotted in DEPRECATED:
        warnings.append(
            f"'{dotted}' is deprecated and has no effect ({DEPRECATED[dotted]}); remove it"
        )
        return
    spec = schema.get(key) if isinstance(key, str) else None
    if spec is None:
        if not _plugin_setting(prefix, key, value):
            guess = closest_key(dotted, [f"{prefix}{k}" for k in schema])
            hint = f"; did you mean '{guess}'?" if guess else ""
            warnings.append(f"unknown setting '{dotted}' ignored{hint}")
        return
    if isinstance(spec, dict):
        if value is None:
            return
        if not isinstance(value, dict):
            raise ConfigError(f"'{dotted}' must be a mapping, got {type(value).__name__}")
        _validate(value, spec, dotted + ".", warnings, problems)
        return
    if value is None:
        return
    if isinstance(value, bool) and bool not in spec.types:
        hint = ""
        if any(
            isinstance(c, str) and c.lower() in ("on", "off", "yes", "no") for c in spec.choices
        ):
            hint = " (YAML reads a bare on/off/yes/no as a boolean: put the word in quotes)"
        raise ConfigError(f"'{dotted}' must be {_names(spec.types)}, got bool{hint}")
    if not isinstance(value, spec.types):
        raise ConfigError(f"'{dotted}' must be {_names(spec.types)}, got {type(value).__name__}")
    if spec.choices and value not in spec.choices and str(value).upper() not in spec.choices:
        raise ConfigError(f"'{dotted}' must be one of {', '.join(map(str, spec.choices))}")
    check = _CHECKS.get(dotted)  # a value of its own shape is checked by its own function
    if (
        check is None
        and isinstance(value, list)
        and not all(isinstance(v, str | int) for v in value)
    ):
        raise ConfigError(f"'{dotted}' must be a list of strings")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
        raise ConfigError(f"'{dotted}' must not be negative")
    problem = check(value) if check is not None else None
    if problem:
        raise ConfigError(f"'{dotted}' {problem}")


def url_problem(value: str) -> str | None:
    """Why ``value`` is not an absolute http(s) URL, or None."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(value.strip())
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as exc:
        return f"must be an absolute http(s) URL: {exc}"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"must be an absolute http(s) URL such as http://127.0.0.1:8080/v1, not {value!r}"
    return None


def _positive(value: float) -> str | None:
    return "must be more than 0 (leave it out for no limit)" if value == 0 else None


def _share(value: float) -> str | None:
    return (
        None
        if 0 < value <= 1
        else f"must be a share of the window, above 0 and at most 1, not {value}"
    )


def _summary_model_problem(value: dict[str, Any]) -> str | None:
    # the reference's other keys (provider, timeout, extra_body, …) are left alone: a home
    # shared with its CLI keeps working
    for key in ("model", "base_url", "api_key"):
        if value.get(key) is not None and not isinstance(value[key], str):
            return f"{key} must be a string"
    base_url = value.get("base_url")
    return f"base_url {url_problem(base_url)}" if base_url and url_problem(base_url) else None


def _pricing_problem(value: Any) -> str | None:
    from hermesd.model.pricing import price_problem

    return price_problem(value)


def _fallback_problem(value: Any) -> str | None:
    from hermesd.model.fallback import config_problem

    return config_problem(value)


def _allowed_domains_problem(value: Any) -> str | None:
    from hermesd.sandbox.allowlist import entries_problem

    return entries_problem(value)


# Checks of a value beyond its type, by dotted key: a sentence saying what is wrong, or None.
_CHECKS: dict[str, Any] = {
    "model.base_url": url_problem,
    "delegation.base_url": url_problem,
    "compression.threshold": _share,
    "compression.target_ratio": _share,
    "auxiliary.compression": _summary_model_problem,
    "auxiliary.vision": _summary_model_problem,
    "budget.session_tokens": _positive,
    "budget.daily_usd": _positive,
    "budget.monthly_usd": _positive,
    "pricing": _pricing_problem,
    "fallback_providers": _fallback_problem,
    "sandbox.allowed_domains": _allowed_domains_problem,
}


def _plugin_setting(prefix: str, key: Any, value: Any) -> bool:
    """Settings that belong to plugins, kept as written for them to read (``ctx.config``,
    ``hermes_cli.config.load_config``): ``plugins.entries``, a ``plugins.<key>`` section, a
    memory provider's ``memory.<provider>`` section (``hermesctl memory setup``), and the
    reference's ``_config_version``; a transcription provider's ``stt.<provider>`` section
    (``model``, ``language``)."""
    if prefix == "" and key == "_config_version":
        return True
    return prefix in ("plugins.", "memory.", "stt.") and isinstance(value, dict)


def _names(types: tuple[type, ...]) -> str:
    words = {
        str: "a string",
        int: "an integer",
        float: "a number",
        list: "a list",
        bool: "a boolean",
        dict: "a mapping",
    }
    return " or ".join(words.get(t, t.__name__) for t in types)


def parse(text: str, path: Path | None = None, plugin_sections: Collection[str] = ()) -> Config:
    """Parse and validate config text; raise ConfigError. A top-level mapping named in
    ``plugin_sections`` (and not a setting of ours) is a plugin's, kept unchecked."""
    where = str(path) if path else "config"
    try:
        data = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where} is not valid YAML: {exc}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where} must be a mapping at the top level")
    warnings: list[str] = []
    problems: list[str] = []
    ours = {
        k: v
        for k, v in data.items()
        if k in SCHEMA or k not in plugin_sections or not isinstance(v, dict)
    }
    _validate(ours, SCHEMA, "", warnings, problems)
    mode = (data.get("socket") or {}).get("mode") if isinstance(data.get("socket"), dict) else None
    if mode is not None and parse_mode(mode) is None:
        problems.append("'socket.mode' must be an octal mode such as '0660'")
    try:
        _check_mcp(data, warnings)
    except ConfigError as exc:
        problems.extend(exc.problems)
    if problems:
        raise ConfigError("; ".join(problems), problems, warnings)
    return Config(data, warnings, path)


def closest_key(dotted: str, candidates: Collection[str]) -> str | None:
    """The known key ``dotted`` was most likely meant to be (a typo's correction), or None."""
    import difflib

    # Compared by the last part among the keys of the same section, so a shared prefix
    # ("model.") does not make unrelated names look alike; a wrong section, by the whole key.
    parent, _, leaf = dotted.rpartition(".")
    siblings = {c.rpartition(".")[2]: c for c in candidates if c.rpartition(".")[0] == parent}
    found = difflib.get_close_matches(leaf, list(siblings), n=1, cutoff=0.7)
    if found:
        return siblings[found[0]]
    whole = difflib.get_close_matches(dotted, list(candidates), n=1, cutoff=0.85)
    return whole[0] if whole else None


def _check_mcp(data: dict[str, Any], warnings: list[str]) -> None:
    """The free-form parts of the MCP settings: each server, each plugin's allowlist."""
    from hermesd.mcp.settings import McpSettingsError, check_allowlists, check_servers

    try:
        servers = data.get("mcp_servers")
        if servers is None or isinstance(servers, dict):  # else _validate reported the type
            warnings.extend(check_servers(servers)[1])
        plugins = data.get("plugins")
        if isinstance(plugins, dict):  # any other type is a problem _validate reported
            check_allowlists(plugins.get("entries"))
    except McpSettingsError as exc:
        raise ConfigError(str(exc)) from None


def parse_mode(value: Any) -> int | None:
    """'0660', '660' or 0o660 → 0o660; None when not a sane file mode."""
    try:
        mode = int(value, 8) if isinstance(value, str) else int(value)
    except ValueError:
        return None
    return mode if 0 <= mode <= 0o777 else None


def plugin_sections(home: Path, env: Mapping[str, str] | None = None) -> set[str]:
    """The top-level sections plugins own: the key and the manifest name of every plugin
    discovery finds in ``home`` with ``env`` (default the process environment), loaded or not.
    Nothing is logged (the plugin host logs what it finds when it loads them)."""
    from hermesd.plugins.loader import plugin_names

    try:
        return plugin_names(home, os.environ if env is None else env)
    except Exception:  # the check then warns about those sections; it must not fail for this
        log.debug("finding the plugins that own config sections failed", exc_info=True)
        return set()


def load(home: Path, env: Mapping[str, str] | None = None) -> Config:
    """Read ``home/config.yaml`` (missing = defaults); plugins are found with ``env`` (default
    the process environment) for `plugin_sections`."""
    path = home / "config.yaml"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return Config({}, [], None)
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not UTF-8 text") from None
    return parse(text, path, plugin_sections(home, env))


def load_dotenv_file(home: Path) -> dict[str, str]:
    """Values from ``home/.env`` (empty when absent); does not touch os.environ."""
    path = home / ".env"
    if not path.exists():
        return {}
    from dotenv import dotenv_values

    return {k: v for k, v in dotenv_values(path).items() if v is not None}


def apply_dotenv(values: dict[str, str]) -> list[str]:
    """Make the environment follow .env: fill variables that are not set, update the ones an
    earlier call set and unset those of them that .env no longer has. Variables set outside
    .env (the daemon's own environment) always win. Returns the names filled or changed."""
    changed = []
    for key, value in list(_FROM_DOTENV.items()):
        if key not in values and os.environ.get(key) == value:
            del os.environ[key]
        if key not in values:
            del _FROM_DOTENV[key]
    for key, value in values.items():
        ours = key in _FROM_DOTENV and os.environ.get(key) == _FROM_DOTENV[key]
        if key not in os.environ or ours:
            if os.environ.get(key) != value:
                changed.append(key)
            os.environ[key] = value
            _FROM_DOTENV[key] = value
    return changed


# The variables this process set from .env, with the value it set (apply_dotenv).
_FROM_DOTENV: dict[str, str] = {}


def ensure_home(home: Path) -> None:
    """Create HERMES_HOME private to its owner if it does not exist."""
    if not home.exists():
        home.mkdir(mode=0o700, parents=True)
        log.info("created %s", home)


def home_problem(home: Path) -> str | None:
    """Create HERMES_HOME if needed; a sentence saying why it cannot be used, or None."""
    try:
        ensure_home(home)
    except OSError as exc:
        return f"cannot create the state directory {home}: {exc.strerror or exc}"
    if not home.is_dir():
        return f"the state directory {home} is not a directory"
    return None  # one that cannot be written is the store's to say (which file, and why)


class SettingsFiles:
    """config.yaml and .env of one ``HERMES_HOME``, for the services that read or edit them.

    Handed to services by the daemon (they sit below this package): loading goes through the
    schema, edits through `hermesd.daemon.config_edit`. Every method reads the files anew.
    Errors are ``ValueError`` subclasses (``ConfigError``, ``EditError``) or ``OSError``.
    """

    def __init__(self, home: Path) -> None:
        self.home = home

    @property
    def config_path(self) -> Path:
        return self.home / "config.yaml"

    @property
    def dotenv_path(self) -> Path:
        return self.home / ".env"

    def load(self) -> Config:
        """config.yaml, validated (``ConfigError`` when it cannot be used)."""
        return load(self.home)

    def dotenv(self) -> dict[str, str]:
        """The values of .env."""
        return load_dotenv_file(self.home)

    def set_plugin_lists(self, enabled: list[str] | bool | None, disabled: list[str]) -> bool:
        """Rewrite ``plugins.enabled``/``disabled``; False when comments could not be kept."""
        from hermesd.daemon.config_edit import set_plugin_lists

        return set_plugin_lists(self.config_path, enabled, disabled)

    def check_env_value(self, name: str, value: Any) -> str | None:
        """Why ``name=value`` cannot go into .env, or None."""
        from hermesd.daemon.config_edit import check_env_value

        return check_env_value(name, value)

    def set_env(self, values: dict[str, str]) -> None:
        """Replace or add variables in .env (written atomically, mode 0600)."""
        from hermesd.daemon.config_edit import set_env_values

        set_env_values(self.dotenv_path, values)

    def unset_env(self, names: list[str]) -> list[str]:
        """Remove variables from .env; the names that were there."""
        from hermesd.daemon.config_edit import unset_env_values

        return unset_env_values(self.dotenv_path, names)

    def apply_env(self) -> dict[str, str]:
        """Make the process environment follow .env as it is now (`apply_dotenv`); its values."""
        values = self.dotenv()
        apply_dotenv(values)
        return values

    def edited_text(self, dotted: str, value: Any) -> str:
        """config.yaml's text with one setting changed (not written)."""
        from hermesd.daemon.config_edit import edited_config_text

        path = self.config_path
        return edited_config_text(
            path.read_text(encoding="utf-8") if path.exists() else "", dotted, value
        )

    def write_config(self, text: str) -> None:
        """Replace config.yaml atomically."""
        from hermesd.daemon.config_edit import write_config

        write_config(self.config_path, text)

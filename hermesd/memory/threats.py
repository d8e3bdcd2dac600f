"""Prompt-injection and exfiltration checks on memory content, as the reference makes them.

Memory enters every new session's system prompt, so what the ``memory`` tool (or a person, or
an approved staged write) stores is checked first: `write_error` answers the reference's
``Blocked: …`` sentence for the first finding, and the write is refused. The snapshot is
checked too (`blocked_placeholder`): an entry that reached the file some other way (an editor,
another program) is replaced in the prompt by a ``[BLOCKED: …]`` note naming what matched,
while the file keeps it for a person to see and remove.

The findings are the reference's "strict" set (hermes-agent 0.19 ``tools/threat_patterns.py``):
invisible and bidirectional Unicode characters, then patterns matched case-insensitively on
the NFKC-folded text (full-width letters fold to ASCII), only the first 64 KiB scanned. Each
pattern is named by the id the reference reports, so the sentences match it word for word.
When they find nothing, `hermesd.memory.injection` looks again (look-alike letters, other
languages, role headers, paraphrases, base64) and its ids are reported the same way.
"""

from __future__ import annotations

import re
import unicodedata

from hermesd.memory import injection

MAX_SCAN_CHARS = 65_536

# Up to eight words between the key words of a phrase: enough against "ignore all prior
# instructions"-style padding, bounded so that a near miss cannot backtrack for long.
_W = r"(?:\w+\s+){0,8}"

#: (id, pattern) in the reference's order; the first finding is the one reported
_PATTERNS: tuple[tuple[str, str], ...] = (
    # instructions that try to replace the system prompt
    ("prompt_injection", rf"ignore\s+{_W}(previous|all|above|prior)\s+{_W}instructions"),
    ("sys_prompt_override", r"system\s+prompt\s+override"),
    ("disregard_rules", rf"disregard\s+{_W}(your|all|any)\s+{_W}(instructions|rules|guidelines)"),
    (
        "bypass_restrictions",
        rf"act\s+as\s+(if|though)\s+{_W}you\s+{_W}(have\s+no|don't\s+have)\s+{_W}"
        r"(restrictions|limits|rules)",
    ),
    (
        "html_comment_injection",
        r"<!--[^>]{0,512}(?:ignore|override|system|secret|hidden)[^>]{0,512}-->",
    ),
    ("hidden_div", r"<\s*div\s+style\s*=\s*[\"'][^>]{0,2048}display\s*:\s*none"),
    (
        "translate_execute",
        r"translate\s+[^\n]{0,512}\s+into\s+[^\n]{0,512}\s+and\s+(execute|run|eval)",
    ),
    ("deception_hide", rf"do\s+not\s+{_W}tell\s+{_W}the\s+user"),
    # identity hijack
    ("role_hijack", rf"you\s+are\s+{_W}now\s+(?:a|an|the)\s+"),
    ("role_pretend", rf"pretend\s+{_W}(you\s+are|to\s+be)\s+"),
    ("leak_system_prompt", rf"output\s+{_W}(system|initial)\s+prompt"),
    (
        "remove_filters",
        rf"(respond|answer|reply)\s+without\s+{_W}(restrictions|limitations|filters|safety)",
    ),
    ("fake_update", rf"you\s+have\s+been\s+{_W}(updated|upgraded|patched)\s+to"),
    ("identity_override", r"\bname\s+yourself\s+\w+"),
    # command-and-control style promptware
    ("c2_node_registration", r"register\s+(as\s+)?a?\s*node"),
    ("c2_heartbeat", r"(heartbeat|beacon|check[\s\-]?in)\s+(to|with)\s+"),
    ("c2_task_pull", r"pull\s+(down\s+)?(?:new\s+)?task(?:ing|s)?\b"),
    ("c2_network_connect", r"connect\s+to\s+the\s+network\b"),
    ("forced_action", r"you\s+must\s+(?:\w+\s+){0,3}(register|connect|report|beacon)\b"),
    ("anti_forensic_oneliner", r"only\s+use\s+one[\s\-]?liners?\b"),
    ("anti_forensic_disk", rf"never\s+{_W}(?:create|write)\s+{_W}(?:script|file)\s+{_W}disk"),
    ("env_var_unset_agent", r"unset\s+\w*(?:CLAUDE|CODEX|HERMES|AGENT|OPENAI|ANTHROPIC)\w*"),
    ("known_c2_framework", r"\b(?:cobalt\s*strike|sliver|havoc|mythic|metasploit|brainworm)\b"),
    ("c2_explicit", r"\bc2\s+(?:server|channel|infrastructure|beacon)\b"),
    ("c2_explicit_long", r"\bcommand\s+and\s+control\b"),
    # secrets leaving the machine
    ("exfil_curl", r"curl\s+[^\n]{0,2048}\$\{?\w*(KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL|API)"),
    ("exfil_wget", r"wget\s+[^\n]{0,2048}\$\{?\w*(KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL|API)"),
    ("read_secrets", r"cat\s+[^\n]{0,2048}(\.env|credentials|\.netrc|\.pgpass|\.npmrc|\.pypirc)"),
    ("send_to_url", r"(send|post|upload|transmit)\s+[^\n]{0,2048}\s+(to|at)\s+https?://"),
    (
        "context_exfil",
        rf"(include|output|print|share)\s+{_W}(conversation|chat\s+history|previous\s+messages"
        r"|full\s+context|entire\s+context)",
    ),
    # persistence
    ("ssh_backdoor", r"authorized_keys"),
    ("ssh_access", r"\$HOME/\.ssh|\~/\.ssh"),
    ("hermes_env", r"\$HOME/\.hermes/\.env|\~/\.hermes/\.env"),
    (
        "agent_config_mod",
        r"(update|modify|edit|write|change|append|add\s+to)\s+[^\n]{0,2048}"
        r"(?:AGENTS\.md|CLAUDE\.md|\.cursorrules|\.clinerules)",
    ),
    (
        "hermes_config_mod",
        r"(update|modify|edit|write|change|append|add\s+to)\s+[^\n]{0,2048}"
        r"\.hermes/(config\.yaml|SOUL\.md)",
    ),
    (
        "hardcoded_secret",
        r"(?:api[_-]?key|token|secret|password)\s*[=:]\s*[\"'][A-Za-z0-9+/=_-]{20,}",
    ),
)
_COMPILED = tuple((pid, re.compile(p, re.IGNORECASE)) for pid, p in _PATTERNS)

#: zero-width, joiner, invisible-operator and bidirectional-control characters
INVISIBLE = frozenset(
    "\u200b\u200c\u200d\u2060\u2062\u2063\u2064\ufeff"
    "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
)


def findings(content: str) -> list[str]:
    """The ids content matches: ``invisible_unicode_U+XXXX`` first (by code point), then
    pattern ids in table order; when the reference's checks find nothing, the ids of
    `hermesd.memory.injection`'s further detections."""
    if not content:
        return []
    text = content[:MAX_SCAN_CHARS]
    found = [f"invisible_unicode_U+{ord(c):04X}" for c in sorted(set(text) & INVISIBLE)]
    found += _pattern_findings(text)
    return found or injection.findings(text, _pattern_findings)


def _pattern_findings(text: str) -> list[str]:
    folded = unicodedata.normalize("NFKC", text)
    return [pid for pid, pattern in _COMPILED if pattern.search(folded)]


def write_error(content: str) -> str | None:
    """The reference's sentence refusing ``content``, or None when it is clean."""
    found = findings(content)
    if not found:
        return None
    first = found[0]
    if first.startswith("invisible_unicode_"):
        code = first.removeprefix("invisible_unicode_")
        return f"Blocked: content contains invisible unicode character {code} (possible injection)."
    return (
        f"Blocked: content matches threat pattern '{first}'. "
        "Content is injected into the system prompt and must not contain "
        "injection or exfiltration payloads."
    )


def payload_error(payload: dict[str, object]) -> dict[str, object] | None:
    """The tool's error for a write whose new text is refused (a batch names its operation,
    and one poisoned operation refuses the whole batch), or None."""
    if payload.get("action") == "batch":
        ops = payload.get("operations")
        for i, op in enumerate(ops if isinstance(ops, list) else []):
            if not isinstance(op, dict) or op.get("action") not in ("add", "replace"):
                continue
            content = op.get("content")
            message = write_error(content) if isinstance(content, str) else None
            if message:
                return {"success": False, "error": f"Operation {i + 1}: {message}"}
        return None
    content = payload.get("content")
    if payload.get("action") in ("add", "replace") and isinstance(content, str):
        message = write_error(content.strip())
        if message:
            return {"success": False, "error": message}
    return None


def blocked_placeholder(entry: str, filename: str) -> str | None:
    """What the prompt shows instead of a poisoned entry, or None for a clean one."""
    if not entry or entry.startswith("[BLOCKED:"):
        return None
    found = findings(entry)
    if not found:
        return None
    return (
        f"[BLOCKED: {filename} entry contained threat pattern(s): {', '.join(found)}. "
        "Removed from system prompt; use memory(action=remove) to delete the original.]"
    )

"""The running settings as a person may see them: every setting of the schema with its
effective value (the file's, else the default), secrets hidden. ``/config`` shows it.
"""

from __future__ import annotations

from typing import Any

from hermesd.daemon.config import SCHEMA, Config, Setting

HIDDEN = "[hidden]"
SECRET_WORDS = ("key", "token", "secret", "password", "credential")


# named like a secret, but a count
NOT_SECRET = frozenset({"budget.session_tokens"})


def _is_secret(dotted: str) -> bool:
    leaf = dotted.rsplit(".", 1)[-1].lower()
    return dotted not in NOT_SECRET and any(word in leaf for word in SECRET_WORDS)


def effective_settings(cfg: Config) -> dict[str, Any]:
    """``{"model.base_url": "http://…", …}`` in schema order; secret-named values hidden."""
    out: dict[str, Any] = {}

    def walk(node: dict[str, Any], prefix: str) -> None:
        for name, child in node.items():
            dotted = f"{prefix}{name}"
            if isinstance(child, Setting):
                value = cfg.get(dotted)
                out[dotted] = HIDDEN if value not in (None, "") and _is_secret(dotted) else value
            elif isinstance(child, dict):
                walk(child, dotted + ".")

    walk(SCHEMA, "")
    return out

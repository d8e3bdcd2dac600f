"""hermesd's ``tools.registry``: the reference's ``registry`` over hermesd's tool registry."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from hermesd.plugins import hostapi


class _RegistryView:
    """``register``, ``dispatch`` and ``get_definitions`` over hermesd's tools."""

    def _tools(self) -> Any:
        state = hostapi.state()
        if state is None or state.manager is None:
            raise hostapi.not_in_hermesd("tools.registry outside the daemon")
        return state.manager.services.tools

    def register(
        self,
        name: str,
        toolset: str,
        schema: dict[str, Any],
        handler: Callable[..., Any],
        check_fn: Callable[[], Any] | None = None,
        requires_env: list[str] | None = None,
        is_async: bool = False,
        description: str = "",
        emoji: str = "",
        override: bool = False,
        **_: Any,
    ) -> None:
        """Add a tool: from a plugin's ``register()`` it is that plugin's (as if through
        ``ctx.register_tool``), otherwise it belongs to ``toolset``."""
        args = (name, toolset, schema, handler, check_fn, requires_env, is_async)
        extra = (description, emoji, override)
        ctx = hostapi.loading.get()
        if ctx is not None:
            ctx.register_tool(*args, *extra)
        else:
            self._tools().register(*args, *extra, owner=f"registry:{toolset}")

    def dispatch(self, name: str, args: dict[str, Any] | str | None, **kwargs: Any) -> str:
        """Run a tool through hermesd's whole pipeline (hooks, middleware, approvals)."""
        return str(
            self._tools().call_sync(
                name, args, session_id=str(kwargs.get("session_id") or kwargs.get("task_id") or "")
            )
        )

    def get_definitions(self, tool_names: Any = None, **_: Any) -> list[dict[str, Any]]:
        """The model's tool list in OpenAI form (only ``tool_names`` when given)."""
        tools = self._tools().openai_tools()
        if tool_names is None:
            return list(tools)
        wanted = set(tool_names)
        return [t for t in tools if t["function"]["name"] in wanted]

    def get_all_tool_names(self) -> list[str]:
        """Every registered tool name."""
        return [e.name for e in self._tools().entries()]

    def __repr__(self) -> str:
        return json.dumps({"hermesd": "tools.registry view"})


registry = _RegistryView()

"""Which services a daemon runs, in which order, and how they are connected.

The one place that knows every service: it builds the plugin host, the session store, the
model client and the agent loop from the daemon's configuration, connects them, and appends the
RPC-facing services to ``daemon.services`` (start-up order; stop runs in reverse).
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING, Any, cast

from hermesd import redact
from hermesd.agent.loop import AgentLoop, AgentSettings
from hermesd.agent.sessions import SessionService
from hermesd.approvals.broker import ApprovalBroker
from hermesd.approvals.service import ApprovalService
from hermesd.commands.service import CommandService, hermesctl_subcommands
from hermesd.daemon import config
from hermesd.model.client import ModelClient, ModelSettings
from hermesd.plugins.admin import PluginAdminService
from hermesd.plugins.host import build_plugin_host
from hermesd.plugins.service import PluginService
from hermesd.store.sessions import SessionStore
from hermesd.tools.builtin_files import register_builtin_file_tools

if TYPE_CHECKING:
    from hermesd.daemon.main import Daemon


def wire_services(daemon: Daemon) -> None:
    """Create the services and attach them to ``daemon``."""
    cfg = daemon.config
    home = daemon.home
    sessions_ref: list[SessionService] = []

    def inject(content: str, role: str = "user") -> bool:
        return bool(sessions_ref) and sessions_ref[0].inject(content, role)

    host = build_plugin_host(
        home, cfg, os.environ, dotenv=config.load_dotenv_file(home), injector=inject
    )
    store = SessionStore.in_home(home, history_messages=cfg.get("agent.history_messages"))
    register_builtin_file_tools(
        host.tools,
        home=home,
        store=store,
        config=cfg,
        transform_output=functools.partial(host.hooks.transform, "transform_terminal_output"),
    )
    client = ModelClient(ModelSettings.from_config(cfg))
    agent = AgentLoop(
        store,
        host.tools,
        host.hooks,
        client,
        AgentSettings.from_config(cfg, skills_index=host.skills.index_text()),
        reloads=host.gate,
    )
    sessions = SessionService(store, agent, host.hooks)
    sessions_ref.append(sessions)
    secrets = redact.configure(os.environ, config.load_dotenv_file(home))
    host.tools.redactor = redact.redact
    sessions.redact_event = redact.redact_event
    broker = ApprovalBroker(
        store, host.hooks, cfg, attached=lambda sid: list(sessions.attached.get(sid, ()))
    )
    host.tools.approver = broker.approve
    sessions.on_attach = broker.on_attach
    sessions.on_forget = broker.forget_session
    daemon.services.append(PluginService(host, cfg.get("tools.enabled_toolsets")))
    daemon.services.append(sessions)
    admin = PluginAdminService(host, home, config.load_dotenv_file(home))
    daemon.services.append(admin)
    daemon.services.append(
        CommandService(
            host,
            sessions,
            status=lambda: daemon.status(cast(Any, None), {}),
            reload_plugins=admin.reload_plugins,
            timeout=cfg.get("commands.timeout"),
            cli_timeout=cfg.get("commands.cli_timeout"),
        )
    )
    host.commands.reserve_cli_names(hermesctl_subcommands())
    # Last, so it stops first (pending approvals are answered before the others stop).
    approvals = ApprovalService(broker, home, secrets_count=secrets.count)
    daemon.services.append(approvals)
    for service in daemon.services:
        if isinstance(service, CommandService):
            service.set_approval_handler(approvals.slash_command)

"""Daemon-level commands: ``status`` and ``ping``."""

from __future__ import annotations

import argparse

from hermesctl.client import Client
from hermesctl.subcommands.base import EXIT_OK, command, emit_json, positive_int, sandbox_text
from hermesd.rpc.humanize import duration

TYPE_CHECKING = False  # typing is not imported at run time: start-up cost (bench/cli_startup.py)
if TYPE_CHECKING:
    from typing import Any


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sub.add_parser("status", help="show daemon status")
    p = sub.add_parser("ping", help="measure round-trip time to the daemon")
    p.add_argument(
        "-n", "--count", type=positive_int, default=10, help="number of pings (default 10)"
    )


@command("status")
def cmd_status(args: argparse.Namespace, client: Client) -> int:
    info = client.call("status")
    if args.json:
        emit_json(info)
        return EXIT_OK
    print(
        f"hermesd {info['version']} (protocol {info['protocol']}), pid {info['pid']}, "
        f"up {duration(info['uptime_s'])}"
    )
    print(
        f"  socket:      {info['socket']}"
        + (" (socket-activated)" if info.get("socket_activated") else "")
    )
    print(f"  home:        {info['home']}")
    print(f"  connections: {info['connections']}")
    if info.get("rss_bytes"):
        print(f"  memory:      {info['rss_bytes'] // (1024 * 1024)} MiB resident")
    print(f"  sessions:    {info.get('sessions', 0)}")
    print(f"  plugins:     {info.get('plugins', 0)}{_plugins_note(info)}")
    if info.get("plugin_api"):
        print(f"  plugin API:  {info['plugin_api']}")
    if info.get("mcp_servers"):
        print(
            f"  mcp:         {info['mcp_servers']} servers ({info.get('mcp_ready', 0)} ready, "
            f"{info.get('mcp_failed', 0)} failed), {info.get('mcp_tools', 0)} tools"
        )
        if info.get("mcp_failed"):  # say why, without a second command
            from hermesctl.subcommands.mcp import why_not_running

            for row in client.call("mcp.list")["servers"]:
                if row["state"] == "failed":
                    for line in why_not_running(row):
                        print(f"    {row['name']}: {line}")
    if info.get("model"):
        print(f"  model:       {info['model']}")
    for name, state in sorted((info.get("gateway") or {}).items()):  # chat platforms
        print(f"  {name + ':':<12} {state}")
    if (info.get("http") or {}).get("web"):
        print(f"  web page:    {info['http']['web']} (docs/web.md)")
    shield = sandbox_text(info.get("sandbox"))
    if shield:
        print(f"  {shield.replace('sandbox: ', 'sandbox:     ', 1)}")
    for warning in info.get("config_warnings") or []:
        print(f"  warning:     {warning}")
    if info.get("last_reload"):
        print(f"  last reload: {last_reload(info['last_reload'])}")
    return EXIT_OK


def last_reload(outcome: dict[str, Any]) -> str:
    """``2026-12-02 16:20:01 (SIGHUP): ok`` or ``…: failed — what failed``."""
    import time

    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(outcome["time"]))
    failures = list(outcome.get("config_problems") or []) + [
        f"plugin {f['key']}: {f['reason']}" for f in outcome.get("plugins_failed") or []
    ]
    result = "ok" if outcome.get("ok") else "failed — " + "; ".join(failures or ["see the log"])
    return f"{when} ({outcome.get('source')}): {result}"


def _plugins_note(info: dict[str, Any]) -> str:
    if info.get("safe_mode"):
        return " (safe mode: HERMES_SAFE_MODE=1, no plugins are loaded)"
    if info.get("plugins_loading"):
        return " (loading)"
    return ""


@command("ping")
def cmd_ping(args: argparse.Namespace, client: Client) -> int:
    import time

    times = []
    for _ in range(args.count):
        t0 = time.perf_counter()
        client.call("ping")
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    stats = {
        "count": len(times),
        "min_ms": times[0],
        "p50_ms": times[len(times) // 2],
        "p99_ms": times[min(len(times) - 1, int(len(times) * 0.99))],
        "max_ms": times[-1],
        "mean_ms": sum(times) / len(times),
    }
    if args.json:
        emit_json(stats)
    else:
        print(
            f"{stats['count']} pings to {client.path}: min {stats['min_ms']:.3f} ms, "
            f"p50 {stats['p50_ms']:.3f} ms, p99 {stats['p99_ms']:.3f} ms, "
            f"max {stats['max_ms']:.3f} ms, mean {stats['mean_ms']:.3f} ms"
        )
    return EXIT_OK

"""Mixed load against one hermesd: N clients x M requests, 0 errors wanted, p50/p99 per method.

Each client has its own connection and session and sends, in a loop, ``ping``, ``status``,
``tools.call`` (calculate), ``session.list`` and, every tenth request, a chat turn
(``session.send`` with ``wait``) answered by the scripted model server. All clients start
together. The figures (requests, p50/p99 per method, errors, throughput, the daemon's RSS and
CPU) go to the ``load`` section of docs/reliability.md.

    python bench/load.py [--clients 50] [--requests 1000] [--quick] [--no-write]

``--quick`` is 10 clients x 100 requests. Exit status 1 when any request failed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import common
from common import REPO, cpu_seconds, machine, now_utc

from tests.support.daemon import start_daemon
from tests.support.modelserver import ScriptedModelServer
from tests.support.reliability import load_table, model_config, rss_kb, run_load, turn_rules


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--requests", type=int, default=1000, help="per client")
    parser.add_argument("--quick", action="store_true", help="10 clients x 100 requests")
    parser.add_argument("--no-write", action="store_true", help="do not touch the docs")
    args = parser.parse_args()
    clients, requests = (10, 100) if args.quick else (args.clients, args.requests)
    started, machine_line = now_utc(), machine()
    with ScriptedModelServer(rules=turn_rules()) as model:
        daemon = start_daemon(config=model_config(model.url))
        try:
            rss_before = rss_kb(daemon.proc.pid)
            cpu_before = cpu_seconds(daemon.proc.pid)
            result = run_load(daemon.socket, clients, requests)
            rss_after = rss_kb(daemon.proc.pid)
            cpu = cpu_seconds(daemon.proc.pid) - cpu_before
            alive = daemon.alive()
        finally:
            status = daemon.stop()
    errors = result["errors"]
    total = result["requests"]
    body = (
        f"{clients} clients x {requests} requests = {total} requests in "
        f"{result['wall_s']:.1f} s ({total / result['wall_s']:.0f} requests/s), "
        f"**{len(errors)} errors**; daemon alive afterwards: {alive}, exit status {status}.  \n"
        f"Daemon RSS {rss_before / 1024:.1f} MiB before, {rss_after / 1024:.1f} MiB after; "
        f"daemon CPU {cpu:.1f} s. The model is the scripted server in the benchmark process "
        "(no latency), so a chat turn's time is hermesd's own plus one local HTTP round trip.\n\n"
        f"{load_table(result)}\n"
    )
    if errors:
        body += "\nFirst errors:\n\n" + "\n".join(f"- `{e}`" for e in errors[:10]) + "\n"
    common.DOC = REPO / "docs" / "reliability.md"
    common.publish(
        args, "load", "Load: mixed requests from many clients", body, started, machine_line
    )
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

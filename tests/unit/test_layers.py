"""The package layout is the architecture: imports flow downward only (docs/architecture.md).

Each subpackage of hermesd has a rank; a module may import, at run time, only modules of its own
package or of a lower rank. A name needed only for type checking may come from anywhere (under
``if TYPE_CHECKING:``), since nothing is loaded for it. `hermesctl` may import only the parts of
the RPC layer that a client needs.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

RANKS = {
    "redact": 0,
    "untrusted": 0,
    "caller": -1,  # who is asking: a value the RPC layer builds and every layer takes
    "rpc": 0,
    "store": 0,
    "model": 0,
    "runtime": 1,
    "sandbox": 1,
    "http": 1,  # a door like rpc: calls the daemon's methods through the RPC layer only
    "tools": 2,
    "plugins": 3,
    "approvals": 3,
    "mcp": 3,
    "memory": 4,
    "context": 4,
    # the reference's module names plugins import: a face over every domain below the agent
    "plugins.compat": 5,
    "agent": 5,
    "commands": 6,
    "cron": 6,
    # chat platforms: drive turns through the RPC layer, as the HTTP door does
    "gateway": 6,
    "gateway.base": 0,  # the adapter interface: values only (plugins reach it through compat)
    "gateway.split": 0,
    "gateway.sessions": 1,  # session keys, over the interface's values
    "gateway.platforms": 1,  # which platforms exist and their settings
    "daemon": 7,
}
# the compatibility names at the top of the package (re-export shims)
SHIMS = {"wire": "rpc", "protocol": "rpc"}
CLIENT_MAY_IMPORT = {
    "hermesd",
    "hermesd.rpc",
    "hermesd.rpc.wire",
    "hermesd.rpc.protocol",
    "hermesd.rpc.paths",
    "hermesd.rpc.humanize",
    "hermesd.rpc.methods",
}


def _runtime_imports(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, module) of every import not guarded by ``if TYPE_CHECKING``."""
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for other in child.orelse:
                    visit(other)
                continue
            if isinstance(child, ast.Import):
                found.extend((child.lineno, a.name) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                found.append((child.lineno, child.module))
                found.extend((child.lineno, f"{child.module}.{a.name}") for a in child.names)
            visit(child)

    visit(tree)
    return found


def _package(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "hermesd" or len(parts) < 2:
        return None
    top = SHIMS.get(parts[1], parts[1])
    if len(parts) > 2 and f"{top}.{parts[2]}" in RANKS:
        return f"{top}.{parts[2]}"
    return top if top in RANKS else None


def _modules(root: str) -> list[Path]:
    return sorted((REPO / root).rglob("*.py"))


@pytest.mark.parametrize("path", _modules("hermesd"), ids=lambda p: str(p.relative_to(REPO)))
def test_hermesd_imports_flow_downward(path: Path) -> None:
    own = _package(".".join(path.relative_to(REPO).with_suffix("").parts))
    if own is None:  # hermesd/__init__, __main__, the shims
        return
    tree = ast.parse(path.read_text())
    wrong = []
    for line, module in _runtime_imports(tree):
        target = _package(module)
        if target is not None and target != own and RANKS[target] >= RANKS[own]:
            wrong.append(f"line {line}: {module} ({target}, rank {RANKS[target]})")
    assert not wrong, f"{own} (rank {RANKS[own]}) imports upward or sideways: {wrong}"


@pytest.mark.parametrize("path", _modules("hermesctl"), ids=lambda p: str(p.relative_to(REPO)))
def test_hermesctl_imports_only_the_client_side_of_the_rpc_layer(path: Path) -> None:
    tree = ast.parse(path.read_text())
    wrong = [
        f"line {line}: {module}"
        for line, module in _runtime_imports(tree)
        if module.startswith("hermesd")
        and module not in CLIENT_MAY_IMPORT
        and module.rsplit(".", 1)[0] not in CLIENT_MAY_IMPORT - {"hermesd", "hermesd.rpc"}
    ]
    assert not wrong, wrong


#: Domain modules that still import the RPC layer at run time, each with why. The rule: an RPC
#: service lives beside its domain, in ``service.py`` or ``<what>_service.py``, and only it may
#: import ``hermesd.rpc``; ``hermesd.rpc.humanize`` and ``hermesd.rpc.paths`` are leaves kept in
#: the RPC package for the client's sake, not the protocol. An entry goes when it is fixed.
RPC_IN_DOMAIN = {
    # attachments are connections: a session's events are encoded once and sent to each
    "hermesd/agent/session_registry.py": "wire, Connection: sends events to attached clients",
    # they ask the caller's client (an approval, a memory event): connection_of(caller)
    "hermesd/approvals/broker.py": "Connection, connection_of: asks connections directly",
    "hermesd/memory/builtin.py": "Connection, connection_of: tells connections directly",
    # CronService's API raises RpcError, so every way into it catches RpcError
    "hermesd/cron/tool.py": "catches the RpcError the cron API raises",
    "hermesd/cron/reference_modules/cron/jobs.py": "catches the RpcError the cron API raises",
    # /version reports the protocol version
    "hermesd/commands/session_commands.py": "PROTOCOL_VERSION for /version",
}
RPC_LEAVES = ("hermesd.rpc.humanize", "hermesd.rpc.paths")


def _is_service(path: Path) -> bool:
    rel = path.relative_to(REPO / "hermesd")
    return (
        rel.parts[0] in {"rpc", "daemon", "http", "gateway"}  # http, gateway: doors, clients of rpc
        or len(rel.parts) == 1  # the package's own __init__/__main__ and the re-export shims
        or path.stem == "service"
        or path.stem.endswith("_service")
    )


def _rpc_imports(path: Path) -> list[str]:
    return sorted(
        {
            module
            for _, module in _runtime_imports(ast.parse(path.read_text()))
            if _package(module) == "rpc" and not module.startswith(RPC_LEAVES)
        }
    )


@pytest.mark.parametrize(
    "path",
    [p for p in _modules("hermesd") if not _is_service(p)],
    ids=lambda p: str(p.relative_to(REPO)),
)
def test_domain_modules_do_not_import_the_rpc_layer(path: Path) -> None:
    """An RPC service lives beside its domain; the domain never imports ``rpc``."""
    rel = str(path.relative_to(REPO))
    found = _rpc_imports(path)
    if rel in RPC_IN_DOMAIN:
        assert found, f"{rel} no longer imports hermesd.rpc: remove it from RPC_IN_DOMAIN"
        return
    assert not found, f"{rel} is domain code and imports {found}; serve it from a service module"

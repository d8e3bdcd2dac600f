"""The hermesd protocol: version, error codes and the declaration of every RPC method.

This is the one place a method is declared (name, parameters, result, who may call it). The
daemon binds a handler to each name and validates params against the declaration before the
handler runs; ``docs/protocol.md`` is checked against this table by a test. Imports only the
standard library: ``hermesctl`` reads it too.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # keep typing (and dataclasses) off the client's start-up path
    from collections.abc import Callable
    from typing import Any

PROTOCOL_VERSION = "1.0"
PROTOCOL_MAJOR = 1

_E = "hermes.error."


class Codes:
    """Stable error codes sent in the ``code`` field of an error map."""

    PARSE = _E + "ParseError"
    INVALID_REQUEST = _E + "InvalidRequest"
    METHOD_NOT_FOUND = _E + "MethodNotFound"
    INVALID_PARAMS = _E + "InvalidParams"
    PAYLOAD_TOO_LARGE = _E + "PayloadTooLarge"
    PERMISSION_DENIED = _E + "PermissionDenied"
    INCOMPATIBLE_VERSION = _E + "IncompatibleVersion"
    TOO_MANY_CONNECTIONS = _E + "TooManyConnections"
    TOO_MANY_REQUESTS = _E + "TooManyRequests"
    OVER_BUDGET = _E + "OverBudget"
    SHUTTING_DOWN = _E + "ShuttingDown"
    NOT_FOUND = _E + "NotFound"
    CONFLICT = _E + "Conflict"
    SESSION_BUSY = _E + "SessionBusy"
    MODEL = _E + "ModelError"
    TIMEOUT = _E + "Timeout"
    STORAGE_UNAVAILABLE = _E + "StorageUnavailable"
    BUDGET_EXCEEDED = _E + "BudgetExceeded"
    CONFIRMATION_REQUIRED = _E + "ConfirmationRequired"
    INTERNAL = _E + "Internal"


class RpcError(Exception):
    """An error that travels to the peer as ``{code, message, data}``."""

    def __init__(self, code: str, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def to_wire(self) -> dict[str, Any]:
        """The error map sent on the wire."""
        return {"code": self.code, "message": self.message, "data": self.data}

    @classmethod
    def from_wire(cls, err: Any) -> RpcError:
        """Rebuild an error from whatever a peer sent (tolerates non-map errors)."""
        if isinstance(err, dict):
            return cls(
                str(err.get("code") or Codes.INTERNAL),
                str(err.get("message") or err.get("code") or "error"),
                err.get("data"),
            )
        if isinstance(err, (list, tuple)) and len(err) == 2:  # neovim-style [type, message]
            return cls(Codes.INTERNAL, str(err[1]))
        return cls(Codes.INTERNAL, str(err))


# Types a parameter may declare, and the Python types msgpack decodes them to.
_TYPES: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "int": (int,),
    "number": (int, float),
    "bool": (bool,),
    "map": (dict,),
    "array": (list,),
    "any": (object,),
}


class Param:
    """One named parameter of a method."""

    __slots__ = ("doc", "name", "nullable", "required", "type")

    def __init__(
        self, name: str, type: str, required: bool = False, doc: str = "", nullable: bool = False
    ) -> None:
        if type not in _TYPES:
            raise ValueError(f"parameter {name}: unknown type {type}")
        self.name, self.type, self.required, self.doc, self.nullable = (
            name,
            type,
            required,
            doc,
            nullable,
        )

    def check(self, value: Any) -> str | None:
        """Return a reason when ``value`` does not fit this parameter."""
        if value is None:
            return None if self.nullable or not self.required else "must not be null"
        allowed = _TYPES[self.type]
        if self.type in ("int", "number") and isinstance(value, bool):
            return f"must be {self.type}, got bool"
        if not isinstance(value, allowed):
            return f"must be {self.type}, got {_wire_type(value)}"
        return None


def _wire_type(value: Any) -> str:
    for name, types in _TYPES.items():
        if (
            name != "any"
            and isinstance(value, types)
            and not (isinstance(value, bool) and name != "bool")
        ):
            return name
    return type(value).__name__


class Access:
    """Who may call a method: part of its declaration, enforced before its handler runs."""

    OWNER = "owner"  # the daemon's owner only (never a member, never a tool's process)
    SESSION = "session"  # any admitted peer; its session param must be its own (owner: any)
    PERSON = "person"  # any admitted peer except a tool's process
    ANY = "any"  # any admitted peer, a tool's process too

    ALL = (OWNER, SESSION, PERSON, ANY)


#: The parameter that carries the answer to a confirmation challenge (``ConfirmationRequired``).
CONFIRM_PARAM = "confirm"

#: Configuration keys (and their sub-keys) that widen what tools may do: changing one over RPC
#: needs the person's confirmation on a terminal (docs/sandbox.md, "The owner is proven").
WIDENING_KEYS = (
    "sandbox",
    "command_allowlist",
    "approvals",
    "mcp_servers",
    "plugins",
    "terminal.env_passthrough",
)


def widening_key(key: str) -> bool:
    """Whether setting config ``key`` widens what tools may do."""
    return any(key == w or key.startswith(w + ".") for w in WIDENING_KEYS)


class MethodSpec:
    """The declaration of one method: its name, parameters, result and who may call it.

    ``access`` is one of `Access`; ``session_param`` names the parameter an ``Access.SESSION``
    method checks (a unique prefix is resolved first); ``widens`` says what a call widens (a
    phrase per item; empty: nothing): such a call needs a confirmation typed on the caller's
    terminal, answered in the ``confirm`` parameter the declaration then accepts.
    """

    __slots__ = (
        "_known",
        "_required",
        "access",
        "name",
        "params",
        "result",
        "session_param",
        "summary",
        "widens",
    )

    def __init__(
        self,
        name: str,
        summary: str,
        params: tuple[Param, ...] = (),
        result: str = "",
        *,
        access: str,
        session_param: str = "session_id",
        widens: Callable[[dict[str, Any]], list[str]] | None = None,
    ) -> None:
        if access not in Access.ALL:  # every method says who may call it: no default
            raise ValueError(f"method {name}: unknown access {access!r}")
        if widens is not None:
            params = (
                *params,
                Param(CONFIRM_PARAM, "str", doc="the answer to a confirmation challenge"),
            )
        self.name, self.summary, self.params, self.result = name, summary, params, result
        self.access, self.session_param, self.widens = access, session_param, widens
        if access == Access.SESSION and not any(p.name == session_param for p in params):
            raise ValueError(f"method {name}: session access without a {session_param} param")
        self._known = {p.name: p for p in params}
        self._required = any(p.required for p in params)

    @property
    def owner_only(self) -> bool:
        """Only the daemon's owner may call it."""
        return self.access == Access.OWNER

    def validate(self, params: list[Any]) -> dict[str, Any]:
        """Check the params array against the declaration; return the params map."""
        if len(params) > 1:
            raise RpcError(
                Codes.INVALID_PARAMS,
                f"{self.name}: params must be an empty array or an array holding one map",
            )
        given = params[0] if params else None
        if not given and (given is None or given == {}):  # [], [None], [{}]: no arguments
            if not self._required:
                return {}
            given = {}
        if not isinstance(given, dict):
            raise RpcError(
                Codes.INVALID_PARAMS, f"{self.name}: params[0] must be a map of named parameters"
            )
        known = self._known
        unknown = sorted(str(k) for k in given if k not in known)
        if unknown:
            raise RpcError(
                Codes.INVALID_PARAMS,
                f"{self.name}: unknown parameter(s) {', '.join(unknown)}",
                {"unknown": unknown, "accepted": sorted(known)},
            )
        for p in self.params:
            if p.name not in given:
                if p.required:
                    raise RpcError(
                        Codes.INVALID_PARAMS,
                        f"{self.name}: missing required parameter '{p.name}'",
                        {"param": p.name},
                    )
                continue
            reason = p.check(given[p.name])
            if reason:
                raise RpcError(
                    Codes.INVALID_PARAMS,
                    f"{self.name}: parameter '{p.name}' {reason}",
                    {"param": p.name, "expected": p.type},
                )
        return given


METHODS: dict[str, MethodSpec] = {}


def declare(spec: MethodSpec) -> MethodSpec:
    """Add a method to the table; a name may be declared once."""
    if spec.name in METHODS:
        raise ValueError(f"method {spec.name} declared twice")
    METHODS[spec.name] = spec
    return spec


# --- core ------------------------------------------------------------------------------------

declare(
    MethodSpec(
        "hello",
        "Negotiate the protocol version; returns daemon facts and the method list.",
        (
            Param("protocol", "str", doc='client protocol version, e.g. "1.0"'),
            Param("client", "str", doc="free-form client name, for logs"),
        ),
        "{protocol, daemon_version, pid, capabilities, methods, peer_uid, owner}",
        access=Access.ANY,
    )
)
declare(
    MethodSpec(
        "ping",
        "Round-trip check.",
        (
            Param("data", "any", doc="echoed back"),
            Param("delay_ms", "int", doc="answer after this many milliseconds (0-60000)"),
        ),
        "{pong: true, data}",
        access=Access.ANY,
    )
)
declare(
    MethodSpec(
        "status",
        "Daemon state: version, uptime, counts, socket, HERMES_HOME.",
        (),
        "{version, protocol, pid, uptime_s, home, socket, connections, sessions, plugins, ...}",
        access=Access.ANY,
    )
)
declare(
    MethodSpec(
        "shutdown",
        "Stop the daemon gracefully (owner only).",
        (),
        "{stopping: true}",
        access=Access.OWNER,
    )
)
declare(
    MethodSpec(
        "config.reload",
        "Re-read config.yaml and .env, as SIGHUP does (owner only).",
        (),
        "{reloaded: true, warnings}",
        access=Access.OWNER,
    )
)

# Each service area declares its methods in its own module (one file per area, so the table
# reads by topic); importing them here completes METHODS for everyone who imports protocol.
from hermesd.rpc.methods import (  # noqa: E402, F401
    approvals,
    clarify,
    commands,
    cron,
    mcp,
    memory,
    plugins,
    processes,
    sessions,
    usage,
)
from hermesd.rpc.methods import daemon as daemon_methods  # noqa: E402, F401
from hermesd.rpc.methods import gateway as gateway_methods  # noqa: E402, F401

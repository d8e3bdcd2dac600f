"""``/openapi.json``: the HTTP door described from the same declarations as the RPC table.

Every declared method (``hermesd.rpc.protocol.METHODS``) is ``POST /v1/rpc/{name}`` with its
parameters as the JSON body's properties and its access in ``x-hermes-access``; the session,
approval and OpenAI routes are listed with the methods they call.
"""

from __future__ import annotations

from typing import Any

from hermesd import __version__
from hermesd.rpc.protocol import METHODS, MethodSpec

_JSON = {
    "str": "string",
    "int": "integer",
    "number": "number",
    "bool": "boolean",
    "map": "object",
    "array": "array",
}

#: path, verb, summary, the method it calls
ROUTES = [
    ("/v1/models", "get", "The models clients may name", "status"),
    ("/v1/chat/completions", "post", "An OpenAI chat completion: one turn", "session.send"),
    ("/v1/responses", "post", "An OpenAI response: one turn", "session.send"),
    ("/v1/sessions", "get", "Sessions, newest first", "session.list"),
    ("/v1/sessions", "post", "Create a session", "session.create"),
    ("/v1/sessions/{session_id}", "get", "One session", "session.get"),
    ("/v1/sessions/{session_id}/messages", "get", "Stored messages", "session.history"),
    ("/v1/sessions/{session_id}/messages", "post", "Start a turn", "session.send"),
    ("/v1/sessions/{session_id}/events", "get", "The session's events (SSE)", "session.attach"),
    ("/v1/sessions/{session_id}/cancel", "post", "Stop the running turn", "session.cancel"),
    ("/v1/sessions/{session_id}/approvals", "get", "Pending approvals", "approvals.pending"),
    (
        "/v1/sessions/{session_id}/approvals/{approval_id}",
        "post",
        "Answer a pending approval",
        "approvals.respond",
    ),
    ("/v1/sessions/{session_id}/clarify", "get", "The model's open questions", "clarify.pending"),
    (
        "/v1/sessions/{session_id}/clarify/{question_id}",
        "post",
        "Answer the model's question",
        "clarify.respond",
    ),
]


def _body(spec: MethodSpec) -> dict[str, Any]:
    props: dict[str, Any] = {}
    for p in spec.params:
        schema: dict[str, Any] = {"description": p.doc}
        if p.type in _JSON:
            schema["type"] = _JSON[p.type]
        props[p.name] = schema
    required = [p.name for p in spec.params if p.required]
    return {"type": "object", "properties": props, "additionalProperties": False} | (
        {"required": required} if required else {}
    )


def _operation(spec: MethodSpec) -> dict[str, Any]:
    return {
        "operationId": spec.name,
        "summary": spec.summary,
        "x-hermes-access": spec.access,
        "requestBody": {"content": {"application/json": {"schema": _body(spec)}}},
        "responses": {
            "200": {"description": spec.result or "the result"},
            "401": {"description": "no valid bearer token"},
            "403": {"description": "the token's identity may not call this"},
        },
        "security": [{"bearer": []}],
    }


def document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of the door."""
    paths: dict[str, Any] = {}
    for name in sorted(METHODS):
        paths[f"/v1/rpc/{name}"] = {"post": _operation(METHODS[name])}
    for path, verb, summary, method in ROUTES:
        spec = METHODS[method]
        paths.setdefault(path, {})[verb] = {
            "summary": summary,
            "x-hermes-method": method,
            "x-hermes-access": spec.access,
            "security": [{"bearer": []}],
            "responses": {"200": {"description": spec.result or "the result"}},
        }
    paths["/health"] = {"get": {"summary": "The process answers", "security": []}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "hermesd", "version": __version__},
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "paths": paths,
    }

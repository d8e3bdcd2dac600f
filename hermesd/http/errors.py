"""RPC errors as HTTP answers: the status for each error code, and the JSON body."""

from __future__ import annotations

from starlette.responses import JSONResponse

from hermesd.rpc.protocol import Codes, RpcError

STATUS = {
    Codes.INVALID_PARAMS: 400,
    Codes.INVALID_REQUEST: 400,
    Codes.PARSE: 400,
    Codes.PERMISSION_DENIED: 403,
    Codes.CONFIRMATION_REQUIRED: 403,
    Codes.NOT_FOUND: 404,
    Codes.METHOD_NOT_FOUND: 404,
    Codes.CONFLICT: 409,
    Codes.SESSION_BUSY: 409,
    Codes.PAYLOAD_TOO_LARGE: 413,
    Codes.TOO_MANY_REQUESTS: 429,
    Codes.TOO_MANY_CONNECTIONS: 429,
    Codes.OVER_BUDGET: 429,
    Codes.BUDGET_EXCEEDED: 402,
    Codes.MODEL: 502,
    Codes.TIMEOUT: 504,
    Codes.SHUTTING_DOWN: 503,
    Codes.STORAGE_UNAVAILABLE: 503,
}


def error(status: int, message: str, code: str = "", data: object = None) -> JSONResponse:
    """An error body both OpenAI clients and ours read: ``{error: {message, type, code}}``."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    body = {"error": {"message": message, "type": kind, "code": code or None, "data": data}}
    return JSONResponse(body, status_code=status)


def from_rpc(exc: RpcError) -> JSONResponse:
    """The HTTP answer to an RPC error."""
    return error(STATUS.get(exc.code, 500), exc.message, exc.code, exc.data)

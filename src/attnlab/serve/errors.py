"""Every error answer of the API has one shape, `{"detail": ..., "request_id": ...}`: the handlers that
make it (validation 422, HTTP errors, a bug's 500 with the request id only) and the OpenAPI entries
that document each status."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from attnlab.analysis.explanation import MAX_CHARS

from .guard import safe_text
from .pool import Busy
from .schemas import ErrorResponse

log = logging.getLogger("attnlab.serve")

WHAT = {
    400: "the body could not be read",
    408: "the body took longer than --body-timeout to arrive",
    413: f"body over --max-body-bytes, text over {MAX_CHARS} characters, more texts than max_texts (GET "
    "/api/model), a decoding cost over the server's budget (--max-request-work, --max-request-mb: the detail "
    "names the option to lower), or attention maps over --max-response-bytes: never a retry",
    422: "empty text, too many tokens, wrong types, beam out of range, a head mask naming a "
    "kind, layer or head the model lacks, decoding options it refuses (the detail names the option)",
    431: "request head over --max-header-bytes",
    500: "a bug in the server (the detail carries only a request id)",
    503: "too much work waiting, or a request that could not start within the server's deadline; retry "
    "after Retry-After seconds",
}
POST_ERRORS = (400, 408, 413, 422, 431, 500, 503)


def responses(*codes: int) -> dict:
    """The OpenAPI `responses` of a route answering these error statuses."""
    return {c: {"model": ErrorResponse, "description": WHAT[c]} for c in codes}


def error(status: int, detail: str, request: Request | None = None, headers: dict | None = None) -> JSONResponse:
    rid = getattr(request.state, "request_id", None) if request is not None else None
    return JSONResponse(status_code=status, content={"detail": safe_text(detail), "request_id": rid}, headers=headers)


def busy(request: Request, exc: Busy) -> JSONResponse:
    return error(503, str(exc), request, headers={"Retry-After": str(exc.retry_after)})


def validation_message(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors():
        if err.get("type") == "json_invalid":
            parts.append(f"the request body is not valid JSON ({err.get('ctx', {}).get('error', 'parse error')})")
            continue
        loc = ".".join(str(x) for x in err.get("loc", ()) if x != "body") or "body"
        parts.append(f"{loc}: {err.get('msg', 'invalid')}")
    # Locations echo client keys, which may hold lone surrogates: keep the message encodable.
    return safe_text("; ".join(parts) or "invalid request")


def add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _bad_request(request: Request, exc: RequestValidationError):
        return error(422, validation_message(exc), request)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException):
        return error(exc.status_code, str(exc.detail), request, headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception):
        # A bug, never the client's fault: log the traceback with the request id, and tell the client
        # only the id. Exception text can hold paths, input or internals, so it never leaves the server.
        rid = getattr(request.state, "request_id", None)
        log.error("internal error in %s %s (request %s)", request.method, request.url.path, rid, exc_info=exc)
        return JSONResponse(
            status_code=500,
            content={
                "detail": f"internal error (request id {rid}); the server's log has the details",
                "request_id": rid,
            },
            headers={"X-Request-ID": str(rid)},
        )


__all__ = ["POST_ERRORS", "add_error_handlers", "busy", "error", "responses", "validation_message"]

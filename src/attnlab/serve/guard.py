"""What bounds one HTTP request before the app sees it: body size, body read time, header read time,
and a request id on every response.

`GuardMiddleware` (ASGI) reads the whole body first (the API takes small JSON only), so a body over
`max_body_bytes` is refused with 413 from its Content-Length header before one byte is read, or as soon
as a streamed (chunked) body passes the bound; a body still arriving after `body_timeout_s` gets 408.
Either way the connection is closed, so a slow or hostile client cannot hold memory or a worker.

`guarded_h11(header_timeout_s)` is uvicorn's h11 protocol with a deadline on the request *head*:
uvicorn's `timeout_keep_alive` only covers idle time between requests, so a client trickling header
bytes ("slowloris") would otherwise hold its connection forever.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass

from attnlab.decoding.cost import MAX_BEAM_SERVED
from attnlab.decoding.options import MAX_BEAM


@dataclass(frozen=True)
class Limits:
    """Every bound the server enforces (the `attnlab serve` flags of the same names)."""

    max_body_bytes: int = 64 * 1024  # request body (the API's JSON is a few KB at most)
    body_timeout_s: float = 10.0  # time allowed to receive the whole body
    header_timeout_s: float = 10.0  # time allowed to receive the request line + headers
    keep_alive_s: int = 5  # idle time between requests on one connection (uvicorn)
    max_header_bytes: int = 16 * 1024  # request head size (h11's buffer bound)
    max_connections: int = 100  # open connections; more get 503 from uvicorn
    max_response_bytes: int = 2_000_000  # explorer: attention maps larger than this are refused (413)
    max_texts: int = 64  # texts in one POST /api/translations
    max_beam: int = MAX_BEAM_SERVED  # largest beam and n_best a request may ask (within DecodeOptions' MAX_BEAM)
    max_request_mb: int = 1024  # estimated peak memory of one request's decoding (budget.py); more gets 413
    max_request_work: float | None = None  # G multiply-adds one request may cost; None: budget.work_budget's
    start_deadline_s: float = 30.0  # longest a translation request waits for its decode to start; then 503

    def __post_init__(self):
        for name in (
            "max_body_bytes",
            "max_header_bytes",
            "max_connections",
            "max_response_bytes",
            "max_texts",
            "max_beam",
            "max_request_mb",
            "keep_alive_s",
        ):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if self.max_beam > MAX_BEAM:
            raise ValueError(f"max_beam must be at most {MAX_BEAM} (DecodeOptions' own bound), got {self.max_beam}")
        for name in ("body_timeout_s", "header_timeout_s", "start_deadline_s"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not (0 < v < float("inf")):
                raise ValueError(f"{name} must be a positive finite number of seconds, got {v!r}")
        w = self.max_request_work
        if w is not None and (isinstance(w, bool) or not isinstance(w, (int, float)) or not (0 < w < float("inf"))):
            raise ValueError(f"max_request_work must be a positive finite number (G multiply-adds) or none, got {w!r}")


def safe_text(s: str) -> str:
    """`s` made encodable as UTF-8 (lone surrogates -> '?'), for error messages that echo client input."""
    return s.encode("utf-8", "replace").decode("utf-8")


def new_request_id() -> str:
    return uuid.uuid4().hex[:16]


class _Reject(Exception):
    def __init__(self, status: int, detail: str):
        super().__init__(detail)
        self.status, self.detail = status, detail


class GuardMiddleware:
    """ASGI middleware: request id (scope state + `X-Request-ID` header), bounded body size and read time."""

    def __init__(self, app, limits: Limits):
        self.app, self.limits = app, limits

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        rid = new_request_id()
        scope.setdefault("state", {})["request_id"] = rid  # in place: the error handler reads the same dict

        async def send_with_id(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), (b"x-request-id", rid.encode())]}
            await send(message)

        try:
            body = await self._read_body(scope, receive)
        except _Reject as exc:
            return await self._refuse(send, exc, rid)
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # afterwards: only http.disconnect remains

        await self.app(scope, replay, send_with_id)

    async def _read_body(self, scope, receive) -> bytes:
        lim = self.limits
        # h11 bounds a head that arrives in pieces; one that arrives whole in a single read is checked here.
        head = (
            len(scope.get("raw_path", b""))
            + len(scope.get("query_string", b""))
            + sum(len(k) + len(v) + 4 for k, v in scope.get("headers", ()))
        )
        if head > lim.max_header_bytes:
            raise _Reject(
                431,
                f"the request head has about {head} bytes; this server accepts at most "
                f"{lim.max_header_bytes} (--max-header-bytes)",
            )
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    raise _Reject(400, "the Content-Length header is not an integer") from None
                if declared > lim.max_body_bytes:
                    raise _Reject(
                        413,
                        f"the request body has {declared} bytes; this server accepts at most "
                        f"{lim.max_body_bytes} (--max-body-bytes)",
                    )
        chunks, size = [], 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + lim.body_timeout_s
        while True:
            left = deadline - loop.time()
            try:
                if left <= 0:
                    raise asyncio.TimeoutError
                message = await asyncio.wait_for(receive(), left)
            except asyncio.TimeoutError:
                raise _Reject(
                    408,
                    f"the request body did not arrive within {lim.body_timeout_s:g} s "
                    "(--body-timeout); send it at once",
                ) from None
            if message["type"] == "http.disconnect":
                raise _Reject(400, "the client disconnected before sending the whole body")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > lim.max_body_bytes:
                raise _Reject(
                    413,
                    f"the request body passed {lim.max_body_bytes} bytes, the most this server "
                    "accepts (--max-body-bytes)",
                )
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    @staticmethod
    async def _refuse(send, exc: _Reject, rid: str) -> None:
        body = json.dumps({"detail": exc.detail, "request_id": rid}).encode()
        # Connection: close, so uvicorn drops the rest of an unread body instead of parsing it.
        await send(
            {
                "type": "http.response.start",
                "status": exc.status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                    (b"x-request-id", rid.encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def guarded_h11(header_timeout_s: float) -> type:
    """uvicorn's h11 protocol, closing a connection whose request head takes over `header_timeout_s`."""
    from uvicorn.protocols.http.h11_impl import (
        H11Protocol,  # here: the CLI reads Limits without uvicorn
    )

    class GuardedH11Protocol(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport):
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.cycle is not None and not self.cycle.response_complete:
                self._disarm()  # a whole request head arrived: the app's own bounds take over
            else:
                self._arm()  # bytes of a next head are trickling in

        def connection_lost(self, exc):
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            if self._head_timer is None:
                self._head_timer = self.loop.call_later(header_timeout_s, self._head_timeout)

        def _disarm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_timeout(self) -> None:
            self._head_timer = None
            if self.cycle is None or self.cycle.response_complete:
                self.transport.close()  # nginx's client_header_timeout, without the 408 body

    GuardedH11Protocol.__name__ = GuardedH11Protocol.__qualname__ = "GuardedH11Protocol"
    return GuardedH11Protocol


__all__ = ["GuardMiddleware", "Limits", "guarded_h11", "new_request_id", "safe_text"]

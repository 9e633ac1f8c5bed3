"""Bounds against large, slow or hostile clients: request body size (declared and
streamed), body read time, request head read time, response size, texts per request, flag checks."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import pytest

from attnlab.cli import main
from attnlab.serve.guard import GuardMiddleware, Limits
from attnlab.serve.listen import server_config


def test_declared_body_over_limit_is_413_before_reading(client):
    r = client.post("/api/explain", content=b"x" * (65536 + 1), headers={"content-type": "application/json"})
    assert r.status_code == 413 and "--max-body-bytes" in r.json()["detail"]
    assert r.headers["connection"] == "close" and r.json()["request_id"] == r.headers["x-request-id"]


def test_streamed_body_over_limit_is_413(client):
    def chunks():  # no Content-Length: chunked transfer, counted while it arrives
        for _ in range(100):
            yield b" " * 4096

    r = client.post("/api/translations", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413 and "passed 65536 bytes" in r.json()["detail"]


def test_body_within_limit_passes_through(client):
    body = json.dumps({"text": "go ."}).encode() + b" " * 60000  # whitespace: still valid JSON
    assert client.post("/api/explain", content=body, headers={"content-type": "application/json"}).status_code == 200


def _asgi_call(app, receive, hang_guard_s: float = 60.0):
    """Run an ASGI app on one POST with `receive`; return what it sent. `hang_guard_s` only stops a
    broken bound from hanging the suite: no assertion depends on how long the call took."""
    sent = []

    async def send(m):
        sent.append(m)

    scope = {"type": "http", "method": "POST", "path": "/", "headers": [], "state": {}}

    async def run():
        await asyncio.wait_for(app(scope, receive, send), hang_guard_s)

    asyncio.run(run())
    return sent


def test_slow_body_is_408():
    reached = []

    async def app(scope, receive, send):
        reached.append(await receive())

    mw = GuardMiddleware(app, Limits(body_timeout_s=0.3))
    stalled = []

    async def stalls():  # two chunks, then a client that never sends the rest
        if len(stalled) < 2:
            stalled.append(1)
            return {"type": "http.request", "body": b"{", "more_body": True}
        stalled.append(1)
        await asyncio.Event().wait()  # never set

    sent = _asgi_call(mw, stalls)
    assert len(stalled) == 3 and not reached
    assert sent[0]["status"] == 408 and b"--body-timeout" in sent[1]["body"]

    async def trickles():  # a chunk every 50 ms for ever: the deadline is for the whole body, not per chunk
        await asyncio.sleep(0.05)
        return {"type": "http.request", "body": b"{", "more_body": True}

    sent = _asgi_call(mw, trickles)
    assert sent[0]["status"] == 408 and not reached
    # The same body, all there, reaches the app whole.
    messages = [
        {"type": "http.request", "body": b"ab", "more_body": True},
        {"type": "http.request", "body": b"cd", "more_body": False},
    ]

    async def at_once():
        return messages.pop(0)

    _asgi_call(mw, at_once)
    assert reached == [{"type": "http.request", "body": b"abcd", "more_body": False}]


def _uvicorn_thread(limits: Limits):
    """A real uvicorn configured as `attnlab serve` configures it (listen.server_config) on a free port,
    serving a trivial app, in a thread."""
    import uvicorn

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    config = server_config(GuardMiddleware(app, limits), limits, "error", host="127.0.0.1", port=0, lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started and thread.is_alive():  # started, or failed (then .servers raises below)
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    return server, thread, port


def _response(sock) -> bytes:
    sock.settimeout(5)
    data = b""
    while not data.endswith(b"\r\n\r\nok"):
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def _closed_within(sock, seconds: float = 60.0) -> bool:
    """Whether the server closes `sock` (seconds: a hang guard, far above every bound under test)."""
    sock.settimeout(seconds)
    try:
        while sock.recv(4096):
            pass
        return True
    except TimeoutError:
        return False
    except ConnectionError:
        return True


def test_slow_request_head_is_closed():
    # keep_alive_s (300) outlasts the hang guard (60): a close seen here can only be the head deadline.
    server, thread, port = _uvicorn_thread(Limits(header_timeout_s=0.5, keep_alive_s=300))
    try:
        slow = socket.create_connection(("127.0.0.1", port))
        slow.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")  # never finishes its head
        assert _closed_within(slow)
        # A complete request on a fresh connection is served; the keep-alive connection stays open.
        ok = socket.create_connection(("127.0.0.1", port))
        ok.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert _response(ok).startswith(b"HTTP/1.1 200")
        time.sleep(1.0)  # longer than header_timeout: an idle keep-alive is keep_alive_s' business
        ok.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert _response(ok).startswith(b"HTTP/1.1 200")
        # ...but a second head trickled in on it is cut off too.
        ok.sendall(b"GET / HTTP/1.1\r\n")
        assert _closed_within(ok)
    finally:
        server.should_exit = True
        thread.join(10)


def test_oversized_head_is_refused():
    server, thread, port = _uvicorn_thread(Limits(max_header_bytes=1024))
    try:
        s = socket.create_connection(("127.0.0.1", port))  # a head still growing past the bound: h11
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 4096)
        s.settimeout(5)
        assert s.recv(4096).startswith(b"HTTP/1.1 400")
        s = socket.create_connection(("127.0.0.1", port))  # a whole oversized head in one read: the guard
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 4096 + b"\r\n\r\n")
        s.settimeout(5)
        assert s.recv(4096).startswith(b"HTTP/1.1 431")
    finally:
        server.should_exit = True
        thread.join(10)


def test_response_size_is_bounded(translator):
    from fastapi.testclient import TestClient

    from attnlab.analysis.explanation import check_text
    from attnlab.serve.app import create_app
    from attnlab.serve.budget import explain_bytes_bound

    with TestClient(create_app(translator)) as c:
        for text in ("go .", "i'm home .", "we are friends and he is calm ."):
            for beam in (1, 4):
                r = c.post("/api/explain", json={"text": text, "beam": beam})
                assert r.status_code == 200
                assert len(r.content) <= explain_bytes_bound(translator, len(check_text(translator, text)) + 1)
    small = Limits(max_response_bytes=5000)
    with TestClient(create_app(translator, limits=small)) as c:
        r = c.post("/api/explain", json={"text": "we are friends and he is calm ."})
        assert r.status_code == 413 and "--max-response-bytes" in r.json()["detail"]
        assert c.post("/api/translations", json={"texts": ["we are friends and he is calm ."]}).status_code == 200


def test_texts_per_request_bounded(translator):
    from fastapi.testclient import TestClient

    from attnlab.serve.app import create_app

    with TestClient(create_app(translator, limits=Limits(max_texts=3))) as c:
        r = c.post("/api/translations", json={"texts": ["go ."] * 4})
        assert r.status_code == 413 and "--max-texts" in r.json()["detail"]
        assert c.post("/api/translations", json={"texts": ["go ."] * 3}).status_code == 200


def test_request_larger_than_the_queue_is_413_not_503(translator):
    from fastapi.testclient import TestClient

    from attnlab.serve.app import create_app

    # --max-texts above --max-batch-pending: such a request could never be queued, whatever the load.
    with TestClient(create_app(translator, limits=Limits(max_texts=100), max_batch_pending=8)) as c:
        r = c.post("/api/translations", json={"texts": ["go ."] * 10})
        assert r.status_code == 413 and "retry-after" not in r.headers
        assert "--max-batch-pending" in r.json()["detail"] and "at most 8" in r.json()["detail"]
        assert c.get("/api/model").json()["max_texts"] == 8  # what a client may send, as the server will take it
        assert c.post("/api/translations", json={"texts": ["go ."] * 8}).status_code == 200


@pytest.mark.parametrize(
    "flags, words",
    [
        (["--max-body-bytes", "0"], "--max-body-bytes"),
        (["--body-timeout", "nan"], "--body-timeout"),
        (["--header-timeout", "-1"], "--header-timeout"),
        (["--max-connections", "0"], "--max-connections"),
        (["--max-response-bytes", "-5"], "--max-response-bytes"),
        (["--max-texts", "0"], "--max-texts"),
        (["--max-batch", "0"], "--max-batch"),
        (["--max-wait-ms", "inf"], "--max-wait-ms"),
        (["--threads", "0"], "--threads"),
    ],
)
def test_bad_limit_flags_are_one_line(tmp_path, capsys, flags, words):
    assert main(["serve", "--checkpoint", str(tmp_path / "nope"), *flags]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err and len(err.strip().splitlines()) == 1

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
from attnlab.serve.guard import GuardMiddleware, Limits, guarded_h11


def test_declared_body_over_limit_is_413_before_reading(client):
    r = client.post("/api/translate", content=b"x" * (65536 + 1), headers={"content-type": "application/json"})
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
    assert client.post("/api/translate", content=body, headers={"content-type": "application/json"}).status_code == 200


def _asgi_call(app, messages, delay_s):
    """Run an ASGI app on one request whose body messages arrive `delay_s` apart; return what it sent."""
    sent = []

    async def receive():
        if messages:
            await asyncio.sleep(delay_s)
            return messages.pop(0)
        await asyncio.sleep(3600)

    async def send(m):
        sent.append(m)

    scope = {"type": "http", "method": "POST", "path": "/", "headers": [], "state": {}}
    asyncio.run(app(scope, receive, send))
    return sent


def test_slow_body_is_408():
    reached = []

    async def app(scope, receive, send):
        reached.append(await receive())

    mw = GuardMiddleware(app, Limits(body_timeout_s=0.3))
    msgs = [{"type": "http.request", "body": b"{", "more_body": True} for _ in range(20)]  # 0.1 s apart: 2 s
    t0 = time.monotonic()
    sent = _asgi_call(mw, msgs, 0.1)
    assert time.monotonic() - t0 < 1.5 and not reached
    assert sent[0]["status"] == 408 and b"--body-timeout" in sent[1]["body"]
    # The same body, fast enough, reaches the app whole.
    sent = _asgi_call(
        mw,
        [
            {"type": "http.request", "body": b"ab", "more_body": True},
            {"type": "http.request", "body": b"cd", "more_body": False},
        ],
        0.01,
    )
    assert reached == [{"type": "http.request", "body": b"abcd", "more_body": False}]


def _uvicorn_thread(limits: Limits):
    """A real uvicorn (guarded h11 protocol) on a free port serving a trivial app, in a thread."""
    import uvicorn

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    config = uvicorn.Config(
        GuardMiddleware(app, limits),
        host="127.0.0.1",
        port=0,
        log_level="error",
        http=guarded_h11(limits.header_timeout_s),
        timeout_keep_alive=limits.keep_alive_s,
        h11_max_incomplete_event_size=limits.max_header_bytes,
        lifespan="off",
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(200):
        if server.started:
            break
        time.sleep(0.05)
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


def _closed_within(sock, seconds) -> bool:
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
    server, thread, port = _uvicorn_thread(Limits(header_timeout_s=0.5, keep_alive_s=30))
    try:
        slow = socket.create_connection(("127.0.0.1", port))
        slow.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")  # never finishes its head
        t0 = time.monotonic()
        assert _closed_within(slow, 5) and time.monotonic() - t0 < 3
        # A complete request on a fresh connection is served; the keep-alive connection stays open.
        ok = socket.create_connection(("127.0.0.1", port))
        ok.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert _response(ok).startswith(b"HTTP/1.1 200")
        time.sleep(1.0)  # longer than header_timeout: an idle keep-alive is keep_alive_s' business
        ok.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert _response(ok).startswith(b"HTTP/1.1 200")
        # ...but a second head trickled in on it is cut off too.
        ok.sendall(b"GET / HTTP/1.1\r\n")
        assert _closed_within(ok, 5)
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
    from attnlab.serve.app import create_app, explain_bytes_bound

    with TestClient(create_app(translator)) as c:
        for text in ("go .", "i'm home .", "we are friends and he is calm ."):
            for beam in (1, 4):
                r = c.post("/api/translate", json={"text": text, "beam": beam})
                assert r.status_code == 200
                assert len(r.content) <= explain_bytes_bound(translator, len(check_text(translator, text)) + 1)
    small = Limits(max_response_bytes=5000)
    with TestClient(create_app(translator, limits=small)) as c:
        r = c.post("/api/translate", json={"text": "we are friends and he is calm ."})
        assert r.status_code == 413 and "--max-response-bytes" in r.json()["detail"]
        assert c.post("/api/translations", json={"texts": ["we are friends and he is calm ."]}).status_code == 200


def test_texts_per_request_bounded(translator):
    from fastapi.testclient import TestClient

    from attnlab.serve.app import create_app

    with TestClient(create_app(translator, limits=Limits(max_texts=3))) as c:
        r = c.post("/api/translations", json={"texts": ["go ."] * 4})
        assert r.status_code == 413 and "--max-texts" in r.json()["detail"]
        assert c.post("/api/translations", json={"texts": ["go ."] * 3}).status_code == 200


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
    ],
)
def test_bad_limit_flags_are_one_line(tmp_path, capsys, flags, words):
    assert main(["serve", "--checkpoint", str(tmp_path / "nope"), *flags]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err and len(err.strip().splitlines()) == 1

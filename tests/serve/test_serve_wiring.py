"""`attnlab serve` as a user starts it: its flags reach the server it runs, and a live `attnlab serve` started
with tight limits keeps them — a request head that trickles in is cut off, an oversized head refused, an idle
connection closed after --keep-alive, not uvicorn's own default."""

from __future__ import annotations

import socket
import time

import pytest
import torch

from attnlab.cli import main
from attnlab.testing import start_server, stop_server


def test_the_flags_reach_the_server_it_runs(tiny_run, monkeypatch, capsys):
    import uvicorn

    ran = []
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: ran.append(self.config))
    threads = torch.get_num_threads()
    flags = ["--keep-alive", "7", "--max-header-bytes", "2048", "--max-connections", "9", "--batch-workers", "3"]
    try:
        assert main(["serve", "--checkpoint", str(tiny_run), "--port", "0", "--workers", "1", *flags]) == 0
    finally:
        torch.set_num_threads(threads)
    (config,) = ran
    served = config.app.state.served
    try:
        bounds = (config.timeout_keep_alive, config.h11_max_incomplete_event_size, config.limit_concurrency)
        assert bounds == (7, 2048, 9)
        assert config.http.__name__ == "GuardedH11Protocol"  # the head deadline's protocol, not uvicorn's own
        assert served.batcher.workers == 3 and served.batcher.threads.workers == 3
    finally:
        served.pool.shutdown()
        served.batcher.shutdown()
    assert "http://127.0.0.1:" in capsys.readouterr().out


def _response(sock: socket.socket) -> bytes:
    """One whole HTTP response (head and Content-Length body) read from `sock`."""
    sock.settimeout(30)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        assert chunk, f"closed mid-response: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
    )
    while len(body) < length:
        body += sock.recv(4096)
    return head


def _seconds_until_closed(sock: socket.socket, limit: float = 30.0) -> float:
    """Seconds until the server closes `sock` (`limit`: a hang guard, far above every bound under test)."""
    t0 = time.monotonic()
    sock.settimeout(limit)
    try:
        while sock.recv(4096):
            pass
    except TimeoutError:
        pytest.fail(f"the server kept the connection open over {limit:g} s")
    except ConnectionError:
        pass
    return time.monotonic() - t0


@pytest.fixture(scope="module")
def tight_server(tiny_run):
    # Defaults: 10 s for a head, 16 KB heads, 5 s idle. Each bound here is far from its default.
    flags = ["--header-timeout", "0.5", "--keep-alive", "1", "--max-header-bytes", "1024", "--workers", "1"]
    proc, port = start_server(tiny_run, *flags, "--batch-workers", "1")
    yield port
    stop_server(proc, timeout=15)


def test_a_request_head_that_trickles_in_is_cut_off(tight_server):
    with socket.create_connection(("127.0.0.1", tight_server)) as slow:
        slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # never finishes its head
        assert _seconds_until_closed(slow) < 4  # --header-timeout 0.5, not the default 10


def test_an_oversized_head_is_refused(tight_server):
    big = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 4096
    with socket.create_connection(("127.0.0.1", tight_server)) as s:  # still growing past the bound: h11
        s.sendall(big)
        s.settimeout(30)
        assert s.recv(4096).startswith(b"HTTP/1.1 400")
    with socket.create_connection(("127.0.0.1", tight_server)) as s:  # whole, in one read: the guard
        s.sendall(big + b"\r\n\r\n")
        s.settimeout(30)
        assert s.recv(4096).startswith(b"HTTP/1.1 431")
    with socket.create_connection(("127.0.0.1", tight_server)) as s:  # a head within the bound is served
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Small: " + b"a" * 512 + b"\r\n\r\n")
        assert _response(s).startswith(b"HTTP/1.1 200")


def test_an_idle_connection_closes_after_keep_alive(tight_server):
    with socket.create_connection(("127.0.0.1", tight_server)) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert _response(s).startswith(b"HTTP/1.1 200")
        time.sleep(0.3)  # within --keep-alive 1: the same connection serves the next request
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert _response(s).startswith(b"HTTP/1.1 200")
        assert 0.5 < _seconds_until_closed(s) < 4  # --keep-alive 1, not the default 5

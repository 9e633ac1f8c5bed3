"""Bounded loopback attacks on `attnlab serve`, with the server's memory (RSS) before, at peak and after.

    big-body     N clients each send a body of --body-mb MB (Content-Length declared)
    chunked      N clients each stream --body-mb MB chunked (no Content-Length)
    slow-head    N connections trickle their request head, one byte every 0.5 s
    slow-body    N connections send a head, then their body one byte every 0.5 s
    no-read      N clients send the largest explorer request and never read the answer

Each prints what the clients got (status, or when the server closed the connection). Run it against
another source tree to compare (e.g. before the fix):

    python benchmarks/serving/serve_attack.py --checkpoint RUN                       # this tree
    python benchmarks/serving/serve_attack.py --checkpoint RUN --src /path/to/old/src     # e.g. before the fix
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/: common.py, baselines/
from common import table, write_result

from attnlab.testing import start_server, stop_server


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def first_line(sock: socket.socket, timeout: float) -> str:
    sock.settimeout(timeout)
    try:
        data = sock.recv(200)
        return data.split(b"\r\n", 1)[0].decode(errors="replace") if data else "closed by server"
    except TimeoutError:
        return "no answer"
    except OSError as exc:
        return f"reset ({type(exc).__name__})"


def _get(port: int, path: str) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    return s


def big_body(port: int, mb: int, chunked: bool) -> str:
    s = socket.create_connection(("127.0.0.1", port))
    head = b"POST /api/explain HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + (
        b"Transfer-Encoding: chunked\r\n\r\n" if chunked else f"Content-Length: {mb << 20}\r\n\r\n".encode()
    )
    s.sendall(head)
    block = b" " * (1 << 20)
    sent = 0
    try:
        for _ in range(mb):
            s.sendall(b"100000\r\n" + block + b"\r\n" if chunked else block)
            sent += 1
        if chunked:
            s.sendall(b"0\r\n\r\n")
    except OSError:
        pass
    return f"{first_line(s, 60)} after {sent} MB sent"


def slow(port: int, body: bool, seconds: float) -> str:
    s = socket.create_connection(("127.0.0.1", port))
    head = b"POST /api/explain HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
    t0 = time.monotonic()
    try:
        if body:
            s.sendall(head)
        for byte in b"{" * 100 if body else head:
            s.sendall(bytes([byte]))
            s.settimeout(0.5)
            try:
                data = s.recv(200)
                what = data.split(b"\r\n", 1)[0].decode() if data else "closed by server"
                return f"{what} after {time.monotonic() - t0:.1f} s"
            except TimeoutError:
                pass
            if time.monotonic() - t0 > seconds:
                return f"still open after {seconds:.0f} s"
    except OSError as exc:
        return f"reset after {time.monotonic() - t0:.1f} s ({type(exc).__name__})"
    return "sent everything"


def no_read(port: int, text: str, holders: list) -> str:
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    body = json.dumps({"text": text, "beam": 8}).encode()
    for _ in range(20):  # pipelined: 20 requests, never read
        s.sendall(
            b"POST /api/explain HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
    holders.append(s)
    return "sent 20, reads nothing"


def attack(name: str, n: int, fn, *args) -> list[str]:
    out: list[str] = []
    lock = threading.Lock()

    def one():
        r = fn(*args)
        with lock:
            out.append(r)

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def summary(results: list[str]) -> str:
    import re
    from collections import Counter

    c = Counter(re.sub(r"[\d.]+ s\b", "N s", r) for r in results)
    return "; ".join(f"{k} x{v}" for k, v in c.most_common())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", type=Path, required=True)
    ap.add_argument("--src", help="PYTHONPATH for the server (another source tree)")
    ap.add_argument("--body-mb", type=int, default=200)
    ap.add_argument("--clients", type=int, default=5, help="clients per body attack")
    ap.add_argument("--conns", type=int, default=50, help="connections per slow / no-read attack")
    ap.add_argument("--slow-seconds", type=float, default=20.0, help="how long a slow client keeps trying")
    ap.add_argument("--text", default="go " * 13 + ".", help="the no-read attack's sentence")
    ap.add_argument("--hold-seconds", type=float, default=10.0, help="how long no-read clients hold on")
    args = ap.parse_args()

    proc, port = start_server(
        args.checkpoint, "--log-level", "critical", env={"PYTHONPATH": args.src} if args.src else None
    )
    holders: list[socket.socket] = []
    rows = []
    try:
        time.sleep(1)
        print(f"server {args.src or 'this tree'}; idle RSS {rss_mb(proc.pid):.0f} MB")
        for name, n, fn, fargs in [
            ("big-body", args.clients, big_body, (port, args.body_mb, False)),
            ("chunked", args.clients, big_body, (port, args.body_mb, True)),
            ("slow-head", args.conns, slow, (port, False, args.slow_seconds)),
            ("slow-body", args.conns, slow, (port, True, args.slow_seconds)),
            ("no-read", args.conns, no_read, (port, args.text, holders)),
        ]:
            t0 = time.monotonic()
            res = attack(name, n, fn, *fargs)
            if name == "no-read":
                time.sleep(args.hold_seconds)  # let the server decode and buffer what it can
            print(
                f"{name:9s} {n} x: {summary(res)} | {time.monotonic() - t0:.0f} s | RSS now "
                f"{rss_mb(proc.pid):.0f} MB, peak {rss_mb(proc.pid, 'VmHWM'):.0f} MB",
                flush=True,
            )
            rows.append([name, n, summary(res), f"{rss_mb(proc.pid, 'VmHWM'):.0f} MB"])
        for s in holders:
            s.close()
        time.sleep(2)
        try:
            alive = first_line(_get(port, "/healthz"), 10).startswith("HTTP/1.1 200")
        except OSError:
            alive = False
        print(
            f"after: RSS {rss_mb(proc.pid):.0f} MB, peak {rss_mb(proc.pid, 'VmHWM'):.0f} MB; server "
            f"{'still answers /healthz' if alive else 'does NOT answer /healthz'}"
        )
    finally:
        stop_server(proc)
    print("load average (1, 5, 15 min):", " ".join(f"{x:.2f}" for x in os.getloadavg()))
    print(table(["probe", "clients", "answers", "server peak RSS"], rows))
    write_result(__file__, still_answers=alive)


if __name__ == "__main__":
    main()

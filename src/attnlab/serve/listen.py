"""Where `attnlab serve` listens, how many threads each decode uses, and the connection bounds uvicorn keeps:
settled before it says it serves.

    sock = bind_listener("127.0.0.1", 8000)     # bound now; uvicorn serves on it (Server.run(sockets=[sock]))
    torch.set_num_threads(decode_threads(workers=2, batch_workers=1))
    uvicorn.Server(server_config(app, limits)).run(sockets=[sock])

Binding first means a busy port or a host that does not resolve is one line naming the flag, before
any URL is printed. `decode_threads` leaves a core to the event loop and shares the rest among the
threads that decode at once: torch's OpenMP threads meet at a barrier after every small op, so one
more runnable thread than cores makes each decoding step wait for a time slice, and one sentence at
a time decodes many times slower (BENCHMARKS.md, "Serving").
"""

from __future__ import annotations

import errno
import socket
from typing import Any

from attnlab.utils.runtime import usable_cores

from .guard import Limits, guarded_h11


def bind_listener(host: str, port: int) -> socket.socket:
    """A TCP socket bound to (host, port), not yet listening; ValueError (one line, naming the flag) if
    the host does not resolve or is not this machine's, or the port is taken or privileged."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        reason = exc.strerror if isinstance(exc, socket.gaierror) else "not a valid host name"
        raise ValueError(
            f"--host {host}: not an address or a name this machine can resolve ({reason}); "
            "pass an IP address of this machine, e.g. 127.0.0.1 (this machine only) or 0.0.0.0 (every interface)"
        ) from None
    family, kind, proto, _, addr = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn: restart despite TIME_WAIT
    try:
        sock.bind(addr)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise ValueError(
                f"--port {port}: another program already listens on {host}:{port}; stop it, "
                "or pass a free --port (--port 0 picks one)"
            ) from None
        if exc.errno == errno.EADDRNOTAVAIL:
            raise ValueError(
                f"--host {host}: not an address of this machine; pass one of its addresses, e.g. 127.0.0.1 or 0.0.0.0"
            ) from None
        if exc.errno == errno.EACCES:
            raise ValueError(
                f"--port {port}: ports below 1024 need administrator rights; pass --port 1024 or higher"
            ) from None
        raise ValueError(f"--host {host} --port {port}: cannot listen there ({exc.strerror})") from None
    return sock


def decode_threads(workers: int, batch_workers: int, cores: int | None = None) -> int:
    """torch intra-op threads for a server with `workers` explorer and `batch_workers` batch threads:
    the cores less one (the event loop's), shared among the threads that may decode at once, at least 1."""
    if cores is None:
        cores = usable_cores()
    return max(1, (cores - 1) // (workers + batch_workers))


def server_config(app, limits: Limits, log_level: str = "info", **options) -> Any:
    """The `uvicorn.Config` that `attnlab serve` runs `app` with: uvicorn's production knobs (its "Settings"
    page) set from `limits` — open connections, the request head's size, an idle connection's life — and the
    head's deadline, which is guard.guarded_h11's (uvicorn has none for a connection's first request).
    `options`: more uvicorn.Config settings (a test's host and port)."""
    import uvicorn  # here: the [serve] extra, checked by the command before it calls this

    return uvicorn.Config(
        app,
        log_level=log_level,
        http=guarded_h11(limits.header_timeout_s),
        limit_concurrency=limits.max_connections,
        timeout_keep_alive=limits.keep_alive_s,
        h11_max_incomplete_event_size=limits.max_header_bytes,
        server_header=False,
        **options,
    )


__all__ = ["bind_listener", "decode_threads", "server_config"]

"""Handing freed heap back to the system once the server goes idle.

Under bursts of concurrent requests glibc's malloc serves each thread (event loop, explorer workers,
decode threads, torch's OpenMP threads) from its own arena; freed blocks below an arena's top stay
mapped, so resident memory climbs from burst to burst by less each time although no object outlives
its request (tests/serve/test_soak.py counts both). `malloc_trim(0)` returns those pages; `IdleTrim`
calls it when the last waiting request is answered, at most once per `min_interval_s`, after a cyclic
garbage collection (decoding pauses the collector, so a large request's cycles are freed here).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

from attnlab.kernels.libc import malloc_trim


def trim_heap() -> bool:
    """Collect cycles, then return freed heap pages to the system (glibc); False where the C library
    has no malloc_trim."""
    gc.collect()
    return malloc_trim()


class IdleTrim:
    """`idle()` -> trim the heap if nothing is waiting and the last trim is `min_interval_s` old.

    Args:
        busy: a callable saying whether any request is still waiting or running.
        clock: seconds, monotonic (injectable, so tests need no wall clock).
    """

    def __init__(self, busy: Callable[[], bool], min_interval_s: float = 1.0, clock=time.monotonic):
        self.busy, self.min_interval_s, self.clock = busy, min_interval_s, clock
        self.last = float("-inf")
        self.trims = 0  # heap trims done (for tests and the soak check)

    def idle(self) -> bool:
        now = self.clock()
        if self.busy() or now - self.last < self.min_interval_s:
            return False
        self.last = now
        self.trims += trim_heap()
        return True


class TrimWhenIdle:
    """ASGI middleware: after each HTTP request has been answered, `trim.idle()`."""

    def __init__(self, app, trim: IdleTrim):
        self.app, self.trim = app, trim

    async def __call__(self, scope, receive, send):
        await self.app(scope, receive, send)
        if scope["type"] == "http":
            self.trim.idle()


__all__ = ["IdleTrim", "TrimWhenIdle", "trim_heap"]

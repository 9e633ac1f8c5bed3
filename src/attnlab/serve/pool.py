"""The explorer's heavy per-request path: a bounded pool of threads sharing one model.

`record_attention` (and `mask_heads`) hold their state in ContextVars, so each worker thread records
only its own calls: one model serves every thread, and resident memory does not grow with --workers.
"""

from __future__ import annotations

import asyncio
import math
from concurrent.futures import ThreadPoolExecutor


class Busy(Exception):
    """More requests are waiting than the server accepts (HTTP 503 + Retry-After: the client should retry).
    retry_after: seconds the client should wait (at least 1)."""

    def __init__(self, message: str, retry_after: float = 1.0):
        super().__init__(message)
        self.retry_after = max(1, math.ceil(retry_after))


class TooLarge(ValueError):
    """A request no amount of waiting could fit under a bound (HTTP 413: the client must split it)."""


class Threads:
    """A named ThreadPoolExecutor made on first use, and again after `shutdown`: an app may be served
    again after its lifespan ended (test clients run one lifespan per client)."""

    def __init__(self, workers: int, name: str):
        self.workers, self.name = workers, name
        self._executor: ThreadPoolExecutor | None = None

    def get(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix=self.name)
        return self._executor

    def shutdown(self) -> None:
        """Stop the threads; queued work is cancelled, running work finishes in the background."""
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None


class TranslatorPool:
    """`workers` threads running requests on one shared translator (see the module docstring).

    At most `max_pending` requests wait or run at once; beyond that `run` raises Busy at once, so a
    flood gets a quick 503 instead of an ever-growing queue and timeouts.
    """

    def __init__(self, translator, workers: int, max_pending: int = 128):
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be a positive integer, got {workers!r}")
        if isinstance(max_pending, bool) or not isinstance(max_pending, int) or max_pending < 1:
            raise ValueError(f"max_pending must be a positive integer, got {max_pending!r}")
        self.base, self.workers, self.max_pending = translator, workers, max_pending
        self.pending = 0  # touched only on the event loop's thread, so no lock
        self.threads = Threads(workers, "attnlab-explain")

    async def run(self, fn, *args):
        if self.pending >= self.max_pending:
            raise Busy(f"the explorer is busy: {self.pending} requests are already waiting; retry in a moment")
        self.pending += 1
        try:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self.threads.get(), lambda: fn(self.base, *args))
        finally:
            self.pending -= 1

    def shutdown(self) -> None:
        self.threads.shutdown()


__all__ = ["Busy", "Threads", "TooLarge", "TranslatorPool"]

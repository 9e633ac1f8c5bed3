"""A process-wide on/off switch for a fast path, so benchmarks can measure what it gives."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["Switch"]


class Switch:
    """A process-wide switch, on unless some `off()` block is running (blocks nest; any thread may open one):
    how benchmarks measure what a fast path gives (`attnlab.utils.native.off`, `attnlab.models.int8_step.off`).

    Examples:
        >>> fast = Switch()
        >>> with fast.off():
        ...     bool(fast)
        False
        >>> bool(fast)
        True
    """

    def __init__(self):
        self._off = 0
        self._lock = threading.Lock()

    def __bool__(self) -> bool:
        return not self._off

    @contextmanager
    def off(self) -> Iterator[None]:
        with self._lock:
            self._off += 1
        try:
            yield
        finally:
            with self._lock:
                self._off -= 1

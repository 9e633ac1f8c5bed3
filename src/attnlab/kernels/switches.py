"""Process-wide on/off switches for the fast paths, and one fingerprint of what is switched on.

    Switch("native")           -> on unless some `off()` block is running (benchmarks measure what a path gives)
    native_enabled()           -> ATTNLAB_NATIVE read as a boolean (0/1, false/true, no/yes, off/on)
    fingerprint()              -> what every switch and ATTNLAB_NATIVE say now, as one hashable value

A worker process forked with one fingerprint computes what a process with another would not (the C kernels
on or off, int8's fused step on or off), so the decoding pool keys its workers on `fingerprint()` instead of
listing the switches one by one: a new switch is in the key by being made.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["ENV", "Switch", "as_bool", "fingerprint", "native_enabled"]

log = logging.getLogger(__name__)

ENV = "ATTNLAB_NATIVE"  # the environment variable that turns attnlab's C kernels off
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")
_registry: list[weakref.ref[Switch]] = []  # every Switch made, in order (weak: a test's own switch may go)
_registry_lock = threading.Lock()
_warned: set[str] = set()  # ATTNLAB_NATIVE values already reported as not a boolean


class Switch:
    """A process-wide switch, on unless some `off()` block is running (blocks nest; any thread may open one):
    how benchmarks measure what a fast path gives (`attnlab.kernels.loader.off`, `attnlab.inference.int8_step.off`).
    Every switch is part of `fingerprint()`.

    Examples:
        >>> fast = Switch("example")
        >>> with fast.off():
        ...     bool(fast)
        False
        >>> bool(fast)
        True
    """

    def __init__(self, name: str = ""):
        self.name = name
        self._off = 0
        self._lock = threading.Lock()
        with _registry_lock:
            _registry[:] = [r for r in _registry if r() is not None]
            _registry.append(weakref.ref(self))

    def __bool__(self) -> bool:
        return not self._off

    def __repr__(self) -> str:
        return f"Switch({self.name!r}, {'on' if self else 'off'})"

    @contextmanager
    def off(self) -> Iterator[None]:
        with self._lock:
            self._off += 1
        try:
            yield
        finally:
            with self._lock:
                self._off -= 1


def as_bool(value: str) -> bool | None:
    """An environment variable's boolean: 1/true/yes/on -> True, 0/false/no/off -> False (any case, spaces
    ignored), anything else -> None.

    Examples:
        >>> as_bool("Off"), as_bool(" YES "), as_bool("2")
        (False, True, None)
    """
    value = value.strip().lower()
    return True if value in _TRUE else False if value in _FALSE else None


def native_enabled() -> bool:
    """Whether ATTNLAB_NATIVE leaves the C kernels on: unset, empty or a true spelling -> True, a false
    spelling (`as_bool`) -> False; anything else -> True, with one warning line per value."""
    raw = os.environ.get(ENV, "")
    setting = as_bool(raw)
    if setting is None and raw.strip() and raw not in _warned:
        _warned.add(raw)
        log.warning(
            "attnlab: %s=%r is not a boolean (expected 0/1, false/true, no/yes or off/on): the C kernels stay on",
            ENV,
            raw,
        )
    return setting is not False


def fingerprint() -> tuple:
    """What is switched on now: ATTNLAB_NATIVE (as `native_enabled` reads it) and every live `Switch`'s
    (name, state), in the order they were made. Equal fingerprints mean the same fast paths run."""
    with _registry_lock:
        switches = [s for s in (r() for r in _registry) if s is not None]
    return (native_enabled(), *((s.name, bool(s)) for s in switches))

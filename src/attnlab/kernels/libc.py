"""The C library's calls attnlab makes outside its own kernels, bound here because ctypes lives in this
package only.

    die_with_parent()  -> prctl(PR_SET_PDEATHSIG): the kernel kills this worker when its parent dies
                          (`attnlab.inference.pool`'s workers)
    malloc_trim()      -> glibc's malloc_trim(0): freed heap pages back to the system (`attnlab.serve.memory`)

Both answer False where the C library has no such call (musl, macOS, Windows).

Examples:
    >>> die_with_parent() in (True, False), malloc_trim() in (True, False)
    (True, True)
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import signal
from collections.abc import Callable

__all__ = ["die_with_parent", "malloc_trim"]

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> bool:
    """Have the kernel send this process SIGKILL when its parent dies; False where that cannot be asked
    (not Linux's glibc: the caller's other checks remain)."""
    with contextlib.suppress(OSError, AttributeError):
        prctl = ctypes.CDLL(None, use_errno=True).prctl
        prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
        prctl.restype = ctypes.c_int
        return prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    return False


def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):  # not glibc: nothing to trim
        return None


_TRIM = _malloc_trim()


def malloc_trim() -> bool:
    """Return freed heap pages to the system (glibc's malloc_trim(0)); False where there is no such call."""
    if _TRIM is None:
        return False
    _TRIM(0)
    return True

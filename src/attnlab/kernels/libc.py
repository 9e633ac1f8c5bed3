"""The C library's calls attnlab makes outside its own kernels, bound here because ctypes lives in this
package only.

    die_with_parent()  -> prctl(PR_SET_PDEATHSIG): the kernel kills this worker when its parent dies
                          (`attnlab.inference.pool`'s workers)
    malloc_trim()      -> glibc's malloc_trim(0): freed heap pages back to the system (`attnlab.serve.memory`)
    keep_freed_memory() -> glibc's mallopt: blocks of up to 32 MiB from the heap, and up to 128 MiB freed at
                          its top kept for the next allocation (`attnlab.decoding.batches`, once per process)

Each answers False where the C library has no such call (musl, macOS, Windows).

Examples:
    >>> die_with_parent() in (True, False), malloc_trim() in (True, False), keep_freed_memory() in (True, False)
    (True, True, True)
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import signal
from collections.abc import Callable

__all__ = ["die_with_parent", "keep_freed_memory", "malloc_trim"]

_PR_SET_PDEATHSIG = 1
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
MMAP_THRESHOLD = 32 << 20  # glibc's largest (HEAP_MAX_SIZE / 2 on 64-bit)
TRIM_THRESHOLD = 128 << 20


def die_with_parent() -> bool:
    """Have the kernel send this process SIGKILL when its parent dies; False where that cannot be asked
    (not Linux's glibc: the caller's other checks remain)."""
    with contextlib.suppress(OSError, AttributeError):
        prctl = ctypes.CDLL(None, use_errno=True).prctl
        prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
        prctl.restype = ctypes.c_int
        return prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    return False


def _glibc(lib: ctypes.CDLL | None, name: str) -> Callable[..., int] | None:
    try:
        return getattr(lib, name) if lib is not None else None
    except AttributeError:  # not glibc: no such call
        return None


def _c_library() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")  # a search of the linker's cache (a subprocess): once
    try:
        return ctypes.CDLL(name) if name else None
    except OSError:
        return None


_LIBC = _c_library()
_TRIM, _MALLOPT = _glibc(_LIBC, "malloc_trim"), _glibc(_LIBC, "mallopt")


def malloc_trim() -> bool:
    """Return freed heap pages to the system (glibc's malloc_trim(0)); False where there is no such call."""
    if _TRIM is None:
        return False
    _TRIM(0)
    return True


@functools.cache
def keep_freed_memory() -> bool:
    """Have glibc's malloc keep freed memory for the next allocation rather than hand it back to the kernel at
    once; False where there is no mallopt. Once per process (a fork inherits it).

    Why: a decoding step allocates and frees tensors of a few MiB (logits, caches one step longer each time);
    glibc maps each block above its dynamic threshold afresh and trims the heap's top once it holds twice that
    threshold free, so every step pays the kernel to fault in and zero pages it just gave back. `attnlab
    translate` of 20,000 greedy sentences on 2 cores (`/usr/bin/time`): 430,000-760,000 page faults and
    1.3-1.9 s of system time without this call, 170,000 and 0.5-0.6 s with it (what a caching allocator, as
    CTranslate2's, gives). What it keeps is bounded by the process's peak use; a server's idle `malloc_trim`
    still returns it."""
    if _MALLOPT is None:
        return False
    return bool(_MALLOPT(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(_MALLOPT(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))

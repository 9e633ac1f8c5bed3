"""What this machine can hold: `memory_bytes()`, the memory a process may use (the smallest of the
physical memory, a cgroup's limit and the process's address-space limit), which the cost checks compare
their estimates with."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

try:
    import resource
except ImportError:  # Windows: no address-space limits to read
    resource = None  # type: ignore[assignment]

__all__ = ["memory_bytes"]

_CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


def memory_bytes() -> int | None:
    """Bytes of memory this process may use: physical memory, within a cgroup's limit (containers) and
    RLIMIT_AS where one is set (`ulimit -v`); None where none can be read (the checks then pass)."""
    sizes = []
    with contextlib.suppress(ValueError, OSError, AttributeError):  # not POSIX (Windows): no sysconf
        sizes.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    for path in _CGROUP_LIMITS:
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 2**60:  # "max", or cgroup v1's "no limit" (2^63 - page)
            sizes.append(int(text))
    if resource is not None:
        with contextlib.suppress(ValueError, OSError):
            soft, _ = resource.getrlimit(resource.RLIMIT_AS)
            if soft != resource.RLIM_INFINITY and soft > 0:
                sizes.append(soft)
    return min(sizes) if sizes else None

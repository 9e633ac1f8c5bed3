"""Bounds for the tests' own child processes: no read of a child's pipe may wait for ever.

    with killed_after(proc, 120):
        line = proc.stdout.readline()   # returns by 120 s at most: the kill ends the pipe

`subprocess.run(..., timeout=...)` bounds a whole call; a read from a running child's pipe has no timeout of
its own, so it runs inside this block (tests/test_code_rules.py checks both)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def killed_after(proc: subprocess.Popen, seconds: float, group: bool = False) -> Iterator[subprocess.Popen]:
    """Within the block, `proc` (with `group`: its whole process group) is SIGKILLed after `seconds`."""

    def kill() -> None:
        with contextlib.suppress(ProcessLookupError):
            if group:
                os.killpg(proc.pid, signal.SIGKILL)
            else:
                proc.kill()

    timer = threading.Timer(seconds, kill)
    timer.daemon = True
    timer.start()
    try:
        yield proc
    finally:
        timer.cancel()

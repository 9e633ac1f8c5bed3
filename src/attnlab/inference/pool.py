"""Worker processes forked from this one and kept: `WorkerPool(owner, workers).map(fn, owner, items)`
computes [fn(owner, item) for item in items] in this process and `workers - 1` children, which start from
this process's memory as it was when the pool was made (a loaded model: nothing is pickled but the items
and the results).

Why processes: a decoding step of a small model is hundreds of small torch ops, each of which drops and
takes back the GIL, so two threads of one process mostly wait for each other; two processes have no GIL to
share (BENCHMARKS.md, "Precision": the `on worker threads` rows). Why kept: a fresh
child first faults in its working set, ~0.1-0.3 s for a batch of 256 sentences, which a map of a few
batches would pay every time.

`can_fork()` says where a pool may be made: Linux (fork re-imports nothing; macOS's system libraries are
not fork-safe), from the main thread of a process whose other Python threads are daemons (a fork copies
only the calling thread, so a lock another thread held would stay locked in the child: a server's request
threads rule it out). The pool starts no thread here, so later pools can still be forked.

Workers run one torch thread each and ignore SIGINT and SIGTERM (a Ctrl-C or a scheduler's signal reaches
the whole process group; the parent decides, and may stop gracefully). They end with the parent however it
ends: between maps each waits on a pipe whose only writer is the parent (new children close the other
pools' ends), and the kernel kills them when the parent dies (PR_SET_PDEATHSIG). A child keeps the other
file descriptors the parent had open when it forked, for the pool's life.
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import os
import pickle
import signal
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.connection import Connection, wait
from typing import Any, cast

import torch

from attnlab.kernels.libc import die_with_parent

__all__ = ["WorkerPool", "can_fork"]

_OPEN: set[Connection] = set()  # this process's ends of every open pool's pipes: a new child closes them


def can_fork() -> bool:
    """Whether a `WorkerPool` may be made here: Linux, from the main thread, and every other Python
    thread is a daemon (a library's watcher: tqdm's monitor, a notebook kernel's heartbeat), none doing
    the program's work (a server's request threads)."""
    main = threading.main_thread()
    return (
        sys.platform == "linux"
        and threading.current_thread() is main
        and all(t.daemon for t in threading.enumerate() if t is not main)
    )


def _claim(counter: Any, alive: Callable[[], None] | None) -> int:
    """The next unclaimed index. `alive` (this process's check on its children) runs while the lock is
    held elsewhere for long: a child killed inside it (the OOM killer) would otherwise hang this one."""
    lock, value = counter.get_lock(), counter.get_obj()
    while not lock.acquire(timeout=1.0):
        if alive is not None:
            alive()
    try:
        i = value.value
        value.value = i + 1
        return i
    finally:
        lock.release()


def _drain(
    owner: Any, counter: Any, fn: Callable[[Any, Any], Any], items: Sequence[Any], alive=None
) -> list[tuple[int, Any]]:
    """Claim items one at a time until none is left: [(index, fn(owner, item)), ...] of those taken here."""
    done: list[tuple[int, Any]] = []
    while (i := _claim(counter, alive)) < len(items):
        done.append((i, fn(owner, items[i])))
    return done


class _RemoteTraceback(Exception):
    """A worker's traceback, as the cause of the exception it raised (as concurrent.futures shows it)."""

    def __init__(self, text: str):
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return f'\n"""\n{self.text}"""'


def _serve(owner: Any, counter: Any, tasks: Connection, results: Connection, parent: int) -> None:
    """A child's life: each map's (fn, items) from `tasks`, its share of the results back on `results`;
    the end of `tasks` (the pool closed, or the parent dead) ends it, and so does the parent's death
    mid-map (checked before each item)."""
    while True:
        try:
            fn, items = tasks.recv()
        except (EOFError, OSError):
            return

        def checked(owner: Any, item: Any, fn=fn) -> Any:
            if os.getppid() != parent:  # orphaned mid-map: nobody will read the results
                os._exit(1)
            return fn(owner, item)

        try:
            reply: tuple = ("ok", _drain(owner, counter, checked, items), "")
        except BaseException as e:  # noqa: BLE001 - every failure goes back to the caller
            reply = ("error", e, traceback.format_exc())
        try:
            results.send(reply)
        except (pickle.PicklingError, TypeError, AttributeError, ValueError) as e:  # it does not pickle
            what = "exception" if reply[0] == "error" else "result"
            detail = f"{type(reply[1]).__name__}: {reply[1]}" if reply[0] == "error" else f"{type(e).__name__}: {e}"
            results.send(("error", RuntimeError(f"a worker's {what} could not be sent back ({detail})"), reply[2]))


def _die_with(parent: int) -> None:
    """Have the kernel kill this (child) process when its parent dies (Linux's PR_SET_PDEATHSIG), so that
    no worker keeps decoding for a parent that is gone; exit now if that already happened."""
    die_with_parent()  # where it cannot (not glibc), the pipe and the per-item check remain
    if os.getppid() != parent:
        os._exit(1)


class WorkerPool:
    """`workers - 1` processes forked now with `owner` (this process's object as it is now), which with
    this one share out each `map`. See the module docstring; `close()` ends them (so does collecting the
    pool). The pool keeps no reference to `owner`: `map` is given this process's.

    Examples (Linux; fn must be a module-level function, items and results must pickle; skipped here: a test
    process has working threads, which a fork would copy in the middle of their work):
        >>> pool = WorkerPool(owner=10, workers=2)  # doctest: +SKIP
        >>> pool.map(operator.add, 10, [1, 2, 3])  # doctest: +SKIP
        [11, 12, 13]

        A pool is never forked from a thread other than the main one:

        >>> refused = []
        >>> def make():
        ...     try:
        ...         WorkerPool(owner=10, workers=2)
        ...     except RuntimeError as e:
        ...         refused.append(str(e))
        >>> thread = threading.Thread(target=make)
        >>> thread.start(); thread.join()
        >>> refused[0].startswith("a WorkerPool needs Linux, the main thread")
        True
    """

    def __init__(self, owner: Any, workers: int):
        if not can_fork():
            others = [t.name for t in threading.enumerate() if not t.daemon]
            raise RuntimeError(
                f"a WorkerPool needs Linux, the main thread and no other non-daemon thread; running: {others}"
            )
        self.workers = workers
        self.key: Any = None  # what the owner's user checks the pool against (batches: the weights)
        self._counter = multiprocessing.get_context("fork").Value("q", 0)
        self._children: list[tuple[int, Connection, Connection]] = []  # (pid, tasks writer, results reader)
        try:
            for _ in range(workers - 1):
                self._fork(owner)
        except BaseException:
            self.close()
            raise

    def _fork(self, owner: Any) -> None:
        task_r, task_w = multiprocessing.Pipe(duplex=False)
        result_r, result_w = multiprocessing.Pipe(duplex=False)
        parent = os.getpid()
        with warnings.catch_warnings():  # Python 3.12+ counts torch's idle OpenMP threads as threads
            warnings.filterwarnings("ignore", "This process .* is multi-threaded", DeprecationWarning)
            pid = os.fork()
        if pid == 0:  # the child: never returns into the caller's code
            status = 0
            try:
                # Signals sent to the whole process group (Ctrl-C, a scheduler's SIGTERM) are the parent's
                # to handle: it may stop gracefully, and its end closes the pipes; its death kills us.
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                _die_with(parent)
                for conn in (*_OPEN, task_w, result_r):
                    conn.close()
                torch.set_num_threads(1)  # the processes are the parallelism
                gc.freeze()  # what the child inherited stays out of its collector's passes
                gc.enable()
                _serve(owner, self._counter, task_r, result_w, parent)
            except BaseException:  # noqa: BLE001 - a child reports by its exit status only
                status = 1
            finally:
                os._exit(status)
        task_r.close()
        result_w.close()
        self._children.append((pid, task_w, result_r))
        _OPEN.update((task_w, result_r))

    def map(self, fn: Callable[[Any, Any], Any], owner: Any, items: Sequence[Any]) -> list[Any]:
        """[fn(owner, item) for item in items] (the children use their copy of the owner), each process
        taking the next item as it finishes one (long and short items balance; this process runs fn with
        the intra-op threads it has). An exception in fn is raised here; a worker that died raises
        BrokenProcessPool. After either, the pool is closed."""
        if self.closed:
            raise RuntimeError("this WorkerPool is closed")
        results: list[Any] = [None] * len(items)
        self._counter.get_obj().value = 0  # no lock: the children wait on their task pipes now
        try:
            for pid, tasks, _ in self._children:
                try:
                    tasks.send((fn, items))
                except OSError:  # it died since the last map
                    raise BrokenProcessPool(f"worker process {pid} died") from None
            replies: list[tuple[str, Any, str]] = [("ok", _drain(owner, self._counter, fn, items, self._alive), "")]
            pending: dict[Any, int] = {answers: pid for pid, _, answers in self._children}
            while pending:
                # Not a plain recv: a child stuck on the claim lock that a killed sibling held would never
                # answer, so between answers this process checks that every child still lives.
                for ready in wait(list(pending), timeout=1.0):
                    pid = pending.pop(ready)
                    try:
                        replies.append(cast(Connection, ready).recv())
                    except (EOFError, OSError):
                        raise BrokenProcessPool(f"worker process {pid} died") from None
                    except (pickle.UnpicklingError, TypeError, AttributeError, ImportError, ValueError) as e:
                        # an exception that pickled but does not unpickle (a custom __init__)
                        raise RuntimeError(f"worker process {pid}'s answer could not be read: {e}") from None
                self._alive()
        except BaseException:
            self.close(kill=True)  # a child may be mid-item: stop them all rather than wait
            raise
        for kind, value, text in replies:
            if kind == "error":
                self.close()
                raise value from _RemoteTraceback(text)
            for i, r in value:
                results[i] = r
        return results

    def _alive(self) -> None:
        """Raise BrokenProcessPool if a child has died (it may have held the claim lock)."""
        for pid, _, _ in self._children:
            try:
                gone = os.waitpid(pid, os.WNOHANG) != (0, 0)
            except ChildProcessError:  # reaped by someone else (SIGCHLD ignored): gone all the same
                gone = True
            if gone:
                raise BrokenProcessPool(f"worker process {pid} died")

    def close(self, kill: bool = False) -> None:
        """End the workers and reap them: each exits at the end of its task pipe, or is killed (at once
        with `kill`, else after 5 s: mid-item); again: nothing."""
        children, self._children = self._children, []
        for _, tasks, answers in children:
            for conn in (tasks, answers):
                _OPEN.discard(conn)
                conn.close()
        deadline = time.monotonic() + (0.0 if kill else 5.0)
        for pid, _, _ in children:
            with contextlib.suppress(ChildProcessError):  # reaped already (by _alive, or SIGCHLD ignored)
                while os.waitpid(pid, os.WNOHANG) == (0, 0):
                    if time.monotonic() > deadline:
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(pid, signal.SIGKILL)
                        os.waitpid(pid, 0)
                        break
                    time.sleep(0.005)
        self.workers = 0

    @property
    def closed(self) -> bool:
        return self.workers == 0

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

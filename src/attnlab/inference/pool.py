"""Worker processes: `WorkerProcess`, the one way attnlab runs work in child processes (decoding's `WorkerPool`
below, `prepare`'s encoders in `attnlab.data.prepared.encoders`), and `WorkerPool`, processes forked once and kept.

`WorkerProcess(serve, args, method=...)` is a child, forked (Linux: it starts from this process's memory, a loaded
model included, and re-imports nothing) or spawned (elsewhere), that runs `serve(conn, *args)` on a duplex pipe of
its own:
- A dead worker is BrokenProcessPool, never a hang: `recv` waits on its pipe and on its exit at once (a shared
  queue, as `concurrent.futures`' pool has, can be left half-written by a killed worker and block its reader).
- Signals are the parent's: a worker ignores SIGINT and SIGTERM (a Ctrl-C or a scheduler's signal reaches the
  whole process group; the parent decides, may stop gracefully, and stops its workers), so it never runs the
  handlers a fork copied.
- No worker outlives its parent: the kernel kills it when the parent dies (PR_SET_PDEATHSIG, Linux, forked from
  the main thread), and a thread of the worker watches a lifeline pipe whose only writer is the parent, exiting at
  its end of file (the parent's death, or `stop`). A forked child closes the parent's ends of every other
  worker's pipes, so that their end of file comes when the parent's does; it keeps the parent's other files.
- `stop(workers, kill)` closes their pipes (so each exits) and SIGKILLs what is left after 5 s, or at once with
  `kill`; at interpreter exit every worker still running is stopped so, before multiprocessing's own exit (which
  would wait on workers that ignore its SIGTERM).

`WorkerPool(owner, workers).map(fn, owner, items)` computes [fn(owner, item) for item in items] in this process and
`workers - 1` forked workers, which start from this process's memory as it was when the pool was made (a loaded
model: nothing is pickled but the items and the results).

Why processes: a decoding step of a small model is hundreds of small torch ops, each of which drops and
takes back the GIL, so two threads of one process mostly wait for each other; two processes have no GIL to
share (BENCHMARKS.md, "Precision": the `on worker threads` rows). Why kept: a fresh
child first faults in its working set, ~0.1-0.3 s for a batch of 256 sentences, which a map of a few
batches would pay every time.

`can_fork()` says where a pool may be made: Linux (fork re-imports nothing; macOS's system libraries are
not fork-safe), from the main thread of a process whose other Python threads are daemons (a fork copies
only the calling thread, so a lock another thread held would stay locked in the child: a server's request
threads rule it out). The pool starts no thread here, so later pools can still be forked. Its workers run
one torch thread each.
"""

from __future__ import annotations

import atexit
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
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.connection import Connection, wait
from typing import Any

import torch

from attnlab.kernels.libc import die_with_parent

__all__ = ["WorkerPool", "WorkerProcess", "can_fork", "stop"]

STOP_WAIT_S = 5.0  # how long `stop` lets a worker end by itself before killing it
SIGNAL_CHECK_S = 0.5  # longest a wait on a worker keeps this thread from a pending signal's handler
_OPEN: set[Connection] = set()  # this process's ends of every running worker's pipes: a forked child closes them
_RUNNING: set[WorkerProcess] = set()  # the workers this process started and has not stopped (stopped at exit)


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


# --------------------------------------------------------------------------- one worker process
class WorkerProcess:
    """One worker: a child process running `serve(conn, *args)` on a duplex pipe of its own (the module
    docstring says how it starts, ends and dies). `send` a message, `recv` one: either raises BrokenProcessPool
    once the worker is gone.

    Args:
        serve: the worker's life; it returns (normally at its pipe's end of file: EOFError or OSError from
            `conn.recv()`) to end the worker. Module-level where spawned: it is pickled by name.
        args: what `serve` takes after its pipe (pickled where spawned, as they are where forked).
        method: 'fork' or 'spawn'.
        what: how messages name the worker ("encoding worker 1234 died").
        name: the process's name.
    """

    def __init__(
        self, serve: Callable[..., None], args: Sequence[Any] = (), *, method: str = "fork",
        what: str = "worker process", name: str = "attnlab-worker",
    ):  # fmt: skip
        context: Any = multiprocessing.get_context(method)  # typeshed gives BaseContext no Process
        self.what, self._parent = what, os.getpid()
        self.conn, theirs = context.Pipe(duplex=True)
        lifeline, self._lifeline = context.Pipe(duplex=False)  # (the worker's reader, our writer: never written)
        inherited = [*_OPEN, self.conn, self._lifeline] if method == "fork" else []
        pdeathsig = threading.current_thread() is threading.main_thread()  # the kernel watches the forking thread
        self.process = context.Process(
            target=_child,
            args=(serve, theirs, lifeline, tuple(args)),
            kwargs={"inherited": inherited, "parent": self._parent, "pdeathsig": pdeathsig},
            daemon=True,
            name=name,
        )
        _OPEN.update((self.conn, self._lifeline))
        try:
            with warnings.catch_warnings():  # Python 3.12+ counts torch's idle OpenMP threads as threads
                warnings.filterwarnings("ignore", "This process .* is multi-threaded", DeprecationWarning)
                self.process.start()
        except BaseException:  # a signal while it started: it is ours to end
            stop([self], kill=True)
            raise
        finally:
            for end in (theirs, lifeline):  # the worker's ends are the worker's alone: its exit is our end of file
                end.close()
        _RUNNING.add(self)

    @property
    def pid(self) -> int | None:
        return self.process.pid

    @property
    def exited(self) -> bool:
        """Whether the worker has ended (its sentinel, not a wait: a reaped or unreaped end alike)."""
        return bool(wait([self.process.sentinel], 0))

    def broken(self) -> BrokenProcessPool:
        """The error that says this worker died (with its exit status once known)."""
        self.process.join(1.0)
        code = self.process.exitcode
        return BrokenProcessPool(f"{self.what} {self.pid} died" + ("" if code is None else f" (exit code {code})"))

    def send(self, message: Any) -> None:
        try:
            self.conn.send(message)
        except OSError:  # its end is closed: it died
            raise self.broken() from None

    def recv(self) -> Any:
        """The worker's next message; BrokenProcessPool as soon as it is gone without one (a message sent
        before it ended still counts)."""
        # In slices: a signal the kernel hands to another thread (torch's, the tokenizer's) interrupts no wait of
        # this one, and Python runs its handler only when this thread is back in the interpreter.
        while not (ready := wait([self.conn, self.process.sentinel], timeout=SIGNAL_CHECK_S)):
            pass
        if self.conn in ready:
            with contextlib.suppress(EOFError, OSError):
                return self.conn.recv()
        raise self.broken()


def stop(workers: Iterable[WorkerProcess], kill: bool = False) -> None:
    """End `workers`: their pipes closed (each exits at their end of file, even mid-item: its lifeline), then
    each reaped, and SIGKILLed if still running after STOP_WAIT_S, or at once with `kill`. Again: nothing."""
    workers = list(workers)
    for w in workers:
        _RUNNING.discard(w)
        for conn in (w.conn, w._lifeline):
            _OPEN.discard(conn)
            conn.close()
    deadline = time.monotonic() + (0.0 if kill else STOP_WAIT_S)
    for w in workers:
        if w.pid is None or w._parent != os.getpid():  # never started, or a forked copy of another's worker
            continue
        w.process.join(max(0.0, deadline - time.monotonic()))
        if w.process.exitcode is None and not w.exited:
            w.process.kill()  # SIGKILL: it ends whatever it was doing, so the join below returns
            w.process.join()


@atexit.register  # registered after multiprocessing's own exit function, so it runs before it
def _stop_running() -> None:
    stop([w for w in _RUNNING if w._parent == os.getpid()])


def _child(serve, conn, lifeline, args, *, inherited, parent: int, pdeathsig: bool) -> None:
    """A worker's start: the parent's signals and pipes let go, its death watched; then `serve`'s life. A failure
    is reported by the exit status only (the parent raises BrokenProcessPool), never a traceback."""
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for end in inherited:  # forked: the parent's ends stay the parent's
            end.close()
        _OPEN.clear()
        _RUNNING.clear()
        if pdeathsig:
            die_with_parent()  # where it cannot (not glibc), the lifeline remains
        if os.getppid() != parent:  # the parent died before the watch began
            os._exit(1)
        threading.Thread(target=_watch, args=(lifeline,), daemon=True, name="attnlab-lifeline").start()
        serve(conn, *args)
    except BaseException:  # noqa: BLE001 - see above
        os._exit(1)
    os._exit(0)  # nothing of the parent's (its exit functions, copies of its objects) runs here


def _watch(lifeline: Connection) -> None:
    with contextlib.suppress(EOFError, OSError):
        lifeline.recv_bytes()  # nothing is ever sent: this returns only at end of file
    os._exit(1)  # the parent closed its end (`stop`) or died


# --------------------------------------------------------------------------- a pool that shares out maps
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


def _serve(conn: Connection, owner: Any, counter: Any, parent: int) -> None:
    """A pool worker's life: each map's (fn, items) from `conn`, its share of the results back; the end of
    `conn` (the pool closed, or the parent dead) ends it, and so does the parent's death mid-map (checked
    before each item)."""
    torch.set_num_threads(1)  # the processes are the parallelism
    gc.freeze()  # what the child inherited stays out of its collector's passes
    gc.enable()
    while True:
        try:
            fn, items = conn.recv()
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
            conn.send(reply)
        except (pickle.PicklingError, TypeError, AttributeError, ValueError) as e:  # it does not pickle
            what = "exception" if reply[0] == "error" else "result"
            detail = f"{type(reply[1]).__name__}: {reply[1]}" if reply[0] == "error" else f"{type(e).__name__}: {e}"
            conn.send(("error", RuntimeError(f"a worker's {what} could not be sent back ({detail})"), reply[2]))


class WorkerPool:
    """`workers - 1` `WorkerProcess`es forked now with `owner` (this process's object as it is now), which with
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
        self._children: list[WorkerProcess] = []
        try:
            for _ in range(workers - 1):
                self._fork(owner)
        except BaseException:
            self.close()
            raise

    def _fork(self, owner: Any) -> None:
        self._children.append(WorkerProcess(_serve, (owner, self._counter, os.getpid()), method="fork"))

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
            for child in self._children:
                child.send((fn, items))
            replies: list[tuple[str, Any, str]] = [("ok", _drain(owner, self._counter, fn, items, self._alive), "")]
            pending: dict[Any, WorkerProcess] = {child.conn: child for child in self._children}
            while pending:
                # Not a plain recv: a child stuck on the claim lock that a killed sibling held would never
                # answer, so between answers this process checks that every child still lives.
                for ready in wait(list(pending), timeout=1.0):
                    child = pending.pop(ready)
                    try:
                        replies.append(child.conn.recv())
                    except (EOFError, OSError):
                        raise child.broken() from None
                    except (pickle.UnpicklingError, TypeError, AttributeError, ImportError, ValueError) as e:
                        # an exception that pickled but does not unpickle (a custom __init__)
                        raise RuntimeError(f"worker process {child.pid}'s answer could not be read: {e}") from None
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
        for child in self._children:
            if child.exited:
                raise child.broken()

    def close(self, kill: bool = False) -> None:
        """End the workers (`stop`): each exits at the end of its pipes, or is killed (at once with `kill`, else
        after 5 s); again: nothing."""
        children, self._children = self._children, []
        stop(children, kill)
        self.workers = 0

    @property
    def closed(self) -> bool:
        return self.workers == 0

    @property
    def pids(self) -> list[int | None]:
        """The process ids of the workers this pool forked (this process, which takes its share too, not among
        them): what an operator's `kill` or a test's names."""
        return [child.pid for child in self._children]

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

"""Worker processes forked and kept: results in order, errors raised in the caller, dead workers
reported, and no worker outliving its parent.

A pool may only be forked from a process without working threads, which a test process that ran the
server tests is not: each check runs in a fresh interpreter."""

from __future__ import annotations

import select
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from processes import killed_after  # tests/ is on sys.path

from attnlab.inference.pool import WorkerPool, can_fork

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="worker processes are forked on Linux only")

PRELUDE = """
import os, sys, time
from concurrent.futures.process import BrokenProcessPool
from attnlab.inference.pool import WorkerPool

def pid_plus(owner, item):
    time.sleep(0.05)  # long enough that every process gets items
    return os.getpid(), owner + item

def fail_in_child(owner, item):
    if os.getpid() != owner:  # owner: the parent's pid
        raise ValueError(f"item {item} is bad")
    time.sleep(0.05)  # the parent is slow, so the child surely claims an item
    return item

def die_in_child(owner, item):
    if os.getpid() != owner:
        os._exit(7)
    time.sleep(0.05)
    return item
"""


def run_script(body: str) -> str:
    """Run PRELUDE + body in a fresh interpreter; its stdout (a failure shows its stderr)."""
    done = subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(body)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_map_gives_results_in_order_from_this_process_and_its_children():
    out = run_script("""
        pool = WorkerPool(owner=100, workers=3)
        got = pool.map(pid_plus, 100, list(range(40)))
        assert [r for _, r in got] == [100 + i for i in range(40)]
        assert os.getpid() in {p for p, _ in got}  # this process takes part
        again = pool.map(pid_plus, 100, list(range(40)))  # the pool is kept for later maps
        assert len({p for p, _ in got + again}) == 3
        second = WorkerPool(owner=5, workers=2)  # a pool starts no thread: another can still be forked
        assert [r for _, r in second.map(pid_plus, 5, [1, 2, 3])] == [6, 7, 8]
        pool.close(); second.close()
        assert pool.closed
        pool.close()  # twice: nothing
        print("ok")
    """)
    assert out.strip() == "ok"


def test_an_error_in_a_worker_is_raised_in_the_caller_with_its_traceback_and_closes_the_pool():
    out = run_script("""
        pool = WorkerPool(owner=os.getpid(), workers=2)
        try:
            pool.map(fail_in_child, os.getpid(), list(range(40)))
        except ValueError as e:
            print("bad" in str(e), pool.closed, "in fail_in_child" in str(e.__cause__))
    """)
    assert out.strip() == "True True True"


def test_a_worker_that_dies_is_reported():
    out = run_script("""
        pool = WorkerPool(owner=os.getpid(), workers=2)
        try:
            pool.map(die_in_child, os.getpid(), list(range(40)))
        except BrokenProcessPool as e:
            print(type(e).__name__, pool.closed)
    """)
    assert out.strip() == "BrokenProcessPool True"


def test_no_pool_while_a_working_thread_runs():
    stop = threading.Event()
    t = threading.Thread(target=stop.wait, name="request-thread")
    t.start()
    try:
        assert not can_fork()
        with pytest.raises(RuntimeError, match=r"no other non-daemon thread; running: .*request-thread"):
            WorkerPool(owner=0, workers=2)
    finally:
        stop.set()
        t.join()


def test_workers_end_when_the_parent_is_killed():
    script = PRELUDE + textwrap.dedent("""
        import threading
        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()  # a daemon does not stop a fork
        pool = WorkerPool(owner=0, workers=3)
        pool.map(pid_plus, 0, list(range(30)))
        print(" ".join(map(str, pool.pids)), flush=True)
        time.sleep(60)
    """)
    assert _children_end_with(script, kids=2) == []


def test_workers_end_when_the_parent_is_killed_in_the_middle_of_a_map():
    # Items of 30 s: only the kernel's parent-death signal can end a child within the 3 s allowed.
    script = PRELUDE + textwrap.dedent("""
        def slow(owner, item):
            time.sleep(30)
            return item
        pool = WorkerPool(owner=0, workers=3)
        print(" ".join(map(str, pool.pids)), flush=True)
        pool.map(slow, 0, list(range(6)))
    """)
    assert _children_end_with(script, kids=2, wait_s=3) == []


def test_a_child_killed_while_holding_the_claim_lock_fails_the_map_instead_of_hanging():
    out = run_script("""
        import signal
        class Spied(WorkerPool):  # leaves its claim counter where the children will find it
            def _fork(self, owner):
                globals()["counter"] = self._counter
                super()._fork(owner)
        def hold_and_die(owner, item):
            if os.getpid() != owner:  # a child takes the claim lock and is killed holding it
                counter.get_lock().acquire()
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(0.1)
            return item
        pool = Spied(owner=os.getpid(), workers=3)
        t0 = time.monotonic()
        try:
            pool.map(hold_and_die, os.getpid(), list(range(40)))
            print("finished")
        except BrokenProcessPool:
            print("broken", time.monotonic() - t0 < 20, pool.closed)
    """)
    assert out.strip() == "broken True True"


def _children_end_with(script: str, kids: int, wait_s: float = 10) -> list[int]:
    """Run script, read the children's pids from its first line, SIGKILL it: the children still running
    after wait_s seconds."""
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 120)
        assert ready, "the script printed no pids"
        with killed_after(proc, 120):
            pids = [int(p) for p in proc.stdout.readline().split()]
        assert len(pids) == kids
        time.sleep(0.3)
    finally:
        proc.kill()
        proc.wait(timeout=60)
    deadline = time.monotonic() + wait_s
    alive = pids
    while alive and time.monotonic() < deadline:
        alive = [p for p in pids if _running(p)]
        time.sleep(0.05)
    return alive


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"  # a zombie has exited
    except FileNotFoundError:
        return False


def test_a_pool_left_open_does_not_hold_up_the_exit_nor_outlive_it():
    """Workers ignore SIGTERM, so multiprocessing's own exit (SIGTERM, then a wait) would wait on them for ever:
    the workers still running are stopped before it."""
    out = run_script("""
        pool = WorkerPool(owner=0, workers=3)
        pool.map(pid_plus, 0, list(range(6)))
        print(" ".join(map(str, pool.pids)))
    """)  # the script ends with the pool open; run_script's timeout fails a hang
    pids = [int(p) for p in out.split()]
    assert len(pids) == 2 and not [p for p in pids if _running(p)]


WORKER_SCRIPT = """
import os, signal, sys, time
from concurrent.futures.process import BrokenProcessPool
from attnlab.inference.pool import WorkerProcess, stop

def echo(conn, prefix):
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        conn.send(prefix + message)

if __name__ == "__main__":
    worker = WorkerProcess(echo, ("got ",), method=sys.argv[1], what="echo worker")
    worker.send("a")
    first = worker.recv()
    os.kill(worker.pid, signal.SIGINT)  # the parent's to handle: the worker goes on
    worker.send("b")
    second = worker.recv()
    os.kill(worker.pid, signal.SIGKILL)
    try:
        worker.recv()
    except BrokenProcessPool as e:
        print(first, second, e, worker.exited)
    stop([worker])
"""


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_worker_process_serves_ignores_sigint_and_its_death_is_broken_process_pool(tmp_path, method):
    script = tmp_path / "worker.py"  # a file: a spawned child imports its functions from it
    script.write_text(WORKER_SCRIPT, encoding="utf-8")
    done = subprocess.run([sys.executable, str(script), method], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("got a got b echo worker ") and "died (exit code -9) True" in done.stdout

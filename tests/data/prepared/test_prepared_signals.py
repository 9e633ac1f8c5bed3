"""`attnlab prepare --workers 2` stopped by SIGTERM, SIGINT or SIGKILL leaves no worker process behind
and no pipe open: the CLI runs in a child process whose encoding workers block on their first chunk."""

import os
import select
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from processes import killed_after  # tests/ is on sys.path
from test_prepared_shards import write_corpus  # tests/data/prepared is on sys.path (no __init__)

SRC = Path(__file__).resolve().parents[3] / "src"

# The CLI with 10-pair chunks (so the pool starts at once) and workers that announce themselves and
# then block, as a worker deep in a long chunk would.
_SCRIPT = textwrap.dedent(
    """
    import os, sys, threading
    import attnlab.data.prepared.encoders as pool
    import attnlab.data.prepared.pipeline as shards

    shards._CHUNK = 10

    def blocked(sources, targets):
        print(f"worker {os.getpid()} busy", flush=True)
        threading.Event().wait()

    pool._work = blocked
    from attnlab.cli import main

    sys.exit(main(sys.argv[1:]))
    """
)


def _children(pid: int) -> list[int]:
    return [int(c) for t in Path(f"/proc/{pid}/task").iterdir() for c in (t / "children").read_text().split()]


def _wait_gone(pid: int, timeout: float = 60) -> bool:
    """Whether process `pid` ended (its pidfd turns readable then), waiting for that up to `timeout`."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], timeout)[0])
    finally:
        os.close(fd)


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc; the workers are forked on Linux")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL], ids=lambda s: s.name)
def test_stopping_prepare_reaps_its_workers_and_closes_the_pipes(tmp_path, sig):
    spec, _, _ = write_corpus(tmp_path, n=80)
    out = tmp_path / "out"
    argv = ["prepare", "--data", spec, "--src-lang", "de", "--tgt-lang", "en", "--vocab-size", "100"]
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    proc = subprocess.Popen(
        [sys.executable, "-c", _SCRIPT, *argv, "--workers", "2", "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    workers: list[int] = []
    try:
        with killed_after(proc, 120):
            for line in proc.stdout:  # the event: a worker has a chunk (the pool is up, encoding has begun)
                if line.startswith("worker "):
                    break
        workers = _children(proc.pid)
        assert len(workers) == 2, f"prepare ended before encoding: {proc.poll()} {workers}"
        proc.send_signal(sig)
        # EOF on both pipes: no process holding them (the parent or a worker) is left.
        _, err = proc.communicate(timeout=60)
        assert all(_wait_gone(pid) for pid in workers)
        if sig == signal.SIGKILL:  # the parent could not reap them; they ended themselves
            assert list(tmp_path.glob(".out.tmp-*"))  # a killed writer's temp folder ...
            meta = subprocess.run([sys.executable, "-m", "attnlab", *argv, "--workers", "1", "--out", str(out)],
                                  env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
            assert meta.returncode == 0, meta.stderr
            assert not list(tmp_path.glob(".out.tmp-*"))  # ... is removed by the next prepare
        else:
            assert proc.returncode == (-signal.SIGTERM if sig == signal.SIGTERM else 130), err
            assert "Traceback" not in err, err
            assert not out.exists() and not list(tmp_path.glob(".out.tmp-*"))
    finally:
        proc.kill()
        for pid in workers:
            if not _wait_gone(pid, timeout=0):
                os.kill(pid, signal.SIGKILL)

"""`attnlab prepare --workers 2` ends within seconds of SIGINT (exit 130) or SIGTERM (ended by SIGTERM, 143 in
a shell) wherever the signal lands: training the vocabulary, encoding the first chunk here, between two workers'
starts, with the pool up and idle, with the workers deep in a chunk, writing the metadata after the last chunk;
and it leaves neither --out nor its temporary folder behind.

One interpreter imports attnlab once and forks a `prepare` per (point, signal), each of which announces the
point and then sleeps there: the signal is sure to land at that point, and the case costs a fork, not a start."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from processes import killed_after  # tests/ is on sys.path
from test_prepared_shards import write_corpus  # tests/data/prepared is on sys.path (no __init__)

SRC = Path(__file__).resolve().parents[3] / "src"
# where the signal lands -> the function of the run whose hook (in _FORKS) announces it and sleeps
POINTS = {
    "vocabulary": "_vocabularies",  # before any worker
    "first-chunk": "encode_chunk",  # the first chunk, encoded in this process before the pool starts
    "starting": "start",  # one worker started, the other not yet
    "pool-up": "_start",  # both started, no chunk sent
    "encoding": "_work",  # a worker deep in its chunk
    "writing": "_write_meta",  # every chunk encoded, the pool still open
}
SIGNALS = {"SIGINT": 130, "SIGTERM": -signal.SIGTERM}

_FORKS = textwrap.dedent(
    """
    import json, multiprocessing.context as mpc, os, sys, threading, time
    import attnlab.data.prepared.encoders as enc
    import attnlab.data.prepared.pipeline as pipe
    from attnlab.cli import main

    pipe._CHUNK = 10  # 80 pairs: 8 chunks, so the pool starts
    POINT = None

    def at(point):
        if POINT == point:
            os.write(1, f"at {os.getpid()} {point}\\n".encode())  # one write: lines of processes never mix
            for _ in range(600):  # the signal lands here, between short sleeps: the kernel may hand it to
                time.sleep(0.1)  # another thread, and Python runs its handler only once this one wakes

    def hooked(owner, name, before=False, once=False):
        original = getattr(owner, name)
        calls = []

        def hook(*a, **k):
            calls.append(1)
            if before and (not once or len(calls) == 1):
                at(name)
            out = original(*a, **k)
            if not before and (not once or len(calls) == 1):
                at(name)
            return out

        setattr(owner, name, hook)

    hooked(pipe, "_vocabularies", before=True)
    hooked(enc, "encode_chunk", before=True, once=True)
    hooked(mpc.ForkProcess, "start", once=True)
    hooked(enc.ChunkEncoder, "_start")
    hooked(pipe, "_write_meta", before=True)
    work = enc._work
    enc._work = lambda s, t: at("_work") or work(s, t)

    jobs = json.loads(sys.argv[1])
    children = {}
    for point, argv in jobs:
        pid = os.fork()
        if pid == 0:
            POINT = point
            try:
                code = main(argv)
            except SystemExit as e:
                code = e.code
            sys.stdout.flush()
            os._exit(code)
        children[pid] = point
    while children:
        pid, status = os.wait()
        os.write(1, f"end {pid} {os.waitstatus_to_exitcode(status)} {time.monotonic()}\\n".encode())
        children.pop(pid, None)
    """
)


@pytest.mark.skipif(sys.platform != "linux", reason="forks; the workers are forked on Linux")
def test_prepare_stops_within_seconds_wherever_the_signal_lands(tmp_path):
    spec, _, _ = write_corpus(tmp_path, n=80)
    cases = [(point, sig) for point in POINTS for sig in SIGNALS]
    jobs = []
    for point, sig in cases:
        folder = tmp_path / f"{point}-{sig}"
        folder.mkdir()
        argv = ["prepare", "--data", spec, "--src-lang", "de", "--tgt-lang", "en", "--vocab-size", "100"]
        jobs.append((POINTS[point], [*argv, "--workers", "2", "--out", str(folder / "out")]))
    errors = (tmp_path / "stderr").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-c", _FORKS, json.dumps(jobs)],
        stdout=subprocess.PIPE,
        stderr=errors,
        env={**os.environ, "PYTHONPATH": str(SRC)},
        text=True,
        cwd=tmp_path,
        start_new_session=True,  # its own group: every child and worker is stopped with it below
    )
    sent: dict[int, tuple[str, str, float]] = {}  # child pid -> (point, signal, when)
    ended: dict[int, tuple[int, float]] = {}
    seen_points: dict[str, int] = {}
    try:
        with killed_after(proc, 60, group=True):  # a prepare that never ends ends the reading
            assert proc.stdout is not None
            while len(ended) < len(cases):
                line = proc.stdout.readline()
                if not line:
                    break
                if not line.startswith(("at ", "end ")):  # prepare's own lines
                    continue
                word, pid_text, rest = line.split(" ", 2)
                pid = int(pid_text)
                if word == "at":  # the n-th child to reach a point gets that point's n-th signal
                    point = next(p for p, hook in POINTS.items() if hook == rest.strip())
                    if point == "encoding":  # a worker announced: signal its parent, the prepare
                        try:
                            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
                        except FileNotFoundError:  # already stopped: its sibling's line reached its parent first
                            continue
                        if pid in sent:
                            continue
                    k = seen_points.get(point, 0)
                    seen_points[point] = k + 1
                    sig = list(SIGNALS)[k]
                    sent[pid] = (point, sig, time.monotonic())
                    os.kill(pid, getattr(signal, sig))
                elif word == "end":
                    code, when = rest.split()
                    ended[pid] = (int(code), float(when))
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
        errors.close()
    err = (tmp_path / "stderr").read_text()
    assert "Traceback" not in err, err
    assert sorted(seen_points.items()) == sorted((p, 2) for p in POINTS), seen_points
    for pid, (point, sig, when) in sent.items():
        assert pid in ended, f"prepare still running 60 s after {sig} at {point}"
        code, end = ended[pid]
        assert code == SIGNALS[sig], f"{sig} at {point}: exit {code}"
        assert end - when < 10, f"{sig} at {point}: ended {end - when:.1f} s after the signal"
    for point, sig in cases:
        assert list((tmp_path / f"{point}-{sig}").iterdir()) == [], f"{sig} at {point} left files"

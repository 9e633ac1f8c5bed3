"""Memory under bursts of concurrent mixed requests: what a leak would show (objects that outlive their
request: Python objects keep growing) apart from allocator fragmentation (resident memory that the
idle server's heap trim hands back), on the tiny model, in seconds."""

from __future__ import annotations

import gc
import random
import tracemalloc
from concurrent.futures import ThreadPoolExecutor

import pytest

from attnlab.serve.memory import IdleTrim, trim_heap

BURSTS, CLIENTS, REQUESTS = 10, 12, 4
# Bounds over the last half of the bursts, once warm: a leak of one explanation (a few KB of lists and floats)
# or one record per request would add ~CLIENTS * REQUESTS * BURSTS / 2 objects, far above these.
MAX_OBJECT_GROWTH = 300
MAX_RSS_GROWTH_MB = 24.0
# Python's allocations are traced over the last TRACED bursts only (tracing makes a burst ~5x slower): growth
# over TRACED - 1 bursts, so ~2.6 KB kept per request crosses the bound (measured: 0.13 MB over 4 bursts).
TRACED = 3
MAX_TRACED_GROWTH_MB = 0.25


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS:"))


def _requests(k: int, sentences: list[str]):
    for r in range(REQUESTS):
        if (k + r) % 3 == 0:  # the explorer: every map recorded and serialised
            yield "/api/explain", {"text": sentences[(k * 7 + r) % len(sentences)], "beam": 1 + (k + r) % 3}
        else:
            texts = [sentences[(k * 3 + r * 5 + j) % len(sentences)] for j in range(1 + (k + r) % 8)]
            yield "/api/translations", {"texts": texts, "beam": 1 + (k * r) % 3}


@pytest.mark.skipif(not trim_heap(), reason="needs glibc (malloc_trim) and /proc")
def test_bursts_leave_no_objects_and_no_growing_heap(translator):
    from fastapi.testclient import TestClient

    from attnlab.serve.app import create_app

    words = "i you he we am is are like see the a cat dog house tea home calm cold tall big small".split()
    rng = random.Random(0)
    sentences = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 10))) + " ." for _ in range(100)]
    objects, traced, rss = [], [], []
    half = BURSTS // 2
    try:
        with TestClient(create_app(translator, workers=2, trim_interval_s=0.0)) as c, ThreadPoolExecutor(CLIENTS) as ex:

            def client(k: int) -> None:
                for path, body in _requests(k, sentences):
                    assert c.post(path, json=body).status_code == 200

            for burst in range(BURSTS):
                if burst == BURSTS - TRACED:
                    tracemalloc.start()
                list(ex.map(client, range(CLIENTS)))
                gc.collect()
                assert c.app.state.served.pool.pending == 0 and c.app.state.served.batcher.pending == 0
                c.get("/healthz")  # answered while idle: the server trims its heap after it
                objects.append(len(gc.get_objects()))
                traced.append(tracemalloc.get_traced_memory()[0] / 1e6)
                rss.append(_rss_mb())
            assert c.app.state.served.trim.trims >= BURSTS
    finally:
        tracemalloc.stop()
    first = BURSTS - TRACED
    growth = (max(objects[half:]) - objects[half], max(traced[first:]) - traced[first], max(rss[half:]) - rss[half])
    report = f"objects {objects}, traced MB {[round(t, 2) for t in traced]}, RSS MB {[round(r) for r in rss]}"
    assert growth[0] <= MAX_OBJECT_GROWTH and growth[1] <= MAX_TRACED_GROWTH_MB, "objects outlive requests: " + report
    assert growth[2] <= MAX_RSS_GROWTH_MB, "resident memory grows although objects do not: " + report


def test_idle_trim_waits_for_idle_and_interval():
    now, busy = [0.0], [True]
    trim = IdleTrim(lambda: busy[0], min_interval_s=1.0, clock=lambda: now[0])
    assert not trim.idle()  # a request still waiting
    busy[0] = False
    assert trim.idle() and not trim.idle()  # trimmed; again too soon
    now[0] = 1.5
    assert trim.idle() and trim.trims == (2 if trim_heap() else 0)

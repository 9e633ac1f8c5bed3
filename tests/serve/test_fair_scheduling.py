"""Fair scheduling on POST /api/translations: requests with options decode on a lane of their own, so a
plain request answers at once while the largest requests the server accepts are decoding; queued work is
bounded, and a request that could not start in time gets 503 with Retry-After."""

from __future__ import annotations

import threading
import time

from fastapi.testclient import TestClient

from attnlab.analysis.explanation import check_text
from attnlab.serve.app import create_app
from attnlab.serve.budget import request_refusal
from attnlab.serve.guard import Limits

TEXT = "we are friends and he is calm ."


def maximal_body(translator, limits: Limits) -> dict:
    """The costliest request `limits` accept: max_texts texts, beam and n_best at max_beam, an alignment,
    and every row forced to the longest output the work budget allows (found by bisection)."""
    n, beam = limits.max_texts, limits.max_beam
    sources = [len(check_text(translator, TEXT)) + 1] * n

    def options(L: int) -> dict:
        return {"n_best": beam, "min_len": L - 1, "max_len": L, "align": True}

    def fits(L: int) -> bool:
        return (
            request_refusal(translator, limits, sources, translator.defaults.merged({"beam": beam, **options(L)}))
            is None
        )

    lo, hi = 2, 1024
    assert fits(lo) and not fits(hi), "the budget should cut the output length somewhere"
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return {"texts": [TEXT] * n, "beam": beam, "options": options(lo)}


def test_a_plain_request_answers_while_three_maximal_ones_decode(translator):
    limits = Limits(max_texts=4, max_beam=4)
    body = maximal_body(translator, limits)
    with TestClient(create_app(translator, limits=limits)) as c:
        assert c.post("/api/translations", json={"texts": ["go ."]}).status_code == 200  # warm
        alone = time.perf_counter()
        assert c.post("/api/translations", json={"texts": ["go ."], "beam": 1}).status_code == 200
        alone = time.perf_counter() - alone
        codes: list[int] = []
        heavy = [threading.Thread(target=lambda: codes.append(c.post("/api/translations", json=body).status_code))
                 for _ in range(3)]  # fmt: skip
        t0 = time.perf_counter()
        for t in heavy:
            t.start()
        batcher = c.app.state.served.batcher
        while batcher.work == 0 and time.perf_counter() - t0 < 10:
            time.sleep(0.01)
        time.sleep(0.2)  # the first maximal request is decoding, the other two wait behind it
        start = time.perf_counter()
        r = c.post("/api/translations", json={"texts": ["go ."], "beam": 1})
        latency = time.perf_counter() - start
        for t in heavy:
            t.join(60)
        heavy_s = time.perf_counter() - t0
    assert r.status_code == 200, r.text
    assert codes == [200, 200, 200]
    print(f"plain {latency:.3f} s ({alone:.3f} s alone) while three maximal requests took {heavy_s:.2f} s")
    # Behind them (one lane for everything) it would wait for at least two of the three, which run one after
    # another: about two thirds of heavy_s on any machine. On its own lane it shares the cores with one of them.
    assert latency < 1.0 and latency < heavy_s / 3, (latency, alone, heavy_s)


def test_queued_work_is_bounded_and_a_late_request_gets_503(translator):
    limits = Limits(max_texts=4, max_beam=4, start_deadline_s=0.05)
    body = maximal_body(translator, limits)
    with TestClient(create_app(translator, limits=limits)) as c:
        batcher = c.app.state.served.batcher
        codes: list = []
        heavy = [threading.Thread(target=lambda: codes.append(c.post("/api/translations", json=body)))
                 for _ in range(2)]  # fmt: skip
        for t in heavy:
            t.start()
        for t in heavy:
            t.join(60)
        late = [r for r in codes if r.status_code == 503]
        assert sorted(r.status_code for r in codes) == [200, 503], [r.text for r in codes]
        assert "could not start within 0.05 s" in late[0].json()["detail"]
        assert int(late[0].headers["Retry-After"]) >= 1
        # The rate is now known: a request whose work ahead exceeds the deadline is refused at once.
        batcher.lane_work = 1e30
        r = c.post("/api/translations", json=body)
        assert r.status_code == 503 and "queued ahead" in r.json()["detail"], r.text
        batcher.lane_work = 0.0
        batcher.work = batcher.max_work
        r = c.post("/api/translations", json={"texts": ["go ."], "beam": 1})
        assert r.status_code == 503 and "G multiply-adds of work waiting" in r.json()["detail"], r.text
        batcher.work = 0.0

"""The micro-batcher behind POST /api/translations: batches form under concurrency, stay within
max_batch, are sorted by length, keep beams apart, answer in order, and refuse beyond max_pending."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest

from attnlab.serve.batcher import MicroBatcher
from attnlab.serve.pool import Busy, TooLarge


class FakeTranslator:
    """Upper-cases; records every call; a sentence containing 'bad' raises ValueError like translate would.
    With a `gate`, each call sets `started` and waits for the gate (the test decides when decoding ends)."""

    def __init__(self, gate: threading.Event | None = None):
        self.calls, self.lock, self.gate, self.started = [], threading.Lock(), gate, threading.Event()

    def options(self, beam):  # as Translator.options: its defaults with this beam
        return SimpleNamespace(beam=beam)

    def translate(self, texts, options):
        beam = options.beam
        with self.lock:
            self.calls.append((list(texts), beam))
        self.started.set()
        if self.gate is not None:
            assert self.gate.wait(60), "the test never opened the gate"
        if any("bad" in t for t in texts):
            raise ValueError("bad sentence")
        return [f"{t.upper()}/{beam}" for t in texts]


def test_concurrent_requests_share_batches():
    fake = FakeTranslator()
    b = MicroBatcher(fake, max_batch=8, max_wait_ms=20)

    async def scenario():
        texts = [f"s{'x' * (i % 5)} {i}" for i in range(40)]
        outs = await asyncio.gather(*(b.translate([t]) for t in texts))
        assert [o[0] for o in outs] == [f"{t.upper()}/1" for t in texts]
        multi = await b.translate(["go .", "a much longer sentence ."], beam=1)
        assert multi == ["GO ./1", "A MUCH LONGER SENTENCE ./1"]

    asyncio.run(scenario())
    b.shutdown()
    sizes = [len(texts) for texts, _ in fake.calls]
    assert sum(sizes[:-1]) == 40 and max(sizes) <= 8 and len(fake.calls) <= 40 // 8 + 3
    for texts, _ in fake.calls:
        assert [len(t) for t in texts] == sorted(len(t) for t in texts)
    assert b.pending == 0 and b.batches == len(fake.calls)


def test_beams_are_never_mixed():
    fake = FakeTranslator()
    b = MicroBatcher(fake, max_batch=16, max_wait_ms=20)

    async def scenario():
        outs = await asyncio.gather(*(b.translate([f"t{i}"], beam=1 + i % 3) for i in range(12)))
        assert [o[0] for o in outs] == [f"T{i}/{1 + i % 3}" for i in range(12)]

    asyncio.run(scenario())
    b.shutdown()
    for texts, beam in fake.calls:
        assert all(t.upper() + f"/{beam}" in [f"T{i}/{1 + i % 3}" for i in range(12)] for t in texts)


def test_more_sentences_than_the_queue_holds_is_too_large_not_busy():
    b = MicroBatcher(FakeTranslator(), max_batch=2, max_pending=3)

    async def scenario():
        with pytest.raises(TooLarge, match="at most 3"):
            await b.translate(["a", "b", "c", "d"])
        assert b.pending == 0 and await b.translate(["a", "b", "c"]) == ["A/1", "B/1", "C/1"]

    asyncio.run(scenario())
    b.shutdown()


def test_one_bad_sentence_fails_only_its_request():
    fake = FakeTranslator()
    b = MicroBatcher(fake, max_batch=8, max_wait_ms=20)

    async def scenario():
        return await asyncio.gather(
            b.translate(["ok ."]), b.translate(["bad ."]), b.translate(["fine ."]), return_exceptions=True
        )

    good1, bad, good2 = asyncio.run(scenario())
    b.shutdown()
    assert good1 == ["OK ./1"] and good2 == ["FINE ./1"] and isinstance(bad, ValueError)


def test_full_queue_is_busy():
    gate = threading.Event()
    fake = FakeTranslator(gate)
    b = MicroBatcher(fake, max_batch=2, max_wait_ms=0, max_pending=3)

    async def scenario():
        first = asyncio.ensure_future(b.translate(["a", "b", "c"]))
        await asyncio.get_running_loop().run_in_executor(None, fake.started.wait, 60)  # its first batch decodes
        with pytest.raises(Busy):
            await b.translate(["d"])
        gate.set()
        assert await first == ["A/1", "B/1", "C/1"]
        assert await b.translate(["d"]) == ["D/1"]  # and it recovers

    asyncio.run(scenario())
    b.shutdown()


@pytest.mark.parametrize(
    "kw", [{"max_batch": 0}, {"max_pending": -1}, {"workers": 0}, {"max_wait_ms": -1}, {"max_wait_ms": float("nan")}]
)
def test_bad_settings_refused(kw):
    with pytest.raises(ValueError, match=next(iter(kw))):
        MicroBatcher(FakeTranslator(), **kw)


def test_api_translations_match_translator(client, translator):
    texts = ["i'm home .", "go .", "he's calm .", "i lost ."]
    r = client.post("/api/translations", json={"texts": texts})
    assert r.status_code == 200, r.text
    assert r.json()["translations"] == translator.translate(texts) and r.json()["beam"] == translator.defaults.beam
    r = client.post("/api/translations", json={"texts": texts[:2], "beam": 3})
    assert r.json()["translations"] == translator.translate(texts[:2], options=translator.options(beam=3))


class HeldTranslator:
    """The real translator, whose first call waits until `batcher` holds `n` sentences: the rest of the
    clients are then certainly queued behind it, however slowly the machine lets them arrive."""

    def __init__(self, translator, n: int):
        self.base, self.n, self.batcher, self.first = translator, n, None, True

    def translate(self, texts, options=None):
        if self.first:
            self.first = False
            while self.batcher.pending < self.n:  # set on the event loop's thread; read here only
                time.sleep(0.005)
        return self.base.translate(texts, options=options)

    def __getattr__(self, name):  # vocabularies, config, model: the real translator's
        return getattr(self.base, name)


def test_api_translations_concurrent_clients_are_batched(translator):
    from fastapi.testclient import TestClient

    from attnlab.serve.app import create_app

    held = HeldTranslator(translator, 16)
    texts = ["i'm home .", "go .", "he's calm .", "i lost ."] * 4
    with TestClient(create_app(held, max_batch=32)) as client:
        held.batcher = batcher = client.app.state.served.batcher
        with ThreadPoolExecutor(16) as ex:
            outs = list(ex.map(lambda t: client.post("/api/translations", json={"texts": [t]}), texts))
    expected = dict(zip(texts, translator.translate(texts)))
    assert all(r.status_code == 200 and r.json()["translations"] == [expected[t]] for r, t in zip(outs, texts))
    # The first batch (whoever came within --max-wait-ms), then all that queued behind it in one more.
    assert batcher.sentences == 16 and batcher.batches <= 2


@pytest.mark.parametrize(
    "body, status, words",
    [
        ({"texts": []}, 422, "texts"),
        ({"texts": ["go .", ""]}, 422, "texts[1]"),
        ({"texts": ["go .", "a" * 501]}, 413, "texts[1]"),
        ({"texts": ["go " * 40]}, 422, "tokens"),
        ({"texts": "go ."}, 422, "texts"),
        ({"texts": ["go ."], "beam": 9}, 422, "beam"),
        ({"text": "go ."}, 422, "texts"),
    ],
)
def test_api_translations_bad_input(client, body, status, words):
    r = client.post("/api/translations", json=body)
    assert r.status_code == status, r.text
    assert words in r.json()["detail"]


def test_api_translations_full_queue_503(client):
    batcher = client.app.state.served.batcher
    saved = batcher.pending
    batcher.pending = batcher.max_pending
    try:
        r = client.post("/api/translations", json={"texts": ["go ."]})
    finally:
        batcher.pending = saved
    assert r.status_code == 503 and r.headers["retry-after"] == "1" and "full" in r.json()["detail"]

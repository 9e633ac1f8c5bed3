"""The plain translation path: concurrent requests gathered into one `Translator.translate` call.

A request puts its sentences on a queue and awaits one future per sentence. A collector task takes the
oldest waiting sentence, waits up to `max_wait_ms` for more (or until `max_batch` are waiting), takes up
to `max_batch` sentences with the same beam, sorts them by length (so a batch pads little) and runs
them as one batch on a decode thread. While a batch decodes, new requests pile up and form the next,
larger batch: under load, batches grow by themselves; alone, a request waits at most `max_wait_ms`.

No attention is recorded here, so every decode thread shares the one model (no copies).
Bounded like the explorer: beyond `max_pending` waiting sentences `translate` raises Busy (HTTP 503);
a request of more than `max_pending` sentences could never fit, so it raises TooLarge (HTTP 413) instead.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
from collections import deque
from dataclasses import dataclass
from typing import Any

from .pool import Busy, Threads, TooLarge


@dataclass
class _Item:
    text: str
    beam: int
    future: asyncio.Future
    options: Any = None  # DecodeOptions: decoded with the other sentences of its own request only
    group: int = 0  # the request an item with options belongs to


class MicroBatcher:
    """Args:
    translator: an `attnlab.decoding.Translator`; only `translate(list[str], options=...)` is used.
    max_batch: most sentences in one decode call.
    max_wait_ms: longest a sentence waits for company before its batch starts.
    max_pending: most sentences waiting or decoding at once; more -> Busy.
    workers: decode threads (batches decoded at the same time); 1 suits a small CPU.
    """

    def __init__(
        self, translator, max_batch: int = 32, max_wait_ms: float = 5.0, max_pending: int = 1024, workers: int = 1
    ):
        for name, v in (("max_batch", max_batch), ("max_pending", max_pending), ("workers", workers)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if not isinstance(max_wait_ms, (int, float)) or not (0 <= max_wait_ms <= 10_000):
            raise ValueError(f"max_wait_ms must be a number of milliseconds in [0, 10000], got {max_wait_ms!r}")
        self.translator = translator
        self.max_batch, self.max_wait_s, self.max_pending, self.workers = (
            max_batch,
            max_wait_ms / 1000,
            max_pending,
            workers,
        )
        self.pending = 0  # sentences queued or decoding; touched on the event loop's thread only
        self.batches = 0  # decode calls made (for tests and the load benchmark)
        self.sentences = 0  # sentences decoded
        self._queue: deque[_Item] = deque()
        # Created by _start() inside the running event loop (before anything uses them).
        self._arrived: asyncio.Event
        self._slots: asyncio.Semaphore
        self._task: asyncio.Task | None = None
        self._running: set[asyncio.Task] = set()
        self.threads = Threads(self.workers, "attnlab-batch")
        self._groups = itertools.count(1)

    async def translate(self, texts: list[str], beam: int = 1, options: Any = None) -> list:
        """Translations of `texts` (already validated), decoded together with other requests' sentences.
        With `options` (a DecodeOptions) the texts form a batch of their own, in order (per-text prefixes
        and constraints follow them), and each result is a `Translation`."""
        self.check_fits(len(texts))
        if self.pending + len(texts) > self.max_pending:
            raise Busy(
                f"the translation queue is full ({self.pending} sentences waiting, at most "
                f"{self.max_pending}); retry in a moment"
            )
        self._start()
        loop = asyncio.get_running_loop()
        group = next(self._groups) if options is not None else 0
        items = [_Item(t, beam, loop.create_future(), options, group) for t in texts]
        self.pending += len(items)
        self._queue.extend(items)
        self._arrived.set()
        try:
            return list(await asyncio.gather(*(it.future for it in items)))
        finally:
            self.pending -= len(items)

    def check_fits(self, n: int) -> None:
        """TooLarge if `n` sentences exceed the queue itself: Busy would be a lie, no retry makes room."""
        if n > self.max_pending:
            raise TooLarge(
                f"{n} texts in one request; the translation queue holds at most {self.max_pending} "
                "sentences (--max-batch-pending); split them"
            )

    def _start(self) -> None:
        if self._task is None or self._task.done():
            self._arrived, self._slots = asyncio.Event(), asyncio.Semaphore(self.workers)
            self._task = asyncio.get_running_loop().create_task(self._collect())

    async def _collect(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            while not self._queue:
                self._arrived.clear()
                await self._arrived.wait()
            await self._slots.acquire()  # a decode thread is free
            deadline = loop.time() + self.max_wait_s
            while len(self._queue) < self.max_batch and (left := deadline - loop.time()) > 0:
                self._arrived.clear()
                try:
                    await asyncio.wait_for(self._arrived.wait(), left)
                except asyncio.TimeoutError:
                    break
            batch = self._take()
            task = loop.create_task(self._decode(batch))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    def _take(self) -> list[_Item]:
        """Up to max_batch waiting sentences with the oldest one's beam (and request, if it has options),
        in arrival order (no starvation)."""
        key = (self._queue[0].beam, self._queue[0].group)
        batch: list[_Item] = []
        rest: deque[_Item] = deque()
        while self._queue and (len(batch) < self.max_batch or key[1]):  # a request with options stays whole
            it = self._queue.popleft()
            if it.future.done():  # its request was cancelled (client gone)
                continue
            (batch if (it.beam, it.group) == key else rest).append(it)
        self._queue.extendleft(reversed(rest))
        return batch if key[1] else sorted(batch, key=lambda it: len(it.text))

    async def _decode(self, batch: list[_Item]) -> None:
        loop = asyncio.get_running_loop()
        try:
            if not batch:
                return
            texts, beam, options = [it.text for it in batch], batch[0].beam, batch[0].options
            try:
                if options is not None:
                    decode = functools.partial(self.translator.translate_tokens, texts, options=options)
                    out = await loop.run_in_executor(self.threads.get(), decode)
                else:
                    plain = functools.partial(
                        self.translator.translate, texts, options=self.translator.options(beam=beam)
                    )
                    out = await loop.run_in_executor(self.threads.get(), plain)
                results: list = list(out)
            except ValueError as exc:
                if options is not None:  # the options do not fit these texts: that request's error (422)
                    results = [exc] * len(batch)
                else:  # one sentence the checks let through must not fail the others: decode one by one
                    results = []
                    for t in texts:
                        try:
                            one = functools.partial(
                                self.translator.translate, [t], options=self.translator.options(beam=beam)
                            )
                            results.append((await loop.run_in_executor(self.threads.get(), one))[0])
                        except Exception as err:  # noqa: BLE001 - handed to that sentence's request
                            results.append(err)
            except Exception as exc:  # noqa: BLE001 - a bug: every request of the batch gets it (-> 500)
                results = [exc] * len(batch)
            self.batches += 1
            self.sentences += len(batch)
            for it, r in zip(batch, results):
                if it.future.done():
                    continue
                if isinstance(r, BaseException):
                    it.future.set_exception(r)
                else:
                    it.future.set_result(r)
        finally:
            self._slots.release()

    def shutdown(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
        for it in self._queue:
            if not it.future.done():
                it.future.cancel()
        self._queue.clear()
        self.threads.shutdown()


__all__ = ["MicroBatcher"]

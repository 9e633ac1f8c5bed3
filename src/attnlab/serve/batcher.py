"""The plain translation path: concurrent requests gathered into one `Translator.translate` call.

A request puts its sentences on a queue and awaits one future per sentence. A collector task takes the
oldest waiting sentence, waits up to `max_wait_ms` for more (or until `max_batch` are waiting), takes up
to `max_batch` sentences with the same beam, sorts them by length (so a batch pads little) and runs
them as one batch on a decode thread. While a batch decodes, new requests pile up and form the next,
larger batch: under load, batches grow by themselves; alone, a request waits at most `max_wait_ms`.

A request with options (a long forced output, a wide beam, an alignment) can cost a thousand plain
sentences, so it never enters that queue: it decodes whole on a lane of its own (`workers` more threads,
one request each, oldest first), and a plain request arriving behind it still starts within `max_wait_ms`.

No attention is recorded here, so every decode thread shares the one model (no copies).
Bounded by work, not sentences: each request brings its estimated cost (`attnlab.decoding.cost`), and
beyond `max_work` queued or decoding `translate` raises Busy (HTTP 503 + Retry-After); so does a request
that could not start within `deadline_s` (estimated from the work ahead of it at the rate decodes have run,
and checked again when its turn comes). A request of more than `max_pending` sentences could never fit,
so it raises TooLarge (HTTP 413) instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from .pool import Busy, Threads, TooLarge


@dataclass
class _Item:
    text: str
    beam: int
    future: asyncio.Future
    queued_at: float = 0.0  # the event loop's time it arrived (its deadline runs from there)


class MicroBatcher:
    """Args:
    translator: an `attnlab.decoding.Translator`; only `translate(list[str], options=...)` is used.
    max_batch: most sentences in one decode call.
    max_wait_ms: longest a sentence waits for company before its batch starts.
    max_pending: most plain sentences waiting or decoding at once; more -> Busy.
    workers: decode threads per lane (plain batches, requests with options); 1 suits a small CPU.
    max_work: most estimated work (multiply-add equivalents) waiting or decoding at once; None: no bound.
    deadline_s: longest a request may wait for its decode to start; later -> Busy.
    """

    def __init__(
        self,
        translator,
        max_batch: int = 32,
        max_wait_ms: float = 5.0,
        max_pending: int = 1024,
        workers: int = 1,
        max_work: float | None = None,
        deadline_s: float = 30.0,
    ):
        for name, v in (("max_batch", max_batch), ("max_pending", max_pending), ("workers", workers)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if not isinstance(max_wait_ms, (int, float)) or not (0 <= max_wait_ms <= 10_000):
            raise ValueError(f"max_wait_ms must be a number of milliseconds in [0, 10000], got {max_wait_ms!r}")
        for name, w in (("max_work", max_work), ("deadline_s", deadline_s)):
            if w is not None and (isinstance(w, bool) or not isinstance(w, (int, float)) or not 0 < w < math.inf):
                raise ValueError(f"{name} must be a positive finite number, got {w!r}")
        self.max_work, self.deadline_s = max_work, float(deadline_s)
        self.work = 0.0  # estimated work queued or decoding, both lanes
        self.lane_work = 0.0  # of it, requests with options
        self.rate: float | None = None  # work per second decodes have run at (a running mean); None: unseen
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
        self.lane_threads = Threads(self.workers, "attnlab-options")
        self._lane: asyncio.Semaphore

    async def translate(self, texts: list[str], beam: int = 1, options: Any = None, work: float = 0.0) -> list:
        """Translations of `texts` (already validated), decoded together with other requests' sentences.
        With `options` (a DecodeOptions) the texts decode as one batch of their own on the options lane,
        in order (per-text prefixes and constraints follow them), and each result is a `Translation`.
        work: the request's estimated cost (`attnlab.decoding.cost.translation_cost(...).work`)."""
        self.check_fits(len(texts))
        if options is None and self.pending + len(texts) > self.max_pending:
            raise Busy(
                f"the translation queue is full ({self.pending} sentences waiting, at most "
                f"{self.max_pending}); retry in a moment"
            )
        if self.max_work is not None and self.work + work > self.max_work:
            raise Busy(
                f"the translation queue is full ({self.work / 1e9:,.1f} G multiply-adds of work waiting, at most "
                f"{self.max_work / 1e9:,.1f} G); retry in a moment",
                self.wait_s(self.work + work - self.max_work),
            )
        ahead = self.lane_work if options is not None else 0.0
        if self.wait_s(ahead) > self.deadline_s:
            raise Busy(
                f"{self.wait_s(ahead):,.0f} s of decoding with options is queued ahead of this request, over "
                f"the {self.deadline_s:g} s a request may wait; retry later or send it without options",
                self.wait_s(ahead),
            )
        self._start()
        self.work += work
        try:
            if options is not None:
                self.lane_work += work
                try:
                    return await self._run_alone(texts, options, work)
                finally:
                    self.lane_work -= work
            return await self._queue_plain(texts, beam)
        finally:
            self.work -= work

    def wait_s(self, work: float) -> float:
        """Seconds `work` takes at the rate decodes have run (0 until one has finished)."""
        return 0.0 if not self.rate else work / self.rate

    def _observe(self, work: float, seconds: float) -> None:
        if work > 0 and seconds > 0:
            rate = work / seconds
            self.rate = rate if self.rate is None else 0.7 * self.rate + 0.3 * rate

    async def _queue_plain(self, texts: list[str], beam: int) -> list:
        loop = asyncio.get_running_loop()
        items = [_Item(t, beam, loop.create_future(), loop.time()) for t in texts]
        self.pending += len(items)
        self._queue.extend(items)
        self._arrived.set()
        try:
            return list(await asyncio.gather(*(it.future for it in items)))
        finally:
            self.pending -= len(items)

    async def _run_alone(self, texts: list[str], options: Any, work: float) -> list:
        """One request with options on the options lane: waits its turn (at most deadline_s), then decodes;
        the lane's slot is freed when the decode thread ends, even if the client has gone."""
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(self._lane.acquire(), self.deadline_s)
        except asyncio.TimeoutError:
            raise Busy(
                f"this request could not start within {self.deadline_s:g} s: other requests with options are "
                "decoding; retry later or send it without options",
                self.wait_s(self.lane_work),
            ) from None
        lane = self._lane

        def release(_) -> None:
            with contextlib.suppress(RuntimeError):  # the loop has closed: nothing waits on the lane any more
                loop.call_soon_threadsafe(lane.release)

        t0 = time.perf_counter()
        decode = functools.partial(self.translator.translate_tokens, texts, options=options)
        done = self.lane_threads.get().submit(decode)
        done.add_done_callback(release)
        out = list(await asyncio.wrap_future(done))
        self._observe(work, time.perf_counter() - t0)
        return out

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
            self._lane = asyncio.Semaphore(self.workers)
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
        """Up to max_batch waiting sentences with the oldest one's beam, in arrival order (no starvation);
        a sentence that waited past deadline_s gets Busy instead."""
        late = asyncio.get_running_loop().time() - self.deadline_s
        key = self._queue[0].beam
        batch: list[_Item] = []
        rest: deque[_Item] = deque()
        while self._queue and len(batch) < self.max_batch:
            it = self._queue.popleft()
            if it.future.done():  # its request was cancelled (client gone)
                continue
            if it.queued_at < late:
                it.future.set_exception(
                    Busy(f"this request could not start within {self.deadline_s:g} s; retry in a moment")
                )
                continue
            (batch if it.beam == key else rest).append(it)
        self._queue.extendleft(reversed(rest))
        return sorted(batch, key=lambda it: len(it.text))

    async def _decode(self, batch: list[_Item]) -> None:
        loop = asyncio.get_running_loop()
        try:
            if not batch:
                return
            texts, beam = [it.text for it in batch], batch[0].beam
            try:
                plain = functools.partial(self.translator.translate, texts, options=self.translator.options(beam=beam))
                out = await loop.run_in_executor(self.threads.get(), plain)
                results: list = list(out)
            except ValueError:  # one sentence the checks let through must not fail the others: one by one
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
        self.lane_threads.shutdown()


__all__ = ["MicroBatcher"]

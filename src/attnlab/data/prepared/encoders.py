"""Encoding `prepare`'s chunks of sentence pairs into token-id arrays, in this process or a pool.

`ChunkEncoder(local, spec, dtype, workers)` turns chunks `(sources, targets)` into `EncodedChunk`s
(flat ids and lengths per side, numpy), in order. The first chunk of a corpus is encoded here; from the
second on, `workers` >= 2 processes encode them (a small corpus never pays for starting the pool), one
chunk per worker in flight so memory stays bounded whatever the corpus size.

The workers are `attnlab.inference.pool.WorkerProcess`es, forked where that is safe and cheap (Linux: no re-import
of the caller's script, no torch import), spawned elsewhere: a worker that dies fails the call (BrokenProcessPool),
never hangs it; workers leave signals to this process and never outlive it (that module's docstring says how).
The encoding is the same function everywhere (the tokenizer's batch encode, or `Vocab.encode`), so the shards do
not depend on the number of workers. `sigterm_unwinds` turns a SIGTERM to this process into an unwinding, so the
pool is reaped and temporary folders removed before the process ends by that signal.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from attnlab.inference.pool import WorkerProcess, stop
from attnlab.utils.runtime import usable_cores

from ..vocab import Vocab

# ("subword", tokenizer JSON, tokenizer JSON) or ("word", src Vocab dict, tgt Vocab dict): what a
# worker needs to rebuild the two encoders (plain data, cheap to send to a spawned process).
EncoderSpec = tuple[str, Any, Any]
Encode = Callable[[list[str]], list[list[int]]]


@dataclass
class EncodedChunk:
    """One chunk of N pairs: `src_flat` (sum of src_lens,) ids in the shard dtype, `src_lens` (N,)
    int64; the same for the target side."""

    src_flat: np.ndarray
    src_lens: np.ndarray
    tgt_flat: np.ndarray
    tgt_lens: np.ndarray


def check_workers(workers: int | None) -> int:
    """None -> the usable cores; otherwise a positive int, or a ValueError saying so."""
    if workers is None:
        return usable_cores()
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive integer (processes that encode), got {workers!r}")
    return workers


def spec_of(kind: str, src_vocab, tgt_vocab) -> EncoderSpec:
    """The plain-data description of two vocabularies that `_encoders` rebuilds in a worker."""
    if kind == "word":
        return ("word", src_vocab.to_dict(), tgt_vocab.to_dict())
    for v in (src_vocab, tgt_vocab):  # 'book' style preprocesses in Python first: not what prepare makes
        if getattr(v, "style", "plain") != "plain":
            raise ValueError(f"prepare encodes with plain subword vocabularies only, got style {v.style!r}")
    return ("subword", src_vocab.tokenizer.to_str(), tgt_vocab.tokenizer.to_str())


def _encoders(spec: EncoderSpec) -> tuple[Encode, Encode]:
    kind, src, tgt = spec
    if kind == "word":

        def word(d: dict) -> Encode:
            vocab = Vocab.from_dict(d)
            return lambda texts: [vocab.encode(t) for t in texts]

        return word(src), word(tgt)

    def subword(js: str) -> Encode:
        tok = Tokenizer.from_str(js)
        # encode_batch_fast (tokenizers >= 0.20) skips the character offsets, as SubwordVocab does.
        encode = getattr(tok, "encode_batch_fast", tok.encode_batch)
        return lambda texts: [e.ids for e in encode(texts)]

    return (subword(src), subword(tgt)) if src != tgt else (subword(src),) * 2


def _flat(ids: list[list[int]], dtype) -> tuple[np.ndarray, np.ndarray]:
    lens = np.fromiter(map(len, ids), np.int64, len(ids))
    flat = np.fromiter(itertools.chain.from_iterable(ids), dtype, int(lens.sum()))
    return flat, lens


def encode_chunk(encoders: tuple[Encode, Encode], dtype, sources: list[str], targets: list[str]) -> EncodedChunk:
    src_flat, src_lens = _flat(encoders[0](sources), dtype)
    tgt_flat, tgt_lens = _flat(encoders[1](targets), dtype)
    return EncodedChunk(src_flat, src_lens, tgt_flat, tgt_lens)


_WORKER: dict = {}  # the worker process's encoders and dtype, set once by _serve


def _work(sources: list[str], targets: list[str]) -> EncodedChunk:
    return encode_chunk(_WORKER["encoders"], _WORKER["dtype"], sources, targets)


def _serve(conn: Connection, spec: EncoderSpec, dtype: str) -> None:
    """A worker's life: a chunk from `conn`, its encoding (or the exception) back; the end of `conn` ends it."""
    # One thread per worker: the pool is the parallelism; tokenizers' own threads would oversubscribe.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    _WORKER.update(encoders=_encoders(spec), dtype=np.dtype(dtype))
    while True:
        try:
            sources, targets = conn.recv()
        except (EOFError, OSError):
            return
        try:
            reply: tuple[bool, Any] = (True, _work(sources, targets))
        except Exception as e:  # noqa: BLE001 - the parent raises it, as a pool's future would
            reply = (False, e)
        conn.send(reply)


class ChunkEncoder:
    """Ordered encoding of chunks; use as a context manager (the pool, if started, ends with it).

    Each worker has its own pipe and at most one chunk at a time (chunk i goes to worker i mod N), so the
    parent reads every answer from one known process: an end of file or the process's exit is a dead
    worker (BrokenProcessPool), never a wait. Leaving the block stops the workers (`attnlab.inference.pool.stop`;
    at once after an error): nothing waits on a worker that died, or on one stuck mid-chunk.

    Args:
        local: the encoders for this process (the vocabularies' own, built once).
        spec: the same encoders as plain data, for worker processes.
        dtype: the shard dtype (uint16 or int32).
        workers: 1 = encode here; N >= 2 = N worker processes from the second chunk on.
    """

    def __init__(self, local: tuple[Encode, Encode], spec: EncoderSpec, dtype, workers: int):
        self.local, self.spec, self.dtype, self.workers = local, spec, np.dtype(dtype), check_workers(workers)
        self._workers: list[WorkerProcess] = []
        self._sent = 0  # chunks sent so far: chunk i went to worker i mod N

    def __enter__(self) -> ChunkEncoder:
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.close(kill=exc_type is not None)

    def close(self, kill: bool = False) -> None:
        """End the workers: each exits at the end of its pipes; after an error (`kill`) or 5 s, SIGKILL."""
        workers, self._workers = self._workers, []
        stop(workers, kill)

    def _start(self) -> None:
        method = "fork" if sys.platform == "linux" else "spawn"
        # Set while the workers are forked: tokenizers then neither warns about a fork after its threads
        # ran nor starts threads in the workers.
        previous = os.environ.get("TOKENIZERS_PARALLELISM")
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
        try:
            for _ in range(self.workers):
                args = (self.spec, self.dtype.str)
                worker = WorkerProcess(_serve, args, method=method, what="encoding worker", name="attnlab-encoder")
                self._workers.append(worker)
        finally:
            if previous is None:
                del os.environ["TOKENIZERS_PARALLELISM"]
            else:
                os.environ["TOKENIZERS_PARALLELISM"] = previous

    def _submit(self, sources: list[str], targets: list[str]) -> WorkerProcess:
        if not self._workers:
            self._start()
        worker = self._workers[self._sent % self.workers]
        self._sent += 1
        worker.send((sources, targets))
        return worker

    @staticmethod
    def _result(worker: WorkerProcess) -> EncodedChunk:
        """The answer to `worker`'s chunk; BrokenProcessPool as soon as it is gone without one."""
        ok, value = worker.recv()
        if ok:
            return value
        raise value

    def map(self, chunks: Iterable[tuple[Any, list[str], list[str]]]) -> Iterator[tuple[Any, EncodedChunk]]:
        """(payload, sources, targets) chunks -> (payload, EncodedChunk), in the order given."""
        chunks = iter(chunks)
        first = next(chunks, None)
        if first is None:
            return
        payload, sources, targets = first
        yield payload, encode_chunk(self.local, self.dtype, sources, targets)
        if self.workers == 1:
            for payload, sources, targets in chunks:
                yield payload, encode_chunk(self.local, self.dtype, sources, targets)
            return
        # One chunk per worker in flight: a second one sent to a worker still sending its last answer
        # could block both ends of its pipe at once.
        pending: collections.deque = collections.deque()
        for payload, sources, targets in chunks:
            if len(pending) >= self.workers:
                done, worker = pending.popleft()
                yield done, self._result(worker)
            pending.append((payload, self._submit(sources, targets)))
        while pending:
            done, worker = pending.popleft()
            yield done, self._result(worker)


class _Terminated(BaseException):
    """SIGTERM, raised where the main thread was, so that every `with` block on the way out runs."""


@contextlib.contextmanager
def sigterm_unwinds() -> Iterator[None]:
    """Within the block, SIGTERM unwinds the stack (pools reaped, temporary folders removed), then ends
    the process by SIGTERM as its default action would (exit status 128 + 15 in a shell). A second
    SIGTERM during the unwinding ends it at once. A no-op outside the main thread or where SIGTERM
    already has a handler (the training loop's own, say)."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        yield
        return

    def handler(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        raise _Terminated

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    except _Terminated:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        raise SystemExit(128 + signal.SIGTERM) from None  # only where the signal is not delivered at once
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)

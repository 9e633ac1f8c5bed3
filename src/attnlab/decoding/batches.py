"""`Translator.search`'s batching: sort by length, cut into batches, decode each as its `DecodeJob` says
(`attnlab.decoding.job`: the generator, any `DecodeOptions`), put the hypotheses back in input order — one batch
after another, or several at once in worker processes or threads.

Workers: a decoding step of a small model is ~100 small ops (matmuls of a few hundred rows), which
torch's intra-op threads split poorly. With `workers=N` (default: torch's thread count), N workers each
decode their own batches with one intra-op thread apiece, taking the next batch as each finishes.

- Where `attnlab.inference.pool.can_fork()` (Linux, the main thread, no other non-daemon thread: a
  notebook's kernel threads are daemons) and the model is on the CPU, they are this process and N - 1
  processes forked from it at the first such call and kept with the job's model (forked again when
  `_decoding_key` changes: the job, weights, modules, switches). Every op drops and takes back the GIL, so threads
  mostly wait for each other (BENCHMARKS.md, "Worker processes"). A worker killed (out of memory) sends
  that model to worker threads from then on, with a warning.
- Elsewhere (a server's request threads, an attention recording or a head mask, which workers forked
  earlier would not see) they are threads, with torch's thread count set to 1 for the duration and
  restored afterwards; it is process-wide, so other torch work running at the same time in the process
  also runs on one thread meanwhile. Each batch runs in a copy of the caller's context.

Streaming callers (`attnlab translate`) decode their input in `paced_windows`: consecutive runs of lines,
each sorted by length and cut into batches here, so that results come back in input order window by
window, as soon as each window is done (Marian's maxi-batches, CTranslate2's buffered iterables). Each
window is sized by the speed measured on the previous one, so that the first lines come out within about a
second on any machine, and a stop loses at most about a second of decoding.

Only inputs of two batches or more use workers (a server request, a single sentence: never). Each batch
is decoded exactly as it would be alone on one intra-op thread, so the outputs do not depend on N (with
workers=1 batches run on torch's intra-op threads, whose split sums may differ in the last bits). Python's
cyclic garbage collector is paused while batches decode (`gc_paused`), and on the CPU glibc's malloc keeps
freed memory for the next step (`attnlab.kernels.libc.keep_freed_memory`, process-wide).
"""

from __future__ import annotations

import os
import threading
import time
import warnings
import weakref
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextvars import copy_context
from dataclasses import fields

import torch
from torch.nn.modules import module as module_hooks

from attnlab.attention.heads import head_masks_active
from attnlab.attention.recording import recording_active
from attnlab.decoding.hypothesis import Hypothesis
from attnlab.decoding.job import DecodeJob
from attnlab.decoding.options import DecodeOptions
from attnlab.inference.pool import WorkerPool, can_fork
from attnlab.kernels.libc import keep_freed_memory
from attnlab.kernels.switches import fingerprint
from attnlab.utils.checks import check_range
from attnlab.utils.runtime import gc_paused, intra_op_threads

__all__ = ["close_worker_pool", "length_batches", "paced_windows", "search_batches"]

_THREADS_LOCK = threading.Lock()  # one worker pool at a time changes torch's thread count
# paced_windows' first window, before any speed is known: a few lines, out within a second even on a slow,
# loaded machine; each next window grows at most GROWTH times, so a slow step is seen before a long window;
# at most PACED_BATCHES batches per worker: a fast search's second of work sorts by length over more lines
# and hands its workers fewer windows (each window ends with a worker waiting for the other's last batch).
FIRST_WINDOW, GROWTH, PACED_BATCHES = 8, 4, 64


def length_batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Indices of sentences cut into batches of `batch_size`, longest first (padding stays low)."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def paced_windows(n: int, batch_size: int, workers: int = 1, seconds: float = 1.0, clock=time.perf_counter):
    """Indices 0..n-1 in consecutive windows, each as long as the speed measured on the previous one decodes
    in `seconds` (the time from handing a window out to the next request: the caller decodes and writes each
    window before asking for the next), starting at FIRST_WINDOW lines, growing at most GROWTH times a
    window, never above PACED_BATCHES batches per worker.

    Examples:
        >>> ticks = iter(range(100))             # a clock where each window takes 1 s: the first, 8 lines/s
        >>> [len(w) for w in paced_windows(100, batch_size=4, seconds=1.0, clock=lambda: next(ticks))][:3]
        [8, 8, 8]
        >>> ticks = iter(range(100))             # 4 s of work a window: growing 4 times, up to 64 batches
        >>> [len(w) for w in paced_windows(400, batch_size=4, seconds=4.0, clock=lambda: next(ticks))]
        [8, 32, 128, 232]
    """
    cap = batch_size * PACED_BATCHES * max(1, workers)
    start, size = 0, min(FIRST_WINDOW, cap)
    while start < n:
        window = range(start, min(start + size, n))
        began = clock()
        yield window
        rate = len(window) / max(clock() - began, 1e-6)  # lines per second, this window
        size = max(1, min(cap, GROWTH * len(window), int(rate * seconds)))
        start = window.stop


def search_batches(
    job: DecodeJob,
    src_ids: Sequence[Sequence[int]],
    options: DecodeOptions,
    prefixes: Sequence[Sequence[int]],
    constraints: Sequence[Sequence[Sequence[int]]],
    *,
    batch_size: int,
    workers: int | None,
    texts: bool = False,
) -> list[list[Hypothesis]]:
    """One list of n_best hypotheses per source id list (no <eos>), in input order, each batch decoded by
    `job.search`. See the module docstring. workers: None = torch.get_num_threads(). texts: each hypothesis
    also detokenized (`Hypothesis.text`, by `job.tgt_vocab`) where its batch was decoded: in parallel, not
    in the caller after every batch.

    prefixes: per source, target ids to continue from (empty: none); sentences with prefixes of the same
    length share batches. constraints: per source, its phrases as target id lists. Sampling draws
    from one generator per batch, seeded with options.seed + the batch's number, so the same seed,
    input and batch size give the same samples with any number of workers."""
    if workers is None:
        workers = torch.get_num_threads()
    else:
        check_range("workers", workers, 1, integer=True, why=" or None (one per torch thread)")
    if job.device.type == "cpu":
        keep_freed_memory()  # each step's tensors reuse the last step's freed memory, never fresh pages
    groups: dict[int, list[int]] = {}
    for i, p in enumerate(prefixes):
        groups.setdefault(len(p), []).append(i)
    batches = []
    for P in sorted(groups):
        members = groups[P]
        batches += [[members[j] for j in b] for b in length_batches([len(src_ids[i]) for i in members], batch_size)]
    # Only sampling draws a seed: other searches leave torch's global random stream alone.
    base = (options.seed if options.seed is not None else int(torch.randint(0, 2**31 - 1, ()))) if options.sample else 0
    tasks = [
        (
            [list(src_ids[i]) for i in idx],
            options,
            [list(prefixes[i]) for i in idx],
            [[list(c) for c in constraints[i]] for i in idx],
            base + number if options.sample else None,
            texts,
        )
        for number, idx in enumerate(batches)
    ]
    results: list[list[Hypothesis] | None] = [None] * len(src_ids)
    for idx, hyps in zip(batches, _run_all(job, _search_task, tasks, workers)):
        for i, h in zip(idx, hyps):
            results[i] = h
    return results  # type: ignore[return-value]


def _run_all(job: DecodeJob, task, items: list, workers: int) -> list:
    """[task(job, item) for item in items]: in turn, or on `workers` processes or threads of one
    intra-op thread each (see the module docstring)."""
    # Paused for the whole call, not only per batch: counts kept growing while paused, so re-enabling it
    # between batches would start a collection (and every few, a full one) at each.
    with gc_paused():
        return _run_items(job, task, items, workers)


def _run_items(job: DecodeJob, task, items: list, workers: int) -> list:
    if workers == 1 or len(items) < 2:
        return [task(job, item) for item in items]
    with _THREADS_LOCK, intra_op_threads(1):
        pool = _worker_pool(job, workers)
        if pool is not None:
            try:
                return pool.map(task, job, items)
            except BrokenProcessPool as e:  # a worker was killed (out of memory?): threads from now on
                _POOLS.pop(job.model, None)
                _BROKE.add(job.model)
                warnings.warn(f"{e}; this translator decodes on worker threads now", RuntimeWarning, stacklevel=4)
        contexts = [copy_context() for _ in items]  # taken here, in the caller's thread
        with ThreadPoolExecutor(min(workers, len(items))) as threads:
            # list(): re-raises here
            return list(threads.map(lambda c, item: c.run(task, job, item), contexts, items))


# The worker processes of each model a job decodes with, kept with it (weakly: a pool never keeps a model alive);
# and the models whose worker was killed, which keep to threads.
_POOLS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_BROKE: weakref.WeakSet = weakref.WeakSet()


def _worker_pool(job: DecodeJob, workers: int) -> WorkerPool | None:
    """The worker processes of the job's model (made on first use, made again when what they decode with
    changed: `_decoding_key`), or None where batches go to threads: not on the CPU, an attention recording
    or a head mask open in this context (workers would not see them), no fork here (`can_fork`),
    ATTNLAB_WORKER_PROCESSES=0 in the environment, or a model whose state is not all tensors (fbgemm's
    int8 layers, where no C compiler is found)."""
    if (
        job.device.type != "cpu"
        or recording_active()
        or head_masks_active()
        or os.environ.get("ATTNLAB_WORKER_PROCESSES") == "0"
        or job.model in _BROKE
    ):
        return None
    pool = _POOLS.get(job.model)
    if pool is None and not can_fork():
        return None
    key = _decoding_key(job, workers)
    if pool is not None and not pool.closed and pool.key == key:
        return pool
    if pool is not None:
        pool.close()
        del _POOLS[job.model]
    if key is None or not can_fork():
        return None
    pool = WorkerPool(job, workers)
    pool.key = key
    _POOLS[job.model] = pool
    return pool


def _decoding_key(job: DecodeJob, workers: int) -> tuple | None:
    """What the workers' copy of the job must still match: the job's fields (tokens, length rule, step), every module
    (itself, type, mode, the ids of its hooks and of the global ones), each weight (itself, storage,
    in-place version), and what is switched on (`attnlab.kernels.switches.fingerprint`: the C kernels,
    int8's fused step, every other fast path's `Switch`). Objects are
    compared by identity and held, so a freed one's address cannot pass for a new one. Not seen: plain
    attributes of modules, functions patched after the fork, and edits through `tensor.data` (no version
    bump): after those, call `close_worker_pool`."""
    model = job.model
    try:
        weights = tuple((_Same(t), t.data_ptr(), t._version) for t in model.state_dict(keep_vars=True).values())
    except (RuntimeError, AttributeError):  # a tensor made in inference mode has no version; fbgemm's state
        return None
    modules = tuple(
        (_Same(m), m.training, tuple(m._forward_hooks), tuple(m._forward_pre_hooks)) for m in model.modules()
    )
    hooks = tuple(module_hooks._global_forward_hooks), tuple(module_hooks._global_forward_pre_hooks)
    settings = tuple((f.name, _value(getattr(job, f.name))) for f in fields(job) if f.name != "model")
    return workers, settings, modules, hooks, weights, fingerprint()


def _value(v):
    """A job's field in a key: a plain value (a device by its name) as it is, anything else by identity."""
    plain = (int, float, str, bool, type(None))
    return v if isinstance(v, plain) else str(v) if isinstance(v, torch.device) else _Same(v)


class _Same:
    """An object in a key, equal only to itself (never by value: tensors, vocabularies)."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __eq__(self, other) -> bool:
        return isinstance(other, _Same) and other.obj is self.obj

    __hash__ = None  # type: ignore[assignment]


def close_worker_pool(translator) -> None:
    """End the worker processes of `translator`'s model (a Translator or a DecodeJob) now (the next multi-batch
    decode forks new ones)."""
    with _THREADS_LOCK:
        pool = _POOLS.pop(translator.model, None)
        if pool is not None:
            pool.close()


@gc_paused()
def _search_task(job: DecodeJob, task: tuple) -> list[list[Hypothesis]]:
    seqs, options, prefixes, constraints, seed, texts = task
    gen = None if seed is None else torch.Generator(device=job.device).manual_seed(seed)
    nbest = job.search(seqs, options, prefixes, constraints, generator=gen)
    if texts:
        if job.tgt_vocab is None:
            raise ValueError("search_batches(texts=True) needs a job with its tgt_vocab")
        for hyps in nbest:
            for h in hyps:
                h.text = job.tgt_vocab.decode(h.tokens)
    return nbest

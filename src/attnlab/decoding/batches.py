"""`Translator.decode`'s batching: sort by length, cut into batches, decode each (greedy or beam), put the
hypotheses back in input order — one batch after another, or several at once on worker threads.

Workers: a decoding step of a small model is ~100 small ops (matmuls of a few hundred rows), which
torch's intra-op threads split poorly (on the 2-core machine of BENCHMARKS.md, two workers of one
thread decoded 1.7x the sentences/s of one batch at a time on two intra-op threads). With `workers=N`
(default: torch's thread count), N Python threads each decode their own batches with one intra-op
thread apiece (torch ops release the GIL, so the batches run in parallel on N cores); torch's thread
count is set to 1 for the duration and restored afterwards. It is process-wide, so other torch work
running at the same time in the process also runs on one thread meanwhile. Only inputs of two batches
or more use workers (a server request, a single sentence: never). Each batch runs in a copy of the
caller's context, so `mask_heads` and `record_attention` apply in the workers too. Results are the same
as with `workers=1`: each batch is decoded exactly as it would be alone.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from contextvars import copy_context

import torch

from attnlab.decoding.beam import beam_search
from attnlab.decoding.greedy_search import greedy
from attnlab.decoding.hypothesis import Hypothesis
from attnlab.utils.checks import check_range
from attnlab.utils.runtime import intra_op_threads

__all__ = ["decode_batches", "length_batches"]

_THREADS_LOCK = threading.Lock()  # one worker pool at a time changes torch's thread count


def length_batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Indices of sentences cut into batches of `batch_size`, longest first (padding stays low)."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def decode_batches(
    translator,
    src_ids: Sequence[Sequence[int]],
    beam: int,
    batch_size: int,
    scores: bool,
    workers: int | None,
    length_penalty: float = 1.0,
) -> list[Hypothesis]:
    """One Hypothesis per source id list (no <eos>), in input order. See the module docstring.
    workers: None = torch.get_num_threads()."""
    if workers is None:
        workers = torch.get_num_threads()
    else:
        check_range("workers", workers, 1, integer=True, why=" or None (one per torch thread)")
    batches = length_batches([len(s) for s in src_ids], batch_size)
    results: list[Hypothesis | None] = [None] * len(src_ids)

    def run(idx: list[int]) -> None:
        for i, h in zip(idx, _decode_one(translator, [src_ids[i] for i in idx], beam, scores, length_penalty)):
            results[i] = h

    if workers == 1 or len(batches) < 2:
        for idx in batches:
            run(idx)
        return results  # type: ignore[return-value]
    with _THREADS_LOCK, intra_op_threads(1):
        contexts = [copy_context() for _ in batches]  # taken here, in the caller's thread
        with ThreadPoolExecutor(min(workers, len(batches))) as pool:
            list(pool.map(lambda c, idx: c.run(run, idx), contexts, batches))  # list(): re-raises here
    return results  # type: ignore[return-value]


def _decode_one(
    translator, seqs: Sequence[Sequence[int]], beam: int, scores: bool, length_penalty: float
) -> list[Hypothesis]:
    """Decode one batch of source id lists (no <eos>): pad, add <eos>, cap the output length."""
    eos, pad = translator.src_vocab.eos, translator.src_vocab.pad
    rows = [list(s) + [eos] for s in seqs]  # the source ends with <eos>, as in training
    S = max(len(r) for r in rows)
    device = translator.device
    src = torch.tensor([r + [pad] * (S - len(r)) for r in rows], dtype=torch.long, device=device)
    lens = torch.tensor([len(r) for r in rows], device=device)
    tgt, limit = translator.tgt_vocab, translator.output_limit(S)
    start_token = getattr(getattr(translator.model, "config", None), "decoder_start_token", None)  # Marian: <pad>
    bos = tgt.bos if start_token is None else start_token
    if beam == 1:
        return greedy(translator.model, src, lens, bos, tgt.eos, limit, scores=scores)
    return beam_search(
        translator.model, src, lens, bos, tgt.eos, beam=beam, length_penalty=length_penalty, max_len=limit
    )

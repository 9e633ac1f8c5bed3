"""Greedy's fast path: arg-max without log-softmax, optional scores, and batch workers.

Every fast path must give exactly the tokens of the plain path: `logits.max(-1)` of a log-softmax,
one batch after another."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from attnlab.data import Vocab
from attnlab.decoding.generator import generate
from attnlab.decoding.options import DecodeOptions
from attnlab.decoding.translator import Translator
from attnlab.kernels import loader as native
from attnlab.kernels.argmax import argmax_rows, pick
from attnlab.models import Transformer, TransformerConfig

pytestmark = pytest.mark.usefixtures("one_thread")
GREEDY = DecodeOptions()


def greedy(model, src, lens, bos, eos, max_len, scores=True):
    """The generator's greedy search: one hypothesis per source."""
    out = generate(model, src, lens, replace(GREEDY, scores=scores), bos=bos, eos=eos, max_len=max_len)
    return [hs[0] for hs in out]


def decode(tr, ids, options=GREEDY, **kw):
    """A translator's greedy hypotheses of source id lists (through its batches and workers)."""
    return [hs[0] for hs in tr.search(ids, options, **kw)]


def decode_ids(tr, ids, **kw):
    return [h.tokens for h in decode(tr, ids, replace(GREEDY, scores=False), **kw)]


@pytest.mark.parametrize("V", [5, 128, 129, 4000, 3755])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_argmax_rows_is_the_first_maximum_like_max(V, dtype):
    torch.manual_seed(V)
    logits = torch.randn(9, V).to(dtype)
    logits[1, : V // 2] = logits[1, V // 2 :].max()  # ties within and across blocks: first one wins
    logits[2, -1] = 50.0  # the maximum in the short last block
    logits[3, 0] = 50.0
    logits[4] = 1.0  # a constant row
    logits[5, V // 3] = float("nan")  # NaN counts as the maximum, as in max()
    logits[6, -1] = logits[6, 0] = 60.0  # first of two equal maxima at both ends
    assert torch.equal(argmax_rows(logits), logits.max(dim=-1).indices)


@pytest.mark.usefixtures("c_kernels")
@pytest.mark.parametrize("V", [1, 5, 16, 129, 4000, 3755])
def test_pick_in_c_chooses_and_scores_as_pytorch(V):
    torch.manual_seed(V)
    logits = torch.randn(10, V) * 4
    logits[1, : V // 2] = logits[1, V // 2 :].max()  # ties: the first one wins
    logits[2, -1] = 50.0
    logits[3] = 1.0  # a constant row
    logits[4, V // 3] = float("nan")  # NaN is the maximum
    logits[5] = float("-inf")  # nothing allowed
    logits[6, -1] = float("inf")
    logits[7, V // 2] = logits[7, -1] = float("nan")  # the first NaN
    for scores in (False, True):
        got = pick(logits, scores)
        with native.off():
            ref = pick(logits, scores)
        assert torch.equal(got[0], ref[0]) and torch.equal(got[0], logits.max(dim=-1).indices)
        if scores:
            assert got[1] is not None and ref[1] is not None
            torch.testing.assert_close(got[1], ref[1], atol=2e-6, rtol=0, equal_nan=True)
        else:
            assert got[1] is None
    assert pick(logits[:0], True)[0].shape == (0,)


def test_pick_on_bf16_logits_chooses_as_max_does_ties_included():
    torch.manual_seed(5)
    logits = (torch.randn(33, 4000) * 3).bfloat16()  # bf16's coarse grid: rows with tied maxima
    logits[0, 10] = logits[0, 3000] = 40.0
    tokens, lp = pick(logits, scores=True)
    assert torch.equal(tokens, logits.max(dim=-1).indices) and tokens[0] == 10
    assert lp is not None and lp.dtype == torch.float32


def test_pick_scores_are_log_softmax_of_the_choice():
    torch.manual_seed(0)
    logits = torch.randn(7, 300) * 4
    tokens, lp = pick(logits, scores=True)
    ref_lp, ref_tok = F.log_softmax(logits, dim=-1).max(dim=-1)
    assert torch.equal(tokens, ref_tok) and lp is not None
    torch.testing.assert_close(lp, ref_lp, rtol=0, atol=1e-5)
    assert pick(logits, scores=False)[1] is None
    with pytest.raises(ValueError, match=r"shape \(B, V\)"):
        argmax_rows(torch.zeros(2, 3, 4))


def tiny_translator(V=300, seed=0) -> Translator:
    """A tiny random Transformer whose vocabularies have V words (so the output layer spans many blocks)."""
    words = [[f"w{i}" for i in range(V)]]
    src, tgt = Vocab(words, min_freq=1), Vocab(words, min_freq=1)
    torch.manual_seed(seed)
    cfg = TransformerConfig(len(src), len(tgt), num_hiddens=16, num_heads=2, num_layers=1, ffn_num_hiddens=32)
    return Translator(Transformer(cfg).eval(), src, tgt, max_output_len=12)


def plain_greedy(model, src, lens, bos, eos, max_len):
    """The reference: full log-softmax, max(), no cache, the batch never shrinks."""
    with torch.no_grad():
        prefix = torch.full((src.shape[0], 1), bos)
        for _ in range(max_len):
            lp = F.log_softmax(model(src, prefix, lens)[:, -1], dim=-1)
            prefix = torch.cat([prefix, lp.max(dim=-1).indices[:, None]], dim=1)
    out = []
    for row in prefix[:, 1:].tolist():
        out.append(row[: row.index(eos)] if eos in row else row)
    return out


def rows_ending_apart():
    """A tiny translator, 12 sources, and an <eos> that ends rows at different steps: (tr, src, lens,
    bos, eos, the plain path's tokens)."""
    tr = tiny_translator()
    torch.manual_seed(1)
    src = torch.randint(4, 300, (12, 6))
    lens = torch.tensor([6, 5, 6, 2, 3, 6, 1, 4, 6, 6, 5, 2])
    bos = tr.tgt_vocab.bos
    # An untrained model rarely says <eos>: stop on a token that some rows produce and others never do,
    # so rows end at different steps (they leave the batch) and some run to the length limit.
    free = plain_greedy(tr.model, src, lens, bos, -1, 10)
    eos = next(t for t in free[0] if sum(t in row for row in free) < len(free))
    return tr, src, lens, bos, eos, plain_greedy(tr.model, src, lens, bos, eos, 10)


def test_fast_greedy_gives_the_tokens_and_scores_of_the_plain_path():
    tr, src, lens, bos, eos, ref = rows_ending_apart()
    with_scores = greedy(tr.model, src, lens, bos, eos, 10)
    no_scores = greedy(tr.model, src, lens, bos, eos, 10, scores=False)
    assert [h.tokens for h in with_scores] == ref == [h.tokens for h in no_scores]
    assert [h.finished for h in with_scores] == [h.finished for h in no_scores]
    assert 0 < sum(h.finished for h in no_scores) < len(no_scores)
    assert all(math.isnan(h.score) and h.positional_scores == [] for h in no_scores)
    for h in with_scores:  # scores still the mean log-probability per produced token
        assert len(h.positional_scores) == len(h.tokens) + h.finished
        assert h.score == pytest.approx(sum(h.positional_scores) / len(h.positional_scores))


@pytest.mark.parametrize("fraction", [0.0, 0.25, 0.5, 2.0])
def test_finished_rows_leaving_late_or_never_change_nothing(monkeypatch, fraction):
    """Finished rows leave the batch at every step (0), once a quarter or half of it is done, or never
    (2.0): the tokens, scores and finished flags stay those of the plain path."""
    tr, src, lens, bos, eos, ref = rows_ending_apart()
    default = greedy(tr.model, src, lens, bos, eos, 10)
    monkeypatch.setattr("attnlab.decoding.search.Greedy.compact", fraction)
    calls = []  # rows kept at each compaction
    reorder = tr.model.reorder_state

    def counted(state, keep):
        calls.append(keep.numel())
        return reorder(state, keep)

    monkeypatch.setattr(tr.model, "reorder_state", counted)
    got = greedy(tr.model, src, lens, bos, eos, 10)
    assert [h.tokens for h in got] == ref
    assert [h.finished for h in got] == [h.finished for h in default]
    for h, e in zip(got, default):
        assert h.positional_scores == pytest.approx(e.positional_scores, abs=1e-5)
    assert (calls == []) == (fraction > 1)
    assert all(n < 12 for n in calls)


@pytest.mark.parametrize("batch_size, workers", [(4, 2), (5, 3), (64, 2), (3, 1)])
def test_workers_and_batch_sizes_give_the_same_translations(batch_size, workers):
    tr = tiny_translator()
    torch.manual_seed(2)
    ids = [torch.randint(4, 300, (n,)).tolist() for n in (3, 7, 1, 5, 5, 2, 8, 4, 6, 3, 2)]
    ref = decode(tr, ids, batch_size=1)  # one sentence at a time: no batching effect at all
    threads = torch.get_num_threads()
    got = decode(tr, ids, batch_size=batch_size, workers=workers)
    assert [h.tokens for h in got] == [h.tokens for h in ref]
    assert [h.score for h in got] == pytest.approx([h.score for h in ref], abs=1e-5)
    assert decode_ids(tr, ids, batch_size=batch_size) == [h.tokens for h in ref]
    assert torch.get_num_threads() == threads  # restored after the worker pool


def test_bad_batch_size_and_workers_are_one_line_errors():
    tr = tiny_translator(V=20)
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="batch_size must be an integer >= 1"):
            decode(tr, [[5, 6]], batch_size=bad)
        with pytest.raises(ValueError, match="workers must be an integer >= 1"):
            decode(tr, [[5, 6]], workers=bad)


def test_a_failing_worker_raises_in_the_caller_and_restores_threads(monkeypatch):
    tr = tiny_translator(V=20)
    threads = torch.get_num_threads()

    def boom(*a, **k):
        raise RuntimeError("decode failed")

    monkeypatch.setattr("attnlab.decoding.job.generate", boom)
    with pytest.raises(RuntimeError, match="decode failed"):
        decode(tr, [[5], [6, 7], [8]], batch_size=1, workers=2)
    assert torch.get_num_threads() == threads


def test_int8_translator_with_workers_matches_one_worker():
    from attnlab.inference.precision import prepare_for_inference

    tr = tiny_translator()
    tr.model = prepare_for_inference(tr.model, "int8")
    torch.manual_seed(3)
    ids = [torch.randint(4, 300, (n,)).tolist() for n in (4, 2, 6, 3, 5, 1)]
    assert decode_ids(tr, ids, batch_size=2) == [h.tokens for h in decode(tr, ids, batch_size=2, workers=3)]


def test_workers_see_the_callers_head_masks():
    from attnlab.attention import mask_heads

    tr = tiny_translator()
    torch.manual_seed(4)
    ids = [torch.randint(4, 300, (n,)).tolist() for n in (4, 2, 6, 3, 5, 1)]
    masks = {"decoder.blocks.0.cross_attention": [0.0, 0.0]}  # the decoder stops seeing the source
    with mask_heads(tr.model, masks):
        ref = decode_ids(tr, ids, batch_size=1)
        got = [h.tokens for h in decode(tr, ids, batch_size=2, workers=2)]
    assert got == ref != decode_ids(tr, ids, batch_size=1)


@pytest.mark.skipif(sys.platform != "linux", reason="worker processes are forked on Linux only")
def test_worker_processes_are_kept_remade_when_the_weights_change_and_match_one_worker():
    # In a fresh interpreter: a pool is forked only where no working thread runs (the server tests leave some).
    script = """
import sys, torch
sys.path.insert(0, sys.argv[1])
from test_greedy_fast_path import decode, decode_ids, tiny_translator
from attnlab.decoding import DecodeOptions
import copy
from attnlab.decoding.batches import _POOLS
tr = tiny_translator()
torch.manual_seed(5)
ids = [torch.randint(4, 300, (n,)).tolist() for n in (4, 2, 6, 3, 5, 1, 7, 2)]
def one():
    return [h.tokens for h in decode(tr, ids, batch_size=2, workers=1)]
ref = one()
assert [h.tokens for h in decode(tr, ids, batch_size=2, workers=2)] == ref
pool = _POOLS[tr.model]
assert not pool.closed
decode(tr, ids, batch_size=2, workers=2)
assert _POOLS[tr.model] is pool  # kept: the children are warm
with torch.no_grad():
    tr.model.decoder.dense.weight.mul_(-1.0)  # in place: the children's copy is now stale
changed = one()
assert changed != ref and [h.tokens for h in decode(tr, ids, batch_size=2, workers=2)] == changed
assert _POOLS[tr.model] is not pool and pool.closed
pool = _POOLS[tr.model]
tr.max_output_len = 3  # a setting, not a weight: forked again too
assert [h.tokens for h in decode(tr, ids, batch_size=2, workers=2)] == one() != changed
assert _POOLS[tr.model] is not pool
twin = copy.deepcopy(tr)  # a translator with workers still copies, and the copy gets its own
assert [h.tokens for h in decode(twin, ids, batch_size=2, workers=2)] == one()
assert _POOLS[twin.model] is not _POOLS[tr.model]
import os, signal, time, warnings
os.kill(_POOLS[tr.model].pids[0], signal.SIGKILL)  # a worker killed between calls (out of memory)
time.sleep(0.2)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    assert [h.tokens for h in decode(tr, ids, batch_size=2, workers=2)] == one()  # decoded here instead
assert any("died" in str(w.message) for w in caught) and tr.model not in _POOLS
for options in (DecodeOptions(sample=True, seed=3, n_best=2), DecodeOptions(beam=3, n_best=2)):
    tr.workers = 1
    ref = tr.search(ids, options, batch_size=2)
    tr.workers = 2
    got = tr.search(ids, options, batch_size=2)
    assert [[h.tokens for h in hs] for hs in got] == [[h.tokens for h in hs] for hs in ref]
print("ok")
"""
    done = subprocess.run(
        [sys.executable, "-c", script, os.path.dirname(__file__)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_an_attention_recording_keeps_workers_in_this_process(monkeypatch):
    from attnlab.attention import record_attention
    from attnlab.inference.pool import WorkerPool

    def no_pool(*a, **k):
        raise AssertionError("a recording's weights must be made in this process")

    monkeypatch.setattr(WorkerPool, "__init__", no_pool)
    monkeypatch.setattr("attnlab.decoding.batches.can_fork", lambda: True)  # forking would be allowed
    tr = tiny_translator()
    ids = [[5, 6, 7], [8, 9], [10]]
    with record_attention(tr.model) as rec:
        decode(tr, ids, batch_size=1, workers=2)
    assert sum(len(w) for w in rec.weights.values()) > 0


def test_the_garbage_collector_is_paused_while_decoding_and_restored_after(monkeypatch):
    import gc

    import attnlab.decoding.job as job

    seen = []
    real = job.generate

    def spy(*a, **k):
        seen.append(gc.isenabled())
        return real(*a, **k)

    monkeypatch.setattr(job, "generate", spy)
    tr = tiny_translator(V=20)
    assert gc.isenabled()
    decode(tr, [[5, 6], [7]], batch_size=1, workers=1)
    assert seen == [False, False] and gc.isenabled()
    gc.disable()
    try:
        decode(tr, [[5, 6]])
        assert not gc.isenabled()  # left as the caller had it
    finally:
        gc.enable()


def test_int8_decodes_in_its_own_batch_size_with_the_same_outputs(monkeypatch):
    from attnlab.decoding.job import DecodeJob
    from attnlab.decoding.translator import BATCH_SIZE_BY_PRECISION, DEFAULT_BATCH_SIZE
    from attnlab.inference.precision import decoding_model

    tr = tiny_translator()
    assert tr.batch_size == DEFAULT_BATCH_SIZE
    model, int8_choice = decoding_model(tr.model, "int8")
    int8 = Translator(model, tr.src_vocab, tr.tgt_vocab, max_output_len=12, precision=int8_choice)
    assert int8.batch_size == BATCH_SIZE_BY_PRECISION["int8"] != DEFAULT_BATCH_SIZE
    torch.manual_seed(7)
    ids = [torch.randint(4, 300, (n,)).tolist() for n in torch.randint(1, 8, (400,)).tolist()]
    int8.workers = 1
    sizes = []

    real = DecodeJob.search

    def spy(job, seqs, *args, **kw):
        sizes.append(len(seqs))
        return real(job, seqs, *args, **kw)

    monkeypatch.setattr(DecodeJob, "search", spy)
    assert decode_ids(int8, ids) == decode_ids(int8, ids, batch_size=DEFAULT_BATCH_SIZE)
    size = BATCH_SIZE_BY_PRECISION["int8"]
    assert sizes == [size] * (400 // size) + [400 % size] * (400 % size > 0) + [256, 144]


@pytest.mark.parametrize("options", [dict(no_repeat_ngram=2), dict(min_len=3), dict(prefix=True)])
def test_greedy_with_bans_or_a_prefix_keeps_the_arg_max_kernel_and_the_compaction(monkeypatch, options):
    """Every greedy call is the one greedy strategy: its choice is `pick` and finished rows leave the batch."""
    from attnlab.decoding import search

    tr, src, lens, bos, eos, _ = rows_ending_apart()
    picks, shrinks = [], []
    real_pick, real_reorder = search.pick, tr.model.reorder_state
    monkeypatch.setattr(search, "pick", lambda rows, scores=True: picks.append(rows.shape) or real_pick(rows, scores))

    def reorder(state, rows, same_sources=False):
        shrinks.append(len(rows))
        return real_reorder(state, rows, same_sources)

    monkeypatch.setattr(tr.model, "reorder_state", reorder)
    monkeypatch.setattr(search.Greedy, "compact", 0.0)  # rows leave as soon as one is done
    prefix = torch.full((src.shape[0], 1), 7) if options.pop("prefix", False) else None
    opts = DecodeOptions(**options)
    if prefix is not None:  # an <eos> that ends some rows after this prefix
        free = [
            h.tokens[1:] for (h,) in generate(tr.model, src, lens, opts, bos=bos, eos=-1, max_len=10, prefix=prefix)
        ]
        eos = next(t for t in free[0] if sum(t in row for row in free) < len(free))
        picks.clear(), shrinks.clear()
    out = generate(tr.model, src, lens, opts, bos=bos, eos=eos, max_len=10, prefix=prefix)
    assert picks and shrinks and all(n < src.shape[0] for n in shrinks)
    assert any(h.finished for (h,) in out)

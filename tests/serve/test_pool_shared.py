"""The explorer's worker threads share one model (recording lives in a ContextVar), and concurrent
requests still get exactly the maps a lone request gets."""

import asyncio

import torch

from attnlab.analysis.explanation import explain
from attnlab.serve.pool import TranslatorPool

SENTENCES = ["i'm home .", "he's calm .", "go .", "i lost ."]


def test_workers_share_one_model_and_record_only_their_own_calls(translator):
    alone = {s: explain(translator, s) for s in SENTENCES}
    pool = TranslatorPool(translator, workers=4)
    seen = []

    def job(t, text):
        seen.append(t.model)
        return explain(t, text)

    async def burst():
        return await asyncio.gather(*(pool.run(job, s) for s in SENTENCES * 3))

    try:
        results = asyncio.run(burst())
    finally:
        pool.shutdown()
    assert all(m is translator.model for m in seen)  # no per-thread copies
    for text, exp in zip(SENTENCES * 3, results):
        ref = alone[text]
        assert exp.tgt_tokens == ref.tgt_tokens
        assert set(exp.maps) == set(ref.maps)
        for kind in ref.maps:
            torch.testing.assert_close(exp.maps[kind], ref.maps[kind], rtol=0, atol=0)

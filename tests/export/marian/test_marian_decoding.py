"""Decoding options against `transformers`' generate on the same imported Marian model, in float32:
n-best lists and their scores, no-repeat n-grams, min length and target prefixes.

Scores: both divide the sum of log-probabilities by (generated tokens, <eos> included) ** length_penalty.
generate() forbids Marian's <pad> after its log-softmax (bad_words_ids), the imported model before it (in
the logits: its `suppress_tokens`), so their log-probabilities differ by the <pad> mass; the score
comparisons turn both off (the token comparisons keep both on, as shipped).
"""

from __future__ import annotations

import copy
import itertools

import pytest
import torch

from attnlab.decoding import DecodeOptions

from ..conftest import sentences
from .test_marian_roundtrip import TEXTS

pytest.importorskip("transformers")

SOURCES = TEXTS + sentences(8, seed=7)


def _strip(row: list[int], eos: int, pad: int) -> list[int]:
    row = row[: row.index(eos)] if eos in row else row
    return [t for t in row if t != pad]


def _generate(tr, ref, texts, start: int = 1, **kw):
    """generate() in float32 for texts; returns (rows of ids without the start token and <eos>, scores or None)."""
    model, tok = ref
    enc = tok(texts, padding=True, return_tensors="pt")
    kw.setdefault("max_new_tokens", tr.output_limit(enc["input_ids"].shape[1]))
    with torch.no_grad():
        out = model.generate(
            **enc, do_sample=False, forced_eos_token_id=None, return_dict_in_generate=True,
            output_scores=True, **kw,
        )  # fmt: skip
    rows = [_strip(r, tr.tgt_vocab.eos, tr.tgt_vocab.pad) for r in out.sequences[:, start:].tolist()]
    scores = out.sequences_scores.tolist() if getattr(out, "sequences_scores", None) is not None else None
    return rows, scores


@pytest.fixture(scope="module")
def imported(marian_dir, tmp_path_factory, one_thread):
    from attnlab.export.marian import import_hf
    from attnlab.runs.loading import load_translator

    return load_translator(import_hf(marian_dir, tmp_path_factory.mktemp("run") / "opus"), precision="fp32")


@pytest.fixture(scope="module")
def hf(marian_dir):
    from transformers import MarianMTModel, MarianTokenizer

    return MarianMTModel.from_pretrained(marian_dir).eval(), MarianTokenizer.from_pretrained(marian_dir)


@pytest.fixture
def unsuppressed(imported, hf):
    """The imported model and generate() both with <pad> allowed (for comparing scores); restored after."""
    cfg = imported.model.config
    before, cfg.suppress_tokens = cfg.suppress_tokens, []
    gen = copy.deepcopy(hf[0].generation_config)
    gen.bad_words_ids = None
    yield gen
    cfg.suppress_tokens = before


def _ours(tr, texts, options, **kw):
    src_ids = [tr.src_vocab.encode(t) for t in texts]
    return tr.search(src_ids, options, **kw)


@pytest.mark.parametrize("alpha", [0.0, 1.0, 2.0])
def test_nbest_lists_and_scores_equal_generate(imported, hf, unsuppressed, alpha):
    N = 4
    hyps = _ours(imported, SOURCES, DecodeOptions(beam=N, n_best=N, length_penalty=alpha))
    rows, scores = _generate(
        imported, hf, SOURCES, num_beams=N, num_return_sequences=N, length_penalty=alpha, generation_config=unsuppressed
    )
    assert [h.tokens for hs in hyps for h in hs] == rows
    got = torch.tensor([h.score for hs in hyps for h in hs])
    torch.testing.assert_close(got, torch.tensor(scores), atol=1e-4, rtol=1e-4)
    assert all(len({tuple(h.tokens) for h in hs}) == N for hs in hyps), "n-best hypotheses must be distinct"
    assert all(hs == sorted(hs, key=lambda h: -h.score) for hs in hyps)


@pytest.mark.parametrize("beam", [1, 4])
def test_no_repeat_ngram_and_min_len_equal_generate(imported, hf, beam):
    opts = DecodeOptions(beam=beam, no_repeat_ngram=2, min_len=6)
    ours = [hs[0].tokens for hs in _ours(imported, SOURCES, opts)]
    want, _ = _generate(imported, hf, SOURCES, num_beams=beam, no_repeat_ngram_size=2, min_new_tokens=6)
    assert ours == want
    plain = [
        hs[0].tokens
        for hs in imported.search(
            [imported.src_vocab.encode(t) for t in SOURCES], imported.options(beam=beam, scores=False)
        )
    ]
    assert ours != plain, "the controls changed nothing: the test does not exercise them"
    for row in ours:
        pairs = list(itertools.pairwise(row))
        assert len(pairs) == len(set(pairs)) and len(row) >= 6


def test_nbest_tokens_equal_generate_with_pad_suppressed(imported, hf):
    hyps = _ours(imported, SOURCES, DecodeOptions(beam=4, n_best=3))
    rows, _ = _generate(imported, hf, SOURCES, num_beams=4, num_return_sequences=3)
    assert [h.tokens for hs in hyps for h in hs] == rows


@pytest.mark.parametrize("beam", [1, 4])
def test_prefix_equals_generate_with_decoder_input_ids(imported, hf, unsuppressed, beam):
    model, tok = hf
    text = "The old"
    prefix = imported.tgt_vocab.encode(text)
    assert prefix and imported.tgt_vocab.unk not in prefix
    opts = DecodeOptions(beam=beam, n_best=beam, prefix=text)
    hyps = _ours(imported, SOURCES, opts)
    enc = tok(SOURCES, padding=True, return_tensors="pt")
    start = model.config.decoder_start_token_id
    dec = torch.tensor([[start] + prefix] * len(SOURCES))
    limit = imported.output_limit(enc["input_ids"].shape[1])
    rows, scores = _generate(
        imported, hf, SOURCES, num_beams=beam, num_return_sequences=beam, decoder_input_ids=dec,
        max_new_tokens=limit - len(prefix), generation_config=unsuppressed,
    )  # fmt: skip
    assert [h.tokens for hs in hyps for h in hs] == rows
    assert all(h.tokens[: len(prefix)] == prefix for hs in hyps for h in hs)
    if beam > 1:
        got = torch.tensor([h.score for hs in hyps for h in hs])
        torch.testing.assert_close(got, torch.tensor(scores), atol=1e-4, rtol=1e-4)

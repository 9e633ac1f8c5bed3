"""Greedy and beam search: cache == recomputation, beam 1 == greedy, beam search == exhaustive search."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

from attnlab import decode
from attnlab.attention import record_attention
from attnlab.models import BahdanauConfig, EncoderDecoder, Transformer, TransformerConfig

PAD, BOS, EOS = 0, 1, 2


pytestmark = pytest.mark.usefixtures("one_thread")


def transformer(tgt_vocab=11, **kw):
    torch.manual_seed(0)
    cfg = dict(num_hiddens=16, num_heads=4, num_layers=2, ffn_num_hiddens=32, dropout=0.2)
    cfg.update(kw)
    return Transformer(TransformerConfig(13, tgt_vocab, **cfg))


def bahdanau(tgt_vocab=11):
    torch.manual_seed(0)
    return EncoderDecoder.from_config(BahdanauConfig(13, tgt_vocab, embed_size=8, num_hiddens=16, dropout=0.2))


def sources(B=5, S=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, 13, (B, S), generator=g)
    lens = torch.randint(1, S + 1, (B,), generator=g)
    return src.masked_fill(torch.arange(S)[None] >= lens[:, None], PAD), lens


@pytest.mark.parametrize("kw", [{}, {"norm_first": True}, {"window": 1}])
def test_cached_greedy_equals_full_recomputation(kw):
    model = transformer(**kw)
    src, lens = sources()
    cached = decode.greedy(model, src, lens, BOS, eos=-1, max_len=12)
    assert cached == decode.greedy(model, src, lens, BOS, eos=-1, max_len=12, use_cache=False)
    assert all(len(row) == 12 for row in cached)  # eos=-1 never stops


def test_greedy_stops_at_eos_and_restores_mode():
    model = transformer()
    src, lens = sources()
    full = decode.greedy(model, src, lens, BOS, eos=-1, max_len=10)
    eos = full[0][3]  # pretend a token the model emits is <eos>
    cut = decode.greedy(model, src, lens, BOS, eos=eos, max_len=10)
    assert model.training
    for f, c in zip(full, cut):
        assert c == (f[:f.index(eos)] if eos in f else f)
    model.eval()
    decode.greedy(model, src, lens, BOS, EOS, max_len=3)
    assert not model.training


@pytest.mark.parametrize("make", [transformer, bahdanau])
def test_beam_one_equals_greedy(make):
    model = make()
    src, lens = sources(B=6)
    for eos in (EOS, -1, 5):
        g = decode.greedy(model, src, lens, BOS, eos, max_len=9)
        assert decode.beam_search(model, src, lens, BOS, eos, beam=1, max_len=9) == g


def _exhaustive(model, src, lens, V, max_len, alpha):
    """Best hypothesis by brute force over every output: score / len**alpha, len counting <eos>."""
    best = []
    with torch.no_grad():
        model.eval()
        for b in range(src.shape[0]):
            cands = []
            for n in range(max_len + 1):
                for seq in itertools.product([t for t in range(V) if t != EOS], repeat=n):
                    ended = n < max_len
                    y = list(seq) + ([EOS] if ended else [])
                    logits = model(src[b:b + 1], torch.tensor([[BOS] + y[:-1]]), lens[b:b + 1])
                    lp = F.log_softmax(logits[0], -1).gather(1, torch.tensor(y)[:, None]).sum()
                    cands.append((float(lp) / len(y) ** alpha, list(seq)))
            best.append(max(cands, key=lambda c: c[0]))
    return best


@pytest.mark.parametrize("make,alpha", [(transformer, 1.0), (transformer, 0.0), (bahdanau, 0.6)])
def test_wide_beam_equals_exhaustive_search(make, alpha):
    V, max_len = 4, 3  # 3 non-eos tokens: 1 + 3 + 9 eos-ended outputs + 27 cut at max_len = 40 < beam
    model = make(tgt_vocab=V)
    src, lens = sources(B=3)
    hyps, scores = decode.beam_search(model, src, lens, BOS, EOS, beam=48, length_penalty=alpha,
                                      max_len=max_len, return_scores=True)
    expected = _exhaustive(model, src, lens, V, max_len, alpha)
    assert hyps == [seq for _, seq in expected]
    assert scores == pytest.approx([s for s, _ in expected], abs=1e-4)


def test_beam_search_batched_with_length_limits():
    model = transformer()
    src, lens = sources(B=4)
    hyps = decode.beam_search(model, src, lens, BOS, eos=-1, beam=3, max_len_a=1.0, max_len_b=2)
    assert [len(h) for h in hyps] == (lens + 2).tolist()


def test_attention_maps_stitch_decoding_steps():
    model = transformer()
    src, lens = sources(B=2)
    with record_attention(model) as rec:
        out = decode.greedy(model, src, lens, BOS, eos=-1, max_len=5)
    maps = decode.attention_maps(rec)
    assert maps["decoder.blocks.1.cross_attention"].shape == (2, 4, 5, 7)
    self_w = maps["decoder.blocks.0.self_attention"]
    assert self_w.shape == (2, 4, 5, 5) and (self_w.triu(1) == 0).all()
    torch.testing.assert_close(self_w.sum(-1), torch.ones(2, 4, 5))
    assert maps["encoder.blocks.0.attention"].shape == (2, 4, 7, 7) and len(out[0]) == 5


def test_bad_arguments_raise():
    model = transformer()
    src, lens = sources()
    with pytest.raises(ValueError, match="beam"):
        decode.beam_search(model, src, lens, BOS, EOS, beam=0)
    with pytest.raises(ValueError, match="src_valid_lens"):
        decode.greedy(model, src, lens[:2], BOS, EOS, max_len=4)
    with pytest.raises(ValueError, match="max_len"):
        decode.greedy(model, src, lens, BOS, EOS, max_len=0)

"""Beam search's "beamable" state: the encoder memory and the cross-attention keys/values stay
at one row per sentence and the beams are folded into the cross-attention queries. Everything must equal
the plainly expanded state (every row its own copy of its sentence), and the double-buffered reorder of
the growing self-attention cache must equal a plain index_select."""

from __future__ import annotations

import pytest
import torch

from attnlab.attention import KVCache, MultiHeadAttention, record_attention
from attnlab.models import Transformer, TransformerConfig

pytestmark = pytest.mark.usefixtures("one_thread")
PAD, BOS = 0, 1
TINY = {"num_hiddens": 16, "num_heads": 4, "num_layers": 2, "ffn_num_hiddens": 32, "dropout": 0.1}


def tiny(**kw):
    torch.manual_seed(0)
    return Transformer(TransformerConfig(13, 11, **{**TINY, **kw})).eval()


def sources(B=4, S=6):
    g = torch.Generator().manual_seed(2)
    src, lens = torch.randint(3, 13, (B, S), generator=g), torch.randint(1, S + 1, (B,), generator=g)
    return src.masked_fill(torch.arange(S)[None] >= lens[:, None], PAD), lens


def test_beamable_attention_equals_expanded_keys_and_records_per_hypothesis():
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2, bias=True).eval()
    B, K, t = 3, 4, 2
    q, mem, lens = torch.randn(B * K, t, 8), torch.randn(B, 5, 8), torch.tensor([5, 2, 3])
    with record_attention(mha) as rec:
        folded = mha(q, mem, mem, lens, beam=K)
        rows = torch.arange(B).repeat_interleave(K)
        plain = mha(q, mem[rows], mem[rows], lens[rows])
    torch.testing.assert_close(folded, plain, atol=1e-5, rtol=0)
    w_folded, w_plain = rec.weights["MultiHeadAttention"]
    assert w_folded.shape == (B * K, 2, t, 5)
    torch.testing.assert_close(w_folded, w_plain, atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="rows per key row"):
        mha(q[:-1], mem, mem, lens, beam=K)
    with pytest.raises(ValueError, match="no mask, causal or window"):
        mha(q, mem, mem, lens, causal=True, beam=K)


@pytest.mark.parametrize("kw", [{}, {"norm_first": True}, {"window": 2}, {"pruned": True}])
def test_expand_beams_equals_plain_expansion(kw):
    """Decode 5 steps on two copies of the state, one kept beamable (expand_beams, beams reordered within
    their sentence, then a sentence leaving), one expanded row by row as before; logits agree to 1e-5.
    Covers post-norm, pre-norm, local encoder attention and pruned heads."""
    pruned = kw.pop("pruned", False)
    model = tiny(**kw)
    if pruned:
        model.prune_heads({"decoder.blocks.0.cross_attention": [1, 3], "decoder.blocks.1.self_attention": [0]})
    src, lens = sources()
    B, K = src.shape[0], 3
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        a, b = model.start_decoding(src, lens), model.start_decoding(src, lens)
        la, _ = model.decode_step(torch.full((B, 1), BOS), a)
        lb, _ = model.decode_step(torch.full((B, 1), BOS), b)
        torch.testing.assert_close(la, lb, atol=0, rtol=0)
        a = model.expand_beams(a, torch.arange(B), K)
        b = model.reorder_state(b, torch.arange(B).repeat_interleave(K))
        assert a.beam == K and a.memory.shape[0] == B and b.beam == 1 and b.memory.shape[0] == B * K
        n = B
        for step in range(5):
            tok = torch.randint(3, 11, (n * K, 1), generator=g)
            la, a = model.decode_step(tok, a)
            lb, b = model.decode_step(tok, b)
            torch.testing.assert_close(la, lb, atol=1e-5, rtol=0)
            # beams reshuffled within their sentence (fairseq's same_sources)
            within = (torch.arange(n)[:, None] * K + torch.randint(0, K, (n, K), generator=g)).reshape(-1)
            a = model.reorder_state(a, within, same_sources=True)
            b = model.reorder_state(b, within, same_sources=True)
            if step == 2:  # sentence 1 leaves the batch: the memory shrinks, still one row per sentence
                keep = torch.tensor([0, 2, 3])
                sel = (keep[:, None] * K + torch.arange(K)).reshape(-1)
                a, b = model.reorder_state(a, sel), model.reorder_state(b, sel)
                assert a.beam == K and a.memory.shape[0] == 3
                n = 3


def test_reorder_that_breaks_the_groups_falls_back_to_one_row_per_hypothesis():
    model = tiny()
    src, lens = sources()
    B, K = src.shape[0], 2
    with torch.no_grad():
        state = model.start_decoding(src, lens)
        model.decode_step(torch.full((B, 1), BOS), state)
        state = model.expand_beams(state, torch.tensor([2, 0]), K)  # only sentences 2 and 0, in that order
        assert state.memory.shape[0] == 2 and state.rows == 4
        with pytest.raises(ValueError, match="one row per source"):
            model.expand_beams(state, torch.arange(2), K)
        model.decode_step(torch.full((4, 1), 5), state)
        mixed = torch.tensor([0, 2, 3])  # rows of sentences 2, 0, 0: not whole groups
        state = model.reorder_state(state, mixed)
        assert state.beam == 1 and state.memory.shape[0] == 3
        logits, _ = model.decode_step(torch.full((3, 1), 6), state)
        rows = torch.tensor([2, 0, 0])
        full = model(src[rows], torch.tensor([[BOS, 5, 6]] * 3), lens[rows])
    torch.testing.assert_close(logits[:, -1], full[:, -1], atol=1e-5, rtol=0)


def test_double_buffered_reorder_equals_index_select_through_growth():
    torch.manual_seed(0)
    cache, ref = KVCache(), None
    B = 5
    for _ in range(40):  # past the first capacity (16) and the doubling
        k, v = torch.randn(B, 2, 1, 3), torch.randn(B, 2, 1, 3)
        cache.update(k, v)
        ref = k if ref is None else torch.cat([ref, k], 2)
        index = torch.randint(0, B, (B,))  # same batch size: the spare buffer is reused
        cache.reorder(index)
        ref = ref.index_select(0, index)
        torch.testing.assert_close(cache.k, ref, atol=0, rtol=0)
    cache.reorder(torch.tensor([4, 1]))  # a sentence count change allocates anew
    torch.testing.assert_close(cache.k, ref[[4, 1]], atol=0, rtol=0)
    assert len(cache) == 40

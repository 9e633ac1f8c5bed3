"""The Bahdanau encoder–decoder: shapes, recorded attention, overfitting, pad-aware batched decoding."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from attnlab.attention import record_attention
from attnlab.decoding.generator import generate
from attnlab.decoding.options import DecodeOptions
from attnlab.models import BahdanauConfig, EncoderDecoder, Seq2SeqAttentionDecoder, Seq2SeqEncoder, build_model

PAD, BOS, EOS = 0, 1, 2


def greedy(model, src, lens, bos, eos, max_len, scores=True):
    """The generator's greedy search: one hypothesis per source."""
    opts = DecodeOptions()
    return [hs[0] for hs in generate(model, src, lens, replace(opts, scores=scores), bos=bos, eos=eos, max_len=max_len)]


def beam_search(model, src, lens, bos, eos, beam=4, max_len=50, length_penalty=1.0):
    """The generator's beam search: the best hypothesis per source."""
    opts = DecodeOptions(beam=beam, length_penalty=length_penalty)
    return [hs[0] for hs in generate(model, src, lens, opts, bos=bos, eos=eos, max_len=max_len)]


pytestmark = pytest.mark.usefixtures("one_thread")


def tiny(dropout=0.0, **kw) -> EncoderDecoder:
    torch.manual_seed(0)
    cfg = dict(src_vocab_size=12, tgt_vocab_size=14, embed_size=16, num_hiddens=24, num_layers=2, dropout=dropout)
    cfg.update(kw)
    return EncoderDecoder.from_config(BahdanauConfig(**cfg))


def padded(seqs, S=None):
    S = S or max(len(s) for s in seqs)
    out = torch.full((len(seqs), S), PAD)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.tensor(s)
    return out, torch.tensor([len(s) for s in seqs])


def test_encoder_decoder_shapes():
    enc = Seq2SeqEncoder(10, 8, 16, num_layers=2)
    X = torch.randint(0, 10, (4, 9))
    outputs, state = enc(X)
    assert outputs.shape == (4, 9, 16) and state.shape == (2, 4, 16)
    model = EncoderDecoder(enc, Seq2SeqAttentionDecoder(11, 8, 16, num_layers=2))
    assert model(X, torch.randint(0, 11, (4, 5)), torch.tensor([9, 3, 1, 5])).shape == (4, 5, 11)


def test_recorded_weights_per_step_sum_to_one_over_valid_source():
    model = tiny()
    src, lens = padded([[3, 4, 5, 6, 7], [3, 4], [5, 6, 7]])
    tgt = torch.randint(3, 14, (3, 4))
    with record_attention(model) as rec:
        model(src, tgt, lens)
    steps = rec.weights["decoder.attention"]
    assert len(steps) == 4 and all(w.shape == (3, 1, 1, 5) for w in steps)
    W = torch.cat(steps, dim=2)[:, 0]  # (B, T, S)
    valid = torch.arange(5)[None, None] < lens[:, None, None]
    torch.testing.assert_close(W.sum(-1), torch.ones(3, 4))
    assert (W[~valid.expand_as(W)] == 0).all()
    # Not recording: nothing is kept anywhere.
    model(src, tgt, lens)
    assert not [k for k, v in vars(model.decoder.attention).items() if isinstance(v, (torch.Tensor, list))]


def test_reorder_state_selects_rows():
    model = tiny().eval()
    src, lens = padded([[3, 4, 5, 6], [3, 4], [5, 6, 7]])
    tgt = torch.randint(3, 14, (3, 5))
    full = model(src, tgt, lens)
    index = torch.tensor([1, 1, 0])
    state = model.start_decoding(src, lens)
    _, state = model.decode_step(tgt[:, :2], state)
    logits, _ = model.decode_step(tgt[index, 2:], model.reorder_state(state, index))
    torch.testing.assert_close(logits, full[index, 2:], atol=1e-5, rtol=1e-5)


def test_tiny_model_overfits_twenty_pairs_exactly():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(2, 6, (2, 20), generator=g)
    pairs = [
        (torch.randint(3, 12, (int(a),), generator=g).tolist(), torch.randint(3, 14, (int(b),), generator=g).tolist())
        for a, b in lengths.T
    ]
    src, lens = padded([s for s, _ in pairs])
    tgt_in, _ = padded([[BOS] + t for _, t in pairs])
    tgt_out, _ = padded([t + [EOS] for _, t in pairs])
    model = tiny(dropout=0.1, embed_size=32, num_hiddens=64)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(150):
        loss = F.cross_entropy(model(src, tgt_in, lens).reshape(-1, 14), tgt_out.reshape(-1), ignore_index=PAD)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert model.training  # greedy restores the mode it found
    assert [h.tokens for h in greedy(model, src, lens, BOS, EOS, max_len=10)] == [t for _, t in pairs]
    assert model.training


def test_batched_decoding_equals_one_by_one():
    model = tiny(dropout=0.3)  # dropout would make results differ if decoding left train mode on
    seqs = [[3, 4, 5, 6, 7, 8], [9, 3], [5, 6, 7], [4]]
    src, lens = padded(seqs, S=8)  # extra padding columns change nothing
    batched = greedy(model, src, lens, BOS, EOS, max_len=7)
    beams = beam_search(model, src, lens, BOS, EOS, beam=3, max_len=7)
    for i, s in enumerate(seqs):
        one = torch.tensor([s])
        (g,) = greedy(model, one, torch.tensor([len(s)]), BOS, EOS, max_len=7)
        (b,) = beam_search(model, one, torch.tensor([len(s)]), BOS, EOS, beam=3, max_len=7)
        assert (g.tokens, g.finished) == (batched[i].tokens, batched[i].finished)
        assert (b.tokens, b.finished) == (beams[i].tokens, beams[i].finished)


def test_config_round_trip_and_errors():
    cfg = BahdanauConfig(7, 9, num_layers=1)
    model = build_model("bahdanau", cfg.to_dict())
    assert isinstance(model, EncoderDecoder) and model.config == cfg and model.MODEL_TYPE == "bahdanau"
    with pytest.raises(ValueError, match="hidden_size"):
        BahdanauConfig.from_dict({"src_vocab_size": 7, "tgt_vocab_size": 9, "hidden_size": 3})
    with pytest.raises(ValueError, match="at least one token"):
        tiny()(torch.tensor([[3, 4]]), torch.tensor([[1]]), torch.tensor([0]))

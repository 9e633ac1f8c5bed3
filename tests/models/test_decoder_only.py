"""The decoder-only translator: prefix masking, causality, padding, and cached decoding == full forward."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from attnlab.attention import record_attention
from attnlab.decoding.generator import generate
from attnlab.decoding.options import DecodeOptions
from attnlab.models import DecoderOnly, DecoderOnlyConfig
from attnlab.models.decoder_only import prefix_mask

pytestmark = pytest.mark.usefixtures("one_thread")


def greedy(model, src, lens, bos, eos, max_len, scores=True):
    """The generator's greedy search: one hypothesis per source."""
    opts = DecodeOptions()
    return [hs[0] for hs in generate(model, src, lens, replace(opts, scores=scores), bos=bos, eos=eos, max_len=max_len)]


def full_greedy(model, src, lens, bos, eos, max_len):
    """Greedy by a full forward over the whole output every step (no cache): the reference, cut at <eos>."""
    from attnlab.decoding.hypothesis import Hypothesis
    from attnlab.decoding.protocol import inference

    with inference(model):
        out, lps = torch.full((src.shape[0], 1), bos, dtype=torch.long), []
        for _ in range(max_len):
            lp = torch.log_softmax(model(src, out, lens)[:, -1].float(), dim=-1)
            nxt = lp.argmax(dim=-1)
            lps.append(lp.gather(1, nxt[:, None]))
            out = torch.cat([out, nxt[:, None]], dim=1)
    hyps = []
    for row, lp in zip(out[:, 1:].tolist(), torch.cat(lps, dim=1).tolist()):
        n = row.index(eos) if eos in row else len(row)
        pos = lp[: n + 1] if eos in row else lp[:n]
        hyps.append(Hypothesis(row[:n], sum(pos) / max(len(pos), 1), eos in row, pos))
    return hyps


def beam_search(model, src, lens, bos, eos, beam=4, max_len=50, length_penalty=1.0):
    """The generator's beam search: the best hypothesis per source."""
    opts = DecodeOptions(beam=beam, length_penalty=length_penalty)
    return [hs[0] for hs in generate(model, src, lens, opts, bos=bos, eos=eos, max_len=max_len)]


def _model(prefix_lm: bool, **kw) -> DecoderOnly:
    torch.manual_seed(0)
    cfg = dict(num_hiddens=16, num_heads=2, num_layers=2, ffn_num_hiddens=32, dropout=0.0, prefix_lm=prefix_lm)
    return DecoderOnly(DecoderOnlyConfig(11, 13, **{**cfg, **kw})).eval()


def _batch():
    torch.manual_seed(1)
    return torch.randint(3, 11, (3, 6)), torch.tensor([6, 4, 2]), torch.randint(3, 13, (3, 5))


@pytest.mark.parametrize("prefix_lm", [False, True])
@pytest.mark.parametrize("norm_first", [False, True])
def test_cached_decoding_equals_the_full_forward(prefix_lm, norm_first):
    model = _model(prefix_lm, norm_first=norm_first)
    src, lens, tgt = _batch()
    full = model(src, tgt, lens)
    state = model.start_decoding(src, lens)
    state.reserve(8)
    steps = [model.decode_step(tgt[:, t : t + 1], state)[0] for t in range(tgt.shape[1])]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("prefix_lm", [False, True])
def test_greedy_and_beam_search_with_the_cache_match_the_uncached_reference(prefix_lm):
    model = _model(prefix_lm)
    src, lens, _ = _batch()
    cached = greedy(model, src, lens, bos=1, eos=2, max_len=7)
    plain = full_greedy(model, src, lens, 1, 2, 7)
    assert [h.tokens for h in cached] == [h.tokens for h in plain]
    assert len(beam_search(model, src, lens, bos=1, eos=2, beam=3, max_len=7)) == 3


def test_prefix_mask_source_sees_source_both_ways_and_never_a_target():
    S, lens = 4, torch.tensor([4, 2])
    slots = torch.arange(S + 3)
    m = prefix_mask(lens, S, slots, slots, prefix_lm=True)  # (B, 7, 7)
    assert m[:, :S, S:].sum() == 0  # no source query sees a target key
    assert m[0, :S, :S].all()  # every real source token sees every other, both ways
    assert not m[1, :, 2:S].any()  # padded source keys are hidden from everyone
    causal_targets = torch.tril(torch.ones(3, 3, dtype=torch.bool))
    assert torch.equal(m[0, S:, S:], causal_targets) and m[0, S:, :S].all()
    causal = prefix_mask(lens, S, slots, slots, prefix_lm=False)
    assert torch.equal(causal[0, :S, :S], torch.tril(torch.ones(S, S, dtype=torch.bool)))
    assert causal[:, :S, S:].sum() == 0


def _source_states(model, src, lens, tgt):
    outs = []
    hook = model.blocks[-1].register_forward_hook(lambda m, i, o: outs.append(o[:, : src.shape[1]]))
    model(src, tgt, lens)
    hook.remove()
    return outs[0]


@pytest.mark.parametrize("prefix_lm", [False, True])
def test_on_outputs_source_tokens_never_see_a_target_token(prefix_lm):
    model = _model(prefix_lm)
    src, lens, tgt = _batch()
    other = torch.randint(3, 13, tgt.shape)
    torch.testing.assert_close(_source_states(model, src, lens, tgt), _source_states(model, src, lens, other))
    with record_attention(model) as rec:
        model(src, tgt, lens)
    w = rec.weights["blocks.0.attention"][0]  # (B, H, S+T, S+T)
    assert float(w[:, :, : src.shape[1], src.shape[1] :].abs().max()) == 0.0


def test_prefix_lm_lets_an_early_source_token_see_a_later_one_and_causal_does_not():
    src, lens, tgt = _batch()
    later = src.clone()
    later[0, 3] = 3 if src[0, 3] != 3 else 4
    for prefix_lm, changes in ((True, True), (False, False)):
        model = _model(prefix_lm)
        a, b = _source_states(model, src, lens, tgt)[0, 0], _source_states(model, later, lens, tgt)[0, 0]
        assert bool((a - b).abs().max() > 1e-6) is changes


def test_later_target_tokens_never_change_earlier_logits_and_padding_never_matters():
    model = _model(False)
    src, lens, tgt = _batch()
    changed = tgt.clone()
    changed[:, 3:] = 5
    torch.testing.assert_close(model(src, tgt, lens)[:, :3], model(src, changed, lens)[:, :3])
    alone = model(src[2:, :2], tgt[2:], lens[2:])  # row 2 without its padding
    torch.testing.assert_close(model(src, tgt, lens)[2:], alone, atol=1e-5, rtol=1e-5)


def test_config_is_checked_and_views_cut_the_one_map():
    with pytest.raises(ValueError, match="share_embeddings needs one vocabulary"):
        DecoderOnlyConfig(11, 13, share_embeddings=True)
    with pytest.raises(ValueError, match="unknown DecoderOnlyConfig keys"):
        DecoderOnlyConfig.from_dict({"src_vocab_size": 3, "tgt_vocab_size": 3, "window": 2})
    views = DecoderOnly.attention_views({"decoder_self": torch.rand(2, 2, 7, 7)}, src_len=4)
    assert {k: tuple(v.shape[2:]) for k, v in views.items()} == {
        "encoder_self": (4, 4),
        "decoder_self": (3, 3),
        "cross": (3, 4),
    }

"""Greedy and beam search through the generator: cache == recomputation, beam search == exhaustive search,
== the search before the generator, and its trace."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

from attnlab.attention import record_attention
from attnlab.attention.recording import attention_maps
from attnlab.decoding.generator import generate
from attnlab.decoding.options import DecodeOptions
from attnlab.decoding.protocol import inference
from attnlab.decoding.trace import trace_path
from attnlab.models import BahdanauConfig, EncoderDecoder, Transformer, TransformerConfig

PAD, BOS, EOS = 0, 1, 2


def toks(hyps):
    return [h.tokens for h in hyps]


pytestmark = pytest.mark.usefixtures("one_thread")


def greedy(model, src, lens, bos, eos, max_len, scores=True):
    out = generate(model, src, lens, DecodeOptions(scores=scores), bos=bos, eos=eos, max_len=max_len)
    return [hs[0] for hs in out]


def beam_search(model, src, lens, bos, eos, beam, length_penalty=1.0, max_len=50, trace=False, early_stopping=True):
    opts = DecodeOptions(beam=beam, length_penalty=length_penalty, early_stopping=early_stopping, trace=trace)
    return [hs[0] for hs in generate(model, src, lens, opts, bos=bos, eos=eos, max_len=max_len)]


def full_greedy(model, src, lens, bos, max_len):
    """Greedy by a full forward over the whole output at every step (no cache): the reference."""
    with inference(model):
        out = torch.full((src.shape[0], 1), bos, dtype=torch.long)
        lps = []
        for _ in range(max_len):
            lp = F.log_softmax(model(src, out, lens)[:, -1].float(), dim=-1)
            nxt = lp.argmax(dim=-1)
            lps.append(lp.gather(1, nxt[:, None]))
            out = torch.cat([out, nxt[:, None]], dim=1)
    return out[:, 1:].tolist(), torch.cat(lps, dim=1).tolist()


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


@pytest.mark.parametrize("make", [lambda: transformer(), lambda: transformer(norm_first=True),
                                  lambda: transformer(window=1), bahdanau])  # fmt: skip
def test_cached_greedy_equals_full_recomputation(make):
    model = make()
    src, lens = sources()
    cached = greedy(model, src, lens, BOS, eos=-1, max_len=12)
    full, full_lp = full_greedy(model, src, lens, BOS, 12)
    assert toks(cached) == full
    for c, f in zip(cached, full_lp):
        assert c.positional_scores == pytest.approx(f, abs=1e-4)
    assert all(len(h.tokens) == 12 and not h.finished for h in cached)  # eos=-1 never stops


def test_greedy_stops_at_eos_and_restores_mode():
    model = transformer()
    src, lens = sources()
    full = toks(greedy(model, src, lens, BOS, eos=-1, max_len=10))
    eos = full[0][3]  # pretend a token the model emits is <eos>
    cut = greedy(model, src, lens, BOS, eos=eos, max_len=10)
    assert model.training
    for f, c in zip(full, cut):
        assert c.tokens == (f[: f.index(eos)] if eos in f else f)
        assert c.finished == (eos in f)
        # one log-probability per produced token, + the <eos> when it finished
        assert len(c.positional_scores) == len(c.tokens) + c.finished
        assert c.score == pytest.approx(sum(c.positional_scores) / len(c.positional_scores))
    model.eval()
    greedy(model, src, lens, BOS, EOS, max_len=3)
    assert not model.training
    # a model in eval mode only at the root still decodes in eval mode (its dropout off: the same tokens)
    model.decoder.train()
    assert toks(greedy(model, src, lens, BOS, eos=-1, max_len=10)) == full
    assert not model.training


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
                    logits = model(src[b : b + 1], torch.tensor([[BOS] + y[:-1]]), lens[b : b + 1])
                    lp = F.log_softmax(logits[0], -1).gather(1, torch.tensor(y)[:, None]).sum()
                    cands.append((float(lp) / len(y) ** alpha, list(seq)))
            best.append(max(cands, key=lambda c: c[0]))
    return best


@pytest.mark.parametrize("make,alpha", [(transformer, 1.0), (transformer, 0.0), (bahdanau, 0.6)])
def test_wide_beam_equals_exhaustive_search(make, alpha):
    V, max_len = 3, 3  # 2 non-eos tokens: 1 + 2 + 4 eos-ended outputs + 8 cut at max_len = 15 < beam
    model = make(tgt_vocab=V)
    src, lens = sources(B=3)
    hyps = beam_search(model, src, lens, BOS, EOS, beam=16, length_penalty=alpha, max_len=max_len)
    expected = _exhaustive(model, src, lens, V, max_len, alpha)
    assert toks(hyps) == [seq for _, seq in expected]
    assert [h.score for h in hyps] == pytest.approx([s for s, _ in expected], abs=1e-4)
    for h in hyps:  # the score is what the positional scores add up to
        n = len(h.positional_scores)
        assert n == len(h.tokens) + h.finished
        assert h.score == pytest.approx(sum(h.positional_scores) / n**alpha, abs=1e-4)


def test_beam_search_batched_with_length_limits():
    model = transformer()
    src, lens = sources(B=4)
    hyps = beam_search(model, src, lens, BOS, eos=-1, beam=3, max_len=(lens + 2).tolist())
    assert [len(h.tokens) for h in hyps] == (lens + 2).tolist()
    assert not any(h.finished for h in hyps)


def test_attention_maps_stitch_decoding_steps():
    model = transformer()
    src, lens = sources(B=2)
    with record_attention(model) as rec:
        out = greedy(model, src, lens, BOS, eos=-1, max_len=5)
    maps = attention_maps(rec)
    assert maps["decoder.blocks.1.cross_attention"].shape == (2, 4, 5, 7)
    self_w = maps["decoder.blocks.0.self_attention"]
    assert self_w.shape == (2, 4, 5, 5) and (self_w.triu(1) == 0).all()
    torch.testing.assert_close(self_w.sum(-1), torch.ones(2, 4, 5))
    assert maps["encoder.blocks.0.attention"].shape == (2, 4, 7, 7) and len(out[0].tokens) == 5


def test_bad_arguments_raise():
    model = transformer()
    src, lens = sources()
    with pytest.raises(ValueError, match="beam"):
        beam_search(model, src, lens, BOS, EOS, beam=0)
    with pytest.raises(ValueError, match="max_len"):
        beam_search(model, src, lens, BOS, EOS, beam=2, max_len=[3, 4])
    with pytest.raises(ValueError, match="src_valid_lens"):
        greedy(model, src, lens[:2], BOS, EOS, max_len=4)
    with pytest.raises(ValueError, match="max_len"):
        greedy(model, src, lens, BOS, EOS, max_len=0)


# ---------------------------------------------------------------------------------------------------
# The beam search before it was reshaped like fairseq's (state expanded before the first step, every
# part of the state index_selected every step, no sentence leaving the batch), kept so the test below can
# check that the generator finds the very same hypotheses. A sentence's finished list keeps its K best
# (transformers' rule: a full list trades its worst for a better one, as at the length limit).
def _keep(fin, entry, K):
    if len(fin) < K:
        fin.append(entry)
    elif entry[0] > min(f[0] for f in fin):
        fin[min(range(len(fin)), key=lambda j: fin[j][0])] = entry


def _old_beam_search(model, src, src_valid_lens, bos, eos, beam=4, length_penalty=1.0, max_len=None):
    B, K, device = src.shape[0], beam, src.device
    limits = [max_len] * B
    finished = [[] for _ in range(B)]
    done = [False] * B
    with inference(model):
        state = model.start_decoding(src, src_valid_lens)
        state = model.reorder_state(state, torch.arange(B, device=device).repeat_interleave(K))
        scores = torch.full((B, K), float("-inf"), device=device)
        scores[:, 0] = 0.0
        tokens = torch.empty((B * K, 0), dtype=torch.long, device=device)
        inp = torch.full((B * K, 1), bos, dtype=torch.long, device=device)
        for step in range(max(limits)):
            logits, state = model.decode_step(inp, state)
            logprobs = F.log_softmax(logits[:, -1].float(), dim=-1)
            V = logprobs.shape[-1]
            cand = (scores.reshape(B * K, 1) + logprobs).reshape(B, K * V)
            top_scores, top_idx = cand.topk(min(2 * K, K * V), dim=1)
            top_beam, top_tok = top_idx // V, top_idx % V
            is_eos = top_tok == eos
            hits = (is_eos[:, :K] & torch.isfinite(top_scores[:, :K])).nonzero().tolist()
            if hits:
                hist = tokens.tolist()
                for b, r in hits:
                    if not done[b]:
                        raw = float(top_scores[b, r])
                        seq = hist[b * K + int(top_beam[b, r])]
                        _keep(finished[b], (raw / (step + 1) ** length_penalty, seq), K)
            live_scores, pick = top_scores.masked_fill(is_eos, float("-inf")).topk(K, dim=1)
            rows = (torch.arange(B, device=device)[:, None] * K + top_beam.gather(1, pick)).reshape(-1)
            new_tok = top_tok.gather(1, pick).reshape(-1)
            tokens = torch.cat([tokens.index_select(0, rows), new_tok[:, None]], dim=1)
            scores = live_scores
            state = model.reorder_state(state, rows)
            inp = new_tok[:, None]
            for b in range(B):
                if done[b]:
                    continue
                if step + 1 >= limits[b]:  # the top K candidates that are not <eos> finish as they are
                    hist = tokens[b * K : (b + 1) * K].tolist()
                    for k in range(K):
                        if int(pick[b, k]) < K and torch.isfinite(scores[b, k]):
                            _keep(finished[b], (float(scores[b, k]) / (step + 1) ** length_penalty, hist[k]), K)
                    done[b] = True
                elif len(finished[b]) >= K:
                    done[b] = True
            if all(done):
                break
    best = [max(f, key=lambda x: x[0]) if f else (float("-inf"), []) for f in finished]
    return [seq for _, seq in best], [s for s, _ in best]


@pytest.mark.parametrize("make", [transformer, bahdanau])
@pytest.mark.parametrize("beam,alpha", [(2, 1.0), (4, 1.0), (5, 0.6)])
def test_beam_search_finds_the_same_hypotheses_as_the_old_search(make, beam, alpha):
    """Sentences leave the batch at different steps here (eos is a frequent token of the untrained
    model), so the shrinking batch and the beams-only reordering are both exercised."""
    model = make(tgt_vocab=9)
    src, lens = sources(B=8, seed=3)
    lengths = set()
    for eos in range(2, 9):
        old_hyps, old_scores = _old_beam_search(model, src, lens, BOS, eos, beam, alpha, max_len=10)
        new = beam_search(model, src, lens, BOS, eos, beam=beam, length_penalty=alpha, max_len=10)
        assert toks(new) == old_hyps
        assert [h.score for h in new] == pytest.approx(old_scores, abs=1e-5)
        lengths.update(len(h.tokens) for h in new)
    assert len(lengths) >= 2  # sentences really did finish at different steps


@pytest.mark.parametrize("make", [transformer, bahdanau])
@pytest.mark.parametrize("beam,alpha,max_len", [(3, 1.0, 12), (4, 0.6, 4)])
def test_beam_trace_is_consistent_with_the_result(make, beam, alpha, max_len):
    """The trace changes nothing, and following parents back from its winner rebuilds each returned hypothesis:
    its tokens, per-token log-probabilities and normalised score; every step keeps `beam` live slots."""
    model = make()
    src, lens = sources(B=3)
    plain = beam_search(model, src, lens, BOS, EOS, beam=beam, length_penalty=alpha, max_len=max_len)
    traced = beam_search(model, src, lens, BOS, EOS, beam=beam, length_penalty=alpha, max_len=max_len, trace=True)
    assert [(h.tokens, h.score, h.finished) for h in traced] == [(h.tokens, h.score, h.finished) for h in plain]
    assert all(h.trace is None for h in plain)
    for b, hyp in enumerate(traced):
        trace = hyp.trace  # this sentence's records only
        assert {r["sentence"] for r in trace} == {b}
        steps = {r["step"]: r for r in trace if r.get("sentence") == b and "step" in r}
        for r in steps.values():
            slots = sorted(c["slot"] for c in r["candidates"] if c["status"] in ("live", "cut"))
            assert slots == list(range(beam))
        path = trace_path(trace, b)
        cands = [steps[s]["candidates"][i] for s, i in path]
        assert [c["token"] for c in cands] == hyp.tokens + ([EOS] if hyp.finished else [])
        assert [c["logprob"] for c in cands] == pytest.approx(hyp.positional_scores, abs=1e-6)
        assert cands[-1]["norm_score"] == pytest.approx(hyp.score, abs=1e-6)
        assert cands[-1]["status"] == ("finished" if hyp.finished else "cut")

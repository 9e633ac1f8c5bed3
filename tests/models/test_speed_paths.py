"""The speed paths must compute what the plain paths do: greedy that drops finished sentences, the
preallocated KV cache, the once-built cross-attention mask, the cached fused QKV weight, the output layer
on real target positions only, and the fused optimizer."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from attnlab.attention import KVCache, MultiHeadAttention
from attnlab.decoding.generator import generate
from attnlab.decoding.options import DecodeOptions
from attnlab.models import Transformer, TransformerConfig
from attnlab.training.config import TrainConfig
from attnlab.training.loss import sequence_loss, target_mask
from attnlab.training.optim import build_optimizer

pytestmark = pytest.mark.usefixtures("one_thread")

PAD, BOS = 0, 1


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


def tiny(**kw):
    torch.manual_seed(0)
    cfg = {"num_hiddens": 16, "num_heads": 4, "num_layers": 2, "ffn_num_hiddens": 32, "dropout": 0.1}
    cfg.update(kw)
    return Transformer(TransformerConfig(13, 11, **cfg))


def sources(B=9, S=7, seed=1):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, 13, (B, S), generator=g)
    lens = torch.randint(1, S + 1, (B,), generator=g)
    return src.masked_fill(torch.arange(S)[None] >= lens[:, None], PAD), lens


class NoReorder(torch.nn.Module):
    """The decoding protocol without `reorder_state`: greedy must keep every row in the batch."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def start_decoding(self, src, lens):
        return self.model.start_decoding(src, lens)

    def decode_step(self, tgt, state):
        return self.model.decode_step(tgt, state)


@pytest.mark.parametrize("kw", [{}, {"norm_first": True}])
def test_greedy_dropping_finished_sentences_equals_recomputation(kw):
    model = tiny(**kw)
    src, lens = sources()
    free = greedy(model, src, lens, BOS, eos=-1, max_len=12)

    # An <eos> the sentences first reach at different steps, so the batch shrinks several times.
    def first_steps(tok):
        return {h.tokens.index(tok) for h in free if tok in h.tokens}

    eos = max(range(3, 11), key=lambda tok: len(first_steps(tok)))
    assert len(first_steps(eos)) > 1, "this tiny model emits no token at different steps; change the seed"
    shrunk = greedy(model, src, lens, BOS, eos=eos, max_len=12)
    full = full_greedy(model, src, lens, BOS, eos, 12)
    kept = greedy(NoReorder(model), src, lens, BOS, eos=eos, max_len=12)
    assert len({len(h.tokens) for h in shrunk if h.finished}) > 1  # sentences ended at different steps
    for a, b, c in zip(shrunk, full, kept):
        assert a.tokens == b.tokens == c.tokens and a.finished == b.finished == c.finished
        assert a.positional_scores == pytest.approx(b.positional_scores, abs=1e-5)
        assert a.positional_scores == pytest.approx(c.positional_scores, abs=1e-6)
        assert a.score == pytest.approx(b.score, abs=1e-5)
    assert model.training  # mode restored


def test_growing_cache_equals_concatenation_through_growth_reorder_and_assignment():
    torch.manual_seed(0)
    cache, ks, vs, B = KVCache(), [], [], 3
    for step in range(40):  # past the first capacity (16) and the doubling
        k, v = torch.randn(B, 2, 1, 4), torch.randn(B, 2, 1, 4)
        ks.append(k)
        vs.append(v)
        K, Vv = cache.update(k, v)
        torch.testing.assert_close(K, torch.cat(ks, 2), rtol=0, atol=0)
        torch.testing.assert_close(Vv, torch.cat(vs, 2), rtol=0, atol=0)
        if step == 20:
            index = torch.tensor([2, 0])
            cache.reorder(index)
            B = 2
            ks, vs = [torch.cat(ks, 2).index_select(0, index)], [torch.cat(vs, 2).index_select(0, index)]
            torch.testing.assert_close(cache.k, ks[0], rtol=0, atol=0)
    assert len(cache) == 40
    cache.k, cache.v = ks[0][:, :, :3].clone(), vs[0][:, :, :3].clone()  # public fields set from outside
    k, v = torch.randn(2, 2, 1, 4), torch.randn(2, 2, 1, 4)
    K, _ = cache.update(k, v)
    torch.testing.assert_close(K, torch.cat([ks[0][:, :, :3], k], 2), rtol=0, atol=0)


def test_nan_that_entered_the_cache_earlier_still_poisons_later_steps():
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2, causal=True).eval()
    x = torch.randn(1, 4, 8)
    x[0, 1, 0] = float("nan")
    cache = KVCache()
    with torch.no_grad():
        steps = [mha(x[:, t : t + 1], x[:, t : t + 1], x[:, t : t + 1], cache=cache) for t in range(4)]
        full = mha(x, x, x)
    assert not cache.finite
    out = torch.cat(steps, 1)
    assert torch.isnan(out[0, 1:]).all() and not torch.isnan(out[0, 0]).any()
    torch.testing.assert_close(out, full, equal_nan=True)


def test_cross_attention_mask_is_rebuilt_for_new_source_lengths():
    model = tiny(dropout=0.0).eval()
    src, lens = sources(B=4)
    with torch.no_grad():
        state = model.start_decoding(src, lens)
        tgt = torch.full((4, 1), BOS)
        model.decode_step(tgt, state)
        index = torch.tensor([3, 3, 0])
        state = model.reorder_state(state, index)
        step2, _ = model.decode_step(torch.full((3, 1), 5), state)
        full = model(src.index_select(0, index), torch.tensor([[BOS, 5]] * 3), lens.index_select(0, index))
    torch.testing.assert_close(step2[:, -1], full[:, -1], rtol=1e-5, atol=1e-5)


def test_cached_fused_qkv_weight_follows_weight_changes():
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2).eval()
    x = torch.randn(2, 3, 8)
    with torch.no_grad():
        before = mha(x, x, x)
        mha.W_k.weight.mul_(2.0)  # in place: the version counter moves
        after = mha(x, x, x)
    with torch.enable_grad():
        reference = mha(x, x, x)  # with autograd the concatenation is never cached
    assert not torch.allclose(before, after)
    torch.testing.assert_close(after, reference.detach())


def test_targets_mask_gives_the_real_rows_of_the_full_logits_and_the_same_loss():
    model = tiny().eval()
    src, lens = sources(B=4)
    g = torch.Generator().manual_seed(3)
    tgt_in, tgt_out = torch.randint(3, 11, (4, 5), generator=g), torch.randint(3, 11, (4, 5), generator=g)
    tgt_lens = torch.tensor([5, 2, 4, 1])
    real = target_mask(tgt_lens, 5)
    with torch.no_grad():
        full = model(src, tgt_in, lens)
        rows = model(src, tgt_in, lens, targets_mask=real)
    assert rows.shape == (int(tgt_lens.sum()), 11)
    torch.testing.assert_close(rows, full[real], rtol=1e-6, atol=1e-6)
    a, n = sequence_loss(full, tgt_out, tgt_lens, 0.1)
    b, m = sequence_loss(rows, tgt_out, tgt_lens, 0.1)
    torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
    assert int(n) == int(m) == 12
    with pytest.raises(ValueError, match="targets_mask must be a bool tensor"):
        model(src, tgt_in, lens, targets_mask=real[:, :3])
    with pytest.raises(ValueError, match=r"\(N, V\) with N = 12"):
        sequence_loss(rows[:5], tgt_out, tgt_lens)


def test_optimizer_is_fused_where_torch_can_and_falls_back_to_foreach(monkeypatch):
    model = tiny()
    opt = build_optimizer(model, TrainConfig())
    assert opt.defaults["fused"] is True
    real_adam = torch.optim.Adam

    def no_fused(*args, fused=None, **kw):
        if fused:
            raise RuntimeError("fused not supported here")
        return real_adam(*args, **kw)

    monkeypatch.setattr(torch.optim, "Adam", no_fused)
    opt = build_optimizer(model, TrainConfig())
    assert opt.defaults["foreach"] is True and not opt.defaults.get("fused")
    assert [len(g["params"]) for g in opt.param_groups] == [
        len(g["params"]) for g in build_optimizer(model, TrainConfig()).param_groups
    ]


def test_reserved_cache_never_grows_and_reuses_its_spare_as_rows_leave():
    """`KVCache.reserve`: one allocation for the whole decode (no doubling copy), and reorders that drop
    rows write into the first rows of the spare buffer instead of allocating a new one."""
    import torch

    from attnlab.attention import KVCache

    cache = KVCache()
    cache.reserve(40)
    k = torch.randn(6, 2, 1, 4)
    for step in range(30):
        cache.update(k + step, k - step)
        if step == 1:
            first = cache._kbuf.data_ptr()
    assert cache._kbuf.data_ptr() == first and cache._kbuf.shape[2] == 40  # reserved once, never grown
    ref_k = cache.k.clone()
    cache.reorder(torch.tensor([0, 1, 2, 3, 4, 5]))  # allocates the second buffer, once
    second = cache._kbuf.data_ptr()
    assert second != first and cache._spare[0].data_ptr() == first
    cache.reorder(torch.tensor([5, 3, 1]))  # rows leave: the first rows of the spare take them
    assert cache._kbuf.data_ptr() == first
    torch.testing.assert_close(cache.k, ref_k[[5, 3, 1]])
    cache.reorder(torch.tensor([2, 0]))
    assert cache._kbuf.data_ptr() == second
    torch.testing.assert_close(cache.k, ref_k[[1, 5]])
    cache.update(k[:2], k[:2])
    torch.testing.assert_close(cache.k[:, :, -1:], k[:2])

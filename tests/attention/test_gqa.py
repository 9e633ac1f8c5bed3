"""Grouped-query / multi-query attention against SDPA's enable_gqa and against repeating KV heads."""

import pytest
import torch
import torch.nn.functional as F

from attnlab.attention import KVCache, MultiHeadAttention, mask_heads, prune_heads, record_attention


def _qkv(mha, x):
    B, L, _ = x.shape
    Dh = mha.head_dim
    q = mha.W_q(x).view(B, L, mha.num_heads, Dh).transpose(1, 2)
    k = mha.W_k(x).view(B, L, mha.num_kv_heads, Dh).transpose(1, 2)
    v = mha.W_v(x).view(B, L, mha.num_kv_heads, Dh).transpose(1, 2)
    return q, k, v


@pytest.mark.parametrize("kv", [1, 2, 4])
def test_equals_sdpa_enable_gqa_and_repeated_heads(kv):
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, num_kv_heads=kv, bias=True).eval()
    assert mha.W_k.weight.shape == (kv * 4, 16)
    x = torch.randn(2, 5, 16)
    q, k, v = _qkv(mha, x)
    visible = torch.tril(torch.ones(5, 5, dtype=torch.bool))
    gqa = F.scaled_dot_product_attention(q, k, v, attn_mask=visible, enable_gqa=True)
    rep = F.scaled_dot_product_attention(
        q, k.repeat_interleave(4 // kv, 1), v.repeat_interleave(4 // kv, 1), attn_mask=visible
    )
    torch.testing.assert_close(gqa, rep, atol=1e-6, rtol=1e-6)
    want = mha.W_o(gqa.transpose(1, 2).reshape(2, 5, 16))
    torch.testing.assert_close(mha(x, x, x, causal=True), want, atol=1e-6, rtol=1e-6)
    with record_attention(mha) as rec:
        recorded = mha(x, x, x, causal=True)
    torch.testing.assert_close(recorded, want, atol=1e-5, rtol=1e-5)
    assert rec.weights["MultiHeadAttention"][0].shape == (2, 4, 5, 5)


def test_cache_holds_only_kv_heads_and_matches_full():
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, num_kv_heads=1, causal=True).eval()
    x = torch.randn(2, 6, 16)
    full = mha(x, x, x)
    cache = KVCache()
    steps = [mha(x[:, t : t + 1], x[:, t : t + 1], x[:, t : t + 1], cache=cache) for t in range(6)]
    assert cache.k.shape == (2, 1, 6, 4)
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-6, rtol=1e-6)


def test_nonfinite_values_poison_only_the_rows_that_see_them():
    mha = MultiHeadAttention(8, 4, num_kv_heads=2).eval()
    x = torch.randn(1, 4, 8)
    kv = x.clone()
    kv[0, 3] = float("nan")
    out = mha(x, kv, kv, valid_lens=torch.tensor([3]))
    assert bool(torch.isfinite(out).all())  # the NaN key is hidden


def test_prune_whole_groups_or_refuse():
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, num_kv_heads=2).eval()
    x = torch.randn(1, 5, 16)
    with mask_heads(mha, {"MultiHeadAttention": [0, 0, 1, 1]}):
        masked = mha(x, x, x)
    with pytest.raises(ValueError, match="whole groups of 2"):
        prune_heads(mha, {"MultiHeadAttention": [1]})
    prune_heads(mha, {"MultiHeadAttention": [0, 1]})
    assert (mha.num_heads, mha.num_kv_heads, mha.kept_heads) == (2, 1, [2, 3])
    torch.testing.assert_close(mha(x, x, x), masked, atol=1e-6, rtol=1e-6)


def test_num_kv_heads_must_divide_heads():
    for bad in (0, 3, 8):
        with pytest.raises(ValueError, match="num_kv_heads must divide"):
            MultiHeadAttention(16, 4, num_kv_heads=bad)

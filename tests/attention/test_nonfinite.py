"""Non-finite inputs: hidden positions never leak, and fused and recorded paths agree exactly on
which rows are NaN."""

import pytest
import torch

from attnlab.attention import MultiHeadAttention, record_attention

NAN = float("nan")


def both_paths(m, *args, **kw):
    fused = m(*args, **kw)
    with record_attention(m) as rec:
        math = m(*args, **kw)
    return fused, math, rec.weights["MultiHeadAttention"][0]


@pytest.fixture
def mha():
    torch.manual_seed(0)
    return MultiHeadAttention(8, 2, bias=True).eval()


@pytest.mark.parametrize("bad", [NAN, float("inf")])
def test_nonfinite_padded_keys_and_values_do_not_leak(mha, bad):
    q, kv = torch.randn(2, 3, 8), torch.randn(2, 5, 8)
    lens = torch.tensor([3, 5])
    clean = mha(q, kv, kv, valid_lens=lens)
    kv_bad = kv.clone()
    kv_bad[0, 3:] = bad  # padding of example 0
    for out in both_paths(mha, q, kv_bad, kv_bad, valid_lens=lens)[:2]:
        torch.testing.assert_close(out, clean, atol=1e-5, rtol=0)
    # A non-finite *value* only (keys clean) at a padded position: same.
    fused, math, w = both_paths(mha, q, kv, kv_bad, valid_lens=lens)
    torch.testing.assert_close(fused, clean, atol=1e-5, rtol=0)
    torch.testing.assert_close(math, clean, atol=1e-5, rtol=0)
    assert torch.isfinite(w).all() and (w[0, :, :, 3:] == 0).all()


def test_nan_real_query_gives_nan_row_on_both_paths(mha):
    x = torch.randn(2, 4, 8)
    q = x.clone()
    q[0, 1] = NAN
    for kw in ({}, {"valid_lens": torch.tensor([4, 4])}, {"valid_lens": torch.tensor([3, 2])}):
        fused, math, w = both_paths(mha, q, x, x, **kw)
        for out in (fused, math):
            assert torch.isnan(out[0, 1]).all()
            rest = torch.ones(2, 4, dtype=torch.bool)
            rest[0, 1] = False
            assert torch.isfinite(out[rest]).all()
        torch.testing.assert_close(fused, math, atol=1e-5, rtol=0, equal_nan=True)
        assert torch.isnan(w[0, :, 1]).all() and torch.isfinite(w[1]).all()


def test_future_nan_does_not_reach_earlier_causal_positions(mha):
    x = torch.randn(1, 5, 8)
    clean = mha(x, x, x, causal=True)
    x_bad = x.clone()
    x_bad[0, 3] = NAN
    for out in both_paths(mha, x_bad, x_bad, x_bad, causal=True)[:2]:
        torch.testing.assert_close(out[:, :3], clean[:, :3], atol=1e-5, rtol=0)
        assert torch.isnan(out[:, 3:]).all()  # position 3 and 4 see the NaN


def test_nan_in_a_visible_key_poisons_only_queries_that_see_it(mha):
    q, kv = torch.randn(1, 2, 8), torch.randn(1, 3, 8)
    mask = torch.tensor([[True, True, False], [True, True, True]])  # query 0 cannot see key 2
    kv[0, 2] = NAN
    fused, math, _ = both_paths(mha, q, kv, kv, mask=mask)
    for out in (fused, math):
        assert torch.isfinite(out[0, 0]).all() and torch.isnan(out[0, 1]).all()

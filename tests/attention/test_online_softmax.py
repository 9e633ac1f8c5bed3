"""The online softmax (FlashAttention's tiling) against SDPA."""

import pytest
import torch
import torch.nn.functional as F

from attnlab.attention import causal_mask, lengths_to_mask, online_softmax_attention, online_softmax_steps


@pytest.mark.parametrize("block", [1, 3, 16, 64])
def test_equals_sdpa_with_padding_and_causal(block):
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, 9, 8) * 3, torch.randn(2, 3, 11, 8) * 3, torch.randn(2, 3, 11, 5)
    pad = lengths_to_mask(torch.tensor([11, 4]), 9, 11)  # (B, 1, 1, Lk)
    torch.testing.assert_close(
        online_softmax_attention(q, k, v, pad, block_size=block),
        F.scaled_dot_product_attention(q, k, v, attn_mask=pad),
        atol=1e-5,
        rtol=1e-5,
    )
    tri = causal_mask(9, 11)  # bottom-right aligned, as attnlab's decoder
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=tri)
    torch.testing.assert_close(
        online_softmax_attention(q, k, v, block_size=block, causal=True), want, atol=1e-5, rtol=1e-5
    )
    torch.testing.assert_close(online_softmax_attention(q, k, v, tri, block_size=block), want, atol=1e-5, rtol=1e-5)


def test_empty_rows_are_zero_not_nan():
    q, k, v = torch.randn(1, 1, 3, 4), torch.randn(1, 1, 6, 4), torch.randn(1, 1, 6, 4)
    mask = torch.ones(3, 6, dtype=torch.bool)
    mask[1] = False
    mask[2, :3] = False  # the first key block of row 2 is empty: m stays -inf there
    out = online_softmax_attention(q, k, v, mask, block_size=3)
    assert bool(torch.isfinite(out).all()) and bool((out[0, 0, 1] == 0).all())
    torch.testing.assert_close(out[0, 0, 2], F.scaled_dot_product_attention(q, k, v, attn_mask=mask)[0, 0, 2])
    assert online_softmax_attention(q, k[:, :, :0], v[:, :, :0]).abs().sum() == 0


@pytest.mark.parametrize(("dtype", "tol"), [(torch.float16, 2e-3), (torch.bfloat16, 1.6e-2)])
def test_half_precision(dtype, tol):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 40, 16) for _ in range(3))
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # float32 reference
    got = online_softmax_attention(q.to(dtype), k.to(dtype), v.to(dtype), block_size=8, causal=True)
    assert got.dtype == dtype
    torch.testing.assert_close(got.float(), want, atol=tol, rtol=tol)


def test_steps_rescale_and_end_exact():
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 1, 2, 4), torch.randn(1, 1, 12, 4), torch.randn(1, 1, 12, 4)
    k[..., 9, :] = q[..., 0, :] * 5  # a late key with the largest score: m must jump and l shrink
    states = list(online_softmax_steps(q, k, v, block_size=4))
    assert [s.end for s in states] == [4, 8, 12]
    assert bool((states[2].m[0, 0, 0] > states[1].m[0, 0, 0]).all())
    torch.testing.assert_close(states[-1].output, F.scaled_dot_product_attention(q, k, v), atol=1e-5, rtol=1e-5)


def test_bad_shapes_are_one_line():
    with pytest.raises(ValueError, match=r"\(B, H, L, Dh\)"):
        online_softmax_attention(torch.randn(2, 3, 4), torch.randn(2, 3, 4), torch.randn(2, 3, 4))
    with pytest.raises(ValueError, match="block_size"):
        x = torch.randn(1, 1, 2, 4)
        online_softmax_attention(x, x, x, block_size=0)

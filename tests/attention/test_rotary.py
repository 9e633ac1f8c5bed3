"""RoPE against `transformers`' Llama implementation, and the interleaved <-> half-split mapping."""

import math

import pytest
import torch
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from attnlab.attention import RotaryEmbedding, half_split_permutation


def _hf_cos_sin(head_dim: int, positions: torch.Tensor, base: float):
    """cos/sin as transformers' LlamaRotaryEmbedding builds them (default rope type)."""
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    freqs = positions.float()[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos()[None], emb.sin()[None]  # (1, L, Dh)


@pytest.mark.parametrize("base", [10000.0, 500.0])
@pytest.mark.parametrize("offset", [0, 7])
def test_equals_transformers_llama(base, offset):
    torch.manual_seed(0)
    q, k = torch.randn(2, 4, 6, 8), torch.randn(2, 2, 6, 8)  # GQA-shaped: fewer key heads
    cos, sin = _hf_cos_sin(8, torch.arange(offset, offset + 6), base)
    want_q, want_k = apply_rotary_pos_emb(q, k, cos, sin)
    got_q, got_k = RotaryEmbedding(8, base=base)(q, k, offset=offset)
    torch.testing.assert_close(got_q, want_q, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(got_k, want_k, atol=1e-6, rtol=1e-6)


def _interleaved_rope(x: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """RoFormer / GPT-J convention: pairs (2f, 2f + 1) rotated by pos * base^(-2f/d), written out."""
    L, d = x.shape[-2], x.shape[-1]
    out = torch.empty_like(x)
    for pos in range(L):
        for f in range(d // 2):
            a = pos * base ** (-2 * f / d)
            x0, x1 = x[..., pos, 2 * f], x[..., pos, 2 * f + 1]
            out[..., pos, 2 * f] = x0 * math.cos(a) - x1 * math.sin(a)
            out[..., pos, 2 * f + 1] = x0 * math.sin(a) + x1 * math.cos(a)
    return out


def test_interleaved_maps_to_half_split_by_a_feature_permutation():
    torch.manual_seed(0)
    x = torch.randn(1, 2, 5, 8)
    perm = half_split_permutation(8)
    rope = RotaryEmbedding(8)
    torch.testing.assert_close(rope.rotate(x[..., perm]), _interleaved_rope(x)[..., perm], atol=1e-5, rtol=1e-5)
    # ... so scores are the same under both conventions once q and k are permuted alike.
    q, k = torch.randn(1, 1, 5, 8), torch.randn(1, 1, 5, 8)
    s_inter = _interleaved_rope(q) @ _interleaved_rope(k).transpose(-1, -2)
    s_half = rope.rotate(q[..., perm]) @ rope.rotate(k[..., perm]).transpose(-1, -2)
    torch.testing.assert_close(s_half, s_inter, atol=1e-5, rtol=1e-5)


def test_scores_depend_on_relative_position_only():
    torch.manual_seed(0)
    rope = RotaryEmbedding(16)
    q, k = torch.randn(1, 1, 1, 16), torch.randn(1, 1, 1, 16)
    s = [(rope.rotate(q, i) * rope.rotate(k, i - 3)).sum() for i in (3, 10, 700)]
    torch.testing.assert_close(torch.stack(s), s[0].expand(3), atol=1e-4, rtol=1e-4)


def test_partial_rotation_passes_the_other_features():
    torch.manual_seed(0)
    x = torch.randn(1, 2, 4, 8)
    rope = RotaryEmbedding(8, fraction=0.5)
    assert rope.rot_dim == 4
    out = rope.rotate(x, 3)
    assert torch.equal(out[..., 4:], x[..., 4:])
    torch.testing.assert_close(out[..., :4], RotaryEmbedding(4).rotate(x[..., :4], 3))


def test_half_precision_keeps_dtype_and_bad_arguments_are_one_line():
    x = torch.randn(1, 1, 3, 8, dtype=torch.bfloat16)
    assert RotaryEmbedding(8).rotate(x).dtype == torch.bfloat16
    with pytest.raises(ValueError, match="fraction"):
        RotaryEmbedding(8, fraction=0.1)
    with pytest.raises(ValueError, match="expects"):
        RotaryEmbedding(8).rotate(torch.randn(1, 3, 8))

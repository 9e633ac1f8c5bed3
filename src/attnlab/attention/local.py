"""Sliding-window (local) attention one query block at a time: memory linear in sequence length."""

from __future__ import annotations

import torch
from torch import Tensor

from .masking import lengths_to_mask


def local_blockwise(mha, q: Tensor, k: Tensor, v: Tensor, valid_lens, causal: bool, position_bias=None) -> Tensor:
    """`mha`'s sliding-window attention (window `mha.window`), one block of `mha.block_size` queries at a time.

    Each block attends to at most block_size + 2 * window keys, so peak memory is O(L * (block_size +
    window)) instead of O(L^2). Shape: q, k, v (B, H, L, Dh), valid_lens (B,) or None -> (B, H, L, Dh).
    """
    B, H, L, _ = q.shape
    w, bs = mha.window, mha.block_size
    assert w is not None  # only called when _use_blockwise saw a window
    key_ok = None if valid_lens is None else lengths_to_mask(torch.as_tensor(valid_lens, device=q.device), L, L)
    outs = []
    for s in range(0, L, bs):
        e = min(s + bs, L)
        ks, ke = max(0, s - w), e if causal else min(L, e + w)
        # Band for queries [s, e) over keys [ks, ke): same rule as window_mask, shifted by the offsets.
        qi = torch.arange(s, e, device=q.device)[:, None]
        kj = torch.arange(ks, ke, device=q.device)[None, :]
        visible = ((qi - kj).abs() <= w) & ((kj <= qi) if causal else True)
        visible = visible[None, None]
        if key_ok is not None:
            visible = visible & key_ok[..., ks:ke]
        bias = None if position_bias is None else mha._bias(position_bias, qi[:, 0], kj[0], q.device)
        outs.append(mha._sdpa_masked(q[:, :, s:e], k[:, :, ks:ke], v[:, :, ks:ke], visible, bias))
    return torch.cat(outs, dim=2)

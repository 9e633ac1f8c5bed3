"""Padded attention as variable-length attention: the valid keys and values of each sentence packed into PyTorch
nested jagged tensors (NJT), so that SDPA runs its unmasked flash / memory-efficient varlen kernels on CUDA (a bool
mask would send it to a slower kernel) and never computes a padded key.

    varlen_attention(q, k, v, valid_lens, dropout_p)    softmax(q k^T / sqrt(D)) v over keys [0, valid_lens[b])

Only the keys and values are packed; every sentence keeps all its Lq queries. `masked_attention`'s contract masks
keys >= valid_lens[b] and keeps every query, so a query past valid_lens[b] (a padded position in self-attention)
still sees keys [0, valid_lens[b]) and gets that output; packing the queries to valid_lens[b] as well would drop
those rows. There is no causal form: NJT SDPA's CPU path refuses `is_causal`, and under the contract a causal query
past valid_lens[b] sees every valid key, which no single causal varlen call expresses (`backend_for` keeps causal
attention on SDPA).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .masking import lengths_to_mask

__all__ = ["varlen_attention"]


def _packed(x: Tensor, keep: Tensor, offsets: Tensor, group: int, max_len: int) -> Tensor:
    """(B, Hkv, L, D) and keep (B, L) -> an NJT (B, Hkv * group, j, D) of the kept rows, each KV head repeated
    `group` times in place (NJT SDPA has no grouped-query heads)."""
    # (total, Hkv, D): the kept positions of every sentence, one after another. The host waits for the device
    # here, once per tensor: the packed size depends on the lengths.
    rows = x.transpose(1, 2)[keep]
    if group > 1:
        rows = rows.repeat_interleave(group, dim=1)  # query head h reads KV head h // group, as SDPA's enable_gqa
    # Bounds, not exact values (every length is in [1, max_len] here): given, NJT asks the device for neither,
    # and the kernels only size their grids by them.
    nested = torch.nested.nested_tensor_from_jagged(rows, offsets, min_seqlen=1, max_seqlen=max_len)
    return nested.transpose(1, 2)


def varlen_attention(q: Tensor, k: Tensor, v: Tensor, valid_lens: Tensor | None, dropout_p: float = 0.0) -> Tensor:
    """softmax(q k^T / sqrt(D)) v where sentence b's queries see keys [0, valid_lens[b]) only, by SDPA on nested
    jagged tensors: the valid keys and values packed, the queries kept whole. A sentence of length 0 gives zeros
    (its queries see no key). Forward and backward; dropout on the weights as SDPA's.

    Shape: q (B, H, Lq, D), k, v (B, Hkv, Lk, D) with H a multiple of Hkv, valid_lens (B,) integers or None
    (every key) -> (B, H, Lq, D).

    Examples:
        >>> q, k, v = torch.randn(2, 4, 5, 8), torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8)
        >>> lens = torch.tensor([5, 2])
        >>> out = varlen_attention(q, k, v, lens)
        >>> want = F.scaled_dot_product_attention(q[1:], k[1:, :, :2], v[1:, :, :2], enable_gqa=True)
        >>> out.shape, torch.allclose(out[1:], want, atol=1e-6)
        (torch.Size([2, 4, 5, 8]), True)
    """
    B, H, Lq, D = q.shape
    Lk = k.shape[2]
    if valid_lens is None:  # nothing to pack
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, enable_gqa=k.shape[1] != H)
    keep = lengths_to_mask(valid_lens.to(q.device), Lq, Lk).view(B, Lk)  # checks the lengths as every backend does
    if B == 0 or Lq == 0 or Lk == 0:  # no query, or no key for any query: nothing to attend
        return q.new_zeros(B, H, Lq, D)
    # An empty sentence keeps one key (an NJT row of length 0 leaves the fused kernels) and its output is zeroed.
    keep[:, 0] = True
    lens = valid_lens.to(q.device, torch.int64)
    offsets = F.pad(lens.clamp(min=1).cumsum(0), (1, 0))
    kn, vn = (_packed(x, keep, offsets, H // k.shape[1], Lk) for x in (k, v))
    # Every sentence keeps its Lq queries: one NJT over q's rows, with the same length for each
    q_offsets = torch.arange(B + 1, device=q.device) * Lq
    q_rows = q.transpose(1, 2).reshape(B * Lq, H, D).contiguous()  # a view when q is (B, Lq, H, D) underneath
    qn = torch.nested.nested_tensor_from_jagged(q_rows, q_offsets, min_seqlen=Lq, max_seqlen=Lq).transpose(1, 2)
    out = F.scaled_dot_product_attention(qn, kn, vn, dropout_p=dropout_p)  # NJT (B, H, j, D)
    dense = out.transpose(1, 2).values().view(B, Lq, H, D).transpose(1, 2)  # (B, H, Lq, D)
    return dense.masked_fill((lens == 0).view(B, 1, 1, 1), 0.0)

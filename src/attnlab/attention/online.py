"""FlashAttention's online softmax (Milakov & Gimelshein 2018; Dao et al. 2022) in plain PyTorch.

softmax(s) @ V is computed one block of keys at a time, never holding a whole (Lq, Lk) score matrix:
for each query row keep the running maximum m, the running sum l = sum exp(s - m) and the unnormalised
output O = sum exp(s - m) v. A new key block with scores s_b updates them as

    m' = max(m, max s_b)
    l' = exp(m - m') l + sum exp(s_b - m')
    O' = exp(m - m') O + exp(s_b - m') @ V_b

and the answer is O / l at the end. The rescaling factor exp(m - m') is what lets a block whose scores
exceed every earlier one arrive late. Memory is O((Lq + Lk) Dh + block^2): linear in length.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import Tensor

from .masking import _as_4d


@dataclass
class OnlineSoftmaxState:
    """The running statistics after the keys [0, end): m and l (B, H, Lq, 1), O (B, H, Lq, Dv), float32;
    `output` = O / l (zeros where no key was visible yet)."""

    end: int
    m: Tensor
    l: Tensor  # noqa: E741 - the paper's name
    O: Tensor  # noqa: E741

    @property
    def output(self) -> Tensor:
        return torch.where(self.l > 0, self.O / self.l.clamp_min(torch.finfo(self.l.dtype).tiny), 0.0)


def _check(q: Tensor, k: Tensor, v: Tensor, block_size: int) -> None:
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(
            f"online_softmax_attention expects q, k, v of shape (B, H, L, Dh), got {tuple(q.shape)}, "
            f"{tuple(k.shape)}, {tuple(v.shape)}"
        )
    if k.shape[:3] != v.shape[:3] or q.shape[:2] != k.shape[:2] or q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q {tuple(q.shape)}, k {tuple(k.shape)} and v {tuple(v.shape)} do not fit: need the same B and H, "
            f"q and k the same Dh, k and v the same length"
        )
    if not isinstance(block_size, int) or block_size <= 0:
        raise ValueError(f"block_size must be a positive integer, got {block_size!r}")


def online_softmax_steps(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    block_size: int = 128,
    causal: bool = False,
    scale: float | None = None,
    q_start: int = 0,
) -> Iterator[OnlineSoftmaxState]:
    """The state after each key block, for the queries q (all of them in one block).

    Args:
        mask: bool, True = may attend, broadcastable to (B, H, Lq, Lk) (2-D (Lq, Lk) and 3-D (B, Lq, Lk)
            as in `MultiHeadAttention`), already cut to these queries.
        causal: query i, at absolute position q_start + i, sees the keys at positions <= its own.
        q_start: position of q[:, :, 0]; Lk - Lq aligns the queries bottom-right, as `causal_mask` does.
    """
    Lq, Lk = q.shape[2], k.shape[2]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    qf = q.float() * scale
    m = torch.full((*q.shape[:3], 1), float("-inf"), device=q.device)
    l = torch.zeros_like(m)  # noqa: E741
    O = q.new_zeros((*q.shape[:3], v.shape[-1]), dtype=torch.float32)  # noqa: E741
    q_pos = torch.arange(q_start, q_start + Lq, device=q.device)[:, None]
    for s in range(0, Lk, block_size):
        e = min(s + block_size, Lk)
        scores = qf @ k[:, :, s:e].float().transpose(-2, -1)  # (B, H, Lq, bk)
        visible = None if mask is None else mask[..., s:e]
        if causal:
            tri = torch.arange(s, e, device=q.device)[None, :] <= q_pos
            visible = tri if visible is None else visible & tri
        if visible is not None:
            scores = scores.masked_fill(~visible, float("-inf"))
        m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))
        # A row with no visible key so far keeps m = -inf: shift by 0 there, so exp gives 0, not NaN.
        shift = torch.where(torch.isinf(m_new), 0.0, m_new)
        p = torch.exp(scores - shift)  # (B, H, Lq, bk)
        alpha = torch.exp(m - shift)  # rescales what earlier blocks contributed
        l = alpha * l + p.sum(dim=-1, keepdim=True)  # noqa: E741
        O = alpha * O + p @ v[:, :, s:e].float()  # noqa: E741
        m = m_new
        yield OnlineSoftmaxState(e, m, l, O)


def online_softmax_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    block_size: int = 128,
    causal: bool = False,
    scale: float | None = None,
) -> Tensor:
    """softmax(q k^T * scale, masked) @ v computed tile by tile (queries and keys in blocks of
    `block_size`) with the online softmax; equal to `F.scaled_dot_product_attention` up to rounding.

    float16/bfloat16 inputs are accumulated in float32 and the output cast back (so it is at least as
    accurate as SDPA in that dtype). A query with no visible key gets a zero output (never NaN).

    Shape: q (B, H, Lq, Dh), k (B, H, Lk, Dh), v (B, H, Lk, Dv), mask bool (Lq, Lk), (B, Lq, Lk) or
    broadcastable to (B, H, Lq, Lk), True = may attend -> (B, H, Lq, Dv) in q's dtype.

    Examples:
        >>> import torch, torch.nn.functional as F
        >>> q, k, v = torch.randn(1, 2, 5, 4), torch.randn(1, 2, 7, 4), torch.randn(1, 2, 7, 4)
        >>> out = online_softmax_attention(q, k, v, block_size=3)
        >>> torch.allclose(out, F.scaled_dot_product_attention(q, k, v), atol=1e-6)
        True
    """
    _check(q, k, v, block_size)
    Lq, Lk = q.shape[2], k.shape[2]
    m4 = None if mask is None else _as_4d(mask.to(q.device), Lq, Lk)
    outs = []
    for s in range(0, Lq, block_size):
        e = min(s + block_size, Lq)
        qm = None if m4 is None else m4[:, :, s:e] if m4.shape[2] != 1 else m4
        last = deque(online_softmax_steps(q[:, :, s:e], k, v, qm, block_size, causal, scale, Lk - Lq + s), maxlen=1)
        outs.append(last[0].output.to(q.dtype) if last else q.new_zeros((*q.shape[:2], e - s, v.shape[-1])))
    if not outs:
        return q.new_zeros((*q.shape[:3], v.shape[-1]))
    return torch.cat(outs, dim=2)

"""Multi-head attention: fused SDPA by default, explicit weights when recorded, a key/value cache for
decoding, and local (sliding-window) attention whose memory grows linearly with sequence length."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .masking import build_mask, lengths_to_mask, window_mask
from .recording import Recordable
from .scoring import attend, check_qkv


class KVCache:
    """Projected keys/values of one attention module, kept across decoding steps.

    static=False (decoder self-attention): each call appends the new step's keys/values.
    static=True (cross-attention): the encoder's keys/values are projected once and reused.

    Shape: k, v: (B, H, L, Dh).
    """

    def __init__(self, static: bool = False):
        self.static = static
        self.k: Tensor | None = None
        self.v: Tensor | None = None

    def __len__(self) -> int:
        return 0 if self.k is None else self.k.shape[2]

    def update(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        if self.k is None or self.static:
            self.k, self.v = k, v
        else:
            self.k, self.v = torch.cat([self.k, k], dim=2), torch.cat([self.v, v], dim=2)
        return self.k, self.v

    def reorder(self, index: Tensor) -> "KVCache":
        """Keep the batch rows named by `index` (beam search); returns self."""
        if self.k is not None:
            self.k, self.v = self.k.index_select(0, index), self.v.index_select(0, index)
        return self


class MultiHeadAttention(Recordable, nn.Module):
    """Multi-head attention with the book's projections W_q, W_k, W_v, W_o (so weights copy to and from
    `torch.nn.MultiheadAttention`).

    Args:
        num_hiddens: model size D; each of the H heads works on D / H features.
        num_heads: H.
        dropout: dropout on the attention weights (training only).
        bias: whether the four projections have biases.
        window: if set, each query sees only keys within this distance (local attention).
        causal: default for `forward(causal=None)`: query i sees keys <= i.
        block_size: query block of the blockwise local-attention path.

    Shape:
        queries (B, Lq, D), keys (B, Lk, D), values (B, Lk, D) -> (B, Lq, D).
        valid_lens (B,) or (B, Lq); mask bool (Lq, Lk), (B, Lq, Lk) or (B, H, Lq, Lk), True = may attend.

    Examples:
        >>> import torch
        >>> attention = MultiHeadAttention(num_hiddens=100, num_heads=5).eval()   # the book's sizes
        >>> X, Y = torch.ones(2, 4, 100), torch.ones(2, 6, 100)
        >>> attention(X, Y, Y, valid_lens=torch.tensor([3, 2])).shape
        torch.Size([2, 4, 100])
    """

    def __init__(self, num_hiddens: int, num_heads: int, dropout: float = 0.0, bias: bool = False,
                 window: int | None = None, causal: bool = False, block_size: int = 256):
        super().__init__()
        if num_hiddens <= 0 or num_heads <= 0 or num_hiddens % num_heads:
            raise ValueError(
                f"num_hiddens must be a positive multiple of num_heads, got num_hiddens={num_hiddens}, "
                f"num_heads={num_heads}; pick num_heads dividing num_hiddens"
            )
        if window is not None and window < 0:
            raise ValueError(f"window must be a non-negative number of positions or None, got {window}")
        self.num_hiddens, self.num_heads = num_hiddens, num_heads
        self.window, self.causal, self.block_size = window, causal, block_size
        self.W_q = nn.Linear(num_hiddens, num_hiddens, bias=bias)
        self.W_k = nn.Linear(num_hiddens, num_hiddens, bias=bias)
        self.W_v = nn.Linear(num_hiddens, num_hiddens, bias=bias)
        self.W_o = nn.Linear(num_hiddens, num_hiddens, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def _split(self, x: Tensor) -> Tensor:
        B, L, D = x.shape
        return x.view(B, L, self.num_heads, D // self.num_heads).transpose(1, 2)  # (B, H, L, Dh)

    def forward(self, queries: Tensor, keys: Tensor, values: Tensor, valid_lens=None, mask=None,
                causal: bool | None = None, cache: KVCache | None = None) -> Tensor:
        check_qkv(queries, keys, values)
        for name, t in (("queries", queries), ("keys", keys), ("values", values)):
            if t.shape[-1] != self.num_hiddens:
                raise ValueError(f"{name} must have {self.num_hiddens} features, got shape {tuple(t.shape)}")
        causal = self.causal if causal is None else causal
        B, Lq, _ = queries.shape
        q = self._split(self.W_q(queries))
        if cache is not None and cache.static and cache.k is not None:
            k, v = cache.k, cache.v  # cross-attention: projected once per sentence
        else:
            k, v = self._split(self.W_k(keys)), self._split(self.W_v(values))
            if cache is not None:
                k, v = cache.update(k, v)
        Lk = k.shape[2]

        if self.recording:
            out = self._math(q, k, v, valid_lens, mask, causal)
        elif self._use_blockwise(Lq, Lk, valid_lens, mask):
            out = self._local_blockwise(q, k, v, valid_lens, causal)
        else:
            out = self._fused(q, k, v, valid_lens, mask, causal)
        out = out.transpose(1, 2).reshape(B, Lq, self.num_hiddens)  # (B, Lq, D)
        return self.W_o(out)

    # -- the three paths -------------------------------------------------------------------------
    def _math(self, q, k, v, valid_lens, mask, causal) -> Tensor:
        """Explicit scores -> masked softmax -> pooling; records (B, H, Lq, Lk) weights."""
        B, _, Lq, Dh = q.shape
        visible = build_mask(B, Lq, k.shape[2], valid_lens, mask, causal, self.window, q.device)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(Dh)
        out, weights = attend(scores, v, visible, self.dropout)
        self._record(weights)
        return out

    def _fused(self, q, k, v, valid_lens, mask, causal) -> Tensor:
        B, _, Lq, _ = q.shape
        Lk = k.shape[2]
        p = self.dropout.p if self.training else 0.0
        if causal and self.window is None and valid_lens is None and mask is None and Lq == Lk:
            # SDPA's own causal flag aligns top-left, which equals ours only when Lq == Lk.
            return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        visible = build_mask(B, Lq, Lk, valid_lens, mask, causal, self.window, q.device)
        if visible is None:
            return F.scaled_dot_product_attention(q, k, v, dropout_p=p)
        # Causal and window masks always let a query see itself, so only a zero length or a user mask can
        # empty a row; skipping the check otherwise keeps short sequences within a few % of raw SDPA.
        if mask is None and (valid_lens is None or not bool((torch.as_tensor(valid_lens) == 0).any())):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=visible, dropout_p=p)
        # A fully masked row would make SDPA return NaN: let it see everything, then zero its output.
        empty = ~visible.any(dim=-1, keepdim=True)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=visible | empty, dropout_p=p)
        return out.masked_fill(empty, 0.0)

    def _use_blockwise(self, Lq, Lk, valid_lens, mask) -> bool:
        # Only self-attention over a long sequence with (B,) lengths at most; anything fancier falls
        # back to the dense mask, which is exact too, just quadratic in memory.
        return (self.window is not None and mask is None and Lq == Lk and Lq > 2 * self.block_size
                and (valid_lens is None or torch.as_tensor(valid_lens).dim() == 1))

    def _local_blockwise(self, q, k, v, valid_lens, causal) -> Tensor:
        """Sliding-window attention one query block at a time.

        Each block of `block_size` queries attends to at most block_size + 2 * window keys, so peak memory
        is O(L * (block_size + window)) instead of O(L^2).
        """
        B, H, L, _ = q.shape
        w, bs = self.window, self.block_size
        p = self.dropout.p if self.training else 0.0
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
            empty = ~visible.any(dim=-1, keepdim=True)
            o = F.scaled_dot_product_attention(q[:, :, s:e], k[:, :, ks:ke], v[:, :, ks:ke],
                                               attn_mask=visible | empty, dropout_p=p)
            outs.append(o.masked_fill(empty, 0.0))
        return torch.cat(outs, dim=2)


__all__ = ["MultiHeadAttention", "KVCache", "window_mask"]

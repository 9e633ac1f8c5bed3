"""Scoring functions: how a query is compared with keys before the masked softmax.

Which to use:
- **Dot product** (scaled by 1/sqrt(d)): no parameters, one matmul, the fastest; needs queries and
  keys of the same size. The Transformer's choice.
- **Multiplicative** (Luong's "general", q^T W k): one matrix bridges different query/key sizes at
  almost the dot product's cost.
- **Additive** (Bahdanau, w_v^T tanh(W_q q + W_k k)): the most flexible (a small MLP per pair), but it
  materialises a (B, Lq, Lk, h) tensor, so it is slow and memory-hungry for long sequences.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .masking import _softmax_with_mask, build_mask
from .recording import Recordable


def check_qkv(queries: Tensor, keys: Tensor, values: Tensor, same_size: bool = False) -> None:
    """Raise a ValueError naming the shapes when queries/keys/values cannot be attended together."""
    for name, t in (("queries", queries), ("keys", keys), ("values", values)):
        if t.dim() != 3:
            raise ValueError(f"{name} must have shape (B, L, D), got {tuple(t.shape)}")
    if not (queries.shape[0] == keys.shape[0] == values.shape[0]):
        raise ValueError(
            f"batch sizes differ: queries {tuple(queries.shape)}, keys {tuple(keys.shape)}, "
            f"values {tuple(values.shape)}"
        )
    if keys.shape[1] != values.shape[1]:
        raise ValueError(
            f"keys and values must have the same length, got {tuple(keys.shape)} and {tuple(values.shape)}"
        )
    if same_size and queries.shape[-1] != keys.shape[-1]:
        raise ValueError(
            f"dot-product attention needs queries and keys of the same size, got {queries.shape[-1]} and "
            f"{keys.shape[-1]}; use MultiplicativeAttention or AdditiveAttention for different sizes"
        )


def attend(scores: Tensor, values: Tensor, visible: Tensor | None, dropout: nn.Module | None = None):
    """Pure attention pooling: (masked softmax of scores) @ values.

    Shape:
        scores: (B, [H,] Lq, Lk); values: (B, [H,] Lk, Dv); visible: bool broadcastable to 4-D scores.
        returns: (output (B, [H,] Lq, Dv), weights (B, [H,] Lq, Lk))
    """
    squeeze = scores.dim() == 3
    s4 = scores[:, None] if squeeze else scores
    weights = _softmax_with_mask(s4, visible)
    weights = weights[:, 0] if squeeze else weights
    dropped = dropout(weights) if dropout is not None else weights
    return torch.matmul(dropped, values), weights


class _ScoringAttention(Recordable, nn.Module):
    """Shared forward: score, mask, softmax, pool. Subclasses define `score(queries, keys)`."""

    same_size = False

    def __init__(self, dropout: float = 0.0):
        super().__init__()
        self.dropout = nn.Dropout(dropout)

    def score(self, queries: Tensor, keys: Tensor) -> Tensor:  # (B, Lq, Lk)
        raise NotImplementedError

    def forward(self, queries: Tensor, keys: Tensor, values: Tensor, valid_lens=None, mask=None) -> Tensor:
        """
        Shape:
            queries (B, Lq, Dq), keys (B, Lk, Dk), values (B, Lk, Dv),
            valid_lens (B,) or (B, Lq), mask bool broadcastable to (B, Lq, Lk) -> output (B, Lq, Dv)
        """
        check_qkv(queries, keys, values, self.same_size)
        B, Lq, Lk = queries.shape[0], queries.shape[1], keys.shape[1]
        visible = build_mask(B, Lq, Lk, valid_lens=valid_lens, mask=mask, device=queries.device)
        out, weights = attend(self.score(queries, keys), values, visible, self.dropout)
        self._record(weights)
        return out


class DotProductAttention(_ScoringAttention):
    """Scaled dot-product attention, softmax(Q K^T / sqrt(d)) V, with dropout on the weights."""

    same_size = True

    def score(self, queries: Tensor, keys: Tensor) -> Tensor:
        return torch.bmm(queries, keys.transpose(1, 2)) / math.sqrt(queries.shape[-1])


class AdditiveAttention(_ScoringAttention):
    """Bahdanau's additive attention: w_v^T tanh(W_q q + W_k k).

    Args:
        num_hiddens: size h of the hidden layer.
        query_size, key_size: input sizes; None infers them on first use (the book's LazyLinear).
    """

    def __init__(
        self, num_hiddens: int, dropout: float = 0.0, query_size: int | None = None, key_size: int | None = None
    ):
        super().__init__(dropout)
        if num_hiddens <= 0:
            raise ValueError(f"num_hiddens must be positive, got {num_hiddens}")
        self.W_q = _linear(query_size, num_hiddens)
        self.W_k = _linear(key_size, num_hiddens)
        self.w_v = nn.Linear(num_hiddens, 1, bias=False)

    def score(self, queries: Tensor, keys: Tensor) -> Tensor:
        # (B, Lq, 1, h) + (B, 1, Lk, h): every query-key pair gets its own hidden vector.
        features = torch.tanh(self.W_q(queries).unsqueeze(2) + self.W_k(keys).unsqueeze(1))
        return self.w_v(features).squeeze(-1)  # (B, Lq, Lk)


def _linear(in_features: int | None, out_features: int) -> nn.Module:
    """A bias-free projection; `in_features=None` infers the input size on first use (the book's LazyLinear)."""
    return nn.Linear(in_features, out_features, bias=False) if in_features else nn.LazyLinear(out_features, bias=False)


class MultiplicativeAttention(_ScoringAttention):
    """Luong's "general" score q^T W k, for queries and keys of different sizes."""

    def __init__(self, query_size: int, key_size: int, dropout: float = 0.0):
        super().__init__(dropout)
        if query_size <= 0 or key_size <= 0:
            raise ValueError(f"query_size and key_size must be positive, got {query_size} and {key_size}")
        self.W = nn.Linear(key_size, query_size, bias=False)

    def score(self, queries: Tensor, keys: Tensor) -> Tensor:
        return torch.bmm(queries, self.W(keys).transpose(1, 2))

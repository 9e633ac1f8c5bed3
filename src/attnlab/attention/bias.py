"""Relative position biases added to the attention scores: ALiBi (Press et al. 2022) and T5's bucketed
learned bias (Raffel et al. 2020).

A bias module is called with the absolute positions of the queries and keys and returns a float
(1, H, Lq, Lk) tensor that `MultiHeadAttention` adds to the scaled scores (on the fused path as SDPA's
float `attn_mask`, on the recorded path before the masked softmax). With a KV cache the queries are
the last Lq of Lk positions, so one step of decoding gets exactly the row a full forward would.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def alibi_slopes(num_heads: int) -> Tensor:
    """ALiBi's per-head slopes, (H,) float32: the geometric sequence 2^(-8/H), 2^(-16/H), ... for a
    power of two H; otherwise those of the nearest lower power of two n, then every other slope of 2n
    (the paper's rule for other head counts).

    Examples:
        >>> alibi_slopes(4)
        tensor([0.2500, 0.0625, 0.0156, 0.0039])
    """
    if not isinstance(num_heads, int) or num_heads <= 0:
        raise ValueError(f"alibi_slopes needs a positive number of heads, got {num_heads!r}")

    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-(2.0 ** -(math.log2(n) - 3)))
        return [start ** (i + 1) for i in range(n)]

    n = 2 ** math.floor(math.log2(num_heads))
    slopes = power_of_two(n)
    if n != num_heads:
        slopes += power_of_two(2 * n)[0::2][: num_heads - n]
    return torch.tensor(slopes, dtype=torch.float32)


def t5_relative_bucket(
    relative_position: Tensor, bidirectional: bool = True, num_buckets: int = 32, max_distance: int = 128
) -> Tensor:
    """T5's bucket of each relative position (key position - query position), an integer tensor of the
    same shape: exact buckets for small distances, logarithmic ones up to `max_distance`, the last bucket
    beyond. Bidirectional (the encoder) spends half the buckets on each direction; otherwise (the causal
    decoder) every key in the future falls in bucket 0, which the causal mask hides anyway."""
    if num_buckets < 2 or max_distance < 1:
        raise ValueError(f"T5 buckets need num_buckets >= 2 and max_distance >= 1, got {num_buckets}, {max_distance}")
    rel = relative_position.long()
    buckets = torch.zeros_like(rel)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (rel > 0).long() * num_buckets
        rel = rel.abs()
    else:
        rel = -torch.clamp(rel, max=0)
    max_exact = num_buckets // 2
    is_small = rel < max_exact
    # Distances in [max_exact, max_distance) share buckets logarithmically.
    large = (
        max_exact
        + (
            torch.log(rel.float().clamp_min(1) / max_exact)
            / math.log(max_distance / max_exact)
            * (num_buckets - max_exact)
        ).long()
    )
    large = torch.clamp(large, max=num_buckets - 1)
    return buckets + torch.where(is_small, rel, large)


class AlibiBias(nn.Module):
    """-slope_h * |i - j|: a fixed linear penalty on distance, steeper for lower heads. Symmetric in the
    encoder; in the causal decoder only j <= i is visible, where it is the paper's -slope_h * (i - j).

    Shape: (q_pos (Lq,), k_pos (Lk,)) -> (1, H, Lq, Lk) float32.
    """

    slopes: Tensor

    def __init__(self, num_heads: int):
        super().__init__()
        self.num_heads = num_heads
        self.register_buffer("slopes", alibi_slopes(num_heads), persistent=False)

    def forward(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        dist = (q_pos[:, None] - k_pos[None, :]).abs().float()  # (Lq, Lk)
        return -self.slopes.to(dist.device)[None, :, None, None] * dist[None, None]


class T5RelativeBias(nn.Module):
    """A learned scalar per head and relative-position bucket (`t5_relative_bucket`), one table per
    stack shared by all its layers, as in T5.

    Shape: (q_pos (Lq,), k_pos (Lk,)) -> (1, H, Lq, Lk) in the table's dtype.
    """

    def __init__(self, num_heads: int, bidirectional: bool, num_buckets: int = 32, max_distance: int = 128):
        super().__init__()
        self.num_heads, self.bidirectional = num_heads, bidirectional
        self.num_buckets, self.max_distance = num_buckets, max_distance
        self.embedding = nn.Embedding(num_buckets, num_heads)
        nn.init.zeros_(self.embedding.weight)  # start position-blind; training learns the preferences

    def forward(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        rel = k_pos[None, :] - q_pos[:, None]  # (Lq, Lk)
        buckets = t5_relative_bucket(rel, self.bidirectional, self.num_buckets, self.max_distance)
        return self.embedding(buckets).permute(2, 0, 1)[None]  # (Lq, Lk, H) -> (1, H, Lq, Lk)

    def extra_repr(self) -> str:
        return f"heads={self.num_heads}, bidirectional={self.bidirectional}, buckets={self.num_buckets}"

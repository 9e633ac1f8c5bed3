"""ALiBi (Press et al. 2022): a fixed linear penalty on distance added to every self-attention's scores,
steeper for lower heads; no parameters, any length, no options.

The bias module is called with the absolute positions of the queries and keys and returns a float
(1, H, Lq, Lk) tensor that `MultiHeadAttention` adds to the scaled scores. With a KV cache the queries are
the last Lq of Lk positions, so one step of decoding gets exactly the row a full forward would.
CTranslate2 cannot hold it: its encoder spec has no ALiBi (only its decoder spec does, for decoder-only
models) and attnlab's biases both stacks. Its view: each head's bias for the lengths asked.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from attnlab.attention.positions.base import SCORES, PositionScheme, StackPositions, StackShape, stack_bias_maps


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


class Alibi(PositionScheme):
    """-slope_h * |i - j| added to every self-attention's scores."""

    name = "alibi"
    enters = SCORES
    ct2_refusal = "CTranslate2's encoder spec lacks (its ALiBi is for decoders only, attnlab's biases both stacks)"
    view = "bias"

    def build(self, options, shape: StackShape) -> StackPositions:
        return StackPositions(bias=AlibiBias(shape.num_heads))

    def maps(self, model, source_len, target_len) -> dict:
        return {**stack_bias_maps(model, source_len, target_len), "slopes": model.encoder.relative_bias.slopes.tolist()}

    def numbers(self, model, source_len, target_len) -> int:
        return model.config.num_heads * (source_len**2 + target_len**2)

    def caption(self, maps, head) -> str:
        return f"alibi · head {head + 1} · slope {maps['slopes'][head]:.4g}: bias = -slope * |i - j|"


ALIBI = Alibi()

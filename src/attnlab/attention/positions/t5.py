"""T5's relative position bias (Raffel et al. 2020): a learned scalar per head and relative-position bucket
added to every self-attention's scores, one table per stack shared by its layers (bidirectional buckets in
the encoder, causal ones in the decoder).

Config block: `num_buckets` and `max_distance` (distances from there on share the last bucket).
CTranslate2: `relative_attention_bias` (buckets, H) in every self-attention layer (the same tensor for all
layers of a stack: the saved model holds it once) and `relative_attention_max_distance`. Its view: each head's
bias for the lengths asked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from attnlab.attention.positions.base import SCORES, PositionScheme, StackPositions, StackShape, stack_bias_maps


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


@dataclass(frozen=True)
class T5Options:
    """The t5 scheme's config block."""

    num_buckets: int = 32  # relative-position buckets per stack (the encoder halves them per direction)
    max_distance: int = 128  # distances from here on share the last bucket


class T5(PositionScheme):
    """A learned bias per head and bucket added to every self-attention's scores."""

    name = "t5"
    enters = SCORES
    Options = T5Options
    ct2 = "relative_attention_bias per self-attention layer"
    view = "bias"

    def check(self, options, num_hiddens, num_heads) -> None:
        if options.num_buckets < 4 or options.max_distance <= options.num_buckets // 2:
            raise ValueError(
                f"TransformerConfig: t5 needs num_buckets >= 4 and max_distance above num_buckets / 2 (the "
                f"decoder's exact buckets), got {options.num_buckets} and {options.max_distance}"
            )

    def build(self, options, shape: StackShape) -> StackPositions:
        bias = T5RelativeBias(shape.num_heads, not shape.causal, options.num_buckets, options.max_distance)
        return StackPositions(bias=bias)

    def ct2_options(self, options, head_dim) -> dict:
        return {"relative_attention_bias": True}

    def ct2_write(self, spec, stack) -> None:
        bias = stack.relative_bias
        table = bias.embedding.weight.detach().float().clone()  # (buckets, H), as CTranslate2 reads it
        for layer in spec.layer:  # one tensor for all layers: the saved model holds it once
            layer.self_attention.relative_attention_bias = table
            layer.self_attention.relative_attention_max_distance = np.dtype("int32").type(bias.max_distance)

    def maps(self, model, source_len, target_len) -> dict:
        enc = model.encoder.relative_bias
        return {
            **stack_bias_maps(model, source_len, target_len),
            "num_buckets": enc.num_buckets,
            "max_distance": enc.max_distance,
        }

    def numbers(self, model, source_len, target_len) -> int:
        return model.config.num_heads * (source_len**2 + target_len**2)

    def caption(self, maps, head) -> str:
        return f"t5 · head {head + 1} · learned bucket bias"


T5_BIAS = T5()

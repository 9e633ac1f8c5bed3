"""Rotary position embedding (RoPE, Su et al. 2021): queries and keys are rotated by an angle that grows
with their position, so the score q_i . k_j depends on the positions only through i - j.

Convention: **half-split** (GPT-NeoX, Llama in `transformers`): feature f of the first half of the
rotated features pairs with feature f + rot/2, and `rotate_half(x) = cat(-x2, x1)`. The original
RoFormer / GPT-J / Meta Llama checkpoints pair neighbours (2f, 2f + 1) instead ("interleaved"); the two
compute the same scores once the rows of W_q and W_k are permuted by `half_split_permutation`
(`interleaved_rope(x)[perm] == rope(x[perm])`).

Config block: `base` (theta_f = base^(-2f / rot_dim)) and `fraction` (the share of each head's features that
rotate, GPT-NeoX's partial rotary). Self-attention only: cross-attention compares target and source
positions, which RoPE leaves to the content. CTranslate2: `rotary_dim`, `rotary_base` and
`rotary_interleave=False` (its non-interleaved layout is GPT-NeoX's half-split one, so no row of W_q/W_k is
permuted). Its view: the angle pos * theta_f of every feature pair at every position, alike for all heads.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from attnlab.attention.positions.base import DECIMALS, QUERIES_KEYS, PositionScheme, StackPositions, StackShape


def rotate_half(x: Tensor) -> Tensor:
    """(..., 2r) -> (..., 2r): (x1, x2) -> (-x2, x1), the half-split rotation by 90 degrees."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def half_split_permutation(rot_dim: int) -> Tensor:
    """Index (rot_dim,) taking interleaved pairs (2f, 2f + 1) to half-split pairs (f, f + rot_dim/2):
    even features first, then odd ones. Permute the rows of each head's W_q/W_k block with it to run
    interleaved-RoPE weights under attnlab's half-split convention."""
    return torch.cat([torch.arange(0, rot_dim, 2), torch.arange(1, rot_dim, 2)])


def rotary_dim(head_dim: int, fraction: float) -> int:
    """Features of a head that RoPE rotates: the `fraction` share of head_dim, rounded down to pairs."""
    return int(head_dim * fraction) // 2 * 2


class RotaryEmbedding(nn.Module):
    """Rotates the first `rot_dim` features of each head of q and k by position-dependent angles.

    Args:
        head_dim: Dh, features per head.
        base: theta_f = base^(-2f / rot_dim) (10000 in the paper and Llama).
        fraction: share of Dh that rotates (GPT-NeoX's partial rotary); rot_dim = the even number
            floor(fraction * Dh) rounds down to; the other features pass unchanged.

    Shape: rope(q, k, offset) with q (B, Hq, L, Dh), k (B, Hk, L, Dh) -> the rotated pair, same shapes;
    position of row l is offset + l (the number of cached steps during decoding). Positions are
    computed on the fly, so any length works. The angles are float32 whatever the input dtype.

    Examples:
        >>> import torch
        >>> rope = RotaryEmbedding(8)
        >>> q, k = torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)
        >>> q2, k2 = rope(q, k)
        >>> torch.allclose(q2.norm(dim=-1), q.norm(dim=-1))   # a rotation keeps lengths
        True
    """

    inv_freq: Tensor

    def __init__(self, head_dim: int, base: float = 10000.0, fraction: float = 1.0):
        super().__init__()
        if head_dim <= 0 or not 0.0 < fraction <= 1.0 or not base > 1.0:
            raise ValueError(
                f"RotaryEmbedding needs head_dim > 0, 0 < fraction <= 1 and base > 1, got head_dim={head_dim}, "
                f"fraction={fraction}, base={base}"
            )
        rot = rotary_dim(head_dim, fraction)
        if rot == 0:
            raise ValueError(
                f"rotary fraction {fraction} of head_dim {head_dim} rotates no feature pair; raise the fraction"
            )
        self.head_dim, self.rot_dim, self.base = head_dim, rot, base
        inv_freq = 1.0 / (base ** (torch.arange(0, rot, 2, dtype=torch.float32) / rot))
        self.register_buffer("inv_freq", inv_freq, persistent=False)  # a function of the config

    def cos_sin(self, length: int, offset: int = 0, device=None) -> tuple[Tensor, Tensor]:
        """cos and sin of the angles of positions offset .. offset + L - 1, each (L, rot_dim), float32."""
        pos = torch.arange(offset, offset + length, device=device or self.inv_freq.device, dtype=torch.float32)
        freqs = pos[:, None] * self.inv_freq.to(pos.device)[None, :]  # (L, rot/2)
        emb = torch.cat((freqs, freqs), dim=-1)  # (L, rot): half-split pairs share an angle
        return emb.cos(), emb.sin()

    def rotate(self, x: Tensor, offset: int = 0) -> Tensor:
        """(B, H, L, Dh) -> (B, H, L, Dh), row l rotated for position offset + l."""
        if x.dim() != 4 or x.shape[-1] != self.head_dim:
            raise ValueError(f"RotaryEmbedding expects (B, H, L, {self.head_dim}), got {tuple(x.shape)}")
        cos, sin = self.cos_sin(x.shape[2], offset, x.device)
        r = self.rot_dim
        xr = x[..., :r].float()
        out = (xr * cos + rotate_half(xr) * sin).to(x.dtype)
        return out if r == self.head_dim else torch.cat((out, x[..., r:]), dim=-1)

    def forward(self, q: Tensor, k: Tensor, offset: int = 0) -> tuple[Tensor, Tensor]:
        return self.rotate(q, offset), self.rotate(k, offset)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, rot_dim={self.rot_dim}, base={self.base}"


@dataclass(frozen=True)
class RopeOptions:
    """The rope scheme's config block."""

    base: float = 10000.0  # angle of feature pair f is pos * base^(-2f / rotated features)
    fraction: float = 1.0  # share of each head's features that rotate (the rest pass as they are)


class Rope(PositionScheme):
    """Rotary queries and keys in every self-attention; no parameters, any length."""

    name = "rope"
    enters = QUERIES_KEYS
    Options = RopeOptions
    ct2 = "rotary_dim, rotary_base, rotary_interleave=False"
    view = "angles"

    def check(self, options, num_hiddens, num_heads) -> None:
        Dh = num_hiddens // num_heads
        if not 0.0 < options.fraction <= 1.0 or int(Dh * options.fraction) < 2 or not options.base > 1.0:
            raise ValueError(
                f"TransformerConfig: rope needs base > 1 and fraction in (0, 1] rotating at least one pair of the "
                f"{Dh} features per head, got base={options.base!r}, fraction={options.fraction!r}"
            )

    def build(self, options, shape: StackShape) -> StackPositions:
        return StackPositions(
            rotary=RotaryEmbedding(shape.num_hiddens // shape.num_heads, options.base, options.fraction)
        )

    def ct2_options(self, options, head_dim) -> dict:
        return {
            "rotary_dim": rotary_dim(head_dim, options.fraction),
            "rotary_interleave": False,
            "rotary_base": options.base,
        }

    def maps(self, model, source_len, target_len) -> dict:
        rope = model.encoder.rotary
        pos = torch.arange(max(source_len, target_len), dtype=torch.float32)
        angles = (pos[:, None] * rope.inv_freq[None, :]).double()  # (L, rot/2): the angles of cos_sin
        return {
            "rot_dim": rope.rot_dim,
            "base": rope.base,
            "inv_freq": rope.inv_freq.tolist(),
            "angles": torch.round(angles, decimals=DECIMALS).tolist(),
        }

    def numbers(self, model, source_len, target_len) -> int:
        return max(source_len, target_len) * model.encoder.rotary.rot_dim // 2

    def caption(self, maps, head) -> str:
        return f"rope · rot_dim {maps['rot_dim']}, base {maps['base']:g} · every head alike"


ROPE = Rope()

"""Attention for a decoding step: a few queries on the CPU without SDPA's kernel, and recorded weights of
beam-folded queries unfolded per hypothesis."""

from __future__ import annotations

import math

import torch
from torch import Tensor


def decoding_on_cpu(q: Tensor) -> bool:
    # A decoding step's few bf16/fp16 queries on the CPU: SDPA's flash kernel costs ~3x three plain ops
    # there (B 256, Lk 10-20), and bf16 greedy decodes ~1.3x faster without it; fp32 gained nothing, so it
    # keeps SDPA (BENCHMARKS.md, "Precision").
    return (
        q.device.type == "cpu"
        and q.dtype in (torch.bfloat16, torch.float16)
        and q.shape[2] <= 8
        and not q.requires_grad
    )


def few_queries_attention(q: Tensor, k: Tensor, v: Tensor, visible: Tensor | None = None) -> Tensor:
    """softmax(q k^T / sqrt(Dh)) v without SDPA, for rows that each see at least one key.
    Shape: q (B, H, Lq, Dh), k, v (B, H, Lk, Dh), visible broadcastable to (B, H, Lq, Lk) -> (B, H, Lq, Dh)."""
    scores = torch.matmul(q, k.transpose(-2, -1)).mul_(1.0 / math.sqrt(q.shape[-1]))  # (B, H, Lq, Lk)
    if visible is not None:
        scores = scores.masked_fill_(~visible, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v)


def unfold_beams(weights: Tensor, beam: int) -> Tensor:
    """Recorded weights of folded queries (B, H, beam*Lq, Lk) -> (B*beam, H, Lq, Lk), one row per hypothesis."""
    if beam == 1:
        return weights
    B, H, BLq, Lk = weights.shape
    return weights.view(B, H, beam, BLq // beam, Lk).transpose(1, 2).reshape(B * beam, H, BLq // beam, Lk)


__all__ = ["decoding_on_cpu", "few_queries_attention", "unfold_beams"]

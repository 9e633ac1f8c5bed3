"""Sampling's step from the top k (`csrc/sample.c`, and its PyTorch fallback): each row's k likeliest tokens,
softmax over them at a temperature, top-p, and one draw at a given uniform, in one call instead of a top-k, a
softmax, a multinomial and their gathers.

    tokens, lprobs, fallback = sample_top_k(logits (n, V), k, uniforms (n,), temperature, top_p, scores)
    native_sample_top_k(...)  -> the same by the C pass, or None where it does not run

A row whose k-th token ties with the next (`TopK` keeps every tied token) or that has no finite logit is
flagged in `fallback`: the caller draws it over the whole vocabulary.
"""

from __future__ import annotations

import ctypes

import torch
from torch import Tensor

from .beam_topk import beam_candidates, top_logits
from .loader import I64, PTR, function, takes

__all__ = ["SIGNATURES", "native_sample_top_k", "sample_top_k"]

SIGNATURES = {"attnlab_sample_topk": [PTR, *[I64] * 4, ctypes.c_float, ctypes.c_float, *[PTR] * 4]}


def sample_top_k(
    logits: Tensor, k: int, uniforms: Tensor, temperature: float = 1.0, top_p: float = 1.0, scores: bool = False
) -> tuple[Tensor, Tensor | None, Tensor]:
    """One draw per row from softmax(top-k logits / temperature) after top-p, at `uniforms` (the inverse of the
    distribution: the first of the kept tokens, likeliest first, whose running probability exceeds u).

    Shape: logits (n, V), uniforms (n,) in [0, 1) -> tokens (n,) int64, their log-probabilities (n,) (None
    without `scores`), fallback (n,) bool (rows to draw over V: a tie with the k-th, or no finite logit).

    Examples:
        >>> logits = torch.tensor([[0.0, 3.0, 1.0, -2.0]]).log_softmax(-1)
        >>> [sample_top_k(logits, 2, torch.tensor([u]))[0].item() for u in (0.1, 0.9)]   # P = 0.88, 0.12
        [1, 2]
    """
    n, V = logits.shape
    if not 1 <= k < V or k + 1 > 64:
        raise ValueError(f"k must lie in [1, min(V - 1, 63)] = [1, {min(V - 1, 63)}], got {k}")
    if (found := native_sample_top_k(logits, k, uniforms, temperature, top_p, scores)) is not None:
        return found
    if scores:
        _, cand, _, values = beam_candidates(logits.float(), torch.zeros((n, 1)), k + 1)
    else:
        values, cand = top_logits(logits.float(), k + 1)
    fallback = (values[:, k] == values[:, k - 1]) | ~(values[:, 0] > float("-inf"))
    x = values[:, :k] / temperature
    e = (x - x[:, :1]).exp()
    if top_p < 1.0:  # TopP over the k: drop the least likely while their mass stays <= 1 - p
        tail = (e / e.sum(dim=1, keepdim=True)).flip(1).cumsum(dim=1).flip(1)
        drop = tail <= 1 - top_p
        drop[:, 0] = False
        e = e.masked_fill(drop, 0.0)
    run = e.cumsum(dim=1)
    pick = (run <= uniforms[:, None] * run[:, -1:]).sum(dim=1, keepdim=True).clamp_(max=k - 1)
    lp = values.gather(1, pick).squeeze(1) if scores else None
    return cand.gather(1, pick).squeeze(1), lp, fallback


def native_sample_top_k(
    logits: Tensor, k: int, uniforms: Tensor, temperature: float, top_p: float, scores: bool
) -> tuple[Tensor, Tensor | None, Tensor] | None:
    """`sample_top_k` in one C call, or None where it does not run (not fp32 rows and uniforms on the CPU,
    autograd, no kernel here)."""
    if logits.dim() != 2 or not takes(torch.float32, logits, uniforms) or not uniforms.is_contiguous():
        return None
    fn = function("sample", "attnlab_sample_topk", SIGNATURES["attnlab_sample_topk"], ctypes.c_int)
    if fn is None:
        return None
    n, V = logits.shape
    tokens, fallback = torch.empty(n, dtype=torch.int64), torch.empty(n, dtype=torch.int64)
    lp = torch.empty(n) if scores else None
    status = fn(
        logits.data_ptr(), logits.stride(0), n, V, k, temperature, top_p, uniforms.data_ptr(), tokens.data_ptr(),
        lp.data_ptr() if lp is not None else None, fallback.data_ptr(),
    )  # fmt: skip
    return (tokens, lp, fallback.bool()) if status == 0 else None

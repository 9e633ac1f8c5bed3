"""A decoding step's attention, a few queries over cached keys and values (`csrc/few_queries.c`), and its
PyTorch fallbacks.

    few_queries(q, k, v, lens, groups)        -> (B, H, Lq, Dh): the C kernel where it runs, else PyTorch's operators
    native_few_queries(q, k, v, lens, groups) -> the same by the C kernel, or None where it does not run
    few_queries_attention(q, k, v, visible)    -> the fallback: three PyTorch operators (no SDPA)
    decoding_on_cpu(q)                         -> whether those three operators beat SDPA for these queries

The kernel computes each query alone over keys that stay where they lie (strided views of the KV cache),
which beats SDPA's blocked GEMMs at a decoding step's shapes; beyond 8 queries it runs only while queries x
keys stay small (a short sentence's self-attention), where it was measured faster
(benchmarks/kernels/native_kernels.py).
"""

from __future__ import annotations

import ctypes
import math

import torch
from torch import Tensor

from .loader import I64, PTR, function, takes

__all__ = [
    "SIGNATURES",
    "decoding_on_cpu",
    "few_queries",
    "few_queries_attention",
    "kernel_lengths",
    "native_few_queries",
    "whole_lengths",
]

# Beyond 8 queries, the most queries x keys the kernel takes (fp32; bf16's widening costs more per key).
_MAX_QUERIES_KEYS = {torch.float32: 64 * 64, torch.bfloat16: 40 * 40}
SYMBOLS = {torch.float32: "attnlab_few_queries_f32", torch.bfloat16: "attnlab_few_queries_bf16kv"}  # by k/v dtype
SIGNATURES = {s: [PTR, I64, I64, I64] * 3 + [PTR, PTR] + [I64] * 6 + [ctypes.c_float] for s in SYMBOLS.values()}


def decoding_on_cpu(q: Tensor) -> bool:
    """Whether queries (B, H, Lq, Dh) are a decoding step's few bf16/fp16 queries on the CPU, where the C kernel
    does not run and SDPA's flash kernel costs more than `few_queries_attention`'s three plain operators
    (BENCHMARKS.md, "Precision")."""
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


def few_queries(q: Tensor, k: Tensor, v: Tensor, lens: Tensor | None = None, groups: int = 1) -> Tensor:
    """softmax(q k^T / sqrt(Dh)) v: `native_few_queries` where it runs, else `few_queries_attention` over the
    key/value heads repeated for their `groups` query heads and keys [0, lens[b]) of row b (a row that sees no
    key gives zeros). Shape: q (B, H, Lq, Dh), k, v (B, H // groups, Lk, Dh), lens (B,) -> (B, H, Lq, Dh).

    Examples:
        >>> q, k = torch.randn(2, 4, 1, 8), torch.randn(2, 2, 5, 8)
        >>> out = few_queries(q, k, k, torch.tensor([5, 0]), groups=2)
        >>> out.shape, bool(out[1].eq(0).all())
        (torch.Size([2, 4, 1, 8]), True)
    """
    out = native_few_queries(q, k, v, lens, groups)
    if out is not None:
        return out
    if groups > 1:
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    if lens is None:
        return few_queries_attention(q, k, v)
    visible = torch.arange(k.shape[2], device=k.device) < lens.to(k.device).view(-1, 1, 1, 1)  # (B, 1, 1, Lk)
    return few_queries_attention(q, k, v, visible).masked_fill(~visible.any(-1, keepdim=True), 0.0)


def native_few_queries(q: Tensor, k: Tensor, v: Tensor, lens: Tensor | None = None, groups: int = 1) -> Tensor | None:
    """softmax(q k^T / sqrt(Dh)) v by attnlab's C kernel (fp32 arithmetic on fp32 or bf16 inputs, the output
    in q's dtype), or None where it does not apply: not fp32 or bf16 on the CPU, autograd on, more than 8
    queries unless queries x keys <= 4096 (bf16: 1600), a head dimension that is not contiguous, shapes that
    do not match (the PyTorch path then says what is wrong), or no kernel on this machine
    (`attnlab.kernels.loader.status`).
    Query i of row b sees keys [0, lens[b]) (all Lk when lens is None; none gives zeros; a length outside
    [0, Lk] gives None); query head h reads KV head h // groups.

    Shape: q (B, H, Lq, Dh), k, v (B, H / groups, Lk, Dh) (any strides but the last), lens (B,) ->
    (B, H, Lq, Dh), a transposed view of a contiguous (B, Lq, H, Dh): the output projection's input.

    Examples:
        >>> q, k = torch.randn(2, 4, 1, 8), torch.randn(2, 4, 5, 8)
        >>> out = native_few_queries(q, k, k)
        >>> out is None or torch.allclose(out, few_queries_attention(q, k, k), atol=1e-6)
        True
    """
    B, H, Lq, Dh = q.shape
    Lk = k.shape[2]
    if (
        q.dtype not in _MAX_QUERIES_KEYS
        or (Lq > 8 and Lq * Lk > _MAX_QUERIES_KEYS[q.dtype])
        or not takes(q.dtype, q, k, v)
        or k.shape[0] != B
        or k.shape[3] != Dh
        or v.shape != k.shape
        or k.shape[1] * groups != H
        or not (lens is None or whole_lengths(lens, B))
    ):
        return None
    kernel = function("few_queries", SYMBOLS[k.dtype], SIGNATURES[SYMBOLS[k.dtype]], ctypes.c_int)
    if kernel is None:
        return None
    lens = kernel_lengths(lens)
    dtype = q.dtype
    q = q.float()  # bf16: the (B, H, Lq, Dh) queries widened (keys and values are read as they are)
    out = torch.empty((B, Lq, H, Dh), dtype=torch.float32)
    status = kernel(
        q.data_ptr(), *q.stride()[:3], k.data_ptr(), *k.stride()[:3], v.data_ptr(), *v.stride()[:3],
        None if lens is None else lens.data_ptr(), out.data_ptr(),
        B, H, groups, Lq, Lk, Dh, 1.0 / math.sqrt(Dh),
    )  # fmt: skip
    if status == 2:  # a length outside [0, Lk]: PyTorch's path says so
        return None
    if status:
        raise MemoryError("attnlab's few-queries attention kernel ran out of memory")
    return out.to(dtype).transpose(1, 2)


def kernel_lengths(lens: Tensor | None) -> Tensor | None:
    """(B,) integer lengths as the C kernels read them: int64, contiguous, on the CPU (None stays None)."""
    if lens is None or (lens.is_cpu and lens.dtype is torch.int64 and lens.is_contiguous()):
        return lens
    return lens.to(device="cpu", dtype=torch.int64).contiguous()


def whole_lengths(lens, B: int) -> bool:
    """Whether `lens` are (B,) integer lengths, as the kernels read them (floats and booleans go to PyTorch's
    path, which rounds or refuses them as it does)."""
    return (
        isinstance(lens, Tensor)
        and tuple(lens.shape) == (B,)
        and not lens.is_floating_point()
        and lens.dtype is not torch.bool
    )

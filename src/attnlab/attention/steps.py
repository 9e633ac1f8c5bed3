"""Attention for a decoding step: a few queries on the CPU without SDPA's kernel (attnlab's C kernel for
fp32 and bf16; three PyTorch ops for bf16/fp16 where it does not run), and recorded weights of beam-folded
queries unfolded per hypothesis."""

from __future__ import annotations

import ctypes
import math

import torch
from torch import Tensor

from attnlab.utils import native

# Beyond 8 queries, the most queries x keys the kernel takes: it computes each query alone, which beats
# SDPA's blocked GEMMs up to about 80 x 80 in fp32 (2.8x at 10 x 10, 1.2x at 80 x 80, 0.88x at 160 x 160)
# and 40 x 40 in bf16 (3.8x at 10 x 10, 1.3x at 40 x 40, 0.91x at 64 x 64; benchmarks/native_kernels.py).
_MAX_QUERIES_KEYS = {torch.float32: 64 * 64, torch.bfloat16: 40 * 40}


def decoding_on_cpu(q: Tensor) -> bool:
    # A decoding step's few bf16/fp16 queries on the CPU where the C kernel (`native_few_queries`) does not
    # run: SDPA's flash kernel costs ~3x three plain ops there (B 256, Lk 10-20; BENCHMARKS.md, "Precision").
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


def native_few_queries(q: Tensor, k: Tensor, v: Tensor, lens: Tensor | None = None, groups: int = 1) -> Tensor | None:
    """softmax(q k^T / sqrt(Dh)) v by attnlab's C kernel (`csrc/few_queries.c`: fp32 arithmetic on fp32 or
    bf16 inputs, the output in q's dtype), or None where it does not apply: not fp32 or bf16 on the CPU,
    autograd on, more than 8 queries unless queries x keys <= 4096 (bf16: 1600; a short sentence's
    self-attention), a head dimension that is not contiguous, shapes that do not match (the PyTorch path
    then says what is wrong), or no kernel on this machine (`attnlab.utils.native.status`).
    Query i of row b sees keys [0, lens[b]) (all Lk when lens is None; none gives zeros; a length outside
    [0, Lk] gives None); query head h reads KV head h // groups.

    Shape: q (B, H, Lq, Dh), k, v (B, H / groups, Lk, Dh) (any strides but the last), lens (B,) ->
    (B, H, Lq, Dh), a transposed view of a contiguous (B, Lq, H, Dh): the output projection's input.

    Examples:
        >>> q, k = torch.randn(2, 4, 1, 8), torch.randn(2, 4, 5, 8)
        >>> out = native_few_queries(q, k, k)
        >>> out is None or torch.allclose(out, torch.softmax(q @ k.mT / 8**0.5, -1) @ k, atol=1e-6)
        True
    """
    B, H, Lq, Dh = q.shape
    Lk = k.shape[2]
    if (
        q.dtype not in _MAX_QUERIES_KEYS
        or (Lq > 8 and Lq * Lk > _MAX_QUERIES_KEYS[q.dtype])
        or not native.takes(q.dtype, q, k, v)
        or k.shape[0] != B
        or k.shape[3] != Dh
        or v.shape != k.shape
        or k.shape[1] * groups != H
        or not (lens is None or _whole_lengths(lens, B))
    ):
        return None
    kernel = native.function("few_queries", _SYMBOLS[k.dtype], _FEW_QUERIES_ARGS, ctypes.c_int)
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


_PTR, _I64 = native.PTR, native.I64
_FEW_QUERIES_ARGS = [_PTR, _I64, _I64, _I64] * 3 + [_PTR, _PTR] + [_I64] * 6 + [ctypes.c_float]
_SYMBOLS = {torch.float32: "attnlab_few_queries_f32", torch.bfloat16: "attnlab_few_queries_bf16kv"}  # by k/v dtype


def kernel_lengths(lens: Tensor | None) -> Tensor | None:
    """(B,) integer lengths as the C kernels read them: int64, contiguous, on the CPU (None stays None)."""
    if lens is None or (lens.is_cpu and lens.dtype is torch.int64 and lens.is_contiguous()):
        return lens
    return lens.to(device="cpu", dtype=torch.int64).contiguous()


def _whole_lengths(lens, B: int) -> bool:
    """(B,) integer lengths, as the kernel reads them (floats and booleans go to PyTorch's path, which
    rounds or refuses them as it does)."""
    return (
        isinstance(lens, Tensor)
        and tuple(lens.shape) == (B,)
        and not lens.is_floating_point()
        and lens.dtype is not torch.bool
    )


def fold_beams(queries: Tensor, keys: Tensor, valid_lens, mask, causal: bool, window, beam: int) -> Tensor:
    """Beam-folded queries (`MultiHeadAttention.forward(beam=...)`): (B*beam, Lq, D) -> (B, beam*Lq, D),
    after checking that folding changes no output (no mask, causal or window; valid_lens (B,) at most)."""
    R, Lq, D = queries.shape
    if keys.shape[0] * beam != R:
        raise ValueError(
            f"with beam={beam}, queries must have {beam} rows per key row: got queries {tuple(queries.shape)} "
            f"and keys {tuple(keys.shape)}"
        )
    if mask is not None or causal or window is not None:
        raise ValueError("beam > 1 folds beams into the query axis: it allows no mask, causal or window")
    if valid_lens is not None and torch.as_tensor(valid_lens).dim() != 1:
        raise ValueError(f"beam > 1 needs valid_lens of shape (B,), got {tuple(torch.as_tensor(valid_lens).shape)}")
    return queries.reshape(R // beam, beam * Lq, D)


def unfold_beams(weights: Tensor, beam: int) -> Tensor:
    """Recorded weights of folded queries (B, H, beam*Lq, Lk) -> (B*beam, H, Lq, Lk), one row per hypothesis."""
    if beam == 1:
        return weights
    B, H, BLq, Lk = weights.shape
    return weights.view(B, H, beam, BLq // beam, Lk).transpose(1, 2).reshape(B * beam, H, BLq // beam, Lk)


__all__ = [
    "decoding_on_cpu",
    "few_queries_attention",
    "fold_beams",
    "kernel_lengths",
    "native_few_queries",
    "unfold_beams",
]

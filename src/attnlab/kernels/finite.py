"""Whether tensors hold only finite values (`csrc/finite.c`), attention's guard before its fast path, and the
PyTorch fallback.

    all_finite(k, v)      -> False when some element is NaN or inf
    native_all_finite(t)  -> the C pass's answer for one tensor, or None where it does not run
"""

from __future__ import annotations

import ctypes
import math

import torch
from torch import Tensor

from .loader import I64, PTR, function, takes

__all__ = ["SIGNATURES", "all_finite", "native_all_finite"]

SYMBOLS = {torch.float32: "attnlab_all_finite_f32", torch.bfloat16: "attnlab_all_finite_bf16"}  # by dtype
SIGNATURES = {symbol: [PTR] + [I64] * 7 for symbol in SYMBOLS.values()}


def all_finite(*tensors: Tensor) -> bool:
    """Whether no element of these tensors is NaN or inf: attention's exact non-finite path runs only when
    needed. The C pass reads fp32 and bf16 CPU tensors as they are; others take one sum each
    (isfinite().all() costs four ops), where a finite tensor whose sum overflows also takes the exact path,
    which gives the same result for finite inputs, only slower.

    Examples:
        >>> all_finite(torch.ones(2, 3)), all_finite(torch.tensor([1.0, float("inf")]))
        (True, False)
    """
    for t in tensors:
        if not t.numel():
            continue
        answer = native_all_finite(t)
        if answer is not None:
            if not answer:
                return False
            continue
        if not math.isfinite(t.detach().sum(dtype=torch.float64 if t.dtype == torch.float64 else torch.float32)):
            return False
    return True


def native_all_finite(t: Tensor) -> bool | None:
    """`all_finite` of one tensor of at most 4 dimensions by the C pass, or None where it does not run (another
    dtype, more dimensions, a last dimension that is not contiguous, autograd, no kernel here)."""
    symbol = SYMBOLS.get(t.dtype)
    if symbol is None or not 0 < t.dim() <= 4 or not takes(t.dtype, t):
        return None
    fn = function("finite", symbol, SIGNATURES[symbol], ctypes.c_int)
    if fn is None:
        return None
    pad = 4 - t.dim()
    shape, strides = (1,) * pad + tuple(t.shape), (0,) * pad + t.stride()
    return bool(fn(t.data_ptr(), *shape, *strides[:3]))

"""The post-norm residual, LayerNorm(x + y), in one pass per row (`csrc/layer_norm.c`), and its guard.

takes_layer_norm(ln, D)           -> whether the C passes compute `ln` as it is (also int8's fused step)
add_layer_norm(x, y, ln)          -> ln(x + y): the C pass where it runs, else PyTorch's
native_add_layer_norm(x, y, ln)   -> ln(x + y) by the C pass, or None where it does not run
"""

from __future__ import annotations

import ctypes

import torch
from torch import Tensor, nn

from .loader import I64, PTR, function, takes

__all__ = ["SIGNATURES", "add_layer_norm", "native_add_layer_norm", "takes_layer_norm"]

SIGNATURES = {"attnlab_add_layer_norm_f32": [PTR, PTR, I64, I64, PTR, PTR, ctypes.c_float, PTR]}


def takes_layer_norm(ln: nn.Module, D: int) -> bool:
    """Whether attnlab's C passes compute `ln` as it is: an nn.LayerNorm over the last D features, with both or
    neither of weight and bias, fp32 on the CPU (`native_add_layer_norm`, int8's fused step)."""
    return (
        type(ln) is nn.LayerNorm
        and tuple(ln.normalized_shape) == (D,)
        and (ln.weight is None) == (ln.bias is None)
        and takes(torch.float32, ln.weight, ln.bias)
    )


def add_layer_norm(X: Tensor, Y: Tensor, ln: nn.LayerNorm) -> Tensor:
    """ln(X + Y): `native_add_layer_norm` where it runs, else PyTorch's. Shape: X, Y (..., D) -> (..., D)."""
    out = native_add_layer_norm(X, Y, ln)
    return ln(X + Y) if out is None else out


def native_add_layer_norm(X: Tensor, Y: Tensor, ln: nn.LayerNorm) -> Tensor | None:
    """ln(X + Y) in one C pass per row, or None where it does not apply: not fp32 on the CPU, autograd, a
    LayerNorm over more than the last dimension, shapes or strides that differ, or no kernel here; the caller
    then computes `ln(X + Y)`. Shape: X, Y (..., D) -> (..., D).

    Examples:
        >>> ln, x, y = nn.LayerNorm(4), torch.randn(3, 4), torch.randn(3, 4)
        >>> with torch.no_grad():
        ...     out = native_add_layer_norm(x, y, ln)
        ...     out is None or torch.allclose(out, ln(x + y), atol=1e-6)
        True
    """
    D = X.shape[-1]
    w, b = ln.weight, ln.bias
    if (
        not takes_layer_norm(ln, D)
        or X.shape != Y.shape
        or not X.is_contiguous()
        or not Y.is_contiguous()
        or not takes(torch.float32, X, Y)
    ):
        return None
    fn = function("layer_norm", "attnlab_add_layer_norm_f32", SIGNATURES["attnlab_add_layer_norm_f32"])
    if fn is None:
        return None
    out = torch.empty_like(X)
    wp, bp = (None, None) if w is None else (w.data_ptr(), b.data_ptr())
    fn(X.data_ptr(), Y.data_ptr(), X.numel() // D if D else 0, D, wp, bp, ln.eps, out.data_ptr())
    return out

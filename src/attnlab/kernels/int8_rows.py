"""The two element-wise passes around an int8 matmul with per-row activation scales (`csrc/int8_rows.c`),
and their PyTorch fallback.

    quantize_rows(x)                                -> (x_q int8 (M, K), scale (M, 1)): x ~= x_q * scale, row by row
    int8_linear(x, weight_t, scale, bias, relu)     -> (M, N) float32: the C passes where they run, else PyTorch's
    native_int8_linear(x, weight_t, scale, bias)    -> the same by the C passes, or None where they do not run

Both paths compute the same recipe (CTranslate2's): each activation row gets the scale max|row| / 127, each
value round-half-to-even of x / scale, the int32 sums of `torch._int_mm` times the row's and the channel's
scale, plus the bias. For the same inputs they give the same int8 rows; the rescale may round its last bit
differently (the C pass fuses the multiply and the add).
"""

from __future__ import annotations

import ctypes

import torch
from torch import Tensor

from .loader import I64, PTR, function, takes

__all__ = ["SIGNATURES", "int8_linear", "native_int8_linear", "quantize_rows"]

SIGNATURES = {
    "attnlab_quantize_rows_f32": [PTR, I64, I64, I64, PTR, PTR],
    "attnlab_dequantize_f32": [PTR, I64, I64, PTR, PTR, PTR, ctypes.c_int, PTR],
}
_TINY = 1e-12  # an all-zero row gets this scale instead of 0 (its values quantize to 0 either way)


def quantize_rows(x: Tensor) -> tuple[Tensor, Tensor]:
    """Symmetric int8 per row: x (M, K) float -> x_q (M, K) int8 in [-127, 127], scale (M, 1) float32,
    with x ~= x_q * scale (error at most scale / 2 per element).

    Examples:
        >>> q, s = quantize_rows(torch.tensor([[1.0, -0.5], [0.0, 0.0]]))
        >>> q.tolist(), torch.allclose(s.flatten(), torch.tensor([1 / 127, 1e-12 / 127]))
        ([[127, -64], [0, 0]], True)
    """
    x = x.float()
    scale = x.abs().amax(dim=-1, keepdim=True).clamp_(min=_TINY).div_(127.0)  # (M, 1)
    return torch.round(x / scale).to(torch.int8), scale


def int8_linear(x: Tensor, weight_t: Tensor, scale: Tensor, bias: Tensor | None, relu: bool = False) -> Tensor:
    """y = (quantize_rows(x) @ weight_t) * row_scale * scale + bias, then max(y, 0) with `relu`.
    Shape: x (M, K) float, weight_t (K, N) int8, scale (N,) float32, bias (N,) float32 or None -> (M, N) float32."""
    y = native_int8_linear(x, weight_t, scale, bias, relu)
    if y is None:
        xq, row_scale = quantize_rows(x)  # (M, K), (M, 1)
        y = torch._int_mm(xq, weight_t).float().mul_(row_scale)  # (M, N)
        y = y.mul_(scale) if bias is None else torch.addcmul(bias, y, scale)
        if relu:
            y = torch.relu_(y)
    return y


def native_int8_linear(
    x: Tensor, weight_t: Tensor, scale: Tensor, bias: Tensor | None, relu: bool = False
) -> Tensor | None:
    """`int8_linear` with its two element-wise passes in attnlab's C kernels, or None where they do not apply
    (not fp32 on the CPU, no rows, autograd, no kernel here). Shape: x (M, K) -> (M, N) float32."""
    M, K = x.shape
    if M == 0 or not takes(torch.float32, x, scale, bias):
        return None
    quantize = function("int8_rows", "attnlab_quantize_rows_f32", SIGNATURES["attnlab_quantize_rows_f32"])
    dequantize = function("int8_rows", "attnlab_dequantize_f32", SIGNATURES["attnlab_dequantize_f32"])
    if quantize is None or dequantize is None:
        return None
    xq = torch.empty((M, K), dtype=torch.int8)
    row_scale = torch.empty(M, dtype=torch.float32)
    quantize(x.data_ptr(), x.stride(0), M, K, xq.data_ptr(), row_scale.data_ptr())
    acc = torch._int_mm(xq, weight_t)  # (M, N) int32, converted to float32 in place
    ptr = acc.data_ptr()
    bias_ptr = bias.data_ptr() if bias is not None else None
    dequantize(ptr, M, acc.shape[1], row_scale.data_ptr(), scale.data_ptr(), bias_ptr, int(relu), ptr)
    return acc.view(torch.float32)

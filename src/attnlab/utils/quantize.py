"""int8 linear layers for decoding on the CPU: per-output-channel weight scales, and per-row activation scales.

    quantize_rows(x)                 -> (x_q int8 (M, K), scale (M, 1)): x ~= x_q * scale, row by row
    quantize_channels(w)             -> (w_q int8 (N, K), scale (N,)):   w ~= w_q * scale[:, None]
    Int8Linear.from_float(linear)    -> y = (x_q @ w_q.T) * row_scale * channel_scale + bias, on torch._int_mm
    fbgemm_linear(linear)            -> PyTorch's dynamic quantized Linear (fbgemm; per-tensor activations)
    quantize_linears(model, names)   -> a copy of model with those nn.Linear layers replaced by int8 ones

The recipe is CTranslate2's: every weight row (output channel) gets its own scale, 127 / max|row|, and so
does every activation row (one token of one sentence), so a long sentence or a large logit never coarsens
the others' grid, and a sentence's output does not depend on the batch it is decoded in. The products
accumulate in int32; `torch._int_mm` runs them on the CPU's int8 dot-product instructions (AVX512-VNNI,
AVX-VNNI, AMX) through oneDNN, and attnlab's C passes (`csrc/int8_rows.c`) quantize the activations and
rescale the sums, one pass each: the default (`attnlab.utils.precision.INT8_KERNEL`), 1.1-1.4x fbgemm's
dynamic Linear per layer at the decoder's shapes (BENCHMARKS.md, "Precision"). Without a C compiler the
two passes are PyTorch operators (the same values, slower than fbgemm, so `prepare_for_inference` then
picks fbgemm, unless ATTNLAB_NATIVE=0 asked for the same values). fbgemm's dynamic Linear ('fbgemm')
quantizes a whole activation tensor with one scale.
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import warnings

import torch
from torch import Tensor, nn
from torch.ao.quantization import default_dynamic_qconfig, per_channel_dynamic_qconfig, quantize_dynamic

from attnlab.utils import native
from attnlab.utils.packed import PackedLinear, is_float_linear, retype_linears

__all__ = [
    "INT8_KERNELS",
    "VNNI_FLAGS",
    "Int8Linear",
    "fbgemm_linear",
    "quantize_channels",
    "quantize_linears",
    "quantize_rows",
]

# CPU flags (as /proc/cpuinfo names them) of int8 dot-product instructions (`torch._int_mm`, fbgemm).
VNNI_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")
INT8_KERNELS = ("fbgemm", "fbgemm-tensor", "int_mm")
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


def quantize_channels(w: Tensor) -> tuple[Tensor, Tensor]:
    """Symmetric int8 per output channel: w (N, K) -> w_q (N, K) int8, scale (N,) float32."""
    q, scale = quantize_rows(w.detach())
    return q, scale.squeeze(1)


class Int8Linear(nn.Module):
    """A linear layer on int8 operands: per-channel weight scales, per-row activation scales, int32 sums.

    Shape: x (..., K) float32 or bfloat16 -> (..., N) float32.
    The weight is kept transposed (K, N) and contiguous, the layout `torch._int_mm` runs fastest.
    """

    weight_t: Tensor
    scale: Tensor
    bias: Tensor | None

    def __init__(self, weight_t: Tensor, scale: Tensor, bias: Tensor | None):
        super().__init__()
        self.in_features, self.out_features = weight_t.shape
        self.register_buffer("weight_t", weight_t)  # (K, N) int8
        self.register_buffer("scale", scale)  # (N,) float32
        self.register_buffer("bias", bias)  # (N,) float32 or None

    @classmethod
    def from_float(cls, linear: nn.Linear) -> Int8Linear:
        q, scale = quantize_channels(linear.weight)
        bias = None if linear.bias is None else linear.bias.detach().float().clone()
        return cls(q.t().contiguous(), scale, bias)

    # `PositionWiseFFN` passes relu=True instead of applying its ReLU after this layer.
    fuses_relu = True

    def forward(self, x: Tensor, relu: bool = False) -> Tensor:
        """x (..., K) -> (..., N); relu: max(y, 0), in the rescaling pass where the C kernels run."""
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features)  # (M, K)
        y = _native_int8_linear(x2, self.weight_t, self.scale, self.bias, relu)
        if y is None:
            xq, row_scale = quantize_rows(x2)  # (M, K), (M, 1)
            y = torch._int_mm(xq, self.weight_t).float().mul_(row_scale)  # (M, N)
            y = y.mul_(self.scale) if self.bias is None else torch.addcmul(self.bias, y, self.scale)
            if relu:
                y = torch.relu_(y)
        return y.view(*lead, self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 per-channel x per-row"


_PTR, _I64 = native.PTR, native.I64
_QUANTIZE_ARGS = [_PTR, _I64, _I64, _I64, _PTR, _PTR]
_DEQUANTIZE_ARGS = [_PTR, _I64, _I64, _PTR, _PTR, _PTR, ctypes.c_int, _PTR]


def _native_int8_linear(
    x: Tensor, weight_t: Tensor, scale: Tensor, bias: Tensor | None, relu: bool = False
) -> Tensor | None:
    """`Int8Linear`'s forward with its two element-wise passes in attnlab's C kernels (`csrc/int8_rows.c`:
    1.3-1.8x the layer on PyTorch's operators at the decoder's shapes, BENCHMARKS.md), or None where they
    do not apply (not fp32 on the CPU, autograd, no kernel here). Shape: x (M, K) -> (M, N) float32."""
    M, K = x.shape
    if M == 0 or not native.takes(torch.float32, x, scale, bias):
        return None
    quantize = native.function("int8_rows", "attnlab_quantize_rows_f32", _QUANTIZE_ARGS)
    dequantize = native.function("int8_rows", "attnlab_dequantize_f32", _DEQUANTIZE_ARGS)
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


def fbgemm_linear(linear: nn.Linear, per_channel: bool = True) -> nn.Module:
    """`linear` as PyTorch's dynamic quantized Linear (fbgemm/oneDNN): int8 weights with per-channel
    (or one per-tensor) scales; each call quantizes its whole input with one scale."""
    qconfig = per_channel_dynamic_qconfig if per_channel else default_dynamic_qconfig
    with quiet_deprecations():
        return quantize_dynamic(nn.Sequential(linear), {nn.Linear: qconfig}, dtype=torch.qint8, inplace=False)[0]


@contextlib.contextmanager
def quiet_deprecations():
    """torch.ao.quantization announces its move to torchao on every call; the API still works and
    torchao is not a dependency, so the warning is noise for users."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        warnings.filterwarnings("ignore", category=UserWarning, module="torch.ao")
        yield


def quantize_linears(model: nn.Module, names: list[str], kernel: str = "int_mm") -> nn.Module:
    """A copy of `model` whose nn.Linear layers named in `names` are int8: `Int8Linear` (kernel 'int_mm'),
    fbgemm's per-channel dynamic Linear ('fbgemm') or its per-tensor one ('fbgemm-tensor'). Tied weights
    (an output layer sharing the embedding) are quantized in the copy only: the embedding stays float.

    Raises ValueError for an unknown kernel or a name that is not an nn.Linear of the model.
    """
    if kernel not in INT8_KERNELS:
        raise ValueError(f"unknown int8 kernel {kernel!r}; expected one of {', '.join(INT8_KERNELS)}")
    out = retype_linears(copy.deepcopy(model).eval(), PackedLinear, nn.Linear)  # torch.ao matches nn.Linear exactly
    for name in names:
        parent_name, _, child = name.rpartition(".")
        parent = out.get_submodule(parent_name) if parent_name else out
        linear = getattr(parent, child, None)
        if type(linear) is not nn.Linear:
            raise ValueError(f"int8: {name!r} is not an nn.Linear of this model")
        setattr(parent, child, _int8(linear, kernel))
    _fuse_qkv(out, model, set(names), kernel)
    return out.eval()  # the new int8 layers too (a module starts in training mode)


def _int8(linear: nn.Linear, kernel: str) -> nn.Module:
    return Int8Linear.from_float(linear) if kernel == "int_mm" else fbgemm_linear(linear, kernel == "fbgemm")


def _fuse_qkv(out: nn.Module, model: nn.Module, names: set[str], kernel: str) -> None:
    """Self-attention modules whose W_q, W_k, W_v are all quantized also get `W_qkv`, the three as one int8
    layer (from the float weights), which they run instead: one activation quantization and one matmul per
    step instead of three (each row of the fused weight keeps its own scale, so the outputs are the three
    layers' exactly); cross-attention modules get `W_kv`, W_k and W_v as one, which they run on the memory."""
    for name, m in model.named_modules():
        parts = [f"{name}.{w}" if name else w for w in ("W_q", "W_k", "W_v")]
        if not all(p in names for p in parts) or not all(is_float_linear(getattr(m, w)) for w in ("W_q", "W_k", "W_v")):
            continue
        target = out.get_submodule(name)
        if name.endswith("cross_attention"):  # the Transformer's (int8 covers no other model)
            target.W_kv = _int8(_concatenated([m.W_k, m.W_v]), kernel)
        else:
            target.W_qkv = _int8(_concatenated([m.W_q, m.W_k, m.W_v]), kernel)


def _concatenated(layers: list[nn.Linear]) -> nn.Linear:
    """One nn.Linear computing `layers` side by side: their outputs concatenated."""
    fused = nn.Linear(layers[0].in_features, sum(w.out_features for w in layers), bias=layers[0].bias is not None)
    with torch.no_grad():
        fused.weight.copy_(torch.cat([w.weight for w in layers]))
        if fused.bias is not None:
            fused.bias.copy_(torch.cat([w.bias for w in layers]))
    return fused

"""int8 linear layers for decoding on the CPU: per-output-channel weight scales, and per-row activation scales.

    quantize_channels(w)             -> (w_q int8 (N, K), scale (N,)):   w ~= w_q * scale[:, None]
    Int8Linear.from_float(linear)    -> y = (x_q @ w_q.T) * row_scale * channel_scale + bias, on torch._int_mm
    fbgemm_linear(linear)            -> PyTorch's dynamic quantized Linear (fbgemm; per-tensor activations)
    has_fbgemm()                     -> whether this PyTorch build has fbgemm
    quantize_linears(model, names)   -> a copy of model with those nn.Linear layers replaced by int8 ones

The recipe is CTranslate2's: every weight row (output channel) gets its own scale, 127 / max|row|, and so
does every activation row (one token of one sentence), so a long sentence or a large logit never coarsens
the others' grid, and a sentence's output does not depend on the batch it is decoded in. The products
accumulate in int32; `torch._int_mm` runs them on the CPU's int8 dot-product instructions (AVX512-VNNI,
AVX-VNNI, AMX) through oneDNN, and attnlab's C passes (`attnlab.kernels.int8_rows`) quantize the activations
and rescale the sums, one pass each: the default (`attnlab.inference.precision.INT8_KERNEL`), faster than
fbgemm's dynamic Linear per layer at the decoder's shapes (BENCHMARKS.md, "Precision"). Without a C compiler
the two passes are PyTorch operators (the same recipe, slower than fbgemm, so `prepare_for_inference` then
picks fbgemm, unless ATTNLAB_NATIVE=0 asked for the per-row recipe). fbgemm's dynamic Linear ('fbgemm')
quantizes a whole activation tensor with one scale.
"""

from __future__ import annotations

import contextlib
import copy
import warnings
from collections.abc import Callable
from typing import Protocol, runtime_checkable

import torch
from torch import Tensor, nn
from torch.ao.quantization import default_dynamic_qconfig, per_channel_dynamic_qconfig, quantize_dynamic

from attnlab.inference.packed import PackedLinear, is_float_linear, retype_linears
from attnlab.kernels.int8_rows import int8_linear, quantize_rows

__all__ = [
    "INT8_KERNELS",
    "VNNI_FLAGS",
    "FusesProjections",
    "Int8Linear",
    "fbgemm_linear",
    "has_fbgemm",
    "quantize_channels",
    "quantize_linears",
]

# CPU flags (as /proc/cpuinfo names them) of int8 dot-product instructions (`torch._int_mm`, fbgemm).
VNNI_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")
INT8_KERNELS = ("fbgemm", "fbgemm-tensor", "int_mm")


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
        y = int8_linear(x2, self.weight_t, self.scale, self.bias, relu)  # the C passes where they run
        return y.view(*lead, self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 per-channel x per-row"


def has_fbgemm() -> bool:
    """Whether this PyTorch build has fbgemm's quantized engine (x86 builds; not ARM's)."""
    return any(e in torch.backends.quantized.supported_engines for e in ("x86", "fbgemm"))


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
    _fuse_qkv(out, set(names), kernel)  # from the float weights, before they are replaced
    for name in names:
        parent_name, _, child = name.rpartition(".")
        parent = out.get_submodule(parent_name) if parent_name else out
        linear = getattr(parent, child, None)
        if type(linear) is not nn.Linear:
            raise ValueError(f"int8: {name!r} is not an nn.Linear of this model")
        setattr(parent, child, _int8(linear, kernel))
    return out.eval()  # the new int8 layers too (a module starts in training mode)


def _int8(linear: nn.Linear, kernel: str) -> nn.Module:
    return Int8Linear.from_float(linear) if kernel == "int_mm" else fbgemm_linear(linear, kernel == "fbgemm")


@runtime_checkable
class FusesProjections(Protocol):
    """A module that makes its own fused projection from its float W_q, W_k, W_v (`MultiHeadAttention`)."""

    def fuse_projections(self, convert: Callable[[nn.Linear], nn.Module], self_attention: bool = True) -> None: ...


def _fuse_qkv(out: nn.Module, names: set[str], kernel: str) -> None:
    """Attention modules whose W_q, W_k, W_v are all to be quantized make their fused int8 projection
    (`fuse_projections`), which they run instead of the three: self-attention's `W_qkv`, cross-attention's
    `W_kv` (the Transformer's `cross_attention` modules; int8 covers no other model)."""
    for name, m in list(out.named_modules()):  # a list: fusing adds modules
        parts = [f"{name}.{w}" if name else w for w in ("W_q", "W_k", "W_v")]
        if isinstance(m, FusesProjections) and all(p in names and is_float_linear(out.get_submodule(p)) for p in parts):
            cross = name.endswith("cross_attention")
            m.fuse_projections(lambda linear: _int8(linear, kernel), self_attention=not cross)

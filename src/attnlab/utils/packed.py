"""Linear layers on weights reordered once for oneDNN, for decoding on the CPU.

    PackedLinear.from_linear(linear)  -> an nn.Linear (same parameters) whose inference forward runs oneDNN
    pack_linears(model)               -> a copy of model with every nn.Linear a PackedLinear
    linear(x, weight, bias, packed)   -> F.linear(x, weight, bias), on `packed` where that is faster

Why: a decoding step's matmuls are small (a few hundred rows), and `F.linear` reorders the weight into the
kernel's blocked layout on every call. oneDNN's linear on a weight reordered once (`mkldnn::_linear_pointwise`,
what inductor's weight prepacking uses) skips that: 2.0-2.3x faster per fp32 layer at 64-256 rows of the
`laptop` decoder on an AVX512 EPYC, 1.5x fp32 greedy end to end, with the same tokens on its validation and
test splits (BENCHMARKS.md, "Precision"). Below `MIN_WORK` (rows x outputs) `F.linear`'s own small-matrix
path is faster, so those calls stay on it; so do training (autograd), other devices and dtypes.
"""

from __future__ import annotations

import copy as _copy
import warnings

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = [
    "MIN_WORK",
    "ONEDNN",
    "PackedLinear",
    "can_pack",
    "is_float_linear",
    "linear",
    "pack_linears",
    "pack_weight",
    "plain_linear",
    "packable",
    "weight_key",
]

# Whether this build has oneDNN's prepacked linear (x86 and ARM builds of PyTorch do).
ONEDNN = (
    torch.backends.mkldnn.is_available()
    and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
)
# Rows x output features from which the packed kernel wins: measured crossings at 192 -> 192 (~20 rows),
# 192 -> 576 (~4), 384 -> 192 (~5) and 192 -> 4000 (2 rows; one row is a tie).
MIN_WORK = 4096
# fp32 only: bf16 linears already run on oneDNN, and packing them measured no faster (0.96-1.0x greedy).
_DTYPES = (torch.float32,)


def is_float_linear(m: nn.Module) -> bool:
    """An nn.Linear or a PackedLinear (the layers int8 quantizes and self-attention fuses), not a subclass
    that computes something else."""
    return type(m) is nn.Linear or type(m) is PackedLinear


def can_pack(weight: Tensor) -> bool:
    """Whether this build reorders `weight` for oneDNN's CPU linear (fp32, on the CPU, not empty: a layer
    whose heads were all pruned has a (0, K) weight)."""
    return ONEDNN and weight.device.type == "cpu" and weight.dtype in _DTYPES and weight.numel() > 0


def packable(x: Tensor, weight: Tensor) -> bool:
    """Whether `linear` would run x (..., K) @ weight (N, K).T on a packed weight."""
    return (
        can_pack(weight)
        and x.device.type == "cpu"
        and x.dtype == weight.dtype
        and x.numel() > 0
        and not (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad))
        and x.dim() >= 2
        and (x.numel() // max(x.shape[-1], 1)) * weight.shape[0] >= MIN_WORK
    )


def weight_key(t: Tensor) -> tuple:
    """What identifies a weight's current values for a cache built from it: its version counter (moved by
    in-place changes) and its storage, dtype and device (changed by `.to()`, which keeps the Parameter).
    A tensor made under inference_mode has no version counter: its storage stands for it."""
    return (-1 if t.is_inference() else t._version), t.data_ptr(), t.dtype, t.device


def pack_weight(weight: Tensor) -> Tensor:
    """The weight (N, K) reordered for oneDNN's linear (an opaque tensor: only `linear` reads it)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach())


def linear(x: Tensor, weight: Tensor, bias: Tensor | None, packed: Tensor | None) -> Tensor:
    """x (..., K) -> (..., N): on `packed` (= pack_weight(weight)) where `packable`, else F.linear."""
    if packed is not None and packable(x, weight):
        return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")
    return F.linear(x, weight, bias)


class PackedLinear(nn.Linear):
    """An nn.Linear that keeps its weight reordered for oneDNN and runs inference on the CPU there.

    Parameters, state_dict and training are nn.Linear's. The reordered copy is made on first use and
    again whenever the weight is replaced or changed in place (its version counter moves), so a layer
    edited after packing never runs stale weights. Copies (deepcopy, pickle) leave it behind.

    Shape: x (..., K) -> (..., N).
    """

    @classmethod
    def from_linear(cls, layer: nn.Linear) -> PackedLinear:
        """A PackedLinear sharing `layer`'s weight and bias (the same Parameter objects)."""
        return _sharing(cls, layer)

    def packed_weight(self) -> Tensor | None:
        """The reordered weight, remade if the weight changed (`weight_key`); None where it cannot be packed."""
        if not can_pack(self.weight):
            return None
        w = self.weight
        cached = self.__dict__.get("_packed")  # (weight, weight_key, packed)
        if cached is None or cached[0] is not w or cached[1] != weight_key(w):
            cached = (w, weight_key(w), pack_weight(w))
            self.__dict__["_packed"] = cached
        return cached[2]

    def forward(self, x: Tensor) -> Tensor:
        if not packable(x, self.weight):
            return F.linear(x, self.weight, self.bias)
        return linear(x, self.weight, self.bias, self.packed_weight())

    def __getstate__(self):
        state = self.__dict__.copy()
        state.pop("_packed", None)  # an opaque oneDNN tensor: remade on first use instead of copied
        return state


def plain_linear(layer: nn.Linear) -> nn.Linear:
    """`layer` as a plain nn.Linear sharing its weight and bias (a PackedLinear unpacked; else itself)."""
    if type(layer) is nn.Linear:
        return layer
    return _sharing(nn.Linear, layer)


def _sharing(cls, layer: nn.Linear):
    """A `cls` (nn.Linear or a subclass) holding `layer`'s own weight and bias Parameters."""
    with warnings.catch_warnings():  # a pruned layer's (0, K) weight: initialising nothing is fine here
        warnings.filterwarnings("ignore", message="Initializing zero-element tensors")
        out = cls(layer.in_features, layer.out_features, bias=layer.bias is not None, device="meta")
    out.weight, out.bias = layer.weight, layer.bias
    return out.train(layer.training)


def pack_linears(model: nn.Module, copy: bool = True) -> nn.Module:
    """A copy of `model` (or, copy=False, the model itself) in which every nn.Linear is a PackedLinear,
    packed now (not on the first call, which decoding workers could otherwise race to)."""
    out = _copy.deepcopy(model) if copy else model
    for name, layer in list(out.named_modules()):
        if type(layer) is not nn.Linear:
            continue
        parent_name, _, child = name.rpartition(".")
        parent = out.get_submodule(parent_name) if parent_name else out
        packed = PackedLinear.from_linear(layer)
        packed.packed_weight()
        setattr(parent, child, packed)
    return out

"""Linear layers on weights reordered once for oneDNN, for decoding on the CPU.

    PackedLinear                      -> an nn.Linear whose inference forward on the CPU runs oneDNN
    pack_linears(model, copy=True)    -> model (or a copy) with every nn.Linear a PackedLinear
    retype_linears(model, frm, to)    -> every layer of exact type `frm` made a `to` (in place, or a copy)
    linear(x, weight, bias, packed)   -> F.linear(x, weight, bias), on `packed` where that is faster

Why: a decoding step's matmuls are small (a few hundred rows), and `F.linear` reorders the weight into the
kernel's blocked layout on every call. oneDNN's linear on a weight reordered once (`mkldnn::_linear_pointwise`,
what inductor's weight prepacking uses) skips that, and gives the same tokens: faster per layer and end to
end at the `laptop` decoder's shapes (BENCHMARKS.md, "C kernels and linear layers"). Below `MIN_WORK`
(rows x outputs) `F.linear`'s own small-matrix path is faster, so those calls stay on it; so do training
(autograd), other devices and dtypes.

Why the class of each nn.Linear is swapped in place rather than the module replaced in its parent (as int8's
`quantize_linears` does, on a copy): a PackedLinear is an nn.Linear with the same Parameters, state_dict and
hooks and no state of its own, so the swap is exact, and fp32 decoding converts the caller's model itself, not a
copy. Every holder of a layer keeps seeing the one module: a layer registered under two parents (tied layers),
forward hooks, `MultiHeadAttention`'s fused-weight cache keyed on its projections, a `Translator` and `explain`
sharing one model. A replaced module would leave each of those holding the old nn.Linear, which would then run
unpacked, or need a second pass to find and rewire them.
"""

from __future__ import annotations

import copy as _copy

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
    "packable",
    "retype_linears",
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
# fp32 only: bf16 linears already run on oneDNN, and packing them measured no faster (BENCHMARKS.md, "Tried, not kept").
_DTYPES = (torch.float32,)


def is_float_linear(m: nn.Module) -> bool:
    """An nn.Linear or a PackedLinear (the layers int8 quantizes and self-attention fuses), not a subclass
    that computes something else."""
    return type(m) is nn.Linear or type(m) is PackedLinear


def can_pack(weight: Tensor) -> bool:
    """Whether this build reorders `weight` for oneDNN's CPU linear: fp32, on the CPU, not empty (a layer
    whose heads were all pruned has a (0, K) weight), and not an inference tensor (which has no version
    counter to tell when it changes)."""
    return (
        ONEDNN
        and weight.device.type == "cpu"
        and weight.dtype in _DTYPES
        and weight.numel() > 0
        and not weight.is_inference()
    )


def packable(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> bool:
    """Whether `linear` would run x (..., K) @ weight (N, K).T + bias on a packed weight: never under
    autocast (which would have cast the inputs) or when autograd needs the result (the packed op has no
    backward), and only from MIN_WORK rows x outputs."""
    return (
        not (
            torch.is_grad_enabled()
            and (x.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad))
        )
        and not torch.is_autocast_enabled("cpu")
        and can_pack(weight)
        and x.device.type == "cpu"
        and x.dtype == weight.dtype
        and x.dim() >= 2
        and x.numel() > 0
        and (x.numel() // x.shape[-1]) * weight.shape[0] >= MIN_WORK
    )


def weight_key(t: Tensor) -> tuple:
    """What identifies a weight's current values for a cache built from it: its version counter (moved by
    in-place changes) and its storage, dtype and device (changed by `.to()`, which keeps the Parameter).
    An inference tensor has no version counter: its key equals nothing, so nothing is cached for it."""
    if t.is_inference():
        return (object(),)
    return t._version, t.data_ptr(), t.dtype, t.device


def pack_weight(weight: Tensor) -> Tensor:
    """The weight (N, K) reordered for oneDNN's linear (an opaque tensor: only `linear` reads it)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach())


def linear(x: Tensor, weight: Tensor, bias: Tensor | None, packed: Tensor | None) -> Tensor:
    """x (..., K) -> (..., N): on `packed` (= pack_weight(weight)) where `packable`, else F.linear."""
    if packed is not None and packable(x, weight, bias):
        return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")
    return F.linear(x, weight, bias)


class PackedLinear(nn.Linear):
    """An nn.Linear that keeps its weight reordered for oneDNN and runs inference on the CPU there.

    Parameters, state_dict, hooks and training are nn.Linear's (it adds no state: `retype_linears` turns
    layers into PackedLinears and back in place). The reordered copy is made on first use and again
    whenever the weight is replaced, moved or changed in place (`weight_key`); it takes as much memory as
    the weight. Copies (deepcopy, pickle) leave it behind.

    Shape: x (..., K) -> (..., N).
    """

    def packed_weight(self) -> Tensor | None:
        """The reordered weight, remade if the weight changed (`weight_key`); None where it cannot be packed."""
        return self._packed_weight() if can_pack(self.weight) else None

    def _packed_weight(self) -> Tensor:
        w, key = self.weight, weight_key(self.weight)
        cached = self.__dict__.get("_packed")  # (weight, weight_key, packed)
        if cached is None or cached[0] is not w or cached[1] != key:
            cached = (w, key, pack_weight(w))
            self.__dict__["_packed"] = cached
        return cached[2]

    def forward(self, x: Tensor) -> Tensor:
        if not packable(x, self.weight, self.bias):  # packable implies can_pack
            return F.linear(x, self.weight, self.bias)
        return torch.ops.mkldnn._linear_pointwise(x, self._packed_weight(), self.bias, "none", [], "")

    def __getstate__(self):
        state = super().__getstate__()
        state.pop("_packed", None)  # an opaque oneDNN tensor: remade on first use instead of copied
        return state


def retype_linears(model: nn.Module, frm: type, to: type, copy: bool = False) -> nn.Module:
    """Every module of exact type `frm` (nn.Linear or PackedLinear) made a `to`, keeping the module object,
    its Parameters, hooks and ties; on the model itself, or (copy=True) on a deep copy."""
    out = _copy.deepcopy(model) if copy else model
    for m in out.modules():
        if type(m) is frm:
            m.__class__ = to
    return out


def pack_linears(model: nn.Module, copy: bool = True) -> nn.Module:
    """`model` (copy=False) or a copy in which every nn.Linear is a PackedLinear. Each packs on its first
    inference call, so layers that never run alone (self-attention's W_q, W_k, W_v, which run fused) take
    no memory for it; two decoding workers reaching a layer first at once both pack it, the same way."""
    return retype_linears(model, nn.Linear, PackedLinear, copy)

"""The wrapper of attnlab's Triton FlashAttention (`flash_triton.py`): launches, tile sizes, the autograd
Function, and what it accepts.

    available()                               -> whether Triton is installed (`pip install attnlab[kernels]`)
    flash(q, k, v, lens, causal)              -> (B, H, Lq, D), differentiable: the Triton kernel where Triton
                                                 is installed, else PyTorch's SDPA under the same mask
    native_flash(q, k, v, lens, causal)       -> the Triton kernel's (FlashAttentionFunction), or None without Triton
    flash_trace(q, k, v, lens, causal, tile)  -> the output and the running max, sum and output after each key tile

CUDA tensors run the compiled kernel; CPU tensors run the same kernel under Triton's interpreter, which
this module builds itself (`InterpretedFunction`), so a reader needs no TRITON_INTERPRET=1 in the environment:
Triton reads that variable once, when `triton.jit` decorates a function. Triton is imported only here, on
the first call: importing attnlab never needs it.

As every wrapper of `attnlab.kernels`: `SIGNATURES` (here each Triton kernel's parameters, in order: Triton
types them at launch, as ctypes' argument types do for a C function), `native_flash`, `flash` with its fallback.
"""

from __future__ import annotations

import importlib.util
import math
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["SIGNATURES", "FlashAttentionFunction", "available", "flash", "flash_trace", "native_flash", "tiles"]

EXTRA = "pip install 'attnlab[kernels]'"  # the extra that brings Triton
_STRIDES = "sqb sqh sqm skb skh skn svb svh svn".split()
_CONSTANTS = ["HAS_LENS", "CAUSAL", "DOT", "BLOCK_M", "BLOCK_N", "BLOCK_D"]
SIGNATURES = {  # flash_triton's kernels (which import Triton, so they are named here, not inspected)
    "forward": ["Q", "K", "V", "O", "LSE", "LENS", "TRACE_M", "TRACE_L", "TRACE_O", *_STRIDES, "sob", "soh", "som"]
    + ["H", "GROUPS", "Lq", "Lk", "D", "n_tiles", "scale", "HAS_LENS", "CAUSAL", "TRACE", *_CONSTANTS[2:]],
    "backward_kv": ["Q", "K", "V", "DO", "LSE", "DELTA", "DK", "DV", "LENS", *_STRIDES]
    + ["Hkv", "GROUPS", "Lq", "Lk", "D", "scale", *_CONSTANTS],
    "backward_q": ["Q", "K", "V", "DO", "LSE", "DELTA", "DQ", "LENS", *_STRIDES]
    + ["H", "GROUPS", "Lq", "Lk", "D", "scale", *_CONSTANTS],
}


def available() -> bool:
    """Whether Triton can be imported (it is the `attnlab[kernels]` extra)."""
    return importlib.util.find_spec("triton") is not None


@cache
def _kernels(interpreted: bool) -> SimpleNamespace:
    """forward, backward_kv and backward_q, compiled for a GPU (`triton.jit`) or for Triton's CPU interpreter."""
    if not available():
        raise ModuleNotFoundError(f"flash_attention needs Triton, which is not installed; run: {EXTRA}")
    import triton  # an optional dependency: imported on first use only

    from . import flash_triton

    if interpreted:
        from triton.runtime.interpreter import InterpretedFunction

        wrap = InterpretedFunction
    else:
        wrap = triton.jit
    return SimpleNamespace(**{name: wrap(getattr(flash_triton, name)) for name in flash_triton.__all__})


_interpreter_lock = threading.Lock()  # the interpreter patches triton.language process-wide while it runs


@contextmanager
def _interpretable() -> Iterator[None]:
    """Let the interpreter call Triton's own library functions (tl.sum, tl.max, tl.zeros, ...).

    Triton decorates those when `triton.language` is imported: as compiled functions unless TRITON_INTERPRET=1
    was set then, and the interpreter can only call interpreted ones. For the launch they are swapped for
    interpreted copies of the same functions, then put back, so a process may run both kinds of kernel."""
    import triton.language as tl
    from triton.runtime.jit import JITFunction

    with _interpreter_lock:
        compiled = {name: f for name, f in vars(tl).items() if isinstance(f, JITFunction)}
        try:
            for name, f in compiled.items():
                setattr(tl, name, _interpreted(f.fn))
            yield
        finally:
            for name, f in compiled.items():
                setattr(tl, name, f)


def _interpreted(fn):
    """fn (a library function of Triton's) run by the interpreter, its patches of `triton.language` undone when
    it returns: Triton's own `InterpretedFunction` call leaves them in place, which is harmless when everything
    is interpreted but breaks compiling a kernel for the GPU later in the process."""
    from triton.runtime.interpreter import InterpretedFunction, _patch_lang

    rewritten = InterpretedFunction(fn).rewrite()

    def call(*args, **kwargs):
        scope = _patch_lang(fn)
        try:
            return rewritten(*args, **kwargs)
        finally:
            if scope is not None:  # older Triton versions return nothing to undo
                scope.restore()

    return call


def tiles(device: torch.device, D: int) -> dict[str, int]:
    """Tile sizes: the GPU's (as Triton's fused-attention tutorial picks them for head dims up to 128) or the
    interpreter's 16 x 16 (small tiles, so short sentences already span several)."""
    block_d = max(16, 1 << (D - 1).bit_length())
    if device.type != "cuda":
        return dict(fwd_m=16, fwd_n=16, kv_m=16, kv_n=16, q_m=16, q_n=16, d=block_d, warps=4, stages=1)
    return dict(fwd_m=128, fwd_n=64, kv_m=32, kv_n=128, q_m=128, q_n=32, d=block_d, warps=8, stages=3)


def _launch(name: str, grid: tuple[int, int], *args, device: torch.device, t: dict[str, int], **constants) -> None:
    """Run kernel `name` over `grid`: compiled on a GPU, under the interpreter on the CPU."""
    if device.type == "cuda":
        _kernels(False).__dict__[name][grid](*args, **constants, num_warps=t["warps"], num_stages=t["stages"])
        return
    with _interpretable():
        _kernels(True).__dict__[name][grid](*args, **constants)


def _dot_precision(dtype: torch.dtype) -> str:
    # float32 stays float32 on a GPU (its default, tf32, would round to 10 bits); bf16/fp16 need no choice
    return "ieee" if dtype == torch.float32 else "tf32"


def _lens(lens: Tensor | None, q: Tensor) -> Tensor:
    return q.new_zeros(1, dtype=torch.int32) if lens is None else lens.to(device=q.device, dtype=torch.int32)


def _forward(q: Tensor, k: Tensor, v: Tensor, lens: Tensor | None, causal: bool, trace: bool = False, tile=None):
    B, H, Lq, D = q.shape
    Hkv, Lk = k.shape[1], k.shape[2]
    t = tiles(q.device, D)
    if tile is not None:
        t["fwd_m"] = t["fwd_n"] = tile
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    lse = torch.empty((B, H, Lq), device=q.device, dtype=torch.float32)
    n_tiles = math.ceil(Lk / t["fwd_n"])
    if trace:
        m_tr = torch.full((B, H, Lq, n_tiles), float("nan"), device=q.device)
        l_tr, o_tr = torch.full_like(m_tr, float("nan")), torch.full((B, H, Lq, n_tiles, D), float("nan"))
    else:
        m_tr = l_tr = o_tr = lse  # never written (TRACE off)
    _launch(
        "forward", (math.ceil(Lq / t["fwd_m"]), B * H),
        q, k, v, out, lse, _lens(lens, q), m_tr, l_tr, o_tr,
        *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *out.stride()[:3],
        H, H // Hkv, Lq, Lk, D, n_tiles, 1.0 / math.sqrt(D), device=q.device, t=t,
        HAS_LENS=lens is not None, CAUSAL=causal, TRACE=trace, DOT=_dot_precision(q.dtype),
        BLOCK_M=t["fwd_m"], BLOCK_N=t["fwd_n"], BLOCK_D=t["d"],
    )  # fmt: skip
    return out, lse, (m_tr, l_tr, o_tr)


def _backward(q, k, v, out, lse, lens, causal, dout):
    B, H, Lq, D = q.shape
    Hkv, Lk = k.shape[1], k.shape[2]
    t = tiles(q.device, D)
    q, dout = q.contiguous(), dout.contiguous()  # the kernels read dout with q's strides
    delta = (dout.float() * out.float()).sum(-1)  # dout . out per row, (6)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    lens_i32, scale = _lens(lens, q), 1.0 / math.sqrt(D)
    common = dict(device=q.device, t=t, HAS_LENS=lens is not None, CAUSAL=causal, DOT=_dot_precision(q.dtype))
    strides = (*q.stride()[:3], *k.stride()[:3], *v.stride()[:3])
    _launch(
        "backward_kv", (math.ceil(Lk / t["kv_n"]), B * Hkv),
        q, k, v, dout, lse, delta, dk, dv, lens_i32, *strides, Hkv, H // Hkv, Lq, Lk, D, scale,
        BLOCK_M=t["kv_m"], BLOCK_N=t["kv_n"], BLOCK_D=t["d"], **common,
    )  # fmt: skip
    _launch(
        "backward_q", (math.ceil(Lq / t["q_m"]), B * H),
        q, k, v, dout, lse, delta, dq, lens_i32, *strides, H, H // Hkv, Lq, Lk, D, scale,
        BLOCK_M=t["q_m"], BLOCK_N=t["q_n"], BLOCK_D=t["d"], **common,
    )  # fmt: skip
    return dq, dk, dv


class FlashAttentionFunction(torch.autograd.Function):
    """softmax(q k^T / sqrt(D), masked) v forward and backward by the Triton kernels; k and v as contiguous
    in their last dimension (`flash` makes them so)."""

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, lens: Tensor | None, causal: bool) -> Tensor:
        out, lse, _ = _forward(q, k, v, lens, causal)
        ctx.save_for_backward(q, k, v, out, lse, lens)
        ctx.causal = causal
        return out

    @staticmethod
    def backward(ctx, dout: Tensor):
        q, k, v, out, lse, lens = ctx.saved_tensors
        dq, dk, dv = _backward(q, k, v, out, lse, lens, ctx.causal, dout)
        return dq, dk, dv, None, None


def _last_contiguous(*ts: Tensor) -> list[Tensor]:
    return [t if t.stride(-1) == 1 else t.contiguous() for t in ts]


def flash(q: Tensor, k: Tensor, v: Tensor, lens: Tensor | None = None, causal: bool = False) -> Tensor:
    """Attention over keys [0, lens[b]) (and, if causal, up to each query's position): `native_flash` where
    Triton is installed, else PyTorch's SDPA under the same boolean mask (a query that sees no key: zeros).

    Shape: q (B, H, Lq, D), k, v (B, Hkv, Lk, D) with H a multiple of Hkv, lens (B,) integers or None ->
    (B, H, Lq, D) in q's dtype.

    Examples:
        >>> q = torch.randn(1, 2, 3, 4)
        >>> want = F.scaled_dot_product_attention(q, q, q, is_causal=True)
        >>> torch.allclose(flash(q, q, q, causal=True), want, atol=1e-5)
        True
    """
    out = native_flash(q, k, v, lens, causal)
    if out is not None:
        return out
    Lq, Lk = q.shape[2], k.shape[2]
    keys = torch.arange(Lk, device=q.device)
    visible = torch.ones((1, 1, Lq, Lk), dtype=torch.bool, device=q.device)
    if causal:
        visible = visible & (keys <= torch.arange(Lq, device=q.device)[:, None] + Lk - Lq)
    if lens is not None:
        visible = visible & (keys < lens.to(q.device).view(-1, 1, 1, 1))
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=visible)
    return out.masked_fill(~visible.any(-1, keepdim=True), 0.0)


def native_flash(q: Tensor, k: Tensor, v: Tensor, lens: Tensor | None = None, causal: bool = False) -> Tensor | None:
    """`flash` by the Triton kernel (compiled on CUDA, interpreted on the CPU), or None where Triton is not
    installed. Shapes as `flash`'s (already checked by `attnlab.attention.flash_attention`)."""
    if not available():
        return None
    q, k, v = _last_contiguous(q, k, v)
    return FlashAttentionFunction.apply(q, k, v, lens, causal)


def flash_trace(q: Tensor, k: Tensor, v: Tensor, lens: Tensor | None = None, causal: bool = False, tile: int = 4):
    """The forward on the CPU interpreter with square tiles of `tile`, recording the state after each key tile.

    Shape: -> out (B, H, Lq, D) and m, l (B, H, Lq, T), O (B, H, Lq, T, D) for the T = cdiv(Lk, tile) key
    tiles: the running maximum, sum and normalised output of each query after that tile, NaN where the
    query's tile skipped it."""
    q, k, v = (t.detach().cpu().contiguous() for t in (q, k, v))
    out, _, (m, sums, o) = _forward(q, k, v, None if lens is None else lens.cpu(), causal, trace=True, tile=tile)
    return out, m, sums, o

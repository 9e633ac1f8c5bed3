"""Masked attention's kernels and the one place that picks among them: a padded batch (the book's `valid_lens`,
one length per sentence) or causal self-attention.

    flash_attention(q, k, v, valid_lens, causal)         attnlab's Triton FlashAttention (`attnlab.kernels.flash`)
    flex_masked(q, k, v, valid_lens, causal)              PyTorch's FlexAttention, a block mask built from the lengths
    varlen_attention(q, k, v, valid_lens, dropout_p)      SDPA on nested jagged tensors: valid keys packed (`varlen`)
    sdpa_masked(q, k, v, visible, bias, dropout_p)        SDPA under a bool mask / float bias, zeros for empty rows
    masked_attention(q, k, v, valid_lens, causal, ...)    the dispatch: `backend_for` names the kernel

A boolean mask sends SDPA off its fastest (flash) kernel; FlexAttention and the Triton kernel skip the masked
tiles instead, and varlen hands SDPA's varlen flash kernel the valid keys only, with no mask (padded batches only:
causal attention stays on SDPA). Which is fastest on a GPU is measured (`python benchmarks/gpu/gpu_kernels.py`,
which prints the line to put in `CUDA_BACKEND`); ATTNLAB_ATTENTION=sdpa|flex|flash|varlen overrides it.
`MultiHeadAttention` calls the dispatch on CUDA only: on the CPU its own paths (the C kernel, SDPA) stay as they are.
"""

from __future__ import annotations

import os
from functools import cache

import torch
import torch.nn.functional as F
from torch import Tensor

from attnlab.kernels.flash import available as triton_available
from attnlab.kernels.flash import flash as triton_flash
from attnlab.utils.extras import require

from .masking import build_mask
from .varlen import varlen_attention

__all__ = ["BACKENDS", "CUDA_BACKEND", "ENV", "backend_for", "flash_attention", "flex_masked", "masked_attention"]

BACKENDS = ("sdpa", "flex", "flash", "varlen")
# sdpa | flex | flash | varlen: the kernel for masked attention on CUDA, whatever CUDA_BACKEND says
ENV = "ATTNLAB_ATTENTION"
# The kernel masked attention takes on CUDA, by (what masks it, whether autograd records it): the fastest one
# in `benchmarks/gpu/gpu_kernels.py`'s record (benchmarks/results/gpu/gpu_kernels.json, "fastest"): on an H200 SDPA
# with the bool mask led in all four, forward and forward + backward, at L = 1,024 to 16,384.
CUDA_BACKEND: dict[tuple[str, bool], str] = {
    ("valid_lens", False): "sdpa",
    ("valid_lens", True): "sdpa",
    ("causal", False): "sdpa",
    ("causal", True): "sdpa",
}


def _check(q: Tensor, k: Tensor, v: Tensor, valid_lens: Tensor | None) -> None:
    if q.dim() != 4 or k.dim() != 4 or k.shape != v.shape:
        raise ValueError(
            f"expected q (B, H, Lq, D) and k, v of one shape (B, Hkv, Lk, D), got {tuple(q.shape)}, "
            f"{tuple(k.shape)}, {tuple(v.shape)}"
        )
    if q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3] or k.shape[1] == 0 or q.shape[1] % k.shape[1]:
        raise ValueError(
            f"q {tuple(q.shape)} and k, v {tuple(k.shape)} do not fit: need the same B and D, and H a multiple of Hkv"
        )
    if valid_lens is not None and (
        not isinstance(valid_lens, Tensor)
        or tuple(valid_lens.shape) != (q.shape[0],)
        or valid_lens.is_floating_point()
        or valid_lens.dtype is torch.bool
    ):
        got = tuple(valid_lens.shape) if isinstance(valid_lens, Tensor) else type(valid_lens).__name__
        raise ValueError(f"valid_lens must be a ({q.shape[0]},) integer tensor (one length per sentence), got {got}")


def flash_attention(q: Tensor, k: Tensor, v: Tensor, valid_lens: Tensor | None = None, causal: bool = False) -> Tensor:
    """softmax(q k^T / sqrt(D), masked) v by attnlab's Triton FlashAttention, forward and backward: compiled on
    a GPU, run by Triton's interpreter on the CPU (the same kernel, slowly: small sizes). Needs Triton
    (`pip install 'attnlab[kernels]'`).

    Sentence b's queries see keys [0, valid_lens[b]); with `causal`, query i (the last Lq of Lk positions)
    sees keys <= i + Lk - Lq as well. A query that sees no key gives zeros. Key tiles no query of a tile can
    see are skipped, not computed (`attnlab/kernels/flash_triton.py`, written to be read).

    Shape: q (B, H, Lq, D), k, v (B, Hkv, Lk, D) with H a multiple of Hkv (grouped-query heads: query head h
    reads KV head h // (H / Hkv)), valid_lens (B,) integers -> (B, H, Lq, D) in q's dtype.

    Examples:
        >>> import torch, torch.nn.functional as F
        >>> q, k, v = torch.randn(2, 2, 7, 16), torch.randn(2, 2, 7, 16), torch.randn(2, 2, 7, 16)
        >>> out = flash_attention(q, k, v, causal=True)
        >>> torch.allclose(out, F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=1e-5)
        True
    """
    _check(q, k, v, valid_lens)
    require("kernels", "flash_attention")
    if not q.dtype == k.dtype == v.dtype or q.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise ValueError(f"flash_attention takes float32, float16 or bfloat16 q, k, v of one dtype, got {q.dtype}")
    if q.device != k.device or q.device != v.device or q.device.type not in ("cpu", "cuda"):
        raise ValueError(f"flash_attention takes q, k, v on one CPU or CUDA device, got {q.device}, {k.device}")
    return triton_flash(q, k, v, valid_lens, causal)


@cache
def _flex_kernel(compiled: bool):
    from torch.nn.attention.flex_attention import flex_attention  # torch >= 2.5; imported where it is used

    # Eager FlexAttention is a reference implementation; on a GPU only the compiled one skips the masked blocks.
    return torch.compile(flex_attention, dynamic=False) if compiled else flex_attention


def flex_masked(q: Tensor, k: Tensor, v: Tensor, valid_lens: Tensor | None = None, causal: bool = False) -> Tensor:
    """FlexAttention with a block mask built from the lengths (and the causal triangle): blocks no query sees
    are skipped. Compiled on CUDA, eager (forward only) on the CPU. Rows that see no key give zeros.

    Shape: as `flash_attention`."""
    from torch.nn.attention.flex_attention import create_block_mask

    B, H, Lq, _ = q.shape
    Lk = k.shape[2]
    lens = None if valid_lens is None else valid_lens.to(q.device)

    def visible(b, h, i, j):  # query i (position i + Lk - Lq) may see key j
        ok = j < lens[b] if lens is not None else j >= 0
        return ok & (j <= i + Lk - Lq) if causal else ok

    block_mask = create_block_mask(visible, B if lens is not None else None, None, Lq, Lk, device=q.device)
    flex = _flex_kernel(q.device.type == "cuda")
    return flex(q, k, v, block_mask=block_mask, enable_gqa=q.shape[1] != k.shape[1])


def sdpa_masked(
    q: Tensor, k: Tensor, v: Tensor, visible: Tensor | None, bias: Tensor | None = None, dropout_p: float = 0.0
) -> Tensor:
    """SDPA under a bool mask (True = may attend) and/or a float bias; rows that see no key give zeros (SDPA
    alone would give NaN). Shape: q (B, H, Lq, D), k, v (B, Hkv, Lk, D), visible and bias broadcastable to
    (B, H, Lq, Lk) -> (B, H, Lq, D)."""
    gqa = q.shape[1] != k.shape[1]
    if visible is None:
        mask = None if bias is None else bias.to(q.dtype)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, enable_gqa=gqa)
    # A fully masked row would make SDPA return NaN: let it see everything, then zero its output.
    empty = ~visible.any(dim=-1, keepdim=True)
    allowed = visible | empty
    mask = allowed if bias is None else bias.to(q.dtype).masked_fill(~allowed, float("-inf"))
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, enable_gqa=gqa)
    return out.masked_fill(empty, 0.0)


def backend_for(q: Tensor, valid_lens: Tensor | None, causal: bool, dropout_p: float = 0.0) -> str:
    """The kernel `masked_attention` takes: SDPA on the CPU and wherever dropout is on (flex and flash have
    none); on CUDA, ATTNLAB_ATTENTION if set, else CUDA_BACKEND's measured choice (SDPA where that is the Triton
    kernel and Triton is not installed, or varlen for causal attention, which it cannot mask)."""
    name = os.environ.get(ENV, "").strip().lower()
    if name and name not in BACKENDS:
        raise ValueError(f"{ENV} must be one of {', '.join(BACKENDS)}, got {name!r}; unset it for the measured default")
    if q.device.type != "cuda" or dropout_p > 0:
        return "sdpa"
    if name == "varlen" and causal:  # varlen has no causal form (attention/varlen.py)
        return "sdpa"
    if name:
        return name
    measured = CUDA_BACKEND["causal" if causal else "valid_lens", torch.is_grad_enabled() and q.requires_grad]
    if measured == "flash" and not triton_available():  # no [kernels] extra here
        return "sdpa"
    return "sdpa" if measured == "varlen" and causal else measured


def masked_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    valid_lens: Tensor | None = None,
    causal: bool = False,
    dropout_p: float = 0.0,
    backend: str | None = None,
) -> Tensor:
    """softmax(q k^T / sqrt(D), masked) v for a padded batch and/or causal attention, by `backend` ("sdpa",
    "flex", "flash", "varlen"; None: `backend_for`). Every backend gives the same output (and gradients: flex
    has none on the CPU); a query that sees no key gives zeros. varlen takes no causal mask (`backend_for`
    never picks it for one).

    Shape: q (B, H, Lq, D), k, v (B, Hkv, Lk, D), valid_lens (B,) integers or None -> (B, H, Lq, D).

    Examples:
        >>> q, k, v = torch.randn(2, 4, 5, 8), torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8)
        >>> out = masked_attention(q, k, v, torch.tensor([5, 2]), backend="sdpa")
        >>> out.shape
        torch.Size([2, 4, 5, 8])
    """
    _check(q, k, v, valid_lens)
    backend = backend or backend_for(q, valid_lens, causal, dropout_p)
    if backend in ("flash", "flex") and dropout_p > 0:  # never dropped silently: training would lose its dropout
        raise ValueError(
            f"the {backend} backend has no attention dropout, got dropout_p={dropout_p}; pass backend=None (SDPA "
            "wherever dropout is on), 'sdpa' or 'varlen'"
        )
    if backend == "flash":
        return flash_attention(q, k, v, valid_lens, causal)
    if backend == "flex":
        return flex_masked(q, k, v, valid_lens, causal)
    if backend == "varlen":
        if causal:
            raise ValueError("the varlen backend masks padded keys only, not causal attention; use 'sdpa' or None")
        return varlen_attention(q, k, v, valid_lens, dropout_p)
    if backend != "sdpa":
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)} or None, got {backend!r}")
    B, _, Lq, _ = q.shape
    Lk = k.shape[2]
    if valid_lens is None and causal and Lq == Lk:
        # SDPA's own causal flag aligns top-left, which equals ours only when Lq == Lk.
        return F.scaled_dot_product_attention(
            q, k, v, dropout_p=dropout_p, is_causal=True, enable_gqa=q.shape[1] != k.shape[1]
        )
    visible = build_mask(B, Lq, Lk, valid_lens, None, causal, None, q.device)
    # Only a zero length, or causal queries before the first key, can empty a row; skipping the check
    # otherwise keeps short sequences within a few % of raw SDPA.
    if (causal and Lq > Lk) or (valid_lens is not None and bool((valid_lens == 0).any())):
        return sdpa_masked(q, k, v, visible, None, dropout_p)
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=visible, dropout_p=dropout_p, enable_gqa=q.shape[1] != k.shape[1]
    )

"""Rows of a decoding cache gathered by index (`csrc/gather_rows.c`), with PyTorch's `index_select` where the
C pass does not run: beam search keeps its hypotheses' parents, finished sentences leave the batch.

    gather_rows(dst, src, index)   dst[i] = src[index[i]] for (B, H, L, Dh) views; dst (n, H, L, Dh)
    gather_rows(dst, src, steps)   dst[i, :, t] = src[steps[i, t], :, t] for steps (n, L): each step of a row
                                   from its own row (reorders kept as an index, laid out again)
    native_gather_rows(...)        the same by the C pass: True where it ran
"""

from __future__ import annotations

import ctypes

import torch
from torch import Tensor

from . import loader as native

__all__ = ["SIGNATURES", "gather_rows", "native_gather_rows"]

_ARGS = [native.PTR, *[native.I64] * 4, native.PTR, *[native.I64] * 3, native.PTR, *[native.I64] * 4]
SIGNATURES = {"attnlab_gather_rows": _ARGS, "attnlab_gather_steps": _ARGS}  # index (n,) | steps (n, L)


def gather_rows(dst: Tensor, src: Tensor, index: Tensor) -> None:
    """dst[i] = src[index[i]] (index (n,)), or dst[i, :, t] = src[index[i, t], :, t] (index (n, L)), for 4-D
    tensors of one dtype that do not overlap in memory, dst (n, *src.shape[1:]): by attnlab's C pass where both
    are on the CPU with a contiguous last dimension, autograd is off and index is contiguous int64 on the CPU
    (dst's version counter is not bumped), else PyTorch's indexing (which names an index out of range).

    Examples:
        >>> src, dst = torch.arange(24.0).view(3, 2, 2, 2), torch.empty(2, 2, 2, 2)
        >>> gather_rows(dst, src, torch.tensor([2, 0]))
        >>> torch.equal(dst, src[[2, 0]])
        True
        >>> gather_rows(dst, src, torch.tensor([[2, 1], [0, 0]]))   # row 0: step 0 of row 2, step 1 of row 1
        >>> torch.equal(dst[0, :, 1], src[1, :, 1])
        True
    """
    if native_gather_rows(dst, src, index):
        return
    if index.dim() == 2:  # (n, L) -> (n, H, L) source rows, each step's own
        H, L = src.shape[1], src.shape[2]
        rows = index[:, None, :].expand(-1, H, -1)
        dst.copy_(src[rows, torch.arange(H)[None, :, None], torch.arange(L)[None, None, :]])
        return
    torch.index_select(src, 0, index, out=dst)


def native_gather_rows(dst: Tensor, src: Tensor, index: Tensor) -> bool:
    """`gather_rows` by the C pass; False where it did not run (see `gather_rows` for what it takes)."""
    steps = index.dim() == 2
    if (
        src.dim() == 4
        and dst.shape == (index.shape[0], *src.shape[1:])
        and index.shape[1:] == src.shape[2:3] * steps
        and index.dtype is torch.int64
        and index.is_cpu
        and index.is_contiguous()
        and native.takes(src.dtype, src, dst)
    ):
        symbol = "attnlab_gather_steps" if steps else "attnlab_gather_rows"
        fn = native.function("gather_rows", symbol, SIGNATURES[symbol], ctypes.c_int)
        if fn is not None:
            e = src.element_size()
            (s0, s1, s2, _), (d0, d1, d2, _) = src.stride(), dst.stride()
            n, n1, n2, n3 = dst.shape
            status = fn(
                src.data_ptr(), src.shape[0], s0 * e, s1 * e, s2 * e, dst.data_ptr(), d0 * e, d1 * e, d2 * e,
                index.data_ptr(), n, n1, n2, n3 * e,
            )  # fmt: skip
            return status == 0
    return False

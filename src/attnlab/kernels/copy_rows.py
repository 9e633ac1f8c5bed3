"""A strided copy of rows (`csrc/copy_rows.c`): a decoding step's new keys or values into the KV cache's slot.

copy_rows(dst, src)        -> dst[...] = src, by the C pass where it runs, else PyTorch's copy
native_copy_rows(dst, src) -> True where the C pass did the copy
"""

from __future__ import annotations

from torch import Tensor

from .loader import I64, PTR, function, takes

__all__ = ["SIGNATURES", "copy_rows", "native_copy_rows"]

SIGNATURES = {"attnlab_copy_rows": [PTR, *[I64] * 3, PTR, *[I64] * 7]}


def copy_rows(dst: Tensor, src: Tensor) -> None:
    """dst[...] = src for two (n0, n1, n2, Dh) tensors that do not overlap in memory: by attnlab's C pass where
    `native_copy_rows` takes them, else PyTorch's copy (which also converts a dtype)."""
    if not native_copy_rows(dst, src):
        dst.copy_(src)


def native_copy_rows(dst: Tensor, src: Tensor) -> bool:
    """The C pass's copy where both are 4-d tensors of one shape and dtype on the CPU with a contiguous last
    dimension and autograd is off (dst's version counter is not bumped); False where it did not run."""
    if dst.dim() != 4 or dst.shape != src.shape or not takes(src.dtype, src, dst):
        return False
    fn = function("copy_rows", "attnlab_copy_rows", SIGNATURES["attnlab_copy_rows"])
    if fn is None:
        return False
    e = src.element_size()
    (s0, s1, s2, _), (d0, d1, d2, _) = src.stride(), dst.stride()
    n0, n1, n2, n3 = src.shape
    fn(src.data_ptr(), s0 * e, s1 * e, s2 * e, dst.data_ptr(), d0 * e, d1 * e, d2 * e, n0, n1, n2, n3 * e)
    return True

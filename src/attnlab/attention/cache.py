"""The decoding cache of `MultiHeadAttention`: growing self-attention keys/values, static cross-attention."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from .masking import build_mask


class KVCache:
    """Projected keys/values of one attention module, kept across decoding steps.

    static=False (decoder self-attention): each call appends the new step's keys/values, written into a
    preallocated buffer that doubles when full (amortised O(1) copies per step instead of a `torch.cat`
    of the whole history every step).
    static=True (cross-attention): the encoder's keys/values are projected once and reused, and so is
    the key mask built from the source lengths (`key_mask`).

    `finite` is False once a non-finite key or value has entered the cache, so attention checks only the
    new rows instead of the whole cache every step.

    Shape: k, v: (B, H, L, Dh) (views of the buffers for a growing cache).
    """

    def __init__(self, static: bool = False):
        self.static = static
        # Any: a Tensor once filled (None before); method calls between checks defeat mypy's narrowing.
        self.k: Any = None
        self.v: Any = None
        self.finite = True
        self._kbuf: Any = None  # (B, H, capacity, Dh); k is kbuf[:, :, :len]
        self._vbuf: Any = None
        self._mask_for: Tensor | None = None  # the valid_lens the cached key mask was built from
        self._mask: tuple[Tensor | None, bool] | None = None

    def __len__(self) -> int:
        return 0 if self.k is None else self.k.shape[2]

    def update(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        if self.k is None or self.v is None or self.static:
            self.k, self.v = k, v
            self._kbuf = self._vbuf = None
            self.finite = _all_finite(k, v)
            return k, v
        self.finite = self.finite and _all_finite(k, v)
        L, t = self.k.shape[2], k.shape[2]
        if not self._owns_buffers() or L + t > self._kbuf.shape[2]:
            self._grow(L + t)
        self._kbuf[:, :, L : L + t] = k
        self._vbuf[:, :, L : L + t] = v
        self.k, self.v = self._kbuf[:, :, : L + t], self._vbuf[:, :, : L + t]
        return self.k, self.v

    def _owns_buffers(self) -> bool:
        # k/v may have been assigned from outside (they are public): then the buffers are stale.
        return (
            self._kbuf is not None
            and self.k is not None
            and self.k.data_ptr() == self._kbuf.data_ptr()
            and self.k.shape[:2] == self._kbuf.shape[:2]
            and self.k.dtype == self._kbuf.dtype
        )

    def _grow(self, needed: int) -> None:
        B, H, L, Dh = self.k.shape
        cap = max(16, needed, 2 * L)
        kbuf = self.k.new_empty((B, H, cap, Dh))
        vbuf = self.v.new_empty((B, H, cap, Dh))
        kbuf[:, :, :L] = self.k
        vbuf[:, :, :L] = self.v
        self._kbuf, self._vbuf = kbuf, vbuf
        self.k, self.v = kbuf[:, :, :L], vbuf[:, :, :L]

    def key_mask(self, valid_lens, num_queries: int, device) -> tuple[Tensor | None, bool]:
        """(visible (B, 1, 1|Lq, Lk) bool mask or None, whether some query sees no key) for these
        source lengths; built once per static cache and source batch instead of every step."""
        if self._mask is None or self._mask_for is not valid_lens:
            visible = build_mask(self.k.shape[0], num_queries, self.k.shape[2], valid_lens, device=device)
            lens = torch.as_tensor(valid_lens)
            self._mask = (visible, lens.dim() == 2 or bool((lens == 0).any()))
            self._mask_for = valid_lens
        return self._mask

    def reorder(self, index: Tensor) -> KVCache:
        """Keep the batch rows named by `index` (beam search, finished sentences leaving); returns self."""
        if self.k is not None:
            if self._owns_buffers():
                L = self.k.shape[2]
                self._kbuf, self._vbuf = self._kbuf.index_select(0, index), self._vbuf.index_select(0, index)
                self.k, self.v = self._kbuf[:, :, :L], self._vbuf[:, :, :L]
            else:
                self.k, self.v = self.k.index_select(0, index), self.v.index_select(0, index)
            self._mask = self._mask_for = None
        return self


def _all_finite(*tensors: Tensor) -> bool:
    # One sum per tensor (a NaN or inf anywhere makes it non-finite; isfinite().all() costs four ops):
    # the exact non-finite path runs only when needed. A finite tensor whose sum overflows also takes
    # that path, which gives the same result for finite inputs, only slower.
    return all(
        math.isfinite(t.detach().sum(dtype=torch.float64 if t.dtype == torch.float64 else torch.float32))
        for t in tensors
        if t.numel()
    )

"""The decoding cache of `MultiHeadAttention`: growing self-attention keys/values, static cross-attention."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from attnlab.kernels.copy_rows import copy_rows
from attnlab.kernels.finite import all_finite
from attnlab.kernels.gather_rows import gather_rows

from .masking import build_mask


class KVCache:
    """Projected keys/values of one attention module, kept across decoding steps.

    static=False (decoder self-attention): each call appends the new step's keys/values, written into a
    preallocated buffer that doubles when full (amortised O(1) copies per step instead of a `torch.cat`
    of the whole history every step). The buffers are laid out (B, H, capacity, Dh), so each head's L
    cached steps are one contiguous (L, Dh) block: attention reads them as it reads a contiguous
    tensor (a (B, capacity, H, Dh) layout made one-query SDPA slower from a dozen steps on), and
    `reorder` (beam search, every step) copies just those blocks into a second, preallocated buffer
    and swaps the two, instead of allocating new buffers of the whole capacity every step (the
    allocation, page faults included, cost more than the copy). So a `k`/`v` taken from the cache is
    valid until the next `reorder` but one.
    static=True (cross-attention): the encoder's keys/values are projected once and reused, and so is
    the key mask built from the source lengths (`key_mask`).

    `finite` is False once a non-finite key or value has entered the cache, so attention checks only the
    new rows instead of the whole cache every step.

    Shape: k, v: (B, H, L, Dh) (for a growing cache, views of the (B, H, capacity, Dh) buffers).
    """

    # Steps of the first buffer. Each doubling copies the cache into fresh (page-faulting) buffers.
    min_capacity = 16

    def __init__(self, static: bool = False):
        self.static = static
        # Any: a Tensor once filled (None before); method calls between checks defeat mypy's narrowing.
        self.k: Any = None
        self.v: Any = None
        self.finite = True
        self._kbuf: Any = None  # (B, H, capacity, Dh); k is kbuf[:, :, :len]
        self._vbuf: Any = None
        self._spare: Any = None  # (kbuf, vbuf) with at least as many rows, reused by `reorder`; or None
        self._reserved = 0  # steps the first buffer is allocated for (`reserve`)
        self._mask_for: Tensor | None = None  # the valid_lens the cached key mask was built from
        self._mask: tuple[Tensor | None, bool] | None = None

    def __len__(self) -> int:
        return 0 if self.k is None else self.k.shape[2]

    def reserve(self, steps: int) -> None:
        """Allocate the buffers for `steps` cached steps when they are first needed (decoding knows its
        length limit), instead of doubling from `min_capacity`: each doubling copies the whole cache into
        fresh buffers (BENCHMARKS.md). Pages that are
        never written are never touched, so a generous reservation costs address space, not memory."""
        self._reserved = max(self._reserved, steps)

    def update(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        if self.k is None or self.v is None or self.static:
            self.k, self.v = k, v
            self._kbuf = self._vbuf = self._spare = None
            self.finite = all_finite(k, v)
            return k, v
        self.finite = self.finite and all_finite(k, v)
        L, t = self.k.shape[2], k.shape[2]
        self._make_room(L + t)
        copy_rows(self._kbuf[:, :, L : L + t], k)
        copy_rows(self._vbuf[:, :, L : L + t], v)
        self._set_views(L + t)
        return self.k, self.v

    def next_slot(self, rows: int, heads: int, head_dim: int) -> tuple[Tensor, Tensor, int]:
        """For a kernel that writes the next step itself (`attnlab.inference.int8_step`): the (B, H, capacity, Dh)
        key and value buffers with room for one more step, and its position L; `advance` then takes it in (a
        `reorder` in between drops the step). An empty cache gets fp32 buffers of (rows, heads, reserved
        steps, head_dim); a filled one keeps its shape and dtype (the caller checks them)."""
        if self.k is None:
            shape = (rows, heads, max(self.min_capacity, self._reserved), head_dim)
            kbuf, vbuf = torch.empty(shape, dtype=torch.float32), torch.empty(shape, dtype=torch.float32)
            self._kbuf, self._vbuf, self._spare, self.finite = kbuf, vbuf, None, True
            self._set_views(0)
        L = self.k.shape[2]
        self._make_room(L + 1)
        return self._kbuf, self._vbuf, L

    def advance(self, finite: bool) -> None:
        """Take in the step written at `next_slot`'s position; `finite`: whether its keys and values are."""
        self.finite = self.finite and finite
        self._set_views(self.k.shape[2] + 1)

    def _make_room(self, steps: int) -> None:
        """Own buffers holding at least `steps` steps (grown, the filled steps copied, where they do not)."""
        if not self._owns_buffers() or self._kbuf.shape[2] < steps:
            self._grow(steps)

    def _set_views(self, L: int) -> None:
        self.k, self.v = self._kbuf[:, :, :L], self._vbuf[:, :, :L]

    def _owns_buffers(self) -> bool:
        # k/v may have been assigned from outside (they are public): then the buffers are stale.
        return (
            self._kbuf is not None
            and self.k is not None
            and self.k.data_ptr() == self._kbuf.data_ptr()
            and self.k.shape[:2] == self._kbuf.shape[:2]
            and self.k.shape[3] == self._kbuf.shape[3]
            and self.k.stride() == self._kbuf.stride()
            and self.k.dtype == self._kbuf.dtype
        )

    def _grow(self, needed: int) -> None:
        B, H, L, Dh = self.k.shape
        cap = max(self.min_capacity, needed, 2 * L, self._reserved)
        kbuf = self.k.new_empty((B, H, cap, Dh))
        vbuf = self.v.new_empty((B, H, cap, Dh))
        kbuf[:, :, :L] = self.k
        vbuf[:, :, :L] = self.v
        self._kbuf, self._vbuf, self._spare = kbuf, vbuf, None
        self._set_views(L)

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
        """Keep the batch rows named by `index` (n,) (beam search, finished sentences leaving), or with index
        (n, L) take step t of row i from row index[i, t] (reorders kept as an index, laid out again); returns
        self."""
        if self.k is None:
            return self
        if index.dim() == 2 and not (self._owns_buffers() and not self.k.requires_grad):
            k, v = self.k.new_empty((len(index), *self.k.shape[1:])), self.v.new_empty((len(index), *self.v.shape[1:]))
            gather_rows(k, self.k, index)
            gather_rows(v, self.v, index)
            self.k, self.v = k, v
            self._kbuf = self._vbuf = self._spare = None
        elif self._owns_buffers() and not self.k.requires_grad:
            L, n = self.k.shape[2], index.shape[0]
            kbuf, vbuf = self._kbuf, self._vbuf
            spare = self._spare  # same (H, capacity, Dh) as kbuf: `_grow` and `update` drop it
            if spare is not None and spare[0].shape[0] >= n:
                # The first n rows of a (B, H, capacity, Dh) buffer are one: as sentences leave, the
                # buffers keep being reused (their pages already faulted in) rather than reallocated.
                knew, vnew = spare[0][:n], spare[1][:n]
            else:
                knew, vnew = kbuf.new_empty((n, *kbuf.shape[1:])), vbuf.new_empty((n, *vbuf.shape[1:]))
            # Only the L filled steps of each row are copied, straight into the other buffer.
            gather_rows(knew[:, :, :L], kbuf[:, :, :L], index)
            gather_rows(vnew[:, :, :L], vbuf[:, :, :L], index)
            self._spare = (kbuf, vbuf)
            self._kbuf, self._vbuf = knew, vnew
            self._set_views(L)
        else:
            self.k, self.v = self.k.index_select(0, index), self.v.index_select(0, index)
            self._kbuf = self._vbuf = self._spare = None
        self._mask = self._mask_for = None
        return self

"""Masks and the masked softmax: the one place where the book's `valid_lens` become boolean masks.

Convention (as in `F.scaled_dot_product_attention`): a boolean mask is **True where a query may attend**.
A query row that sees no key at all gets a zero weight row (and so a zero output) — never NaN and never
the uniform weights the book's `-1e6` fill produces.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def sequence_mask(X: Tensor, valid_len: Tensor, value: float = 0.0) -> Tensor:
    """The book's helper: fill entries of X beyond each row's valid length with `value`.

    Shape:
        X: (N, L, ...) or (N, L); valid_len: (N,). Returns a new tensor shaped like X.
    """
    if valid_len.dim() != 1 or valid_len.shape[0] != X.shape[0]:
        raise ValueError(
            f"sequence_mask: expected valid_len of shape ({X.shape[0]},) for X of shape {tuple(X.shape)}, "
            f"got {tuple(valid_len.shape)}"
        )
    keep = torch.arange(X.shape[1], device=X.device)[None, :] < valid_len[:, None].to(X.device)
    keep = keep.reshape(keep.shape + (1,) * (X.dim() - 2))
    return X.masked_fill(~keep, value)


def lengths_to_mask(valid_lens: Tensor, num_queries: int, num_keys: int) -> Tensor:
    """Turn the book's `valid_lens` into a boolean key mask.

    Shape:
        valid_lens: (B,) — every query of example b sees keys [0, valid_lens[b]);
                    (B, Lq) — query i of example b sees keys [0, valid_lens[b, i]).
        returns: (B, 1, 1, Lk) or (B, 1, Lq, Lk), broadcastable over heads.
    """
    if not isinstance(valid_lens, Tensor):
        valid_lens = torch.as_tensor(valid_lens)
    if valid_lens.dtype == torch.bool or (
        valid_lens.dtype.is_floating_point and not torch.equal(valid_lens, valid_lens.round())
    ):
        raise ValueError(f"valid_lens must hold whole numbers of keys, got dtype {valid_lens.dtype}")
    if valid_lens.dim() not in (1, 2):
        raise ValueError(f"valid_lens must have shape (B,) or (B, Lq), got {tuple(valid_lens.shape)}")
    if valid_lens.dim() == 2 and valid_lens.shape[1] != num_queries:
        raise ValueError(
            f"valid_lens of shape (B, Lq) must have Lq={num_queries} (the number of queries), "
            f"got {tuple(valid_lens.shape)}"
        )
    if valid_lens.numel() and (valid_lens.min() < 0 or valid_lens.max() > num_keys):
        raise ValueError(
            f"valid_lens must lie in [0, {num_keys}] (the number of keys), got values in "
            f"[{int(valid_lens.min())}, {int(valid_lens.max())}]"
        )
    positions = torch.arange(num_keys, device=valid_lens.device)
    if valid_lens.dim() == 1:
        return (positions < valid_lens[:, None])[:, None, None, :]
    return (positions < valid_lens[..., None])[:, None, :, :]


def causal_mask(num_queries: int, num_keys: int, device=None) -> Tensor:
    """(Lq, Lk) lower-triangular mask aligned to the bottom right.

    With a key/value cache the queries are the *last* Lq positions of Lk, so query i sits at absolute
    position Lk - Lq + i and may see keys up to and including that position.
    """
    offset = num_keys - num_queries
    q = torch.arange(num_queries, device=device)[:, None] + offset
    k = torch.arange(num_keys, device=device)[None, :]
    return k <= q


def window_mask(num_queries: int, num_keys: int, window: int, causal: bool = False, device=None) -> Tensor:
    """(Lq, Lk) band mask: query i (bottom-right aligned) sees keys j with |i - j| <= window
    (and j <= i when causal)."""
    offset = num_keys - num_queries
    q = torch.arange(num_queries, device=device)[:, None] + offset
    k = torch.arange(num_keys, device=device)[None, :]
    band = (q - k).abs() <= window
    return band & (k <= q) if causal else band


def _as_4d(mask: Tensor, num_queries: int, num_keys: int) -> Tensor:
    """Bring a user mask of shape (Lq, Lk), (B, Lq, Lk) or (B|1, H|1, Lq, Lk) to 4-D."""
    if mask.dtype != torch.bool:
        raise ValueError(f"mask must be a boolean tensor (True = may attend), got dtype {mask.dtype}")
    if mask.dim() == 2:
        mask = mask[None, None]
    elif mask.dim() == 3:
        mask = mask[:, None]
    elif mask.dim() != 4:
        raise ValueError(f"mask must have shape (Lq, Lk), (B, Lq, Lk) or (B, H, Lq, Lk), got {tuple(mask.shape)}")
    if mask.shape[-2] not in (1, num_queries) or mask.shape[-1] not in (1, num_keys):
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not broadcast to (..., Lq={num_queries}, Lk={num_keys})"
        )
    return mask


def build_mask(
    batch_size: int,
    num_queries: int,
    num_keys: int,
    valid_lens: Tensor | None = None,
    mask: Tensor | None = None,
    causal: bool = False,
    window: int | None = None,
    device=None,
) -> Tensor | None:
    """Combine every way of saying "who may attend to whom" into one boolean mask, or None.

    Returns:
        None when everything is visible (so SDPA may take its unmasked fast path), else a bool tensor
        of shape (B|1, 1|H, Lq, Lk).
    """
    out = None
    if valid_lens is not None:
        valid_lens = torch.as_tensor(valid_lens, device=device)
        if valid_lens.shape[0] != batch_size:
            raise ValueError(
                f"valid_lens has batch size {valid_lens.shape[0]} but the queries have batch size {batch_size}"
            )
        out = lengths_to_mask(valid_lens, num_queries, num_keys)
    if mask is not None:
        m = _as_4d(mask.to(device) if device is not None else mask, num_queries, num_keys)
        if m.shape[0] not in (1, batch_size):
            raise ValueError(f"mask has batch size {m.shape[0]}, expected 1 or {batch_size}")
        out = m if out is None else out & m
    if window is not None:
        band = window_mask(num_queries, num_keys, window, causal, device)
        out = band[None, None] if out is None else out & band
    elif causal:
        tri = causal_mask(num_queries, num_keys, device)
        out = tri[None, None] if out is None else out & tri
    return out


def masked_softmax(X: Tensor, valid_lens: Tensor | None = None, mask: Tensor | None = None) -> Tensor:
    """Softmax over the last axis that gives exactly zero weight to masked keys.

    Args:
        X: scores, (B, Lq, Lk) or (B, H, Lq, Lk), any floating dtype (float16/bfloat16 included).
        valid_lens: the book's lengths, (B,) or (B, Lq); for 4-D X they apply to every head.
        mask: boolean, True = may attend; broadcastable to X.
    Returns:
        weights shaped like X; rows with no visible key are all zeros.

    Examples:
        >>> import torch
        >>> masked_softmax(torch.zeros(2, 1, 4), torch.tensor([2, 0]))   # the book's valid_lens
        tensor([[[0.5000, 0.5000, 0.0000, 0.0000]],
        <BLANKLINE>
                [[0.0000, 0.0000, 0.0000, 0.0000]]])
    """
    if valid_lens is None and mask is None:
        return F.softmax(X, dim=-1)
    if X.dim() not in (3, 4):
        raise ValueError(f"masked_softmax expects scores of shape (B, Lq, Lk) or (B, H, Lq, Lk), got {tuple(X.shape)}")
    squeeze = X.dim() == 3
    X4 = X[:, None] if squeeze else X
    B, _, Lq, Lk = X4.shape
    visible = build_mask(B, Lq, Lk, valid_lens=valid_lens, mask=mask, device=X.device)
    weights = _softmax_with_mask(X4, visible)
    return weights[:, 0] if squeeze else weights


def _softmax_with_mask(scores: Tensor, visible: Tensor | None) -> Tensor:
    """Softmax with -inf at hidden keys; empty rows (all -inf -> NaN) become zeros."""
    if visible is None:
        return F.softmax(scores, dim=-1)
    # -inf is exact in every floating dtype, unlike a -1e6 fill (which overflows float16 and, worse,
    # gives a fully masked row uniform weights instead of none).
    # Empty rows are softmaxed unmasked (no NaN even in the backward pass), then zeroed.
    empty = ~visible.any(dim=-1, keepdim=True)
    scores = scores.masked_fill(~(visible | empty), float("-inf"))
    return F.softmax(scores, dim=-1).masked_fill(empty, 0.0)

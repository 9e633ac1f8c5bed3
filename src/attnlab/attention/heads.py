"""Heads as units: masks that gate each head's output, held per thread, and pruning that removes heads.

    with mask_heads(model, {"encoder.blocks.0.attention": [1, 0, 1, 1]}):
        model(...)                      # head 1 of that module contributes nothing, in this thread only
    prune_heads(model, {"encoder.blocks.0.attention": [1]})   # physically removes head 1

A head mask of shape (H,) multiplies each head's output before the output projection W_o (Michel et al.
2019): 1 keeps a head, 0 removes its contribution, any float is a gate (its gradient is the head's
importance signal). Like recordings, active masks live in a `contextvars.ContextVar`, so one model
can serve many threads, each with its own heads switched off, without editing weights.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from types import MappingProxyType
from typing import Protocol, cast

import torch
from torch import Tensor, nn

from attnlab.inference.packed import is_float_linear


class HeadedAttention(Protocol):
    """What head masking and pruning need of an attention module (MultiHeadAttention has it)."""

    num_heads: int

    def prune_heads(self, heads: Sequence[int]) -> None: ...


# id(module) -> (H,) gate, for the masks open in this context (merged: inner masks multiply outer ones).
# A read-only view as the default, so no context can mutate the value every other context starts from.
_ACTIVE: ContextVar[Mapping[int, Tensor]] = ContextVar("attnlab_head_masks", default=MappingProxyType({}))


def check_head_mask(head_mask, num_heads: int, where: str = "head_mask") -> Tensor:
    """Validate a head mask and return it as a float tensor of shape (H,).

    Accepts a tensor or a sequence of numbers/bools; raises ValueError saying what was expected.
    """
    if not isinstance(head_mask, Tensor):
        try:
            head_mask = torch.as_tensor(head_mask, dtype=torch.float32)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise ValueError(f"{where} must be {num_heads} numbers (one gate per head), got {head_mask!r}") from exc
    if head_mask.dim() != 1 or head_mask.shape[0] != num_heads:
        raise ValueError(
            f"{where} must have shape ({num_heads},) (one gate per head), got shape "
            f"{tuple(head_mask.shape)}; use 1 to keep a head and 0 to mask it"
        )
    if head_mask.dtype == torch.bool or not head_mask.dtype.is_floating_point:
        head_mask = head_mask.float()
    if not bool(torch.isfinite(head_mask.detach()).all()):
        raise ValueError(f"{where} must hold finite gates, got {head_mask.tolist()}")
    return head_mask


def head_masks_active() -> bool:
    """Whether a `mask_heads` block is open in this context."""
    return bool(_ACTIVE.get())


def active_head_mask(module: nn.Module) -> Tensor | None:
    """The (H,) gate that `mask_heads` set for `module` in the current context, or None."""
    masks = _ACTIVE.get()
    return masks.get(id(module)) if masks else None


def attention_modules(model: nn.Module) -> dict[str, HeadedAttention]:
    """Qualified name -> every multi-head attention module of `model` (those with `num_heads`)."""
    # Recognised by their parts, not their class: importing MultiHeadAttention here would be circular.
    return {name or type(m).__name__: cast(HeadedAttention, m) for name, m in model.named_modules() if _is_multihead(m)}


def _is_multihead(m: nn.Module) -> bool:
    return isinstance(getattr(m, "num_heads", None), int) and all(hasattr(m, p) for p in ("W_q", "W_k", "W_v", "W_o"))


def _resolve(model: nn.Module, names: Sequence[str]) -> dict[str, HeadedAttention]:
    modules = attention_modules(model)
    unknown = [n for n in names if n not in modules]
    if unknown:
        raise ValueError(
            f"no multi-head attention module named {unknown[0]!r} in {type(model).__name__}; "
            f"valid names are {sorted(modules)}"
        )
    return {n: modules[n] for n in names}


def head_masks_from_indices(model: nn.Module, heads: Mapping[str, Sequence[int]]) -> dict[str, Tensor]:
    """{module name: head indices to turn off} -> {module name: (H,) 0/1 mask}; bad indices raise."""
    out = {}
    for name, m in _resolve(model, list(heads)).items():
        mask = torch.ones(m.num_heads)
        for h in _check_indices(heads[name], m.num_heads, name):
            mask[h] = 0.0
        out[name] = mask
    return out


def _check_indices(heads: Sequence[int], num_heads: int, name: str) -> list[int]:
    heads = list(heads)
    bad = [h for h in heads if isinstance(h, bool) or not isinstance(h, int) or not 0 <= h < num_heads]
    if bad:
        raise ValueError(f"{name} has heads 0..{num_heads - 1}, got head index {bad[0]!r}")
    return sorted(set(heads))


@contextmanager
def mask_heads(model: nn.Module, masks: Mapping[str, object]):
    """Gate the heads of `model`'s attention modules while the block runs, in this thread/task only.

    Args:
        masks: {module qualified name: (H,) gate}, e.g. {"decoder.blocks.1.cross_attention": [1, 0, 1, 1]}.
            Gates may be tensors that require grad (for gradient-based head importance).

    Examples:
        >>> import torch
        >>> from attnlab.attention import MultiHeadAttention, mask_heads
        >>> mha = MultiHeadAttention(8, 2).eval()
        >>> x = torch.randn(1, 3, 8)
        >>> with mask_heads(mha, {"MultiHeadAttention": [0, 0]}):
        ...     out = mha(x, x, x)
        >>> bool((out == 0).all())   # no bias: with every head masked the output is zero
        True
    """
    merged = dict(_ACTIVE.get())
    for name, m in _resolve(model, list(masks)).items():
        gate = check_head_mask(masks[name], m.num_heads, where=f"the head mask of {name}")
        key = id(m)
        merged[key] = gate * merged[key] if key in merged else gate
    token = _ACTIVE.set(merged)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def prune_heads(model: nn.Module, heads: Mapping[str, Sequence[int]]) -> dict[str, list[int]]:
    """Remove heads for good: {module name: indices of its *current* heads to remove}.

    Returns the indices removed per module (sorted). Outputs equal those of the unpruned model with the
    same heads masked to 0 (up to float rounding), at a smaller cost.
    """
    removed = {}
    for name, m in _resolve(model, list(heads)).items():
        idx = _check_indices(heads[name], m.num_heads, name)
        m.prune_heads(idx)
        removed[name] = idx
    return removed


def prune_projections(m, heads: Sequence[int]) -> None:
    """Remove heads of a multi-head attention module `m` for good (its `prune_heads`): W_q/W_k/W_v lose
    their rows, W_o its columns; `m.num_heads`, `m.num_kv_heads` and `m.kept_heads` follow.

    With grouped-query attention (groups of G = H / Hkv query heads sharing a KV head) only whole
    groups can go, taking their KV head with them: a group left smaller than the others has no
    equivalent grouped attention.
    """
    G, Dh = m.groups, m.head_dim
    heads = sorted(set(int(h) for h in heads))
    if any(not 0 <= h < m.num_heads for h in heads):
        raise ValueError(f"this attention has heads 0..{m.num_heads - 1}, got head indices {heads}")
    keep = [h for h in range(m.num_heads) if h not in heads]
    if G > 1 and any(set(range(h // G * G, h // G * G + G)) - set(heads) for h in heads):
        raise ValueError(
            f"this attention shares each KV head among {G} query heads (num_kv_heads={m.num_kv_heads}): "
            f"prune whole groups of {G} heads (g*{G} .. g*{G}+{G - 1}), got head indices {heads}"
        )
    rows = torch.tensor([h * Dh + i for h in keep for i in range(Dh)], dtype=torch.long)
    kv_rows = torch.tensor([g * Dh + i for g in sorted({h // G for h in keep}) for i in range(Dh)], dtype=torch.long)
    m.W_q = _slice_linear(m.W_q, rows, dim=0)
    for name in ("W_k", "W_v"):
        setattr(m, name, _slice_linear(getattr(m, name), kv_rows, dim=0))
    m.W_o = _slice_linear(m.W_o, rows, dim=1)
    m.kept_heads = [m.kept_heads[h] for h in keep]
    m.num_heads, m.num_kv_heads = len(keep), len(keep) // G


def _slice_linear(layer: nn.Linear, index: Tensor, dim: int) -> nn.Linear:
    """A new layer of the same kind (nn.Linear, or a PackedLinear: a decoding model stays packed) keeping
    the output rows (dim=0) or input columns (dim=1) named by index."""
    W = layer.weight.detach().index_select(dim, index.to(layer.weight.device)).clone()
    has_bias = layer.bias is not None
    with warnings.catch_warnings():  # pruning every head leaves zero-element weights: fine, not a mistake
        warnings.simplefilter("ignore", UserWarning)
        kind = type(layer) if is_float_linear(layer) else nn.Linear
        out = kind(W.shape[1], W.shape[0], bias=has_bias, device=W.device, dtype=W.dtype)
    with torch.no_grad():
        out.weight.copy_(W)
        if has_bias:
            b = layer.bias.detach()
            out.bias.copy_(b.index_select(0, index.to(b.device)) if dim == 0 else b)
    out.weight.requires_grad_(layer.weight.requires_grad)
    return out


def merge_pruned(
    previous: Mapping[str, Sequence[int]] | None, heads: Mapping[str, Sequence[int]], num_heads: int
) -> dict[str, list[int]]:
    """Record a pruning in terms of the *original* head indices (what a config stores).

    previous: {module name: original indices already removed}; heads: {module name: current indices to
    remove now}; num_heads: the unpruned H. Returns the updated {module name: original indices removed}.
    """
    out = {name: sorted(set(int(h) for h in idx)) for name, idx in (previous or {}).items()}
    for name, idx in heads.items():
        kept = [h for h in range(num_heads) if h not in out.get(name, [])]  # current index -> original
        removed = set(out.get(name, []))
        for h in _check_indices(idx, len(kept), name):
            removed.add(kept[h])
        out[name] = sorted(removed)
    return out


__all__ = [
    "merge_pruned",
    "active_head_mask",
    "attention_modules",
    "check_head_mask",
    "head_masks_from_indices",
    "mask_heads",
    "prune_heads",
]

"""Capture attention weights from any model, only when asked.

    with record_attention(model) as rec:
        model(...)
    rec.weights["encoder.blocks.0.attention"]  # list of (B, H, Lq, Lk) tensors, one per call

Outside a recording no attention module keeps a weight tensor anywhere, and multi-head attention
runs the fused SDPA kernel; inside one, every recordable module runs its explicit math path.

The active recordings live in a `contextvars.ContextVar`, not in flags on the modules: a recording is
seen only by the thread (or asyncio task) that opened it, so one model can serve many threads at once,
some recording and some not, and each recording gets exactly its own weights.
"""

from __future__ import annotations

from collections import defaultdict
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

# Every kind of attention map a model may declare (its `ATTENTION_KINDS`, a subset), in display order:
# the groups `attnlab.analysis` sorts recordings into.
ATTENTION_KINDS = ("encoder_self", "decoder_self", "cross")

# The recordings open in this context, innermost last. A tuple (immutable), so a context that copies
# it can never see another context's later changes.
_ACTIVE: ContextVar[tuple[AttentionRecording, ...]] = ContextVar("attnlab_recordings", default=())


@dataclass
class AttentionRecording:
    """What a recording captured: module qualified name -> list of weight tensors (B, H, Lq, Lk)."""

    weights: dict[str, list[Tensor]] = field(default_factory=lambda: defaultdict(list))
    detach: bool = True
    # id(module) -> qualified name, for the modules of the recorded model. The modules themselves are
    # kept in `_modules` so their ids cannot be reused by other objects while the recording lives.
    names: dict[int, str] = field(default_factory=dict, repr=False)
    _modules: list[Recordable] = field(default_factory=list, repr=False)

    def add(self, name: str, weights: Tensor) -> None:
        if weights.dim() == 3:  # single-head scoring modules: (B, Lq, Lk) -> (B, 1, Lq, Lk)
            weights = weights[:, None]
        self.weights[name].append(weights.detach() if self.detach else weights)

    def stacked(self, name: str, dim: int = 2) -> Tensor:
        """Concatenate the calls of one module, e.g. per-step decoder weights along the query axis."""
        return torch.cat(self.weights[name], dim=dim)


class Recordable:
    """Mixin for attention modules: `recording` is True while a recording of this module is active in
    the current context (thread / task); `_record` hands weights to every such recording."""

    @property
    def recording(self) -> bool:
        key = id(self)
        return any(key in rec.names for rec in _ACTIVE.get())

    def _record(self, weights: Tensor) -> None:
        key = id(self)
        for rec in _ACTIVE.get():
            name = rec.names.get(key)
            if name is not None:
                rec.add(name, weights)


def recording_active() -> bool:
    """Whether a recording is open in this context (its weights must be captured in this process)."""
    return bool(_ACTIVE.get())


@contextmanager
def record_attention(model: nn.Module, detach: bool = True):
    """Make every attention module inside `model` store its weights while the block runs.

    Only calls made in the current thread (or asyncio task) are recorded; other threads using the same
    model at the same time run unrecorded (and fused) unless they open their own recording.

    Examples:
        >>> import torch
        >>> from attnlab.attention import MultiHeadAttention, record_attention
        >>> mha = MultiHeadAttention(num_hiddens=8, num_heads=2).eval()
        >>> x = torch.randn(1, 3, 8)
        >>> with record_attention(mha) as rec:
        ...     _ = mha(x, x, x)
        >>> rec.weights["MultiHeadAttention"][0].shape
        torch.Size([1, 2, 3, 3])
    """
    modules = [(name, m) for name, m in model.named_modules() if isinstance(m, Recordable)]
    if not modules:
        raise ValueError(f"record_attention: {type(model).__name__} contains no attnlab attention module to record")
    rec = AttentionRecording(detach=detach)
    for name, m in modules:
        rec.names[id(m)] = name or type(m).__name__
        rec._modules.append(m)
    token = _ACTIVE.set(_ACTIVE.get() + (rec,))
    try:
        yield rec
    finally:
        _ACTIVE.reset(token)


def attention_maps(rec) -> dict[str, Tensor]:
    """Stitch a recording of step-by-step decoding into one (B, H, Lq, Lk) tensor per module.

    Cached decoding records one call per step: cross-attention (B, H, 1, S) each, self-attention
    (B, H, 1, t) with t growing. Calls are concatenated along the query axis; shorter key axes are padded
    with zeros on the right (a step cannot see the future, so those weights are exactly zero anyway).
    """
    maps = {}
    for name, calls in rec.weights.items():
        Lk = max(w.shape[-1] for w in calls)
        maps[name] = torch.cat([F.pad(w, (0, Lk - w.shape[-1])) for w in calls], dim=2)
    return maps

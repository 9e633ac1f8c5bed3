"""Capture attention weights from any model, only when asked.

    with record_attention(model) as rec:
        model(...)
    rec.weights["encoder.blocks.0.attention"]  # list of (B, H, Lq, Lk) tensors, one per call

Outside a recording no attention module keeps a weight tensor anywhere, and multi-head attention
runs the fused SDPA kernel; inside one, every recordable module runs its explicit math path.
"""

from __future__ import annotations

from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn


@dataclass
class AttentionRecording:
    """What a recording captured: module qualified name -> list of weight tensors (B, H, Lq, Lk)."""

    weights: dict[str, list[Tensor]] = field(default_factory=lambda: defaultdict(list))
    detach: bool = True

    def add(self, name: str, weights: Tensor) -> None:
        if weights.dim() == 3:  # single-head scoring modules: (B, Lq, Lk) -> (B, 1, Lq, Lk)
            weights = weights[:, None]
        self.weights[name].append(weights.detach() if self.detach else weights)

    def stacked(self, name: str, dim: int = 2) -> Tensor:
        """Concatenate the calls of one module, e.g. per-step decoder weights along the query axis."""
        return torch.cat(self.weights[name], dim=dim)


class Recordable:
    """Mixin for attention modules: `_recording` is set by `record_attention` and None otherwise."""

    _recording: AttentionRecording | None = None
    _record_name: str = ""

    @property
    def recording(self) -> bool:
        return self._recording is not None

    def _record(self, weights: Tensor) -> None:
        if self._recording is not None:
            self._recording.add(self._record_name, weights)


@contextmanager
def record_attention(model: nn.Module, detach: bool = True):
    """Make every attention module inside `model` store its weights while the block runs.

    Examples:
        >>> import torch
        >>> from attnlab.attention import MultiHeadAttention
        >>> mha = MultiHeadAttention(8, 2).eval()
        >>> X = torch.randn(1, 3, 8)
        >>> with record_attention(mha) as rec:
        ...     _ = mha(X, X, X)
        >>> [tuple(w.shape) for w in rec.weights["MultiHeadAttention"]]   # (B, H, Lq, Lk) per call
        [(1, 2, 3, 3)]
    """
    rec = AttentionRecording(detach=detach)
    modules = [(name, m) for name, m in model.named_modules() if isinstance(m, Recordable)]
    if not modules:
        raise ValueError(
            f"record_attention: {type(model).__name__} contains no attnlab attention module to record"
        )
    for name, m in modules:
        m._recording, m._record_name = rec, name or type(m).__name__
    try:
        yield rec
    finally:
        for _, m in modules:
            m._recording = None

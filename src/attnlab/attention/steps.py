"""Beam-folded queries for a decoding step: the hypotheses of a sentence folded into the query axis against
its one memory row, and recorded weights unfolded per hypothesis. (A step's few queries run on
`attnlab.kernels.few_queries`.)"""

from __future__ import annotations

import torch
from torch import Tensor


def fold_beams(queries: Tensor, keys: Tensor, valid_lens, mask, causal: bool, window, beam: int) -> Tensor:
    """Beam-folded queries (`MultiHeadAttention.forward(beam=...)`): (B*beam, Lq, D) -> (B, beam*Lq, D),
    after checking that folding changes no output (no mask, causal or window; valid_lens (B,) at most)."""
    R, Lq, D = queries.shape
    if keys.shape[0] * beam != R:
        raise ValueError(
            f"with beam={beam}, queries must have {beam} rows per key row: got queries {tuple(queries.shape)} "
            f"and keys {tuple(keys.shape)}"
        )
    if mask is not None or causal or window is not None:
        raise ValueError("beam > 1 folds beams into the query axis: it allows no mask, causal or window")
    if valid_lens is not None and torch.as_tensor(valid_lens).dim() != 1:
        raise ValueError(f"beam > 1 needs valid_lens of shape (B,), got {tuple(torch.as_tensor(valid_lens).shape)}")
    return queries.reshape(R // beam, beam * Lq, D)


def unfold_beams(weights: Tensor, beam: int) -> Tensor:
    """Recorded weights of folded queries (B, H, beam*Lq, Lk) -> (B*beam, H, Lq, Lk), one row per hypothesis."""
    if beam == 1:
        return weights
    B, H, BLq, Lk = weights.shape
    return weights.view(B, H, beam, BLq // beam, Lk).transpose(1, 2).reshape(B * beam, H, BLq // beam, Lk)


__all__ = ["fold_beams", "unfold_beams"]

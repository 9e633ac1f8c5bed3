"""The training loss: cross-entropy over real target tokens only (padding never counts)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def sequence_loss(logits: Tensor, targets: Tensor, valid_lens: Tensor,
                  label_smoothing: float = 0.0) -> tuple[Tensor, Tensor]:
    """Cross-entropy summed over real target tokens, and how many there are.

    Divide the sum by the count for the per-token mean. Unlike the book's `MaskedSoftmaxCELoss`
    (a mean over all padded steps, then over the batch) every real token — `<eos>` included — weighs
    the same however long its sentence and however much padding its batch has.

    Shape:
        logits (B, T, V) any float dtype (computed in float32); targets (B, T); valid_lens (B,).
        returns (loss_sum (), num_tokens ()).
    """
    B, T, V = logits.shape
    real = torch.arange(T, device=targets.device)[None, :] < valid_lens[:, None].to(targets.device)  # (B, T)
    # Only real positions enter the loss at all, so whatever the pad tokens or their logits are,
    # they can change neither the value nor the gradient.
    loss = F.cross_entropy(logits[real].float(), targets[real], reduction="sum",
                           label_smoothing=label_smoothing)
    return loss, real.sum()


def masked_cross_entropy(logits: Tensor, targets: Tensor, valid_lens: Tensor,
                         label_smoothing: float = 0.0) -> Tensor:
    """Mean cross-entropy per real target token (see `sequence_loss`)."""
    total, count = sequence_loss(logits, targets, valid_lens, label_smoothing)
    return total / count.clamp(min=1)

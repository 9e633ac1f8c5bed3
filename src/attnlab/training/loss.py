"""The training loss: cross-entropy over real target tokens only (padding never counts)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def target_mask(valid_lens: Tensor, num_steps: int) -> Tensor:
    """(B, T) bool: True at the real target positions (t < valid_lens[b]), False at padding."""
    return torch.arange(num_steps, device=valid_lens.device)[None, :] < valid_lens[:, None]


def sequence_loss(
    logits: Tensor, targets: Tensor, valid_lens: Tensor, label_smoothing: float = 0.0
) -> tuple[Tensor, Tensor]:
    """Cross-entropy summed over real target tokens, and how many there are.

    Divide the sum by the count for the per-token mean. Unlike the book's `MaskedSoftmaxCELoss`
    (a mean over all padded steps, then over the batch) every real token — `<eos>` included — weighs
    the same however long its sentence and however much padding its batch has.

    Shape:
        logits (B, T, V) any float dtype (computed in float32), or (N, V): the N real positions
            only, in row-major (b, t) order — what `Transformer(..., targets_mask=target_mask(...))`
            returns, so the output layer never runs on padding;
        targets (B, T); valid_lens (B,).
        returns (loss_sum (), num_tokens ()).
    """
    real = target_mask(valid_lens.to(targets.device), targets.shape[1])  # (B, T)
    if logits.dim() == 3:
        # Only real positions enter the loss at all, so whatever the pad tokens or their logits are,
        # they can change neither the value nor the gradient.
        logits = logits[real]
    elif logits.dim() != 2 or logits.shape[0] != int(real.sum()):
        raise ValueError(
            f"logits must be (B, T, V) or (N, V) with N = {int(real.sum())} real target positions, "
            f"got {tuple(logits.shape)}"
        )
    loss = F.cross_entropy(logits.float(), targets[real], reduction="sum", label_smoothing=label_smoothing)
    return loss, real.sum()


def masked_cross_entropy(logits: Tensor, targets: Tensor, valid_lens: Tensor, label_smoothing: float = 0.0) -> Tensor:
    """Mean cross-entropy per real target token (see `sequence_loss`)."""
    total, count = sequence_loss(logits, targets, valid_lens, label_smoothing)
    return total / count.clamp(min=1)

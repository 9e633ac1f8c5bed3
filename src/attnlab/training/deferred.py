"""Losses read late: a training step leaves its loss on the device, so the host never waits for the GPU.

    deferred = DeferredLosses(device)
    deferred.check(mean)                      # in the step, before the update: halts the run on a non-finite loss
    deferred.add(mean, tokens, batches)       # after it
    back = deferred.read(losses, window)      # every N steps, one transfer: (tokens, batches) to take back

A non-finite loss sets `halted` on the device, which the fused optimizer reads as its `found_inf`: that update
and every later one are skipped. `read` returns those steps (the non-finite one and the ones after it), so the
run's position goes back to the last finite state.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from attnlab.training.progress import LossWindow

__all__ = ["DeferredLosses"]


class DeferredLosses:
    """The steps taken but not yet read, and whether one of them diverged (on the device)."""

    def __init__(self, device: torch.device):
        self.steps: list[tuple[Tensor, int, int]] = []  # (mean loss (1,) on the device, target tokens, batches)
        self.halted = torch.zeros((), device=device)  # 1.0 once a loss was non-finite: sticky until the run stops

    def check(self, mean: Tensor) -> None:
        """Halt on the device if the step's mean loss (1,) is not finite (no read)."""
        self.halted = torch.maximum(self.halted, (~torch.isfinite(mean[0])).float())

    def add(self, mean: Tensor, tokens: int, batches: int) -> None:
        self.steps.append((mean, tokens, batches))

    def read(self, losses: list[float], window: LossWindow) -> list[tuple[int, int]]:
        """Read every pending loss in one transfer into `losses` and `window`, up to the first non-finite one;
        returns (tokens, batches) of that step and of every step after it (empty when all were finite)."""
        if not self.steps:
            return []
        values = torch.cat([loss for loss, _, _ in self.steps]).tolist()
        steps, self.steps = self.steps, []
        for i, (value, (_, tokens, _)) in enumerate(zip(values, steps)):
            if not math.isfinite(value):  # all-reduced: every rank sees it
                return [(t, b) for _, t, b in steps[i:]]
            losses.append(value)
            window.add(value, tokens)
        return []

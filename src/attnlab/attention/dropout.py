"""Dropout with a cheaper random mask on CPU.

`nn.Dropout` on CPU draws one Bernoulli sample per element, and on a small Transformer that costs about a
tenth of a training step (the profile of `benchmarks/training/train_throughput.py --profile`: `aten::bernoulli_`
10% at D = 256), more than the optimizer. `Dropout` draws 64 random bits per three elements instead and
compares 16 of them with a threshold: the same distribution up to a 2^-16 resolution of p, and a
training step of the D = 256 benchmark model ~10% faster (BENCHMARKS.md). Its fixed cost is higher:
under ~40k elements `nn.Dropout` measured faster (forward + backward, one avx2 core), so tensors under
2^15 elements keep it.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

__all__ = ["Dropout", "dropout_keep_mask"]

_LEVELS = 1 << 16  # p is rounded to a multiple of 2^-16


def dropout_keep_mask(shape: torch.Size | tuple[int, ...], p: float, device=None) -> tuple[Tensor, float]:
    """A boolean keep mask of `shape` (each element kept with probability 1 - p', p' = p rounded to a
    multiple of 2^-16) and the scale 1 / (1 - p') that keeps the expectation unchanged.

    Each int64 from the generator (`random_`: uniform over [0, 2^63), so its top bit is always 0) gives
    three 16-bit lanes; the fourth, holding that bit, is not used. Seeded by `torch.manual_seed` like
    any other draw.

    Examples:
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> keep, scale = dropout_keep_mask((1000, 100), 0.25)
        >>> round(keep.float().mean().item(), 2), scale
        (0.75, 1.3333333333333333)
    """
    n = math.prod(shape)
    dropped = round(p * _LEVELS)  # lanes below this count (of 2^16 equally likely values) are dropped
    words = torch.empty(-(-n // 3), dtype=torch.int64, device=device).random_()
    lanes = words.view(torch.int16).view(-1, 4)[:, :3].reshape(-1)[:n].view(shape)  # uniform in [-2^15, 2^15)
    return lanes >= dropped - _LEVELS // 2, _LEVELS / (_LEVELS - dropped)


class Dropout(nn.Dropout):
    """`nn.Dropout(p)`: in training, zero each element with probability p and scale the rest by 1 / (1 - p);
    in eval, the identity. On CPU the mask comes from `dropout_keep_mask` (p rounded to 2^-16); on other
    devices, for tensors under `min_fast_numel` elements, for in-place dropout and for p outside (0, 1) it
    is `nn.Dropout` itself (the same draws as `nn.Dropout`, so small models keep their seeded results).

    Shape: any -> the same.

    Examples:
        >>> import torch
        >>> drop = Dropout(0.5)
        >>> y = drop(torch.ones(40, 1000))
        >>> sorted(set(y.flatten().tolist()))
        [0.0, 2.0]
        >>> torch.equal(drop.eval()(y), y)
        True
    """

    min_fast_numel = 1 << 15

    def forward(self, input: Tensor) -> Tensor:
        if (
            not self.training
            or not 0.0 < self.p < 1.0
            or self.inplace
            or input.device.type != "cpu"
            or input.numel() < self.min_fast_numel
        ):
            return super().forward(input)
        keep, scale = dropout_keep_mask(input.shape, self.p, input.device)
        # One product with a float mask: autograd saves the mask and the backward is one multiplication.
        return input * (keep.to(input.dtype) * scale)

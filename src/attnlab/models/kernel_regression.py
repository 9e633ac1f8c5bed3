"""Nadaraya–Watson kernel regression: attention pooling before there were neural networks.

    f(q) = sum_i alpha(q, k_i) v_i,   alpha(q, k_i) = K((q - k_i) / h) / sum_j K((q - k_j) / h)

Queries are test inputs, keys the training inputs, values the training targets. `NadarayaWatson`
fixes the kernel and bandwidth h (nonparametric); `NWKernelRegression` learns the width w of a
Gaussian kernel, alpha = softmax_i(-((q - k_i) w)^2 / 2) (the book's parametric model).

Shapes: queries (Q,); keys and values (K,) shared by every query, or (Q, K) one row per query (the
leave-one-out training setting). Outputs (Q,); weights (Q, K).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

__all__ = [
    "KERNELS",
    "KernelData",
    "make_data",
    "target_function",
    "NadarayaWatson",
    "NWKernelRegression",
    "average_pooling",
    "leave_one_out",
    "fit",
]


def _gaussian(u: torch.Tensor) -> torch.Tensor:
    return torch.exp(-(u**2) / 2)


def _boxcar(u: torch.Tensor) -> torch.Tensor:
    return (u.abs() <= 1).to(u.dtype)


def _epanechnikov(u: torch.Tensor) -> torch.Tensor:
    # The true Epanechnikov kernel 3/4 (1 - u^2) on |u| <= 1 (the 3/4 cancels in the normalization).
    # The book's code named `epanechikov` computes max(1 - |u|, 0), which is the triangular kernel.
    return torch.clamp(1 - u**2, min=0)


def _triangular(u: torch.Tensor) -> torch.Tensor:
    return torch.clamp(1 - u.abs(), min=0)


def _constant(u: torch.Tensor) -> torch.Tensor:
    return torch.ones_like(u)


# name -> K(u); "constant" gives uniform weights, i.e. average pooling.
KERNELS = {
    "gaussian": _gaussian,
    "boxcar": _boxcar,
    "epanechnikov": _epanechnikov,
    "triangular": _triangular,
    "constant": _constant,
}


class KernelData(NamedTuple):
    """The book's toy regression problem (all float32 tensors)."""

    x_train: torch.Tensor  # (K,) sorted inputs, uniform on [0, 5)
    y_train: torch.Tensor  # (K,) f(x_train) + N(0, noise^2)
    x_test: torch.Tensor  # (Q,) 0, 0.1, ..., 4.9
    y_truth: torch.Tensor  # (Q,) noise-free f(x_test)


def target_function(x: torch.Tensor) -> torch.Tensor:
    """f(x) = 2 sin(x) + x^0.8, the book's ground truth."""
    return 2 * torch.sin(x) + x**0.8


def make_data(seed: int = 0, n_train: int = 50, noise: float = 0.5) -> KernelData:
    """Draw the book's data with a private generator (the global RNG is left alone)."""
    if n_train < 1:
        raise ValueError(f"n_train must be a positive number of training points, got {n_train}")
    if noise < 0:
        raise ValueError(f"noise must be a standard deviation >= 0, got {noise}")
    g = torch.Generator().manual_seed(seed)
    x_train, _ = torch.sort(torch.rand(n_train, generator=g) * 5)
    y_train = target_function(x_train) + noise * torch.randn(n_train, generator=g)
    # Integer steps, then scale: arange(0, 5, 0.1) can yield 51 points from float rounding.
    x_test = torch.arange(50, dtype=torch.float32) / 10
    return KernelData(x_train, y_train, x_test, target_function(x_test))


def _broadcast_keys(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor | None = None):
    """Validate shapes; return keys (and values) as (Q, K)."""
    if queries.dim() != 1:
        raise ValueError(f"queries must have shape (Q,), got {tuple(queries.shape)}")
    q = queries.shape[0]
    if keys.dim() == 1:
        keys = keys.unsqueeze(0).expand(q, -1)
    if keys.dim() != 2 or keys.shape[0] != q:
        raise ValueError(f"keys must have shape (K,) or (Q, K) = ({q}, K), got {tuple(keys.shape)}")
    if values is None:
        return keys
    if values.dim() == 1:
        values = values.unsqueeze(0).expand(q, -1)
    if values.shape != keys.shape:
        raise ValueError(f"values must match keys: keys broadcast to {tuple(keys.shape)}, values {tuple(values.shape)}")
    return keys, values


class NadarayaWatson(nn.Module):
    """Nonparametric attention pooling with a fixed kernel and bandwidth.

    Args:
        bandwidth: h > 0; the kernel sees (q - k) / h. Larger h -> flatter weights -> the prediction
            tends to the mean of the values.
        kernel: one of KERNELS ("constant" is average pooling).

    A query whose kernel support holds no key (possible with boxcar/epanechnikov/triangular) gets
    a zero weight row and prediction 0 — the project's rule for an empty attention row, never NaN.
    The Gaussian never has an empty row: it is normalized with a softmax over -u^2/2, so even keys
    far beyond the bandwidth (where exp underflows to 0) still give proper weights.
    """

    def __init__(self, bandwidth: float = 1.0, kernel: str = "gaussian"):
        super().__init__()
        if kernel not in KERNELS:
            raise ValueError(f"unknown kernel {kernel!r}; valid kernels: {', '.join(KERNELS)}")
        if not bandwidth > 0:  # also rejects NaN
            raise ValueError(f"bandwidth must be > 0, got {bandwidth}")
        self.bandwidth = float(bandwidth)
        self.kernel = kernel

    def extra_repr(self) -> str:
        return f"bandwidth={self.bandwidth}, kernel={self.kernel!r}"

    def weights(self, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """Attention weights (Q, K); each row sums to 1, or is all zero if no key is in support."""
        keys = _broadcast_keys(queries, keys)
        u = (queries.unsqueeze(1) - keys) / self.bandwidth  # (Q, K)
        if self.kernel == "gaussian":
            return torch.softmax(-(u**2) / 2, dim=1)
        k = KERNELS[self.kernel](u)
        total = k.sum(dim=1, keepdim=True)
        # Empty support: 0 / 1 = 0 instead of 0 / 0 = NaN.
        return k / torch.where(total > 0, total, torch.ones_like(total))

    def forward(self, queries, keys, values, return_weights: bool = False):
        """queries (Q,), keys/values (K,) or (Q, K) -> predictions (Q,) [, weights (Q, K)]."""
        keys, values = _broadcast_keys(queries, keys, values)
        w = self.weights(queries, keys)
        out = (w * values).sum(dim=1)
        return (out, w) if return_weights else out


def average_pooling(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """The baseline that ignores the query: every prediction is the mean of the values. (Q,)"""
    return NadarayaWatson(kernel="constant")(queries, keys, values)


class NWKernelRegression(nn.Module):
    """Parametric Nadaraya–Watson: a Gaussian kernel whose width w is learned.

    weights = softmax_k(-((q - k) * w)^2 / 2): w plays the role of 1 / bandwidth, so a larger
    learned w means narrower, sharper attention.

    Args:
        w: initial width; None draws it from U(0, 1) with the global generator, as the book does
            (seed with torch.manual_seed for a reproducible run).
    """

    def __init__(self, w: float | None = None):
        super().__init__()
        init = torch.rand(1) if w is None else torch.tensor([float(w)])
        self.w = nn.Parameter(init)

    def weights(self, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        keys = _broadcast_keys(queries, keys)
        return torch.softmax(-(((queries.unsqueeze(1) - keys) * self.w) ** 2) / 2, dim=1)

    def forward(self, queries, keys, values, return_weights: bool = False):
        """queries (Q,), keys/values (K,) or (Q, K) -> predictions (Q,) [, weights (Q, K)]."""
        keys, values = _broadcast_keys(queries, keys, values)
        w = self.weights(queries, keys)
        out = (w * values).sum(dim=1)
        return (out, w) if return_weights else out


def leave_one_out(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys and values (K, K-1): row i holds every training point except i.

    Training a kernel's width on keys that include the query itself would drive the width to
    infinity (each point attends only to itself and predicts its own label exactly).
    """
    n = x.shape[0]
    if n < 2:
        raise ValueError(f"leave-one-out needs at least 2 training points, got {n}")
    keep = ~torch.eye(n, dtype=torch.bool)
    return x.expand(n, n)[keep].reshape(n, n - 1), y.expand(n, n)[keep].reshape(n, n - 1)


def fit(
    model: nn.Module, x_train: torch.Tensor, y_train: torch.Tensor, lr: float = 0.5, epochs: int = 5
) -> list[float]:
    """Train `model` by full-batch SGD on the leave-one-out squared error, as the book does.

    The book minimizes the *sum* of squared errors with lr=0.5, so we keep that objective (lr is
    tuned for it); the returned history is the mean squared leave-one-out error per epoch, measured
    before that epoch's step, which is comparable across data sizes.
    """
    if epochs < 0:
        raise ValueError(f"epochs must be >= 0, got {epochs}")
    if not lr > 0:
        raise ValueError(f"lr must be > 0, got {lr}")
    keys, values = leave_one_out(x_train, y_train)
    params = [p for p in model.parameters() if p.requires_grad]
    history = []
    for _ in range(epochs):
        err = (model(x_train, keys, values) - y_train) ** 2
        grads = torch.autograd.grad(err.sum(), params)
        # Plain SGD written out: importing torch.optim pulls in torch._dynamo (seconds of startup)
        # for what is one subtraction per parameter here.
        with torch.no_grad():
            for p, g in zip(params, grads):
                p.sub_(lr * g)
        history.append(float(err.detach().mean()))
    return history

"""The Transformer's normalisation: LayerNorm normalises each token over its features, BatchNorm each
feature over the batch, shown on one small batch.
"""

from __future__ import annotations

import torch
from torch import nn

from attnlab.chapter.result import ChapterResult


def norm_comparison(X: torch.Tensor | None = None) -> ChapterResult:
    """LayerNorm and BatchNorm (training mode) of X, (B, D); the book's X = [[1, 2], [2, 3]] by default.

    Both use unit gains and zero biases (fresh modules), so the outputs show the normalization alone.
    """
    X = torch.tensor([[1.0, 2.0], [2.0, 3.0]]) if X is None else torch.as_tensor(X, dtype=torch.float32)
    if X.dim() != 2 or X.shape[0] < 2 or X.shape[1] < 2:
        raise ValueError(
            f"X must be (B, D) with B >= 2 and D >= 2 (batch norm needs a batch, layer norm "
            f"features), got shape {tuple(X.shape)}"
        )
    ln, bn = nn.LayerNorm(X.shape[1]), nn.BatchNorm1d(X.shape[1])
    bn.train()  # batch statistics, as during training; eval mode would use running averages instead
    with torch.no_grad():
        lnX, bnX = ln(X), bn(X)

    def rows(t):
        return [[round(float(v), 4) for v in row] for row in t]

    headers = ["input row", "X", "layer norm (per example)", "batch norm (per feature)"]
    table = [[i, rows(X)[i], rows(lnX)[i], rows(bnX)[i]] for i in range(X.shape[0])]
    paragraph = (
        "Layer norm standardizes each example across its features (each row of its output has mean "
        "0); batch norm standardizes each feature across the batch (each column has mean 0). "
        "Layer norm gives the same output for an example whatever else is in the batch, and works "
        "with batches of one and sequences of varying length, which is why the Transformer uses it."
    )
    return ChapterResult(
        "Layer norm vs batch norm",
        paragraph,
        tables=[(headers, table)],
        data={"X": rows(X), "layer_norm": rows(lnX), "batch_norm": rows(bnX)},
    )

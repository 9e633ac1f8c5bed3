"""Two pieces of the attention chapter that `attnlab.chapter` lacks, in its `ChapterResult` form.

- `attention_cues`   the book's first figure: the identity matrix as attention weights, "each query
                     attends only to itself" (queries = keys, one-hot rows).
- `norm_comparison`  LayerNorm vs BatchNorm on the book's 2x2 example: layer norm normalizes each
                     example over its features, batch norm each feature over the batch; the
                     Transformer uses layer norm because it does not depend on the batch.

Examples:
    >>> from attnlab.chapter_extra import attention_cues, norm_comparison
    >>> attention_cues(4).data["weights"].shape
    torch.Size([1, 1, 4, 4])
    >>> norm_comparison().data["layer_norm"]
    [[-1.0, 1.0], [-1.0, 1.0]]
"""

from __future__ import annotations

import torch
from torch import nn

from attnlab import viz
from attnlab.chapter import ChapterResult

__all__ = ["attention_cues", "norm_comparison"]


def attention_cues(num_queries: int = 10) -> ChapterResult:
    """The identity as attention weights, (1, 1, L, L), drawn with the book's `show_heatmaps`.

    Raises ValueError when `num_queries` is outside 1..1000 (a heatmap larger than that shows nothing).
    """
    if not 1 <= num_queries <= 1000:
        raise ValueError(f"num_queries must be in 1..1000, got {num_queries}")
    weights = torch.eye(num_queries).reshape(1, 1, num_queries, num_queries)  # (rows, cols, Lq, Lk)
    fig = viz.show_heatmaps(weights, xlabel="Keys", ylabel="Queries")
    paragraph = (
        f"Attention weights of {num_queries} queries over {num_queries} keys where each query "
        "attends only to the key at its own position: the identity matrix. Every row is a "
        "probability distribution (it sums to 1); attention pooling with these weights returns "
        "each value unchanged. Learned attention replaces these one-hot rows with soft ones."
    )
    return ChapterResult("Attention cues", paragraph, figures={"attention_cues": fig}, data={"weights": weights})


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

"""Two pieces of the attention chapter that `attnlab.chapter` lacks, in its `ChapterResult` form.

- `attention_cues`   the book's first figure: the identity matrix as attention weights, "each query
                     attends only to itself" (queries = keys, one-hot rows).
- `norm_comparison`  LayerNorm vs BatchNorm on the book's 2x2 example: layer norm normalizes each
                     example over its features, batch norm each feature over the batch; the
                     Transformer uses layer norm because it does not depend on the batch.

Examples:
    >>> from attnlab.chapter import attention_cues, norm_comparison
    >>> attention_cues(4).data["weights"].shape
    torch.Size([1, 1, 4, 4])
    >>> norm_comparison().data["layer_norm"]
    [[-1.0, 1.0], [-1.0, 1.0]]
"""

from __future__ import annotations

import torch

from attnlab.chapter.result import ChapterResult
from attnlab.viz.heatmaps import show_heatmaps


def attention_cues(num_queries: int = 10) -> ChapterResult:
    """The identity as attention weights, (1, 1, L, L), drawn with the book's `show_heatmaps`.

    Raises ValueError when `num_queries` is outside 1..1000 (a heatmap larger than that shows nothing).
    """
    if not 1 <= num_queries <= 1000:
        raise ValueError(f"num_queries must be in 1..1000, got {num_queries}")
    weights = torch.eye(num_queries).reshape(1, 1, num_queries, num_queries)  # (rows, cols, Lq, Lk)
    fig = show_heatmaps(weights, xlabel="Keys", ylabel="Queries")
    paragraph = (
        f"Attention weights of {num_queries} queries over {num_queries} keys where each query "
        "attends only to the key at its own position: the identity matrix. Every row is a "
        "probability distribution (it sums to 1); attention pooling with these weights returns "
        "each value unchanged. Learned attention replaces these one-hot rows with soft ones."
    )
    return ChapterResult("Attention cues", paragraph, figures={"attention_cues": fig}, data={"weights": weights})

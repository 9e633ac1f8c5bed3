"""Learned absolute positions: a trainable (max_len, D) table added to the embeddings (BERT, GPT-2).

No options of its own (`max_len`, the model's, is the table's rows); a sentence longer than the table is
refused, and decoding stops at its end (`bounded`). CTranslate2 gets the table itself.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnlab.attention.positions.base import EMBEDDINGS, PositionScheme, StackPositions, StackShape
from attnlab.attention.positions.sinusoidal import PositionalEncoding


class Learned(PositionScheme):
    """A learned table added to the embeddings; its rows are the positions there are."""

    name = "learned"
    enters = EMBEDDINGS
    bounded = True
    ct2 = "position table"
    images = True

    def build(self, options, shape: StackShape) -> StackPositions:
        return StackPositions(
            encoding=PositionalEncoding(shape.num_hiddens, shape.dropout, shape.max_len, learned=True)
        )

    def ct2_write(self, spec, stack) -> None:
        spec.position_encodings.encodings = stack.pos_encoding.embedding.weight.detach().float().clone()

    def grid_table(self, rows: int, columns: int, num_hiddens: int) -> Tensor:
        """A trainable row per patch and one for the class token, drawn as ViT draws them (std 0.02)."""
        return nn.Parameter(torch.randn(1, 1 + rows * columns, num_hiddens) * 0.02)


LEARNED = Learned()

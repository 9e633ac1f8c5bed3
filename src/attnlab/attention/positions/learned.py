"""Learned absolute positions: a trainable (max_len, D) table added to the embeddings (BERT, GPT-2).

No options of its own (`max_len`, the model's, is the table's rows); a sentence longer than the table is
refused, and decoding stops at its end (`bounded`). CTranslate2 gets the table itself.
"""

from __future__ import annotations

from attnlab.attention.positions.base import EMBEDDINGS, PositionScheme, StackPositions, StackShape
from attnlab.attention.positions.sinusoidal import PositionalEncoding


class Learned(PositionScheme):
    """A learned table added to the embeddings; its rows are the positions there are."""

    name = "learned"
    enters = EMBEDDINGS
    bounded = True
    ct2 = "position table"

    def build(self, options, shape: StackShape) -> StackPositions:
        return StackPositions(
            encoding=PositionalEncoding(shape.num_hiddens, shape.dropout, shape.max_len, learned=True)
        )

    def ct2_write(self, spec, stack) -> None:
        spec.position_encodings.encodings = stack.pos_encoding.embedding.weight.detach().float().clone()


LEARNED = Learned()

"""No positions at all: a position-blind model (order reaches the decoder only through its causal mask).

CTranslate2 gets an all-zero table, since it adds sinusoids of its own to a stack that has no table and no
other scheme.
"""

from __future__ import annotations

import torch

from attnlab.attention.positions.base import CT2_TABLE_ROWS, NOTHING, PositionScheme


class NoPositions(PositionScheme):
    """Nothing added, rotated or biased."""

    name = "none"
    enters = NOTHING
    ct2 = "zero position table"

    def ct2_write(self, spec, stack) -> None:
        spec.position_encodings.encodings = torch.zeros(CT2_TABLE_ROWS, stack.num_hiddens)


NONE = NoPositions()

"""The sinusoidal positions of "Attention Is All You Need", added to the embeddings (the book's, the paper's
and Marian's), and `PositionalEncoding`, the module that adds them (or a learned table, `learned.py`); their
2-D form for a Vision Transformer's grid of patches (`sinusoidal_2d`: half the features rows, half columns).

Config block: `layout`, the column order of the sinusoids ("interleaved", the book's; "split", Marian's).
CTranslate2 gets the table itself (at least `CT2_TABLE_ROWS` rows: attnlab extends sinusoids past max_len,
CTranslate2 stops at the table's end); Hugging Face's MarianMTModel holds them as fixed split sinusoids.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from attnlab.attention.dropout import Dropout
from attnlab.attention.positions.base import CT2_TABLE_ROWS, EMBEDDINGS, PositionScheme, StackPositions, StackShape

LAYOUTS = ("interleaved", "split")


def sinusoidal_encoding(positions: Tensor, num_hiddens: int, layout: str = "interleaved") -> Tensor:
    """P[pos, 2j] = sin(pos / 10000^(2j/d)), P[pos, 2j+1] = cos(pos / 10000^(2j/d)).

    layout="interleaved" is the book's (sin, cos alternate); "split" puts every sine first and every
    cosine after them (Marian / OPUS-MT, fairseq), the same values with the columns permuted.

    Shape: positions (L,) -> (L, D).
    """
    if layout not in LAYOUTS:
        raise ValueError(f"sinusoid layout must be one of {LAYOUTS}, got {layout!r}")
    j2 = torch.arange(0, num_hiddens, 2, dtype=torch.float32, device=positions.device)
    angles = positions.to(torch.float32)[:, None] / torch.pow(10000.0, j2 / num_hiddens)
    P = torch.zeros(positions.shape[0], num_hiddens, device=positions.device)
    if layout == "split":
        half = angles.shape[1]  # odd D: the sine half is one column longer
        P[:, :half] = torch.sin(angles)
        P[:, half:] = torch.cos(angles[:, : num_hiddens - half])
        return P
    P[:, 0::2] = torch.sin(angles)
    P[:, 1::2] = torch.cos(angles[:, : num_hiddens // 2])  # odd D: one fewer cosine column
    return P


def sinusoidal_2d(grid_h: int, grid_w: int, num_hiddens: int) -> Tensor:
    """2-D sinusoids: the first D/2 features encode the patch's row, the last D/2 its column.

    Shape: -> (grid_h * grid_w, D), patches in row-major order.

    Examples:
        >>> P = sinusoidal_2d(2, 3, 8)  # patches 0 and 2 share row 0; 1 and 4 share column 1
        >>> P.shape, torch.equal(P[0, :4], P[2, :4]), torch.equal(P[1, 4:], P[4, 4:])
        (torch.Size([6, 8]), True, True)
    """
    rows = sinusoidal_encoding(torch.arange(grid_h), num_hiddens // 2)  # (gh, D/2)
    cols = sinusoidal_encoding(torch.arange(grid_w), num_hiddens // 2)  # (gw, D/2)
    return torch.cat([rows[:, None].expand(-1, grid_w, -1), cols[None].expand(grid_h, -1, -1)], dim=-1).reshape(
        grid_h * grid_w, num_hiddens
    )


class PositionalEncoding(nn.Module):
    """Adds position information to (already scaled) embeddings, then dropout.

    Args:
        num_hiddens: D.
        max_len: rows precomputed (sinusoidal) or learned; sinusoidal positions beyond it are computed on
            the fly instead of failing.
        learned: a trainable (max_len, D) table instead of the fixed sinusoids.
        layout: column order of the sinusoids, "interleaved" (book) or "split" (Marian); see
            `sinusoidal_encoding`.

    Shape: X (B, L, D) -> (B, L, D); `offset` is the absolute position of X[:, 0] (incremental decoding).
    """

    def __init__(
        self,
        num_hiddens: int,
        dropout: float = 0.0,
        max_len: int = 1000,
        learned: bool = False,
        layout: str = "interleaved",
    ):
        super().__init__()
        if num_hiddens <= 0 or max_len <= 0:
            raise ValueError(f"num_hiddens and max_len must be positive, got {num_hiddens} and {max_len}")
        self.num_hiddens, self.max_len, self.learned, self.layout = num_hiddens, max_len, learned, layout
        self.dropout = Dropout(dropout)
        if learned:
            self.embedding = nn.Embedding(max_len, num_hiddens)
        else:
            # Not persistent: it is a function of the config, so checkpoints need not carry it.
            P = sinusoidal_encoding(torch.arange(max_len), num_hiddens, layout)[None]
            self.P: Tensor
            self.register_buffer("P", P, persistent=False)

    def encoding(self, length: int, offset: int = 0, device=None) -> Tensor:
        """(L, D) encodings of positions offset .. offset + L - 1."""
        end = offset + length
        if self.learned:
            if end > self.max_len:
                raise ValueError(
                    f"learned positional encoding holds {self.max_len} positions, asked for position {end - 1}; "
                    f"train with a larger max_len or use the sinusoidal encoding"
                )
            return self.embedding.weight[offset:end]
        if end <= self.max_len:
            return self.P[0, offset:end]
        return sinusoidal_encoding(
            torch.arange(offset, end, device=device or self.P.device), self.num_hiddens, self.layout
        )

    def forward(self, X: Tensor, offset: int = 0) -> Tensor:
        if X.dim() != 3 or X.shape[-1] != self.num_hiddens:
            raise ValueError(f"PositionalEncoding expects (B, L, {self.num_hiddens}), got {tuple(X.shape)}")
        P = self.encoding(X.shape[1], offset, X.device).to(X.dtype)
        return self.dropout(X + P[None])


@dataclass(frozen=True)
class SinusoidalOptions:
    """The sinusoidal scheme's config block."""

    layout: str = "interleaved"  # sinusoid columns: interleaved sin/cos (book) or split (sin half, cos half)


class Sinusoidal(PositionScheme):
    """Fixed sinusoids added to the embeddings; any length (computed past max_len on the fly)."""

    name = "sinusoidal"
    enters = EMBEDDINGS
    Options = SinusoidalOptions
    marian = True
    ct2 = "position table"
    images = True

    def check(self, options, num_hiddens, num_heads) -> None:
        if options.layout not in LAYOUTS:
            raise ValueError(
                f"positions='sinusoidal' takes layout {LAYOUTS[0]!r} or {LAYOUTS[1]!r}, got {options.layout!r}"
            )

    def build(self, options, shape: StackShape) -> StackPositions:
        return StackPositions(
            encoding=PositionalEncoding(shape.num_hiddens, shape.dropout, shape.max_len, layout=options.layout)
        )

    def ct2_write(self, spec, stack) -> None:
        pe = stack.pos_encoding
        spec.position_encodings.encodings = pe.encoding(max(pe.max_len, CT2_TABLE_ROWS)).detach().float().clone()

    def check_grid(self, num_hiddens: int) -> None:
        if num_hiddens % 4:
            raise ValueError(f"2-D sinusoidal positions need num_hiddens divisible by 4, got {num_hiddens}")

    def grid_table(self, rows: int, columns: int, num_hiddens: int) -> Tensor:
        """`sinusoidal_2d` of the grid; the class token gets position zero: it has no place on the grid."""
        return torch.cat([torch.zeros(1, num_hiddens), sinusoidal_2d(rows, columns, num_hiddens)])[None]


SINUSOIDAL = Sinusoidal()

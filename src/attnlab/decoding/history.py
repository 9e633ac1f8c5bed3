"""The beam loop's record of every live row's tokens and log-probabilities so far: two preallocated buffers per
table that take turns, so a step is one `index_select(out=)` per table (the rows that stay, from their parents)
and one column written — no growing, no concatenation, no Python lists until a hypothesis finishes.

    hist = History(rows=B * K, length=steps, device=src.device)
    hist.advance(parents, tokens, lprobs)      # parents (R',): the row each new row continues
    toks, lps = hist.read(rows)                # those rows' histories as lists (a hypothesis that finishes)

Tables are (length, rows), steps first: the first t steps of R rows are one contiguous block of a buffer.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["History"]


class History:
    """Tokens (int64) and log-probabilities (float32) of R rows after t steps. Rows only ever leave or are
    copied (beams taking their parents' place), so R never grows past the first."""

    def __init__(self, rows: int, length: int, device: torch.device):
        self.length, self.rows, self.t = length, rows, 0
        self._tok = [torch.zeros(length * rows, dtype=torch.long, device=device) for _ in range(2)]
        self._lp = [torch.zeros(length * rows, dtype=torch.float, device=device) for _ in range(2)]

    def _view(self, flat: Tensor, rows: int) -> Tensor:
        return flat[: self.length * rows].view(self.length, rows)

    @property
    def tokens(self) -> Tensor:
        """(R, t) the tokens so far (a view: what the bans read)."""
        return self._view(self._tok[0], self.rows)[: self.t].t()

    def start(self, tokens: Tensor, lprobs: Tensor) -> None:
        """Every row's first steps (a prefix): tokens, lprobs (R, P)."""
        P = tokens.shape[1]
        self._view(self._tok[0], self.rows)[:P] = tokens.t()
        self._view(self._lp[0], self.rows)[:P] = lprobs.t()
        self.t = P

    def advance(self, parents: Tensor, tokens: Tensor, lprobs: Tensor) -> None:
        """Row i of the next step continues row parents[i] with tokens[i], lprobs[i] (each (R',))."""
        R, t = parents.numel(), self.t
        if t + 1 > self.length:
            raise ValueError(f"History holds {self.length} steps; step {t + 1} does not fit")
        for tables in (self._tok, self._lp):
            old, new = self._view(tables[0], self.rows), self._view(tables[1], R)
            if t:
                torch.index_select(old[:t], 1, parents, out=new[:t])
            tables[0], tables[1] = tables[1], tables[0]
        self._view(self._tok[0], R)[t] = tokens
        self._view(self._lp[0], R)[t] = lprobs
        self.rows, self.t = R, t + 1

    def read(self, rows: Tensor) -> tuple[list[list[int]], list[list[float]]]:
        """The tokens and log-probabilities of `rows` (m,) so far, m lists of t each."""
        toks = self._view(self._tok[0], self.rows)[: self.t].index_select(1, rows)
        lps = self._view(self._lp[0], self.rows)[: self.t].index_select(1, rows)
        return toks.t().tolist(), lps.t().tolist()

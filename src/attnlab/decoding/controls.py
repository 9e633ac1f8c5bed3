"""Length and repetition controls on a step's log-probabilities, shared by greedy, sampling and (constrained)
beam search. Each forbids tokens by setting their log-probability to -inf and leaves the others as they
are (no renormalisation), as `transformers`' MinNewTokensLength and NoRepeatNGram processors do.

    controls = Controls(eos, min_len=3, no_repeat_ngram=2)
    lprobs = controls(lprobs, history)     # lprobs (R, V) after log_softmax; history (R, t) output so far
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["Controls", "banned_ngram_tokens"]


def banned_ngram_tokens(history: list[int], n: int) -> list[int]:
    """Tokens that would repeat an n-gram of `history` if appended to it.

    Examples:
        >>> banned_ngram_tokens([5, 6, 7, 5, 6], 3)   # (5, 6, 7) occurred: 7 may not follow (5, 6) again
        [7]
        >>> banned_ngram_tokens([5, 6], 3)
        []
    """
    if n < 1 or len(history) < n - 1:
        return []
    if n == 1:
        return sorted(set(history))
    key = tuple(history[len(history) - n + 1 :])
    return sorted({history[i + n - 1] for i in range(len(history) - n + 1) if tuple(history[i : i + n - 1]) == key})


@dataclass
class Controls:
    """min_len: <eos> is forbidden while an output has fewer tokens (t < min_len, the prefix counts);
    no_repeat_ngram: no n-gram of this size occurs twice in an output (0 = off)."""

    eos: int
    min_len: int = 0
    no_repeat_ngram: int = 0

    @property
    def active(self) -> bool:
        return self.min_len > 0 or self.no_repeat_ngram > 0

    def __call__(self, lprobs: Tensor, history: Tensor) -> Tensor:
        """lprobs (R, V) for the next token of each of R rows, whose outputs so far are history (R, t);
        returns lprobs with the forbidden tokens at -inf (modified in place)."""
        t = history.shape[1]
        if t < self.min_len:
            lprobs[:, self.eos] = float("-inf")
        n = self.no_repeat_ngram
        if n and t >= n - 1:
            rows, cols = [], []
            for r, hist in enumerate(history.tolist()):
                banned = banned_ngram_tokens(hist, n)
                rows += [r] * len(banned)
                cols += banned
            if rows:
                lprobs[torch.tensor(rows, device=lprobs.device), torch.tensor(cols, device=lprobs.device)] = float(
                    "-inf"
                )
        return lprobs

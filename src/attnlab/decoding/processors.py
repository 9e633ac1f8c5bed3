"""Logits processors: each takes a step's log-probabilities (R, V) and the outputs so far (R, t) and returns
log-probabilities, as `transformers`' LogitsProcessor/LogitsWarper list does. Two kinds, in this order:

- bans (`MinLength`, `NoRepeatNGram`, `SuppressTokens`) set forbidden tokens to -inf and leave the others
  as they are (no renormalisation): what every search scores with;
- warpers (`Temperature`, `TopK`, `TopP`) reshape the distribution sampling draws from; the hypotheses'
  scores stay the model's log-probabilities after the bans.

    bans, warpers = processors_for(options, eos)
    lprobs = apply(bans, lprobs, history)           # lprobs (R, V) after log_softmax; history (R, t)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from attnlab.decoding.options import DecodeOptions

__all__ = [
    "MinLength",
    "NoRepeatNGram",
    "Processor",
    "SuppressTokens",
    "Temperature",
    "TopK",
    "TopP",
    "apply",
    "banned_ngram_tokens",
    "processors_for",
]

NEG_INF = float("-inf")


class Processor:
    """lprobs (R, V) for the next token of R rows whose outputs so far are history (R, t) -> lprobs (R, V)
    (bans modify them in place)."""

    def __call__(self, lprobs: Tensor, history: Tensor) -> Tensor:
        raise NotImplementedError


def apply(processors: Sequence[Processor], lprobs: Tensor, history: Tensor) -> Tensor:
    for p in processors:
        lprobs = p(lprobs, history)
    return lprobs


@dataclass
class MinLength(Processor):
    """<eos> is forbidden while an output has fewer than `min_len` tokens (the prefix counts)."""

    eos: int
    min_len: int

    def __call__(self, lprobs: Tensor, history: Tensor) -> Tensor:
        if history.shape[1] < self.min_len:
            lprobs[:, self.eos] = NEG_INF
        return lprobs


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
class NoRepeatNGram(Processor):
    """No n-gram of size `n` occurs twice in an output (the prefix counts)."""

    n: int

    def __call__(self, lprobs: Tensor, history: Tensor) -> Tensor:
        if history.shape[1] < self.n - 1:
            return lprobs
        rows, cols = [], []
        for r, hist in enumerate(history.tolist()):
            banned = banned_ngram_tokens(hist, self.n)
            rows += [r] * len(banned)
            cols += banned
        if rows:
            lprobs[torch.tensor(rows, device=lprobs.device), torch.tensor(cols, device=lprobs.device)] = NEG_INF
        return lprobs


@dataclass
class SuppressTokens(Processor):
    """These token ids are never produced (`transformers`' SuppressTokensLogitsProcessor)."""

    tokens: tuple[int, ...]

    def __call__(self, lprobs: Tensor, history: Tensor) -> Tensor:
        lprobs[:, list(self.tokens)] = NEG_INF
        return lprobs


@dataclass
class Temperature(Processor):
    """Divides the log-probabilities (softmax(lprobs / T) = softmax(logits / T))."""

    temperature: float

    def __call__(self, lprobs: Tensor, history: Tensor) -> Tensor:
        return lprobs / self.temperature


@dataclass
class TopK(Processor):
    """Only the k likeliest tokens stay (ties with the k-th kept), as `transformers`' TopKLogitsWarper."""

    k: int

    def __call__(self, lprobs: Tensor, history: Tensor) -> Tensor:
        if self.k >= lprobs.shape[-1]:
            return lprobs
        kth = lprobs.topk(self.k, dim=-1).values[:, -1:]  # (R, 1)
        return lprobs.masked_fill(lprobs < kth, NEG_INF)


@dataclass
class TopP(Processor):
    """The smallest set of likeliest tokens whose probability reaches p stays (always at least one), as
    `transformers`' TopPLogitsWarper.

    Examples:
        >>> s = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
        >>> torch.isfinite(TopP(0.8)(s, s)).tolist(), torch.isfinite(TopK(3)(s, s)).tolist()
        ([[True, True, False, False]], [[True, True, True, False]])
    """

    p: float

    def __call__(self, lprobs: Tensor, history: Tensor) -> Tensor:
        ordered, idx = lprobs.sort(dim=-1)  # ascending
        drop = ordered.softmax(dim=-1).cumsum(dim=-1) <= 1 - self.p
        drop[:, -1] = False  # the likeliest token always stays
        return lprobs.masked_fill(drop.scatter(1, idx, drop), NEG_INF)


def processors_for(options: DecodeOptions, eos: int) -> tuple[list[Processor], list[Processor]]:
    """The bans and the (sampling) warpers `options` ask for, in `transformers`' order."""
    bans: list[Processor] = []
    if options.min_len:
        bans.append(MinLength(eos, options.min_len))
    if options.no_repeat_ngram:
        bans.append(NoRepeatNGram(options.no_repeat_ngram))
    warpers: list[Processor] = []
    if options.sample:
        if options.temperature != 1.0:
            warpers.append(Temperature(options.temperature))
        if options.top_k > 0:
            warpers.append(TopK(options.top_k))
        if options.top_p < 1.0:
            warpers.append(TopP(options.top_p))
    return bans, warpers

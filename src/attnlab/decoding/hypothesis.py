"""`Hypothesis`: one decoded sentence, as greedy and beam search return it — tokens, whether it ended
with <eos>, its score and the log-probability of every produced token, so no caller has to guess back
what decoding knew.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Hypothesis:
    """One decoded sentence.

    tokens: produced target ids, without <bos> and <eos>.
    score: total log-probability / len ** length_penalty, len counting the <eos> when finished.
    finished: True when decoding produced <eos>; False when it stopped at the length limit.
    positional_scores: log-probability of each produced token (len(tokens) + 1 entries when finished:
        the last is the <eos>).
    """

    tokens: list[int]
    score: float
    finished: bool
    positional_scores: list[float] = field(default_factory=list)

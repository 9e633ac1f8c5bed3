"""`Hypothesis`: one decoded sentence as the generator returns it — tokens, whether it ended with <eos>,
its score and the log-probability of every produced token, so no caller has to guess back what decoding
knew; and `Finished`, the generator's record of a hypothesis as it finishes.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Hypothesis:
    """One decoded sentence.

    tokens: produced target ids (a prefix included), without <bos> and <eos>.
    score: total log-probability / len ** length_penalty, len counting the <eos> when finished (not the prefix).
    finished: True when decoding produced <eos>; False when it stopped at the length limit.
    positional_scores: log-probability of each produced token (len(tokens) + 1 entries when finished:
        the last is the <eos>).
    trace: with `DecodeOptions.trace`, beam search's record of this sentence (`attnlab.decoding.trace`; its
        records' "sentence" is the sentence's place in its batch), on the best hypothesis of each; else None.
    text: the tokens detokenized, where the search was asked for texts (the worker that decoded it wrote
        it); else None.
    """

    tokens: list[int]
    score: float
    finished: bool
    positional_scores: list[float] = field(default_factory=list)
    trace: list[dict] | None = None
    text: str | None = None


@dataclass
class Finished:
    """A hypothesis that left the search: at its <eos> (`ended`) or cut at the length limit."""

    score: float  # normalised: total log-probability / generated length ** length_penalty
    tokens: list[int]
    positional_scores: list[float]
    ended: bool
    met: int = 0  # constraint phrases it holds (n-best lists rank by them first)
    origin: tuple[int, int] | None = None  # (step, candidate) where it finished: the trace's winner

    def hypothesis(self) -> Hypothesis:
        return Hypothesis(self.tokens, self.score, self.ended, self.positional_scores)


def keep_best(fin: list[Finished], entry: Finished, K: int) -> bool:
    """Add `entry` to a sentence's finished list, which keeps its K best by (constraint phrases held, score)
    (a full list trades its worst for a better one, in place: `transformers`' rule); says whether it went in."""
    if len(fin) < K:
        fin.append(entry)
        return True
    worst = min(range(len(fin)), key=lambda j: (fin[j].met, fin[j].score))
    if (entry.met, entry.score) > (fin[worst].met, fin[worst].score):
        fin[worst] = entry
        return True
    return False

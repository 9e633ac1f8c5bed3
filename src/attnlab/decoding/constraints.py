"""Lexically constrained beam search with dynamic beam allocation (Post & Vilar 2018): every output
contains given target phrases, in any order, wherever the length limit leaves room for them.

    search = ConstrainedBeamSearch(5, eos, constraints=[[[12, 40]], [[7], [30, 31]]])   # per sentence: ids

Each hypothesis carries a `Progress`: which phrases it has produced, and every phrase it may be inside
(each unmet phrase whose first tokens end its output, with how many): phrases that share a first token,
or one whose start continues another, are followed together, as fairseq's constraint trie follows them
("le chat" and "le chien": after "le" both are in progress, and "chien" completes the second). A phrase
counts once it occurs anywhere in the output (occurrences may overlap: "le" and "le chat" are both met by
"le chat"); a phrase given twice must occur twice. One step (`ConstrainedBeamSearch.step`), per sentence:

1. candidates: the 2K best continuations overall (as plain beam search), plus for every live
   hypothesis the tokens that continue the phrases it is inside (or, inside none, the first token of
   each phrase it has not produced), plus its own single best token;
2. <eos> is forbidden to hypotheses that have not produced every phrase; <eos> candidates among the
   K best candidates finish (the loop finishes them: they come first);
3. the others are put into banks by the number of constraint tokens they have produced, and the K live
   slots are dealt round-robin, best first within each bank, starting from the fullest bank: every
   bank with candidates holds a slot, so some hypothesis always gains the next constraint token while
   the others keep the best unconstrained continuations (the unused share of a small bank goes to the
   others).

At the length limit the loop cuts the first K candidates; an output is chosen among the finished ones by the
number of phrases produced first, then score (so in an n-best list, a runner-up cut at the limit may
lack a phrase: it ranks after every hypothesis that holds them all).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from attnlab.decoding.search import Candidates, Search, SearchState

__all__ = ["ConstrainedBeamSearch", "Progress", "allocate"]


@dataclass(frozen=True)
class Progress:
    """How far one hypothesis is through its sentence's phrases (token id lists).

    met: which phrases it has produced; partial: (phrase, tokens of it produced) for every unmet phrase
    whose start the output ends with, sorted.

    Examples:
        >>> p = Progress.start(2)
        >>> p = p.advance([[5, 6], [9]], 5).advance([[5, 6], [9]], 6)
        >>> p.met, p.produced([[5, 6], [9]]), p.done
        ((True, False), 2, False)
        >>> shared = [[5, 6], [5, 7]]                         # two phrases with the same first token
        >>> p = Progress.start(2).advance(shared, 5)
        >>> p.partial, p.wanted(shared), p.advance(shared, 7).met
        (((0, 1), (1, 1)), [6, 7], (False, True))
    """

    met: tuple[bool, ...]
    partial: tuple[tuple[int, int], ...] = ()

    @classmethod
    def start(cls, n: int) -> Progress:
        return cls((False,) * n)

    @property
    def done(self) -> bool:
        return all(self.met)

    def produced(self, phrases: list[list[int]]) -> int:
        """Constraint tokens produced: whole phrases met plus the furthest progress into one (the bank)."""
        return sum(len(p) for p, m in zip(phrases, self.met) if m) + max((n for _, n in self.partial), default=0)

    def wanted(self, phrases: list[list[int]]) -> list[int]:
        """Tokens that would advance a phrase: the next of each phrase it is inside, else the first of each
        unmet one."""
        if self.partial:
            return sorted({phrases[c][n] for c, n in self.partial})
        return sorted({p[0] for p, m in zip(phrases, self.met) if not m})

    def advance(self, phrases: list[list[int]], token: int) -> Progress:
        """The progress after appending `token`: every phrase it continues moves on, every unmet phrase it
        begins starts; one that ends is met (of identical phrases, one per occurrence)."""
        moved = [(c, n + 1) for c, n in self.partial if phrases[c][n] == token]
        moved += [(c, 1) for c, (p, m) in enumerate(zip(phrases, self.met)) if not m and p[0] == token]
        if not moved and not self.partial:
            return self
        met, ended = list(self.met), set()
        for c, n in moved:
            if n == len(phrases[c]) and tuple(phrases[c]) not in ended:
                met[c] = True
                ended.add(tuple(phrases[c]))
        partial = sorted({(c, n) for c, n in moved if n < len(phrases[c]) and not met[c]})
        return Progress(tuple(met), tuple(partial))


def allocate(cands: list[tuple[float, int, int, Progress]], phrases: list[list[int]], K: int, produced=None) -> list:
    """Deal K live slots among candidates (score, beam, token, progress): banks by constraint tokens
    produced (`produced(progress)`, default `progress.produced(phrases)`), best first within a bank,
    round-robin from the fullest bank."""
    bank = produced or (lambda p: p.produced(phrases))
    banks: dict[int, list] = {}
    for c in sorted(cands, key=lambda c: -c[0]):
        banks.setdefault(bank(c[3]), []).append(c)
    order = sorted(banks, reverse=True)
    chosen: list = []
    rank = 0
    while len(chosen) < K and any(rank < len(banks[b]) for b in order):
        chosen += [banks[b][rank] for b in order if rank < len(banks[b])][: K - len(chosen)]
        rank += 1
    return sorted(chosen, key=lambda c: -c[0])


class ConstrainedBeamSearch(Search):
    """Constrained beam search's step (module docstring). `constraints[u]`: unit u's phrases as token id
    lists (a unit may have none); `prefixes[u]`: the target ids it starts with (they may hold phrase tokens).
    Candidates per sentence: its finishing <eos> candidates first, then the K dealt live slots by score,
    then -inf fillers, C = 2K in all."""

    def __init__(self, beam: int, eos: int, constraints: Sequence[Sequence[Sequence[int]]], prefixes=None):
        self.K, self.eos = beam, eos
        self.phrases = [[list(p) for p in c] for c in constraints]
        self.progress: list[list[Progress]] = []
        for u, phrases in enumerate(self.phrases):
            p = Progress.start(len(phrases))
            for t in prefixes[u] if prefixes is not None else []:
                p = p.advance(phrases, t)
            self.progress.append([p] * beam)
        self._units: list[int] = []
        self._cands: list[list[Progress]] = []
        # Per unit: every token of its phrases (a token outside them leaves a progress outside any phrase as
        # it is), and memos of `advance` and `produced`: a beam's few progresses meet the same tokens each step.
        self._phrase_tokens = [{t for p in phrases for t in p} for phrases in self.phrases]
        self._advanced: list[dict[tuple[Progress, int], Progress]] = [{} for _ in self.phrases]
        self._produced: list[dict[Progress, int]] = [{} for _ in self.phrases]

    def _advance(self, u: int, p: Progress, token: int) -> Progress:
        if not p.partial and token not in self._phrase_tokens[u]:
            return p
        memo = self._advanced[u]
        nxt = memo.get((p, token))
        if nxt is None:
            nxt = memo[(p, token)] = p.advance(self.phrases[u], token)
        return nxt

    def _bank(self, u: int):
        memo, phrases = self._produced[u], self.phrases[u]

        def produced(p: Progress) -> int:
            n = memo.get(p)
            if n is None:
                n = memo[p] = p.produced(phrases)
            return n

        return produced

    def step(self, step: int, lprobs: Tensor, scores: Tensor, state: SearchState) -> Candidates:
        n, K, V = lprobs.shape
        units, eos, neg_inf = state.sentences, self.eos, float("-inf")
        not_done = [i * K + k for i, u in enumerate(units) for k in range(K) if not self.progress[u][k].done]
        flat = lprobs.view(n * K, V)
        if not_done:
            flat[torch.tensor(not_done, device=flat.device), eos] = neg_inf
        by_sentence = self._candidates(lprobs, scores, units)
        rows, cands = [], []
        for i, u in enumerate(units):
            ranked = sorted(((s, k, t) for (k, t), s in by_sentence[i].items() if s > neg_inf), key=lambda c: -c[0])
            done = self.progress[u]
            finishing = [(s, k, t, done[k]) for s, k, t in ranked[:K] if t == eos]
            live = [(s, k, t, self._advance(u, done[k], t)) for s, k, t in ranked if t != eos]
            row = finishing + allocate(live, self.phrases[u], K, self._bank(u))
            row += [(neg_inf, 0, eos, Progress.start(len(self.phrases[u])))] * (2 * K - len(row))
            rows.append(row)
            cands.append([c[3] for c in row])
        self._units, self._cands = list(units), cands
        dev = lprobs.device
        cand_scores = torch.tensor([[c[0] for c in r] for r in rows], device=dev, dtype=scores.dtype)
        tokens = torch.tensor([[c[2] for c in r] for r in rows], device=dev, dtype=torch.long)
        beams = torch.tensor([[c[1] for c in r] for r in rows], device=dev, dtype=torch.long)
        parent = (torch.arange(n, device=dev)[:, None] * K + beams).reshape(-1)
        lp = flat[parent, tokens.reshape(-1)].view(n, 2 * K)
        return Candidates(cand_scores, tokens, beams, lp.masked_fill(cand_scores == neg_inf, 0.0))

    def _candidates(self, lprobs: Tensor, scores: Tensor, units: list[int]) -> list[dict[tuple[int, int], float]]:
        """Per sentence: (beam, token) -> total score of the 2K best overall, each hypothesis' own best and the
        tokens that advance its phrases."""
        n, K, V = lprobs.shape
        neg_inf = float("-inf")
        total = scores[:, :, None] + lprobs  # (n, K, V)
        top_s, idx = total.reshape(n, K * V).topk(min(2 * K, K * V), dim=1)
        top_t, top_b = idx % V, idx // V
        best_s, best_t = total.max(dim=-1)  # (n, K) each hypothesis' own best continuation
        sc = scores.tolist()
        want = [
            (i, k, t)
            for i, u in enumerate(units)
            for k in range(K)
            if sc[i][k] > neg_inf
            for t in self.progress[u][k].wanted(self.phrases[u])
        ]
        want_s = total[[w[0] for w in want], [w[1] for w in want], [w[2] for w in want]].tolist() if want else []
        by_sentence: list[dict[tuple[int, int], float]] = [{} for _ in range(n)]
        for i, row in enumerate(zip(top_s.tolist(), top_b.tolist(), top_t.tolist())):
            by_sentence[i].update({(k, t): s for s, k, t in zip(*row)})
        for i, (ss, ts) in enumerate(zip(best_s.tolist(), best_t.tolist())):
            by_sentence[i].update({(k, t): s for k, (s, t) in enumerate(zip(ss, ts))})
        for (i, k, t), s in zip(want, want_s):
            by_sentence[i][(k, t)] = s
        return by_sentence

    def chosen(self, live: Tensor) -> None:
        for i, (u, pos) in enumerate(zip(self._units, live.tolist())):
            self.progress[u] = [self._cands[i][p] for p in pos]

    def met(self, row: int, position: int) -> int:
        return sum(self._cands[row][position].met)

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
2. <eos> is forbidden to hypotheses that have not produced every phrase;
3. the candidates are put into banks by the number of constraint tokens they have produced (an <eos>
   keeps its hypothesis' count), and 2K places are dealt round-robin, best first within each bank,
   starting from the fullest bank (fairseq's stripes): every bank with candidates holds a place, so some
   hypothesis always gains the next constraint token while the others keep the best unconstrained
   continuations (the unused share of a small bank goes to the others);
4. in the dealt order, as plain beam search's candidates in score order, the loop finishes the <eos>
   candidates among the first K and keeps the first K others live: a hypothesis that holds every phrase
   ends once <eos> leads the fullest bank, however far behind the unconstrained continuations it is. A
   sentence is done once K hypotheses finished and no live one that may end (holds every phrase) could
   still beat the worst of them (`Search.endable`), or once no live one could rank among the n_best it
   returns at any length (`BeamLoop._settled`).

At the length limit the loop cuts the first K candidates; an output is chosen among the finished ones by the
number of phrases produced first, then score (so in an n-best list, a runner-up cut at the limit may
lack a phrase: it ranks after every hypothesis that holds them all).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import torch
from torch import Tensor

from attnlab.decoding.search import Candidates, Search, SearchState
from attnlab.kernels.beam_topk import constrained_candidates
from attnlab.kernels.deal import PhraseRows, deal

__all__ = ["ConstrainedBeamSearch", "PhraseTable", "Progress", "allocate"]


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

    def produced(self, phrases: Sequence[Sequence[int]]) -> int:
        """Constraint tokens produced: whole phrases met plus the furthest progress into one (the bank)."""
        return sum(len(p) for p, m in zip(phrases, self.met) if m) + max((n for _, n in self.partial), default=0)

    def wanted(self, phrases: Sequence[Sequence[int]]) -> list[int]:
        """Tokens that would advance a phrase: the next of each phrase it is inside, else the first of each
        unmet one."""
        if self.partial:
            return sorted({phrases[c][n] for c, n in self.partial})
        return sorted({p[0] for p, m in zip(phrases, self.met) if not m})

    def moves(self, phrases: Sequence[Sequence[int]]) -> list[int]:
        """The tokens that change it, sorted: the next of each phrase it is inside and the first of each unmet
        one. Any other token only ends the phrases it is inside (`advance` gives Progress(met, ()))."""
        return sorted({phrases[c][n] for c, n in self.partial} | {p[0] for p, m in zip(phrases, self.met) if not m})

    def advance(self, phrases: Sequence[Sequence[int]], token: int) -> Progress:
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
    """Deal K slots among candidates (score, beam, token, progress): banks by constraint tokens produced
    (`produced(progress)`, default `progress.produced(phrases)`), best first within a bank, round-robin from
    the fullest bank; the dealt candidates in the order dealt (fairseq's stripes).

    Examples:
        >>> open_, met = Progress((False,)), Progress((True,))
        >>> cands = [(-1.0, 0, 7, open_), (-2.0, 0, 8, open_), (-3.0, 1, 9, met)]   # (score, beam, token, progress)
        >>> [c[2] for c in allocate(cands, [[9]], 2)]   # the fuller bank first, then the best of the other
        [9, 7]
    """
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
    return chosen


class PhraseTable:
    """Every progress (`Progress`) the search has met, one id each, and what a step reads of it as tensors
    indexed by id: a hypothesis' progress is one id, so a step's bookkeeping is gathers, not Python objects.

    bank (S,): constraint tokens produced; done (S,): every phrase met; met (S,): phrases met; want (S, W):
    the tokens that would advance it (-1: none); tokens (S, T): the tokens that change it (`Progress.moves`;
    -2: none, so that no candidate's token, a missing wanted one's -1 included, matches it)
    and nxt (S, T) the id after each; reset (S,): the id after any other token. The rows of `tokens`,
    `nxt` and `reset` are filled once a progress is held by a hypothesis (`expand`); new rows reach the
    tensors once per step (`flush`), not one small write each.

    Examples:
        >>> t = PhraseTable([[[5, 6], [9]]], torch.device("cpu"))
        >>> s = t.id(0, Progress.start(2)); t.expand([s]); t.flush()
        >>> t.want[s].tolist(), t.bank[t.nxt[s, 0]].item(), t.tokens[s].tolist()   # after 5: "5 6" begun
        ([5, 9], 1, [5, 9, -2])
    """

    def __init__(self, phrases: list[list[list[int]]], device: torch.device):
        self.phrases, self.device = phrases, device
        self.shapes = [_shape(ph) for ph in phrases]  # each unit's (pattern, its tokens)
        self.W = max([len(ph) for ph in phrases] + [1])
        self.T = max([len({t for p in ph for t in p}) for ph in phrases] + [1])  # at most a unit's distinct tokens
        self.ids: dict[tuple[int, Progress], int] = {}
        self.progress: list[Progress] = []
        self.unit: list[int] = []
        self.rows: list[tuple[int, bool, int, list[int]]] = []  # (bank, done, met, want) not yet in the tensors
        self.expanded: list[bool] = []
        empty = torch.empty(0, dtype=torch.long, device=device)
        self.bank, self.met, self.reset = empty, empty, empty
        self.done = torch.empty(0, dtype=torch.bool, device=device)
        self.filled = torch.empty(0, dtype=torch.bool, device=device)  # (S,) `expanded` as a tensor
        self.want = torch.empty((0, self.W), dtype=torch.long, device=device)
        self.tokens = torch.empty((0, self.T), dtype=torch.long, device=device)
        self.nxt = torch.empty((0, self.T), dtype=torch.long, device=device)

    def id(self, u: int, p: Progress) -> int:
        """The id of unit u's progress p (a new one gets its bank, done, met and wanted tokens)."""
        key = (u, p)
        s = self.ids.get(key)
        if s is None:
            s = self.ids[key] = len(self.progress)
            self.progress.append(p)
            self.unit.append(u)
            self.expanded.append(False)
            pattern, tokens = self.shapes[u]
            bank, wanted = _summary(pattern, p)
            self.rows.append((bank, p.done, sum(p.met), sorted(tokens[t] for t in wanted)))
        return s

    def expand(self, ids) -> None:
        """Fill the transitions of progresses `ids` (those hypotheses now hold)."""
        todo = [s for s in dict.fromkeys(ids) if not self.expanded[s]]
        if not todo:
            return
        self.flush()
        toks, nxt, reset = [], [], []
        for s in todo:
            self.expanded[s] = True
            u, p = self.unit[s], self.progress[s]
            pattern, tokens = self.shapes[u]
            moves, after, other = _transitions(pattern, p)
            pad = self.T - len(moves)
            toks.append([tokens[t] for t in moves] + [-2] * pad)
            nxt.append([self.id(u, q) for q in after] + [0] * pad)
            reset.append(self.id(u, other))
        self.flush()
        rows = torch.tensor(todo, device=self.device)
        self.filled[rows] = True
        self.tokens[rows] = torch.tensor(toks, device=self.device)
        self.nxt[rows] = torch.tensor(nxt, device=self.device)
        self.reset[rows] = torch.tensor(reset, device=self.device)

    def flush(self) -> None:
        """New progresses' rows into the tensors."""
        if not self.rows:
            return
        m, dev = len(self.rows), self.device
        bank, done, met, want = zip(*self.rows)
        self.rows = []
        self.bank = torch.cat([self.bank, torch.tensor(bank, device=dev)])
        self.done = torch.cat([self.done, torch.tensor(done, device=dev)])
        self.filled = torch.cat([self.filled, torch.zeros(m, dtype=torch.bool, device=dev)])
        self.met = torch.cat([self.met, torch.tensor(met, device=dev)])
        padded = [w + [-1] * (self.W - len(w)) for w in want]
        self.want = torch.cat([self.want, torch.tensor(padded, dtype=torch.long, device=dev)])
        self.tokens = torch.cat([self.tokens, torch.full((m, self.T), -2, device=dev)])
        self.nxt = torch.cat([self.nxt, torch.zeros((m, self.T), dtype=torch.long, device=dev)])
        self.reset = torch.cat([self.reset, torch.zeros(m, dtype=torch.long, device=dev)])


Pattern = tuple[tuple[int, ...], ...]


def _shape(phrases: list[list[int]]) -> tuple[Pattern, list[int]]:
    """A unit's phrases as a pattern of local tokens (numbered by first appearance) and the token each stands
    for: a progress and its moves depend on which tokens are equal, not on which they are, so units of the same
    pattern ("je" or "chat": one phrase of one token) share `_transitions` and `_summary`.

    Examples:
        >>> _shape([[40, 7], [7]])
        (((0, 1), (1,)), [40, 7])
    """
    local: dict[int, int] = {}
    return tuple(tuple(local.setdefault(t, len(local)) for t in p) for p in phrases), list(local)


@lru_cache(maxsize=1 << 16)
def _transitions(pattern: Pattern, p: Progress) -> tuple[tuple[int, ...], tuple[Progress, ...], Progress]:
    """p's moves in a pattern's local tokens, the progress after each, and the progress after any other token."""
    moves = p.moves(pattern)
    return tuple(moves), tuple(p.advance(pattern, t) for t in moves), Progress(p.met, ()) if p.partial else p


@lru_cache(maxsize=1 << 16)
def _summary(pattern: Pattern, p: Progress) -> tuple[int, tuple[int, ...]]:
    """p's bank (constraint tokens produced) and its wanted tokens, in a pattern's local tokens."""
    return p.produced(pattern), tuple(p.wanted(pattern))


class ConstrainedBeamSearch(Search):
    """Constrained beam search's step (module docstring). `constraints[u]`: unit u's phrases as token id
    lists (a unit may have none); `prefixes[u]`: the target ids it starts with (they may hold phrase tokens).
    Candidates per sentence: the 2K dealt, in the order dealt, then -inf fillers, C = 2K in all. Each
    hypothesis' progress is an id of the `PhraseTable`; a step finds every sentence's candidates at once
    (`constrained_candidates`: one C pass over the logits) and deals them (`kernels.deal`: `allocate`'s rules
    as a sort key, rank within the bank, then the fuller bank first)."""

    def __init__(self, beam: int, eos: int, constraints: Sequence[Sequence[Sequence[int]]], prefixes=None,
                 raw_logits: bool = False):  # fmt: skip
        self.K, self.eos, self.raw_logits = beam, eos, raw_logits
        self.phrases = [[list(p) for p in c] for c in constraints]
        self.prefixes = prefixes
        self.table: PhraseTable | None = None

    def _start(self, device: torch.device) -> PhraseTable:
        """The table, each unit's progress after its prefix (every hypothesis) and its fresh start (fillers)."""
        table = self.table = PhraseTable(self.phrases, device)
        first, fresh = [], []
        for u, phrases in enumerate(self.phrases):
            p = fresh_p = Progress.start(len(phrases))
            for t in self.prefixes[u] if self.prefixes is not None else []:
                p = p.advance(phrases, t)
            first.append(table.id(u, p))
            fresh.append(table.id(u, fresh_p))
        table.expand(first + fresh)
        # Per live sentence, in the loop's order (every unit at the start; `keep` drops those that leave).
        self.state = torch.tensor(first, device=device)[:, None].repeat(1, self.K)  # (n, K) progress ids
        self.fresh = torch.tensor(fresh, device=device)  # (n,)
        beam_ids = torch.arange(self.K, device=device)  # the beam of each hypothesis' own best and wanted tokens:
        self.own = torch.cat([beam_ids, beam_ids.repeat_interleave(table.W)])  # (K + K*W,)
        return table

    def step(self, step: int, lprobs: Tensor, scores: Tensor, state: SearchState) -> Candidates:
        n, K, _ = lprobs.shape
        dev = lprobs.device
        table = self.table if self.table is not None else self._start(dev)
        st = self.state  # (n, K) each hypothesis' progress
        banned = ~table.done.take(st)  # (n, K) no <eos> before every phrase
        # Candidates, in the order a tie keeps: the 2K best overall, each hypothesis' own best, the tokens
        # that advance its phrases (a (beam, token) met twice: its first place).
        found = self._from_logits if self.raw_logits else self._from_lprobs
        cs, cb, ct, clp = found(lprobs, scores, banned, table.want.index_select(0, st.view(-1)).view(n, K, -1))
        rows = PhraseRows(table.tokens, table.nxt, table.reset, table.bank)
        cand_scores, tokens, beams, lp, self._cands = deal((cs, cb, ct, clp), st, rows, self.eos, 2 * K, self.fresh)
        return Candidates(cand_scores.to(scores.dtype), tokens, beams, lp)

    def _from_lprobs(self, lprobs: Tensor, scores: Tensor, banned: Tensor, want: Tensor) -> tuple[Tensor, ...]:
        """The candidates from log-probabilities (n, K, V) (after bans): scores, beams, tokens, log-probabilities
        (n, 2K + K + K*W) (-inf: none)."""
        n, K, V = lprobs.shape
        neg_inf = float("-inf")
        flat = lprobs.view(n * K, V)
        flat[:, self.eos].masked_fill_(banned.view(-1), neg_inf)
        total = scores[:, :, None] + lprobs  # (n, K, V)
        top_s, idx = total.reshape(n, K * V).topk(min(2 * K, K * V), dim=1)
        best_s, best_t = total.max(dim=-1)  # (n, K)
        want_s = total.gather(2, want.clamp(min=0)).masked_fill(want < 0, neg_inf)
        cs = torch.cat([top_s, best_s, want_s.reshape(n, -1)], dim=1)
        cb = torch.cat([idx // V, self.own.expand(n, -1)], dim=1)
        ct = torch.cat([idx % V, best_t, want.reshape(n, -1)], dim=1)
        clp = lprobs.reshape(n, K * V).gather(1, cb * V + ct.clamp(min=0))
        return cs, cb, ct, clp

    def _from_logits(self, logits: Tensor, scores: Tensor, banned: Tensor, want: Tensor) -> tuple[Tensor, ...]:
        """`_from_lprobs` from the logits themselves (no bans apply): one C pass (`constrained_candidates`, a
        banned <eos> never a candidate) gives each sentence's 2K best, each hypothesis' own best and its
        log-sum-exp, so a phrase token's log-probability is its logit - log-sum-exp."""
        n, K, V = logits.shape
        R, neg_inf = n * K, float("-inf")
        ban = torch.where(banned.view(R), self.eos, -1)
        top, (best_t, best_lp, lse) = constrained_candidates(logits.reshape(R, V), scores, min(2 * K, K * V), ban)
        top_s, top_t, top_b, top_lp = top
        best_lp = best_lp.view(n, K)
        want_lp = logits.gather(2, want.clamp(min=0)).float() - lse.view(n, K, 1)
        skip = (want < 0) | ((want == self.eos) & banned[:, :, None])
        want_s = (scores[:, :, None] + want_lp).masked_fill(skip, neg_inf)
        cs = torch.cat([top_s, scores + best_lp, want_s.reshape(n, -1)], dim=1)
        cb = torch.cat([top_b, self.own.expand(n, -1)], dim=1)
        ct = torch.cat([top_t, best_t.view(n, K), want.reshape(n, -1)], dim=1)
        clp = torch.cat([top_lp, best_lp, want_lp.reshape(n, -1)], dim=1)
        return cs, cb, ct, clp

    def chosen(self, live: Tensor) -> None:
        held = self._held = self._cands.gather(1, live)
        self.state = held
        assert self.table is not None
        new = held[~self.table.filled.take(held)]  # most steps: none (a progress is met again and again)
        if new.numel():
            self.table.expand(new.unique().tolist())

    def keep(self, rows: Sequence[int]) -> None:
        kept = torch.tensor(rows, device=self.state.device)
        self.state, self.fresh = self.state.index_select(0, kept), self.fresh.index_select(0, kept)

    def endable(self) -> Tensor:
        """Only a hypothesis that holds every phrase may end (its <eos> is banned until then)."""
        assert self.table is not None
        return self.table.done[self._held]

    def met(self, row: int, position: int) -> int:
        assert self.table is not None
        return self.table.progress[int(self._cands[row, position])].met.count(True)

"""The decoding loop's two modes over one shared start, shrink and reorder (`generate` picks one by the strategy's
`Search.single`), as Hugging Face's `_sample` and `_beam_search`:

- `RowLoop`, one candidate per row (greedy, sampling): the candidate is the row's next token or its <eos>, a unit
  finishes once, and outputs are tables of one row per unit, read at the end.
- `BeamLoop`, C >= 2K candidates per sentence (beam and constrained beam search): the rows' history follows the
  beams, and each sentence keeps its K best finished hypotheses.

What both do per step, and when a sentence is done, is `attnlab.decoding.generator`'s docstring.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from attnlab.decoding.history import History
from attnlab.decoding.hypothesis import Finished, keep_best
from attnlab.decoding.options import DecodeOptions
from attnlab.decoding.processors import Processor, apply
from attnlab.decoding.protocol import expand_state, reorders, reserve_steps
from attnlab.decoding.search import Candidates, Search, SearchState
from attnlab.decoding.trace import trace_step

__all__ = ["BeamLoop", "Loop", "RowLoop"]

SETTLE_MARGIN = 1e-4  # `BeamLoop._settled`: how far below the n_best-th finished score a live bound must be


class Loop:
    """What both modes share: n live sentences (units) of K rows each, the model's state and the rows' next
    inputs; the start (encoder, caches, the first step's expansion), the step's processed scores, the shrink
    (done sentences leave the batch) and the reorder (the caches follow the rows). A mode (`RowLoop`,
    `BeamLoop`: which one, the strategy declares by `Search.single`) adds its record of the outputs so far,
    its `advance` and its `results`."""

    def __init__(self, model, search: Search, options: DecodeOptions, *, bans: list[Processor], eos: int,
                 limits: list[int], copies: int, trace: list | None):  # fmt: skip
        self.model, self.search, self.bans, self.eos, self.limits = model, search, bans, eos, limits
        self.alpha, self.early, self.n_best = options.length_penalty, options.early_stopping, options.n_best
        self.copies, self.trace, self.K = copies, trace, search.K
        self.first_limit = min(limits)
        self.finished: list[list[Finished]] = [[] for _ in limits]
        self.drops = reorders(model)  # without `reorder_state`, done sentences stay in the batch

    def start(self, src: Tensor, lens: Tensor | None, bos: int, prefix: Tensor | None) -> None:
        U, K, device = len(self.limits), self.K, src.device
        self.P = P = 0 if prefix is None else prefix.shape[1]
        self.state = self.model.start_decoding(src, lens)
        reserve_steps(self.state, max(self.limits) + P)
        self._tables(U * K, P + max(self.limits), device)
        self.active = list(range(U))  # the unit of each live sentence
        self.active_t = torch.arange(U, device=device)  # the same, as a tensor
        self.home = torch.arange(U * K, device=device)  # (n*K,) table row of each batch row
        self.done = torch.zeros(U, dtype=torch.bool, device=device)  # sentences done but still in the batch
        self.dead = 0
        # All K copies start identical: only the first may expand, or the beam fills with duplicates.
        self.scores = torch.full((U, K), float("-inf"), device=device)
        self.scores[:, 0] = 0.0
        inp = torch.full((src.shape[0], 1), bos, dtype=torch.long, device=device)
        self.inp = inp if prefix is None else torch.cat([inp, prefix.to(device)], dim=1)  # (B, 1 + P)

    def _tables(self, rows: int, length: int, device: torch.device) -> None:
        """The mode's record of `rows` outputs of up to `length` tokens."""
        raise NotImplementedError

    def _start_prefix(self, tokens: Tensor, lprobs: Tensor) -> None:
        """Every row's record starts with the prefix: tokens, lprobs (U*K, P)."""
        raise NotImplementedError

    def _history(self, step: int) -> Tensor:
        """(n*K, P + step) the live rows' tokens so far (what the bans read)."""
        raise NotImplementedError

    def _follow(self, rows: Tensor, new_tok: Tensor, new_lp: Tensor | None) -> None:
        """After a step's shrink: the record's row i continues row rows[i] with new_tok[i] (beams only)."""

    def advance(self, step: int) -> bool:
        """One step; True when every sentence is done."""
        raise NotImplementedError

    def results(self) -> list[list[Finished]]:
        """Every unit's finished hypotheses."""
        return self.finished

    def _candidates(self, step: int, logits: Tensor) -> Candidates:
        """The strategy's step on this step's logits (n*K, L, V) (step 0: (B, 1 + P, V), expanded here)."""
        n, K = len(self.active), self.K
        x = logits[:, -1]
        if not self.search.raw_logits:
            x = F.log_softmax(x.float(), dim=-1)
        if step == 0:
            if self.P:  # the prefix's own log-probabilities, into every row's record
                lp = F.log_softmax(logits[:, :-1].float(), dim=-1).gather(2, self.inp[:, 1:, None]).squeeze(2)
                toks, lp = (t.repeat_interleave(self.copies * K, dim=0) for t in (self.inp[:, 1:], lp))
                self._start_prefix(toks, lp)
            if self.copies * K > 1:
                x = x.repeat_interleave(self.copies * K, dim=0)
        history = None
        if self.bans or self.search.history:
            history = self._history(step)
            x = apply(self.bans, x, history)
        V = x.shape[-1]
        return self.search.step(step, x.view(n, K, V), self.scores, SearchState(self.active, history))

    def _shrink(self, step: int, count: int, rows: Tensor, new_tok: Tensor, new_lp: Tensor | None = None) -> bool:
        """`count` more sentences are done (`self.done` marks them); drop done sentences from the batch once the
        strategy's `compact` says so; the record follows the rows that stay; reorder the state."""
        n, K = len(self.active), self.K
        self.dead += count
        if self.dead == n:
            return True
        drop = self.drops and self.dead and self.dead >= self.search.compact * n
        keep = (~self.done).nonzero().squeeze(1) if drop else None
        if keep is not None:
            sel = (keep[:, None] * K + torch.arange(K, device=keep.device)).reshape(-1)
            rows, new_tok = rows.index_select(0, sel), new_tok.index_select(0, sel)
            new_lp = None if new_lp is None else new_lp.index_select(0, sel)
            kept = keep.tolist()
            self.search.keep(kept)
            self.active = [self.active[i] for i in kept]
            self.active_t = self.active_t.index_select(0, keep)
            self.home, self.scores = self.home.index_select(0, sel), self.scores.index_select(0, keep)
            self.done, self.dead = self.done[keep], 0
        self._follow(rows, new_tok, new_lp)
        self._reorder(step, rows, keep is not None, n)
        self.inp = new_tok[:, None]
        return False

    def _reorder(self, step: int, rows: Tensor, shrunk: bool, n: int) -> None:
        """The model's state follows the live rows: step 0 expands each source to its rows; later, rows that
        changed parents (K > 1) or left (a shrink) reorder the caches."""
        K, copies = self.K, self.copies
        if step == 0 and copies * K > 1:
            if copies == 1:  # whole sentences: the kept ones expand straight from their sources
                self.state = expand_state(self.model, self.state, rows // K, K)
                return
            every = torch.arange(n * K, device=rows.device)  # sampling: every source's copies, then the shrink
            self.state = expand_state(self.model, self.state, every // (copies * K), copies * K)
        if shrunk:  # sentences left: every part of the state drops their rows
            self.state = self.model.reorder_state(self.state, rows)
        elif K > 1 and step > 0:  # beams changed parents within their sentences: only the growing caches move
            self.state = self.model.reorder_state(self.state, rows, same_sources=True)


class RowLoop(Loop):
    """One candidate per row (greedy, sampling: Hugging Face's `_sample`): a row's candidate is its next token
    or its <eos>, so a unit finishes once and its output is one row of two tables (tokens, log-probabilities),
    written every step and read once at the end."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.ends: dict[int, tuple[int, bool]] = {}  # unit -> (generated tokens kept, ended with <eos>)

    def _tables(self, rows: int, length: int, device: torch.device) -> None:
        self.tokens = torch.zeros((rows, length), dtype=torch.long, device=device)
        self.lps = torch.zeros((rows, length), dtype=torch.float, device=device)

    def _start_prefix(self, tokens: Tensor, lprobs: Tensor) -> None:
        self.tokens[:, : self.P], self.lps[:, : self.P] = tokens, lprobs

    def _history(self, step: int) -> Tensor:
        return self.tokens.index_select(0, self.home)[:, : self.P + step]

    def advance(self, step: int) -> bool:
        logits, self.state = self.model.decode_step(self.inp, self.state)
        cands = self._candidates(step, logits)
        hits = cands.tokens[:, 0] == self.eos
        if self.dead:  # rows already done may say <eos> again
            hits &= ~self.done
        self._write(step, cands)
        ended = self._ends(step, hits)
        if ended:
            self.done[ended] = True
        self.scores = cands.scores
        rows = torch.arange(len(self.active), device=hits.device)
        return self._shrink(step, len(ended), rows, cands.tokens[:, 0])

    def _write(self, step: int, cands: Candidates) -> None:
        """This step's tokens into the tables, <eos> too (a finished row's tail is never read)."""
        col = self.P + step
        self.tokens[self.home, col] = cands.tokens[:, 0]
        self.lps[self.home, col] = cands.lprobs[:, 0]

    def _ends(self, step: int, hits: Tensor) -> list[int]:
        """Rows that finish now: at their <eos> (`hits` (n,)), or cut at their limit."""
        ended = []
        if int(hits.sum()):  # one read of the step's result
            ended = hits.nonzero().squeeze(1).tolist()
            for i in ended:
                self.ends[self.active[i]] = (step, True)
        if step + 1 >= self.first_limit:
            for i, u in enumerate(self.active):
                if step + 1 >= self.limits[u] and u not in self.ends:
                    self.ends[u] = (step + 1, False)
                    ended.append(i)
        return ended

    def results(self) -> list[list[Finished]]:
        """Read off the tables (without the strategy's `scores`: NaN scores, no positional scores)."""
        P, alpha = self.P, self.alpha
        units = sorted(self.ends)
        toks = self.tokens[units].tolist()
        lps = self.lps[units].tolist() if self.search.scores else None
        for j, u in enumerate(units):
            m, ended = self.ends[u]
            row = toks[j][: P + m]
            if lps is None:
                self.finished[u] = [Finished(math.nan, row, [], ended)]
                continue
            pos = lps[j][: P + m + 1] if ended else lps[j][: P + m]
            generated = pos[P:]
            self.finished[u] = [Finished(sum(generated) / max(len(generated), 1) ** alpha, row, pos, ended)]
        return self.finished


class BeamLoop(Loop):
    """C >= 2K candidates per sentence (beam and constrained beam search: Hugging Face's `_beam_search`): the
    rows' tokens and log-probabilities in a `History` that follows the batch's rows, and every unit's K best
    finished hypotheses, with their count and worst score as tensors so that a step decides which sentences
    are done without a loop over them."""

    def _tables(self, rows: int, length: int, device: torch.device) -> None:
        self.hist = History(rows, length, device)
        self.limit_t = torch.tensor(self.limits, device=device)  # (U,) each unit's last step + 1
        self.nfin = torch.zeros(len(self.limits), dtype=torch.long, device=device)  # (U,) finished hypotheses held
        self.worst = torch.full((len(self.limits),), math.inf, dtype=torch.float64, device=device)  # (U,) their worst
        # (U,) the n_best-th best finished score (-inf: fewer), and the length ** penalty of each unit's limit
        self.nth = torch.full((len(self.limits),), -math.inf, dtype=torch.float64, device=device)
        self.reach = self.limit_t.double() ** self.alpha

    def _start_prefix(self, tokens: Tensor, lprobs: Tensor) -> None:
        self.hist.start(tokens, lprobs)

    def _history(self, step: int) -> Tensor:
        return self.hist.tokens

    def _follow(self, rows: Tensor, new_tok: Tensor, new_lp: Tensor | None) -> None:
        assert new_lp is not None
        self.hist.advance(rows, new_tok, new_lp)

    def advance(self, step: int) -> bool:
        logits, self.state = self.model.decode_step(self.inp, self.state)
        cands = self._candidates(step, logits)
        n, K = len(self.active), self.K
        C = cands.tokens.shape[1]
        filler = (cands.tokens == self.eos) | ~(cands.scores > float("-inf"))
        # The first K positions that are neither <eos> nor impossible stay live (fillers after them: -inf).
        order = torch.arange(C, device=filler.device) + C * filler
        live = order.topk(K, dim=1, largest=False).indices  # (n, K) positions, in candidate order
        live_scores = cands.scores.gather(1, live).masked_fill(filler.gather(1, live), float("-inf"))
        hits = (cands.tokens[:, :K] == self.eos) & (cands.scores[:, :K] > float("-inf"))
        rows = (torch.arange(n, device=live.device)[:, None] * K + cands.beams.gather(1, live)).reshape(-1)
        new_tok, new_lp = cands.tokens.gather(1, live).reshape(-1), cands.lprobs.gather(1, live).reshape(-1)
        accepted = self._finish_eos(step, cands, hits)
        self.search.chosen(live)
        records = None
        if self.trace is not None:
            norm = (step + 1) ** self.alpha
            records = trace_step(self.trace, step, self.active, cands, live, accepted=accepted, norm=norm)
        ended = self._done_sentences(step, cands, live, live_scores, records)
        count = int(ended.sum())
        if count:
            self.done |= ended
        self.scores = live_scores
        return self._shrink(step, count, rows, new_tok, new_lp)

    def _finish_eos(self, step: int, cands: Candidates, hits: Tensor) -> set[tuple[int, int]]:
        """The <eos> hits (n, K) finish; returns the (row, position) of those kept."""
        where = hits.nonzero()
        if not len(where):
            return set()
        wi, wc = where[:, 0], where[:, 1]
        toks, lps = self.hist.read(wi * self.K + cands.beams[wi, wc])
        vals, last = cands.scores[wi, wc].tolist(), cands.lprobs[wi, wc].tolist()
        accepted, touched = set(), {}
        norm = (step + 1) ** self.alpha
        for (i, c), s, t, lp, eos_lp in zip(where.tolist(), vals, toks, lps, last):
            u = self.active[i]
            entry = Finished(s / norm, t, lp + [eos_lp], True, self.search.met(i, c), (step, c))
            if keep_best(self.finished[u], entry, self.K):
                accepted.add((i, c))
                touched[u] = self.finished[u]
        if touched:  # what the done rule reads: how many finished, the worst of them
            units = torch.tensor(list(touched), device=hits.device)
            self.nfin[units] = torch.tensor([len(f) for f in touched.values()], device=hits.device)
            worst = [min(e.score for e in f) for f in touched.values()]
            self.worst[units] = torch.tensor(worst, dtype=torch.float64, device=hits.device)
            nth = [sorted((e.score for e in f), reverse=True)[self.n_best - 1] if len(f) >= self.n_best else -math.inf
                   for f in touched.values()]  # fmt: skip
            self.nth[units] = torch.tensor(nth, dtype=torch.float64, device=hits.device)
        return accepted

    def _done_sentences(self, step, cands, live, live_scores, records) -> Tensor:
        """(n,) the sentences done after this step: cut at their limit (their first K candidates finish as
        they are), or K finished and (early stopping, or no live hypothesis that could still beat the worst
        of them: best live total / length ** penalty <= worst finished, in float64 as the scores are), or
        settled (`_settled`). Only a live hypothesis that could end now is a rival (`Search.endable`: one that
        lacks a constraint phrase cannot; counting it kept sentences to their length limit)."""
        best = live_scores.max(dim=1).values  # (n,)
        units = self.active_t
        full = self.nfin.index_select(0, units) >= self.K
        if not self.early:
            endable = self.search.endable()
            rival = best if endable is None else live_scores.masked_fill(~endable, float("-inf")).max(dim=1).values
            full &= rival.double() / (step + 1) ** self.alpha <= self.worst.index_select(0, units)
        ended = full | self._settled(best, units) | (best == float("-inf"))
        if self.dead:  # still in a batch that cannot shrink
            ended &= ~self.done
        if step + 1 >= self.first_limit:
            limit = self.limit_t.index_select(0, units) <= step + 1
            if self.dead:
                limit &= ~self.done
            for i in limit.nonzero().squeeze(1).tolist():
                self._cut(step, i, cands, live, records)
            ended |= limit
        return ended

    def _settled(self, best: Tensor, units: Tensor) -> Tensor:
        """(n,) the sentences whose output can no longer change: the n_best hypotheses they return have
        finished, and no continuation of a live one could rank among them. A log-probability is at most 0, so
        a live total T ends no higher than T / limit ** penalty (`transformers`' exact bound, its
        early_stopping="never", held to the n_best returned rather than all K kept); a finished hypothesis
        that ended holds every constraint phrase, so the ranking's first key ties. SETTLE_MARGIN: the C
        pass's log-probability of a certain token may round a few ulps above 0."""
        reach = best.double() / self.reach.index_select(0, units)
        return reach < self.nth.index_select(0, units) - SETTLE_MARGIN

    def _cut(self, step: int, i: int, cands: Candidates, live: Tensor, records) -> None:
        """At the limit, sentence i's live hypotheses among its first K candidates finish unended."""
        K, u = self.K, self.active[i]
        pos, sc, tok = live[i].tolist(), cands.scores[i].tolist(), cands.tokens[i].tolist()
        beams, last = cands.beams[i].tolist(), cands.lprobs[i].tolist()
        slots = [k for k, c in enumerate(pos) if c < K and sc[c] > float("-inf") and tok[c] != self.eos]
        if not slots:
            return
        toks, lps = self.hist.read(torch.tensor([i * K + beams[pos[k]] for k in slots], device=live.device))
        norm = (step + 1) ** self.alpha
        for k, t, lp in zip(slots, toks, lps):
            c = pos[k]
            entry = Finished(sc[c] / norm, t + [tok[c]], lp + [last[c]], False, self.search.met(i, c), (step, c))
            if keep_best(self.finished[u], entry, K) and records is not None:
                records[i]["candidates"][c]["status"] = "cut"

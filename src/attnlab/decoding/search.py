"""Search strategies: how one step chooses, apart from the loop around it (fairseq's `search.py`). Each is a
`Search` with one `step(step, lprobs, scores, state) -> Candidates`: from the log-probabilities (n, K, V) of
the next token after each of n sentences' K live hypotheses and their totals so far (n, K), the candidates
(n, C), best first, each a token extending one of the K (`beams`). The loop (`attnlab.decoding.generator`)
finishes the <eos> candidates among the first K, keeps the first K others live, shrinks the batch and
reorders the caches; a strategy never sees the model.

    Greedy      K = 1, C = 1: the arg-max (`argmax.pick`: the C kernel, no log-softmax without bans)
    BeamSearch  K = beam, C = 2K: the 2K best continuations, so K that do not end in <eos> always remain
                (from the logits themselves without bans: `kernels.beam_topk`'s one pass)
    Sampling    K = 1, C = 1: one draw per row from softmax(warped log-probabilities) (top-k without bans: one
                call, `kernels.sample_top_k`, from the k candidates of one pass, never a distribution over V)
    (constrained beam search: `attnlab.decoding.constraints.ConstrainedBeamSearch`)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import Tensor

from attnlab.decoding.processors import Processor, Temperature, TopK, TopP, apply
from attnlab.kernels.argmax import pick
from attnlab.kernels.beam_topk import beam_candidates
from attnlab.kernels.sample import sample_top_k

__all__ = ["BeamSearch", "Candidates", "Greedy", "Sampling", "Search", "SearchState"]


class Candidates(NamedTuple):
    """One step's choice for n sentences, C candidates each, best first (constrained beam search: in the order
    its banks deal them)."""

    scores: Tensor  # (n, C) total log-probability of each candidate (-inf: none)
    tokens: Tensor  # (n, C) the token it appends
    beams: Tensor  # (n, C) the live hypothesis (0..K-1) it extends
    lprobs: Tensor  # (n, C) the token's own log-probability (its positional score)


class SearchState(NamedTuple):
    """What the loop tells a strategy besides the step's numbers."""

    sentences: list[int]  # the unit (sentence, or one sample of it) of each of the n rows of the step
    history: Tensor | None  # (n * K, t) tokens so far, prefix included (None when no one asked for it)


class Search:
    """A strategy. `K`: live hypotheses per sentence; `single`: step gives one candidate per row (C = 1, K = 1),
    the row's next token, so the loop runs in its row mode (a table per row, read at the end) rather than its
    beam mode (C >= 2K candidates per sentence, a history that follows the beams); `compact`: the fraction of a
    batch's sentences that must be done before their rows leave it (0: at once; dropping rows copies every
    cache); `raw_logits`: step takes the logits themselves (no ban applies: greedy's arg-max needs no
    log-softmax); `history`: step reads the tokens so far; `scores`: False when step skips the
    log-probabilities (greedy without scores: outputs have NaN scores and no positional scores)."""

    K: int = 1
    single: bool = False
    compact: float = 0.0
    raw_logits: bool = False
    history: bool = False
    scores: bool = True

    def step(self, step: int, lprobs: Tensor, scores: Tensor, state: SearchState) -> Candidates:
        raise NotImplementedError

    def chosen(self, live: Tensor) -> None:
        """The loop kept candidates `live` (n, K) (positions into the step's C) as the next live hypotheses."""

    def endable(self) -> Tensor | None:
        """(n, K) which live hypotheses the loop kept last (`chosen`) could end now (None: every one)."""
        return None

    def keep(self, rows: Sequence[int]) -> None:
        """Only the sentences at positions `rows` of the step stay in the batch."""

    def met(self, row: int, position: int) -> int:
        """Constraint phrases the candidate at (row, position) holds (ranks n-best lists; 0 without any)."""
        return 0


class Greedy(Search):
    """The most likely token. With `raw_logits`, step gets the logits and `pick` reads the chosen token's
    log-probability off them (logit - logsumexp) only when `scores`; otherwise the banned log-probabilities."""

    single = True
    compact = 0.25
    raw_logits = True

    def __init__(self, scores: bool = True, raw_logits: bool = True):
        self.scores, self.raw_logits = scores, raw_logits

    def step(self, step: int, lprobs: Tensor, scores: Tensor, state: SearchState) -> Candidates:
        rows = lprobs[:, 0]  # (n, V): logits or log-probabilities
        if self.raw_logits:
            tok, lp = pick(rows, self.scores)
        else:
            tok, _ = pick(rows, False)
            lp = rows.gather(1, tok[:, None]).squeeze(1).float() if self.scores else None
        lp = torch.zeros(tok.shape, device=tok.device) if lp is None else lp
        tok, lp = tok[:, None], lp[:, None]
        return Candidates(scores + lp, tok, torch.zeros_like(tok), lp)


class BeamSearch(Search):
    """The best 2K continuations of each sentence's K live hypotheses (fairseq's `BeamSearch.step`).

    Examples:
        >>> lprobs = torch.log(torch.tensor([[[0.6, 0.3, 0.1], [0.5, 0.4, 0.1]]]))   # n=1, K=2, V=3
        >>> c = BeamSearch(2).step(0, lprobs, torch.tensor([[0.0, float("-inf")]]), SearchState([0], None))
        >>> c.tokens[0, :3].tolist(), c.beams[0, :3].tolist()   # beam 1 is unused: the finite ones extend beam 0
        ([0, 1, 2], [0, 0, 0])
    """

    def __init__(self, beam: int, raw_logits: bool = False):
        self.K, self.raw_logits = beam, raw_logits

    def step(self, step: int, lprobs: Tensor, scores: Tensor, state: SearchState) -> Candidates:
        n, K, V = lprobs.shape
        if self.raw_logits:  # logits: log-softmax, totals and the 2K best in one pass (`kernels.beam_topk`)
            return Candidates(*beam_candidates(lprobs.reshape(n * K, V), scores, min(2 * K, K * V)))
        flat = lprobs.reshape(n, K * V)
        cand = (scores.unsqueeze(-1) + lprobs).reshape(n, K * V)
        cand_scores, idx = cand.topk(min(2 * K, K * V), dim=1)  # sorted, best first
        return Candidates(cand_scores, idx % V, idx // V, flat.gather(1, idx))


class Sampling(Search):
    """One token per row drawn from softmax(warpers(lprobs)) (temperature, top-k, top-p) with `generator`;
    the candidate's score is the model's log-probability, before the warpers.

    With `raw_logits` (no bans) step gets the logits. With `top_k` too, and the warpers `processors_for` makes
    (temperature, top-k, top-p, in that order), one call draws each row's token (`kernels.sample_top_k`: its
    k likeliest from one pass over the logits, softmax over them at the temperature, top-p, and the inverse of
    that distribution at one uniform from `generator`): softmax over the k equals softmax(logits / T) with
    every other token masked, as `TopK` then `TopP` over V give. A step where a token ties with the k-th (or a
    row has no finite logit) draws over V instead, where `TopK` keeps every tied token. Without `scores` the
    pass reads the logits themselves (no log-sum-exp over V) and the candidates' scores are zeros, as
    greedy's. Finished samples leave the batch a quarter at a time, as greedy's (`compact`).

    Examples:
        >>> logits = torch.tensor([[[0.0, 3.0, 1.0, -2.0]]])                  # n=1, K=1, V=4
        >>> s = Sampling([TopK(1)], torch.Generator().manual_seed(0), raw_logits=True, top_k=1)
        >>> c = s.step(0, logits, torch.zeros(1, 1), SearchState([0], None))
        >>> c.tokens.tolist(), round(c.lprobs.item(), 4) == round(logits.log_softmax(-1)[0, 0, 1].item(), 4)
        ([[1]], True)
    """

    single = True
    compact = 0.25  # rows that left at once cost a reorder of every cache per step: 4 % slower (ct2_speed.py)

    def __init__(self, warpers: Sequence[Processor], generator: torch.Generator | None = None, *,
                 raw_logits: bool = False, top_k: int = 0, scores: bool = True):  # fmt: skip
        self.generator, self.raw_logits, self.top_k, self.scores = generator, raw_logits, top_k, scores
        self.warpers = list(warpers)
        # The one-call draw: the warpers processors_for makes, in its order (temperature, top-k, top-p).
        self.draw = _draw_settings(self.warpers) if raw_logits and top_k else None

    def step(self, step: int, lprobs: Tensor, scores: Tensor, state: SearchState) -> Candidates:
        rows = lprobs[:, 0]  # (n, V): logits (raw_logits) or log-probabilities
        n, V = rows.shape
        if self.draw is not None and self.top_k < min(V, 64):
            u = torch.rand(n, generator=self.generator, device=rows.device)
            tok, lp, fallback = sample_top_k(rows.float(), self.top_k, u, *self.draw, scores=self.scores)
            if not bool(fallback.any()):
                tok = tok[:, None]
                lp = torch.zeros(tok.shape, device=tok.device) if lp is None else lp[:, None]
                return Candidates(scores + lp, tok, torch.zeros_like(tok), lp)
        cand_lp = rows.float().log_softmax(dim=-1) if self.raw_logits else rows
        probs = apply(self.warpers, cand_lp, cand_lp).softmax(dim=-1)
        tok = torch.multinomial(probs, 1, generator=self.generator)  # (n, 1)
        lp = cand_lp.gather(1, tok) if self.scores else torch.zeros(tok.shape, device=tok.device)
        return Candidates(scores + lp, tok, torch.zeros_like(tok), lp)


def _draw_settings(warpers: Sequence[Processor]) -> tuple[float, float] | None:
    """(temperature, top_p) of warpers that are Temperature, TopK, TopP at most once each and in that order (what
    `sample_top_k` draws from); None for any others."""
    kinds = [type(w) for w in warpers]
    if any(k not in (Temperature, TopK, TopP) for k in kinds) or kinds != sorted(kinds, key=_ORDER.index):
        return None
    if len(set(kinds)) != len(kinds):
        return None
    temperature = next((w.temperature for w in warpers if isinstance(w, Temperature)), 1.0)
    top_p = next((w.p for w in warpers if isinstance(w, TopP)), 1.0)
    return temperature, top_p


_ORDER = [Temperature, TopK, TopP]

"""Lexically constrained beam search with dynamic beam allocation (Post & Vilar 2018): every output
contains given target phrases, in any order, wherever the length limit leaves room for them.

    hyps = constrained_search(model, src, lens, bos, eos, beam=5, n_best=1, max_len=50,
                              constraints=[[[12, 40]], [[7], [30, 31]]])   # per sentence: phrases as ids

Each hypothesis carries a `Progress`: which phrases it has produced, and every phrase it may be inside
(each unmet phrase whose first tokens end its output, with how many): phrases that share a first token,
or one whose start continues another, are followed together, as fairseq's constraint trie follows them
("le chat" and "le chien": after "le" both are in progress, and "chien" completes the second). A phrase
counts once it occurs anywhere in the output (occurrences may overlap: "le" and "le chat" are both met by
"le chat"); a phrase given twice must occur twice. One step, per sentence:

1. candidates: the 2K best continuations overall (as plain beam search), plus for every live
   hypothesis the tokens that continue the phrases it is inside (or, inside none, the first token of
   each phrase it has not produced), plus its own single best token;
2. <eos> is forbidden to hypotheses that have not produced every phrase; <eos> candidates among the
   K best candidates finish;
3. the others are put into banks by the number of constraint tokens they have produced, and the K live
   slots are dealt round-robin, best first within each bank, starting from the fullest bank: every
   bank with candidates holds a slot, so some hypothesis always gains the next constraint token while
   the others keep the best unconstrained continuations (the unused share of a small bank goes to the
   others).

At the length limit the live hypotheses are cut; an output is chosen among the finished ones by the
number of phrases produced first, then score (so in an n-best list, a runner-up cut at the limit may
lack a phrase: it ranks after every hypothesis that holds them all).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.decoding.beam import Finished, finalize, prefix_history, shrink_batch
from attnlab.decoding.controls import Controls
from attnlab.decoding.hypothesis import Hypothesis
from attnlab.decoding.protocol import check_source, expand_state, inference, reserve_steps
from attnlab.decoding.search import beam_step

__all__ = ["Progress", "constrained_search"]


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


def allocate(cands: list[tuple[float, int, int, Progress]], phrases: list[list[int]], K: int) -> list:
    """Deal K live slots among candidates (score, beam, token, progress): banks by constraint tokens
    produced, best first within a bank, round-robin from the fullest bank."""
    banks: dict[int, list] = {}
    for c in sorted(cands, key=lambda c: -c[0]):
        banks.setdefault(c[3].produced(phrases), []).append(c)
    order = sorted(banks, reverse=True)
    chosen: list = []
    rank = 0
    while len(chosen) < K and any(rank < len(banks[b]) for b in order):
        chosen += [banks[b][rank] for b in order if rank < len(banks[b])][: K - len(chosen)]
        rank += 1
    return sorted(chosen, key=lambda c: -c[0])


def constrained_search(
    model: nn.Module,
    src: Tensor,
    src_valid_lens: Tensor | None,
    bos: int,
    eos: int,
    beam: int,
    n_best: int,
    max_len: int,
    constraints: list[list[list[int]]],
    length_penalty: float = 1.0,
    *,
    controls: Controls | None = None,
    prefix: Tensor | None = None,
) -> list[list[Hypothesis]]:
    """Constrained beam search (module docstring): B lists of `n_best` hypotheses, best first.

    Args:
        src: (B, S) source ids; src_valid_lens: (B,) or None.
        max_len: most steps after the prefix (<eos> included).
        constraints: per sentence, its phrases as token id lists (non-empty; a sentence may have none).
        controls, prefix: as in `beam_search`.
    """
    check_source(src, src_valid_lens, max_len)
    B, K, device = src.shape[0], beam, src.device
    if len(constraints) != B or any(not p for c in constraints for p in c):
        raise ValueError(f"constraints must hold one list of non-empty phrases per sentence ({B})")
    P = 0 if prefix is None else prefix.shape[1]
    neg_inf = float("-inf")
    finished: list[list[Finished]] = [[] for _ in range(B)]
    met_of: list[list[int]] = [[] for _ in range(B)]  # phrases each finished entry holds
    active = list(range(B))
    with inference(model):
        state = model.start_decoding(src, src_valid_lens)
        reserve_steps(state, max_len + P)
        scores = torch.full((B, K), neg_inf, device=device)
        scores[:, 0] = 0.0
        progress = [[Progress.start(len(constraints[b]))] * K for b in range(B)]
        tokens = torch.empty((B * K, 0), dtype=torch.long, device=device)
        pos_lp = torch.empty((B * K, 0), dtype=torch.float, device=device)
        inp = torch.full((B, 1), bos, dtype=torch.long, device=device)
        if prefix is not None:
            inp = torch.cat([inp, prefix.to(device)], dim=1)
        for step in range(max_len):
            n = len(active)
            logits, state = model.decode_step(inp, state)
            logprobs = F.log_softmax(logits[:, -1].float(), dim=-1)
            if step == 0:
                logprobs = logprobs.repeat_interleave(K, dim=0)
                if prefix is not None:
                    tokens, pos_lp = prefix_history(logits, inp, K)
                    for i, b in enumerate(active):  # the prefix may already hold constraint tokens
                        for t in prefix[i].tolist():
                            progress[b] = [p.advance(constraints[b], t) for p in progress[b]]
            if controls is not None:
                logprobs = controls(logprobs, tokens)
            not_done = [i * K + k for i, b in enumerate(active) for k in range(K) if not progress[b][k].done]
            if not_done:
                logprobs[torch.tensor(not_done, device=device), eos] = neg_inf
            V = logprobs.shape[-1]
            total = scores[:, :, None] + logprobs.view(n, K, V)  # (n, K, V)
            top_s, top_t, top_b = beam_step(logprobs.view(n, K, V), scores)  # (n, 2K)
            best_s, best_t = total.max(dim=-1)  # (n, K) each hypothesis' own best continuation
            sc = scores.tolist()
            want = [
                (i, k, t)
                for i, b in enumerate(active)
                for k in range(K)
                if sc[i][k] > neg_inf
                for t in progress[b][k].wanted(constraints[b])
            ]
            want_s = total[[w[0] for w in want], [w[1] for w in want], [w[2] for w in want]].tolist() if want else []
            by_sentence: list[dict[tuple[int, int], float]] = [{} for _ in range(n)]
            for i, row in enumerate(zip(top_s.tolist(), top_b.tolist(), top_t.tolist())):
                by_sentence[i].update({(k, t): s for s, k, t in zip(*row)})
            for i, (ss, ts) in enumerate(zip(best_s.tolist(), best_t.tolist())):
                by_sentence[i].update({(k, t): s for k, (s, t) in enumerate(zip(ss, ts))})
            for (i, k, t), s in zip(want, want_s):
                by_sentence[i][(k, t)] = s

            lp_flat = logprobs.view(n * K, V)
            new_rows: list[int] = []
            new_tok: list[int] = []
            new_scores: list[list[float]] = []
            new_prog: list[list[Progress]] = []
            keep = []
            for i, b in enumerate(active):
                cands = sorted(((s, k, t) for (k, t), s in by_sentence[i].items() if s > neg_inf), key=lambda c: -c[0])
                for s, k, t in cands[:K]:  # <eos> among the K best finishes (only done hypotheses may say it)
                    if t == eos:
                        r = i * K + k
                        entry = (
                            s / (step + 1) ** length_penalty,
                            tokens[r].tolist(),  # only a finishing row's history leaves the tensors
                            pos_lp[r].tolist() + [float(lp_flat[r, t])],
                            True,
                        )
                        if finalize(finished[b], entry, K):
                            met_of[b].append(len(constraints[b]))
                live = [(s, k, t, progress[b][k].advance(constraints[b], t)) for s, k, t in cands if t != eos]
                chosen = allocate(live, constraints[b], K)
                chosen += [(neg_inf, 0, eos, Progress.start(len(constraints[b])))] * (K - len(chosen))
                new_rows += [i * K + c[1] for c in chosen]
                new_tok += [c[2] for c in chosen]
                new_scores.append([c[0] for c in chosen])
                new_prog.append([c[3] for c in chosen])
            rows = torch.tensor(new_rows, device=device)
            nt = torch.tensor(new_tok, device=device)
            new_lp = lp_flat[rows, nt].masked_fill(torch.tensor(new_scores, device=device).view(-1) == neg_inf, 0.0)
            tokens = torch.cat([tokens.index_select(0, rows), nt[:, None]], dim=1)
            pos_lp = torch.cat([pos_lp.index_select(0, rows), new_lp[:, None]], dim=1)
            scores = torch.tensor(new_scores, device=device, dtype=torch.float)
            for i, b in enumerate(active):
                progress[b] = new_prog[i]
                if len(finished[b]) >= K:
                    continue
                if step + 1 >= max_len:  # the limit: live hypotheses finish as they are
                    hist, hist_lp = tokens[i * K : (i + 1) * K].tolist(), pos_lp[i * K : (i + 1) * K].tolist()
                    for k in range(K):
                        if new_scores[i][k] > neg_inf:
                            entry = (new_scores[i][k] / (step + 1) ** length_penalty, hist[k], hist_lp[k], False)
                            if finalize(finished[b], entry, K):
                                met_of[b].append(sum(progress[b][k].met))
                    continue
                keep.append(i)
            if not keep:
                break
            if len(keep) < n:
                rows, tokens, pos_lp, nt, scores = shrink_batch(keep, K, rows, tokens, pos_lp, nt, scores)
                active = [active[i] for i in keep]
            if step == 0:
                state = expand_state(model, state, rows // K, K)
            else:
                state = model.reorder_state(state, rows, same_sources=len(keep) == n)
            inp = nt[:, None]
    out = []
    for b, fin in enumerate(finished):
        ranked = [f for _, f in sorted(zip(met_of[b], fin), key=lambda mf: (-mf[0], -mf[1][0]))]
        out.append([Hypothesis(t, s, e, lp) for s, t, lp, e in ranked[:n_best]] or [Hypothesis([], neg_inf, False)])
    return out

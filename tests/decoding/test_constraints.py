"""Constrained beam search with phrases that share a first token (or whose start continues another): every
phrase a hypothesis may be inside is followed, checked against an exhaustive search over a scripted model."""

from __future__ import annotations

import contextlib
import itertools
import math

import pytest
import torch
from torch import Tensor, nn

from attnlab.decoding import generator as generator_module
from attnlab.decoding.constraints import Progress, allocate
from attnlab.decoding.generator import generate
from attnlab.decoding.options import DecodeOptions
from attnlab.decoding.search import Candidates, Search, SearchState
from attnlab.kernels import loader as native

PAD, BOS, EOS, LE, CHAT, CHIEN, NOIR = range(7)
V = 7
# A bigram model: P(next | previous). After "le" it prefers "chien"; "chien" is rather followed by "le",
# "chat" rather by <eos>: the best output holding "le chat" and "le chien" is "le chien le chat".
BIGRAM = {
    BOS: {LE: 0.9, NOIR: 0.1},
    LE: {CHIEN: 0.8, CHAT: 0.1, NOIR: 0.1},
    CHIEN: {LE: 0.35, EOS: 0.4, NOIR: 0.25},
    CHAT: {EOS: 0.6, LE: 0.1, NOIR: 0.3},
    NOIR: {EOS: 0.5, LE: 0.5},
}


class Bigram(nn.Module):
    """The decoding protocol over a fixed table of log-probabilities (the state is nothing: each step's
    logits depend on the last token only); `bigram` (default BIGRAM): previous -> {next: probability}."""

    def __init__(self, bigram: dict | None = None):
        super().__init__()
        table = torch.full((V, V), 1e-6)
        for prev, nxt in (BIGRAM if bigram is None else bigram).items():
            for tok, p in nxt.items():
                table[prev, tok] = p
        self.register_buffer("logp", (table / table.sum(-1, keepdim=True)).log())

    def start_decoding(self, src, src_valid_lens=None):
        return None

    def decode_step(self, tgt, state):
        return self.logp[tgt], state  # (B, t, V)

    def reorder_state(self, state, rows, same_sources=False):
        return state


def contains(tokens, phrase):
    return any(tokens[i : i + len(phrase)] == phrase for i in range(len(tokens) - len(phrase) + 1))


def exhaustive(model, phrases, max_len):
    """The highest-scoring output (<eos> within max_len steps, length penalty 1) holding every phrase."""
    best = (-math.inf, None)
    for n in range(max_len):
        for seq in itertools.product(range(3, V), repeat=n):
            seq = list(seq)
            if not all(contains(seq, p) for p in phrases):
                continue
            toks = [BOS, *seq, EOS]
            lp = sum(float(model.logp[a, b]) for a, b in itertools.pairwise(toks))
            best = max(best, (lp / (n + 1), seq), key=lambda t: t[0])
    return best


def search(phrases, beam, max_len):
    model = Bigram()
    src = torch.zeros((1, 2), dtype=torch.long)
    opts = DecodeOptions(beam=beam, early_stopping=True)
    return generate(model, src, None, opts, bos=BOS, eos=EOS, max_len=max_len, constraints=[phrases])[0][0]


@pytest.mark.parametrize("beam", [1, 2, 4])
def test_phrases_sharing_a_first_token_are_both_followed(beam):
    """Phrases "le chat" and "le chien": after "le" both are in progress, so "le chien" counts as the second phrase
    and the search finds the best output holding both (the exhaustive search's), not "le chat le chien"."""
    phrases = [[LE, CHAT], [LE, CHIEN]]
    h = search(phrases, beam, max_len=5)
    score, best = exhaustive(Bigram(), phrases, max_len=5)
    assert h.finished and h.tokens == best == [LE, CHIEN, LE, CHAT]
    assert h.score == pytest.approx(score, abs=1e-5)


def test_a_phrase_that_another_begins_is_met_inside_it():
    """Phrases "le" and "le chat" fit in 2 tokens: "le chat" holds both; following only the first listed would
    need "le le chat", which the limit (3 steps, <eos> included) has no room for."""
    h = search([[LE], [LE, CHAT]], beam=2, max_len=3)
    assert h.finished and h.tokens == [LE, CHAT]


def test_a_phrase_given_twice_must_occur_twice():
    h = search([[NOIR], [NOIR]], beam=4, max_len=6)
    assert h.tokens.count(NOIR) >= 2, h.tokens


def test_progress_tracks_every_phrase_it_may_be_inside():
    shared = [[LE, CHAT], [LE, CHIEN], [CHIEN, NOIR]]
    p = Progress.start(3).advance(shared, LE)
    assert p.partial == ((0, 1), (1, 1)) and p.wanted(shared) == [CHAT, CHIEN]
    p = p.advance(shared, CHIEN)  # completes "le chien" and starts "chien noir"
    assert p.met == (False, True, False) and p.partial == ((2, 1),) and p.produced(shared) == 3
    p = p.advance(shared, CHAT)  # continues nothing, starts nothing
    assert p.partial == () and p.met == (False, True, False)


# -- the tensor step against the same rules written per sentence ------------------------------------------------


class ObjectConstrainedSearch(Search):
    """The same step written another way: per sentence, with a `Progress` object per hypothesis, a dict of
    candidates, `sorted` and `allocate` (the module docstring's rules, one object at a time)."""

    def __init__(self, beam, eos, constraints, prefixes=None, raw_logits=False):
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
            held = self.progress[u]  # an <eos> candidate keeps its hypothesis' progress
            after = [(s, k, t, held[k] if t == eos else self._advance(u, held[k], t)) for s, k, t in ranked]
            row = allocate(after, self.phrases[u], 2 * K, self._bank(u))
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

    def endable(self) -> Tensor:
        return torch.tensor([[p.done for p in self.progress[u]] for u in self._units])


class RandomChain(nn.Module):
    """A seeded random model over V2 tokens whose logits depend on the last token and its position (so that
    two orders of the same tokens do not tie); the state is the number of positions seen."""

    def __init__(self, V2: int, seed: int):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.register_buffer("logits", torch.randn((V2, V2), generator=g) * 2)
        self.register_buffer("at", torch.randn((16, V2), generator=g))

    def start_decoding(self, src, src_valid_lens=None):
        return 0

    def decode_step(self, tgt, state):
        t = tgt.shape[1]
        return self.logits[tgt] + self.at[state : state + t], state + t

    def reorder_state(self, state, rows, same_sources=False):
        return state


@pytest.mark.parametrize("kernels", [True, False])  # the C passes, or their PyTorch fallbacks
@pytest.mark.parametrize("min_len", [0, 3])  # 0: the C pass over the logits; 3: a ban, log-probabilities
def test_the_tensor_step_deals_as_the_per_sentence_rules(monkeypatch, min_len, kernels):
    """Phrase tables, ranks within banks and the C passes (or their fallbacks) give the hypotheses, scores and
    phrase counts the per-sentence objects give, on 24 sources of 1-3 random phrases (some sharing tokens),
    with prefixes."""
    V2, rng = 10, torch.Generator().manual_seed(3)
    model = RandomChain(V2, seed=4)
    phrases = [
        [torch.randint(3, V2, (int(torch.randint(1, 3, (1,), generator=rng)),), generator=rng).tolist()
         for _ in range(int(torch.randint(1, 4, (1,), generator=rng)))]
        for _ in range(24)
    ]  # fmt: skip
    prefix = torch.randint(3, V2, (24, 1), generator=rng)
    opts = DecodeOptions(beam=3, n_best=3, min_len=min_len)
    src = torch.zeros((24, 2), dtype=torch.long)

    def run():
        return generate(model, src, None, opts, bos=BOS, eos=EOS, max_len=8, prefix=prefix, constraints=phrases)

    with contextlib.nullcontext() if kernels else native.off():
        ours = run()
    monkeypatch.setattr(generator_module, "ConstrainedBeamSearch", ObjectConstrainedSearch)
    theirs = run()
    assert [[h.tokens for h in hs] for hs in ours] == [[h.tokens for h in hs] for hs in theirs]
    assert [[h.finished for h in hs] for hs in ours] == [[h.finished for h in hs] for hs in theirs]
    for hs, rs in zip(ours, theirs):
        assert [h.score for h in hs] == pytest.approx([r.score for r in rs], abs=1e-5)
    ended = [h.finished for hs in ours for h in hs]
    assert 0 < sum(ended) < len(ended)  # both kinds: outputs that placed their phrases and ended, and cut ones


class Early(Bigram):
    """`Bigram` where "chat" can come only as one of the first two tokens (later: probability e^-30)."""

    def start_decoding(self, src, src_valid_lens=None):
        return 0

    def decode_step(self, tgt, state):
        logits = self.logp[tgt].clone()  # (B, t, V)
        late = torch.arange(state, state + tgt.shape[1]) >= 2
        logits[:, late, CHAT] = -30.0
        return logits, state + tgt.shape[1]


def test_a_hypothesis_without_its_phrases_is_no_rival_in_the_done_rule(monkeypatch):
    """A sentence with `beam` finished hypotheses is done once no live one that may end (holds every phrase)
    could beat them. Here "le le le ..." is likelier per token than any output holding "chat", which only the
    first two tokens can be, and cannot end without it: counted as a rival (as plain beam search counts every
    live hypothesis), it would keep the sentence to its length limit."""
    from attnlab.decoding.constraints import ConstrainedBeamSearch

    model = Early({BOS: {LE: 0.9, CHAT: 0.1}, LE: {LE: 0.98, CHAT: 0.01, EOS: 0.01}, CHAT: {EOS: 0.999, LE: 0.001}})
    steps = []
    real = model.decode_step

    def counted(tgt, state):
        steps[-1] += 1
        return real(tgt, state)

    monkeypatch.setattr(model, "decode_step", counted)

    def run():
        steps.append(0)
        opts = DecodeOptions(beam=2, length_penalty=0.0)  # scores are totals: a longer output never gains
        out = generate(model, torch.zeros((1, 2), dtype=torch.long), None, opts, bos=BOS, eos=EOS, max_len=20,
                       constraints=[[[CHAT]]])  # fmt: skip
        assert out[0][0].finished and CHAT in out[0][0].tokens
        return out[0][0].tokens

    ours = run()
    monkeypatch.setattr(ConstrainedBeamSearch, "endable", lambda self: None)  # every live hypothesis a rival
    assert run() == ours  # the same answer
    assert steps[0] < 10 and steps[1] == 20, steps  # without the rule: on to the limit

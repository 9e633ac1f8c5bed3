"""Constrained beam search with phrases that share a first token (or whose start continues another): every
phrase a hypothesis may be inside is followed, checked against an exhaustive search over a scripted model."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from torch import nn

from attnlab.decoding.constraints import Progress
from attnlab.decoding.generator import generate
from attnlab.decoding.options import DecodeOptions

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
    logits depend on the last token only)."""

    def __init__(self):
        super().__init__()
        table = torch.full((V, V), 1e-6)
        for prev, nxt in BIGRAM.items():
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

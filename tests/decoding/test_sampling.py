"""Sampling's draws against the distribution it claims, on a scripted model whose every step gives the same
logits: the first tokens of many seeded samples pass a chi-square test against softmax(logits / T) (and a
sampler that ignores the model fails it); top-k and top-p draw from exactly the support they allow."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attnlab.decoding import search
from attnlab.decoding.generator import generate
from attnlab.decoding.options import DecodeOptions

BOS, EOS = 0, 1
LOGITS = torch.tensor([-9.0, 0.3, 1.2, -0.4, 0.9, -1.5, 0.0, 2.0])  # V = 8; <bos> nearly never drawn
V = LOGITS.numel()
CHI2_DF7_P001 = 24.322  # the chi-square distribution's 0.999 quantile at 7 degrees of freedom


class Scripted(nn.Module):
    """The decoding protocol with the same logits at every step for every row (the state is nothing)."""

    def start_decoding(self, src, src_valid_lens=None):
        return None

    def decode_step(self, tgt, state):
        return LOGITS.expand(tgt.shape[0], tgt.shape[1], V).clone(), state

    def reorder_state(self, state, rows, same_sources=False):
        return state


def first_tokens(seed: int, sources: int = 64, **options) -> torch.Tensor:
    """The first token of sources x 64 samples (one decoding step: <eos> is a token too)."""
    opts = DecodeOptions(sample=True, n_best=64, seed=seed, **options)
    gen = torch.Generator().manual_seed(seed)
    src = torch.zeros((sources, 1), dtype=torch.long)
    out = generate(Scripted(), src, None, opts, bos=BOS, eos=EOS, max_len=1, generator=gen)
    return torch.tensor([h.tokens[0] if h.tokens else EOS for hs in out for h in hs])


def chi_square(draws: torch.Tensor, probs: torch.Tensor) -> float:
    """Pearson's statistic over the tokens expected at least 5 times (the rest pooled into one cell)."""
    counts = torch.bincount(draws, minlength=V).double()
    expected = probs.double() * draws.numel()
    big = expected >= 5
    obs = torch.cat([counts[big], counts[~big].sum().reshape(1)])
    exp = torch.cat([expected[big], expected[~big].sum().reshape(1)])
    keep = exp > 0
    return float(((obs[keep] - exp[keep]) ** 2 / exp[keep]).sum())


@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0])
def test_draws_follow_softmax_of_logits_over_temperature(temperature):
    draws = first_tokens(seed=3, temperature=temperature)
    assert chi_square(draws, torch.softmax(LOGITS / temperature, dim=-1)) < CHI2_DF7_P001
    # ... and not another temperature's distribution (the test tells temperatures apart)
    other = 4.0 if temperature < 1.5 else 0.5
    assert chi_square(draws, torch.softmax(LOGITS / other, dim=-1)) > CHI2_DF7_P001


def test_the_chi_square_test_fails_a_sampler_that_ignores_the_model(monkeypatch):
    """Swap the sampler's draw for a uniform one: the same test must reject it."""
    real = torch.multinomial

    def uniform(probs, n, generator=None):
        return real(torch.ones_like(probs), n, generator=generator)

    monkeypatch.setattr("attnlab.decoding.search.torch.multinomial", uniform)
    assert chi_square(first_tokens(seed=3), torch.softmax(LOGITS, dim=-1)) > CHI2_DF7_P001


def test_the_same_seed_gives_the_same_samples_and_another_seed_others():
    assert torch.equal(first_tokens(seed=5, sources=4), first_tokens(seed=5, sources=4))
    assert not torch.equal(first_tokens(seed=5, sources=4), first_tokens(seed=6, sources=4))


@pytest.mark.parametrize("k", [1, 3, 5])
def test_top_k_draws_exactly_from_the_k_likeliest(k):
    allowed = set(LOGITS.topk(k).indices.tolist())
    seen = set(first_tokens(seed=7, top_k=k).tolist())
    assert seen == allowed


@pytest.mark.parametrize("p", [0.3, 0.6, 0.9])
def test_top_p_draws_exactly_from_the_smallest_set_holding_p(p):
    probs, order = torch.softmax(LOGITS, dim=-1).sort(descending=True)
    n = int((probs.cumsum(0) < p).sum()) + 1  # the smallest prefix whose mass reaches p
    allowed = set(order[:n].tolist())
    draws = first_tokens(seed=7, top_p=p)
    assert set(draws.tolist()) == allowed
    # within the nucleus the draws follow the renormalised probabilities
    kept = torch.zeros(V)
    kept[order[:n]] = torch.softmax(LOGITS, dim=-1)[order[:n]]
    assert chi_square(draws, kept / kept.sum()) < CHI2_DF7_P001


@pytest.mark.parametrize(("k", "temperature", "p"), [(3, 0.5, 1.0), (5, 2.0, 1.0), (5, 1.0, 0.8), (7, 1.5, 0.9)])
def test_top_k_with_temperature_and_top_p_follows_the_masked_softmax(k, temperature, p):
    """The draws from the k candidates (the fast path: logits, no bans) against softmax(logits / T) computed
    over V with every token outside the top k, then outside the nucleus p of what remains, masked."""
    scaled = LOGITS / temperature
    masked = scaled.masked_fill(scaled < scaled.topk(k).values[-1], float("-inf"))
    probs, order = masked.softmax(-1).sort(descending=True)
    n = int((probs.cumsum(0) < p).sum()) + 1
    expected = torch.zeros(V)
    expected[order[:n]] = probs[:n] / probs[:n].sum()
    draws = first_tokens(seed=11, top_k=k, temperature=temperature, top_p=p)
    assert set(draws.tolist()) == set(order[:n].tolist())
    assert chi_square(draws, expected) < CHI2_DF7_P001


def test_top_k_draws_take_the_one_pass_and_score_the_model_log_probability(monkeypatch):
    """Top-k sampling without bans draws with one `sample_top_k` call per step (never a softmax over V), and
    each sample's positional score is log_softmax(logits) of its token, before the temperature."""
    calls = []
    real = search.sample_top_k

    def counted(logits, k, *args, **kwargs):
        calls.append((k, *args[1:], kwargs["scores"]))
        return real(logits, k, *args, **kwargs)

    monkeypatch.setattr("attnlab.decoding.search.sample_top_k", counted)
    softmax = torch.softmax
    monkeypatch.setattr(torch, "softmax", lambda *a, **k: pytest.fail("a softmax over V"))
    monkeypatch.setattr(torch.Tensor, "softmax", lambda *a, **k: pytest.fail("a softmax over V"))
    opts = DecodeOptions(sample=True, n_best=8, seed=1, top_k=4, temperature=0.7)
    out = generate(Scripted(), torch.zeros((2, 1), dtype=torch.long), None, opts, bos=BOS, eos=EOS, max_len=3,
                   generator=torch.Generator().manual_seed(1))  # fmt: skip
    monkeypatch.setattr(torch, "softmax", softmax)
    assert calls and set(calls) == {(4, 0.7, 1.0, True)}  # k, temperature, top-p, scores
    lp = torch.log_softmax(LOGITS, dim=-1)
    for h in (h for hs in out for h in hs):
        want = [float(lp[t]) for t in h.tokens] + ([float(lp[EOS])] if h.finished else [])
        assert h.positional_scores == pytest.approx(want, abs=1e-5)

"""Every search against a reference computed another way.

Beam search (K = 2, 3), decoder-only and encoder–decoder (every position scheme, full and grouped key/value
heads), on a batch whose sentences end at different steps: each hypothesis it returns carries, token by token,
the log-probabilities an uncached full forward of the model gives its own tokens (a cache reordered to the wrong
parents, or rows mixed up as sentences leave, gives other numbers), its score is their sum over its length to
the penalty, and the K best are ranked. Sampling beyond the first token: a scripted model whose next-token
distribution depends on the previous token, the joint distribution of the first two tokens (chi-square) over
a batch whose rows end at different steps, plain and under top-k. The top-k and top-p warpers: the same
scores as `transformers`' warpers, values and -inf."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from attnlab.attention.positions import POSITIONS
from attnlab.decoding.generator import generate
from attnlab.decoding.options import DecodeOptions
from attnlab.decoding.processors import TopK, TopP
from attnlab.models import Transformer, TransformerConfig
from attnlab.models.decoder_only import DecoderOnly, DecoderOnlyConfig

PAD, BOS, EOS = 0, 1, 2
V = 9


def _eos_likely(model: nn.Module, bias: float) -> nn.Module:
    """Raise <eos>'s output bias, so that hypotheses finish at many different steps."""
    out = [m for m in model.modules() if isinstance(m, nn.Linear) and m.out_features == V][-1]
    with torch.no_grad():
        out.bias[EOS] += bias
    return model.eval()


def _sources() -> tuple[torch.Tensor, torch.Tensor]:
    src = torch.randint(3, V, (4, 6), generator=torch.Generator().manual_seed(0))
    lens = torch.tensor([6, 2, 4, 1])
    return src.masked_fill(torch.arange(6) >= lens[:, None], PAD), lens


def _check_against_full_forward(model: nn.Module, beam: int, alpha: float = 1.0) -> None:
    src, lens = _sources()
    opts = DecodeOptions(beam=beam, n_best=beam, length_penalty=alpha)
    out = generate(model, src, lens, opts, bos=BOS, eos=EOS, max_len=[7, 3, 5, 6])
    lengths = set()
    for b, hyps in enumerate(out):
        assert len(hyps) == beam
        scores = [h.score for h in hyps]
        assert scores == sorted(scores, reverse=True)
        for h in hyps:
            steps = h.tokens + [EOS] if h.finished else h.tokens
            lengths.add(len(steps))
            tgt_in = torch.tensor([[BOS, *steps[:-1]]])
            with torch.no_grad():  # the reference: every position recomputed from the tokens, no cache
                lp = model(src[b : b + 1], tgt_in, lens[b : b + 1]).log_softmax(-1)[0]
            want = lp.gather(1, torch.tensor(steps)[:, None])[:, 0]
            torch.testing.assert_close(torch.tensor(h.positional_scores), want, atol=2e-5, rtol=1e-5)
            assert h.score == pytest.approx(want.sum().item() / len(steps) ** alpha, abs=1e-4)
    assert len(lengths) >= 2  # the hypotheses ended at different steps (the batch shrank on the way)


@pytest.mark.parametrize("beam", [2, 3])
def test_decoder_only_beam_search_scores_are_the_full_forwards(beam, one_thread):
    torch.manual_seed(1)
    cfg = DecoderOnlyConfig(V, V, num_hiddens=16, num_heads=2, num_layers=2, ffn_num_hiddens=24, dropout=0.0)
    _check_against_full_forward(_eos_likely(DecoderOnly(cfg), 1.5), beam)


@pytest.mark.parametrize("beam", [2, 3])
@pytest.mark.parametrize("kv_heads", [1, 2], ids=["kv1", "kv2"])
@pytest.mark.parametrize("positions", POSITIONS)
def test_encoder_decoder_beam_search_scores_are_the_full_forwards(positions, kv_heads, beam, one_thread):
    torch.manual_seed(2)
    cfg = TransformerConfig(
        V, V, num_hiddens=16, num_heads=2, num_layers=2, ffn_num_hiddens=24, dropout=0.0, max_len=32,
        positions=positions, num_kv_heads=kv_heads,
    )  # fmt: skip
    _check_against_full_forward(_eos_likely(Transformer(cfg), 0.5), beam, alpha=0.7)


# -- sampling beyond the first token ----------------------------------------------------------------------------

# A Markov chain over M = 6 (<pad> 0, <bos> 1, <eos> 2, tokens 3-5): the logits of the next token given the last
# one. After 3, tokens 3 and 5 tie at k = 2 (a step where any row ties at the k-th draws over V, keeping both, as
# `TopK`); at k = 3 no row ties at the boundary, so every step runs sampling's top-k fast path.
MARKOV = torch.tensor(
    [
        [-30.0, -30.0, 0.0, 0.1, 0.2, 0.3],  # after <pad>: never asked
        [-30.0, -30.0, -0.5, 1.0, 0.0, -1.0],  # after <bos>: the first token (<eos> included)
        [-30.0, -30.0, 0.1, 0.2, 0.3, 0.4],  # after <eos>: rows already done, never read
        [-30.0, -30.0, -1.0, 0.0, 1.5, 0.0],  # after 3
        [-30.0, -30.0, 0.5, 1.0, -3.0, 0.3],  # after 4
        [-30.0, -30.0, -2.0, 0.8, 0.8, -0.5],  # after 5
    ]
)
M = MARKOV.shape[1]


class Markov(nn.Module):
    """The decoding protocol with logits that depend only on each row's previous token (no state)."""

    def start_decoding(self, src, src_valid_lens=None):
        return None

    def decode_step(self, tgt, state):
        return MARKOV[tgt].clone(), state  # (R, t) -> (R, t, M)

    def reorder_state(self, state, rows, same_sources=False):
        return state


def _chi2_quantile(df: int, z: float = 3.09) -> float:
    """The chi-square distribution's 0.999 quantile (z: the normal's), by Wilson and Hilferty's approximation."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def _joint(warp) -> dict[tuple[int, int], float]:
    """P(first token, second token) under the warper (second = -1 after a first <eos>)."""
    p1 = warp(MARKOV[BOS : BOS + 1].log_softmax(-1)).softmax(-1)[0]
    joint = {}
    for a in range(M):
        if a == EOS:
            joint[(a, -1)] = p1[a].item()
            continue
        p2 = warp(MARKOV[a : a + 1].log_softmax(-1)).softmax(-1)[0]
        for b in range(M):
            joint[(a, b)] = p1[a].item() * p2[b].item()
    return joint


def _first_two(seed: int, **options) -> list[tuple[int, int]]:
    """(first, second) tokens of 96 sources x 48 samples whose limits are 2, 3 and 5 steps (the rows end at
    different steps: at a drawn <eos> or their limit)."""
    sources = 96
    opts = DecodeOptions(sample=True, n_best=48, seed=seed, **options)
    limits = [(2, 3, 5)[i % 3] for i in range(sources)]
    src = torch.zeros((sources, 1), dtype=torch.long)
    gen = torch.Generator().manual_seed(seed)
    out = generate(Markov(), src, None, opts, bos=BOS, eos=EOS, max_len=limits, generator=gen)
    pairs = []
    for hyps in out:
        for h in hyps:
            steps = h.tokens + [EOS] if h.finished else h.tokens
            pairs.append((steps[0], -1) if steps[0] == EOS else (steps[0], steps[1]))
    return pairs


def _chi_square(pairs: list[tuple[int, int]], joint: dict) -> tuple[float, int]:
    """Pearson's statistic over the cells expected at least 5 times (others pooled), and its degrees of freedom."""
    n = len(pairs)
    counts = {cell: 0 for cell in joint}
    for pair in pairs:
        assert pair in counts and joint[pair] > 0, f"drew {pair}, which has no probability"
        counts[pair] += 1
    big = [c for c in joint if joint[c] * n >= 5]
    small = [c for c in joint if joint[c] * n < 5]
    cells = [(counts[c], joint[c] * n) for c in big]
    if small:
        cells.append((sum(counts[c] for c in small), sum(joint[c] for c in small) * n))
    cells = [(o, e) for o, e in cells if e > 0]
    return sum((o - e) ** 2 / e for o, e in cells), len(cells) - 1


def test_the_first_two_tokens_follow_the_chain(one_thread):
    pairs = _first_two(seed=5)
    chain = _joint(lambda lp: lp)
    stat, df = _chi_square(pairs, chain)
    assert stat < _chi2_quantile(df), (stat, df)
    # The test tells distributions apart: a second token drawn whatever the first was fails it.
    first, second = MARKOV[BOS].softmax(-1), MARKOV[2:].softmax(-1).mean(0)
    independent = {(a, b): first[a].item() * (1.0 if b < 0 else second[b].item()) for a, b in chain}
    assert _chi_square(pairs, independent)[0] > _chi2_quantile(df)


@pytest.mark.parametrize(
    ("k", "scores", "temperature"), [(2, True, 1.0), (2, False, 1.0), (3, True, 1.0), (3, False, 1.0), (3, False, 0.5)]
)
def test_the_first_two_tokens_follow_the_chain_under_top_k(k, scores, temperature, one_thread):
    # scores=False draws from the k largest logits themselves (`top_logits`), never their log-probabilities
    pairs = _first_two(seed=6, top_k=k, scores=scores, temperature=temperature)

    def kept(lp):  # the reference: the k likeliest keep their log-probabilities / T, the rest none
        lp = lp / temperature
        return lp.masked_fill(lp < lp.sort(dim=-1, descending=True).values[:, k - 1 : k], -math.inf)

    stat, df = _chi_square(pairs, _joint(kept))
    assert stat < _chi2_quantile(df), (stat, df)


# -- the warpers against transformers' ---------------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 2, 5, 17, 40])
def test_top_k_scores_equal_transformers_warper(k):
    warpers = pytest.importorskip("transformers.generation.logits_process")
    lprobs = torch.randn(6, 40, generator=torch.Generator().manual_seed(k)).log_softmax(-1)
    lprobs[0, 3] = lprobs[0, 7]  # a tie
    ids = torch.zeros((6, 1), dtype=torch.long)
    want = warpers.TopKLogitsWarper(top_k=k)(ids, lprobs.clone())
    got = TopK(k)(lprobs.clone(), ids)
    assert torch.equal(torch.isinf(got), torch.isinf(want))
    assert torch.equal(got, want)


@pytest.mark.parametrize("p", [0.05, 0.3, 0.6, 0.9, 0.99])
def test_top_p_scores_equal_transformers_warper(p):
    warpers = pytest.importorskip("transformers.generation.logits_process")
    lprobs = (2 * torch.randn(6, 40, generator=torch.Generator().manual_seed(int(p * 100)))).log_softmax(-1)
    ids = torch.zeros((6, 1), dtype=torch.long)
    want = warpers.TopPLogitsWarper(top_p=p)(ids, lprobs.clone())
    got = TopP(p)(lprobs.clone(), ids)
    assert torch.equal(torch.isinf(got), torch.isinf(want))
    assert torch.equal(got, want)

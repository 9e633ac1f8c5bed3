"""`beam_candidates` (csrc/beam_topk.c) chooses what log_softmax + `beam_step` choose, on PyTorch's own ops."""

import pytest
import torch
import torch.nn.functional as F

from attnlab.decoding.search import BeamSearch, SearchState
from attnlab.kernels import loader as native
from attnlab.kernels.beam_topk import beam_candidates


def reference(logits, scores, k):
    n, K = scores.shape
    lprobs = F.log_softmax(logits, dim=-1)
    s, t, b, _ = BeamSearch(K).step(0, lprobs.view(n, K, -1), scores, SearchState(list(range(n)), None))
    s, t, b = s[:, :k], t[:, :k], b[:, :k]
    return s, t, b, lprobs.view(n, K, -1)[torch.arange(n)[:, None], b, t]


def test_the_beam_kernel_builds_where_the_other_kernels_do():
    if native.load("int8_step") is None:
        pytest.skip("no C compiler for attnlab's kernels")
    assert native.load("beam_topk") is not None, native.status("beam_topk")


@pytest.mark.parametrize("K, V", [(1, 7), (2, 50), (4, 4000), (5, 33)])
def test_beam_candidates_are_log_softmax_and_beam_step(K, V):
    g = torch.Generator().manual_seed(K * V)
    n = 6
    logits = torch.randn(n * K, V, generator=g) * 3
    scores = -torch.rand(n, K, generator=g) * 5
    scores[0, 1:] = float("-inf")  # a first step: only beam 0 may expand
    logits[3, 5] = float("-inf")  # a suppressed token
    k = min(2 * K, K * V)
    got = beam_candidates(logits, scores, k)
    want = reference(logits, scores, k)
    assert torch.equal(got[1], want[1]) and torch.equal(got[2], want[2])
    torch.testing.assert_close(got[0], want[0], rtol=0, atol=2e-5)
    torch.testing.assert_close(got[3], want[3], rtol=0, atol=2e-5)
    with native.off():  # PyTorch's path: the reference exactly
        for a, b in zip(beam_candidates(logits, scores, k), want):
            assert torch.equal(a, b)


def test_beam_candidates_on_strided_logits_and_every_candidate():
    logits = torch.randn(4, 20)[:, :9]  # rows of 9 logits, 20 apart (a (n*K, 1, V) step's last position)
    scores = torch.zeros(2, 2)
    s, t, b, lp = beam_candidates(logits, scores, 18)  # every candidate, best first
    assert bool((s[:, :-1] >= s[:, 1:]).all())
    assert sorted((b * 9 + t)[0].tolist()) == list(range(18))
    with pytest.raises(ValueError):
        beam_candidates(logits, scores, 19)

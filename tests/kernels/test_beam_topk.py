"""`beam_candidates` (csrc/beam_topk.c) chooses what log_softmax + `beam_step` choose, on PyTorch's own ops;
`top_logits` what `torch.topk` does; `constrained_candidates` what its PyTorch path does."""

import pytest
import torch
import torch.nn.functional as F

from attnlab.decoding.search import BeamSearch, SearchState
from attnlab.kernels import loader as native
from attnlab.kernels.beam_topk import beam_candidates, constrained_candidates, native_beam_candidates, top_logits


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


@pytest.mark.parametrize("K, V", [(1, 7), (2, 50), (4, 4000), (5, 33), (3, 130)])
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


def test_beam_candidates_skip_hopeless_hypotheses_nan_rows_and_ties():
    """A hypothesis far behind the list's worst is skipped whole; a row holding NaN gives no candidate (its
    log-softmax is NaN, as PyTorch's); a tie across blocks goes to the lower token. Otherwise exactly
    log_softmax + beam_step, with NaN rows as hypotheses that do not exist."""
    g = torch.Generator().manual_seed(7)
    n, K, V = 3, 4, 300
    logits = torch.randn(n * K, V, generator=g) * 4
    scores = torch.tensor([[0.0, -1.0, -400.0, -500.0], [0.0, -0.5, -0.7, float("-inf")], [-2.0, -2.0, -3.0, -90.0]])
    logits[0, 100:164] = float("nan")  # a whole block of one row
    logits[5, ::7] = float("nan")  # scattered ones
    top = logits[8].max() + 1
    logits[8, 200] = logits[8, 10] = top  # a tie across blocks of one row
    got = beam_candidates(logits, scores, 2 * K)
    absent = scores.clone()
    absent[0, 0] = absent[1, 1] = float("-inf")
    want = reference(logits.nan_to_num(0.0), absent, 2 * K)
    assert got[1][2, :2].tolist() == [10, 200] and got[2][2, :2].tolist() == [0, 0]  # the tie: lower token first
    assert torch.equal(got[1][:2], want[1][:2]) and torch.equal(got[2][:2], want[2][:2])
    assert torch.equal(got[1][2, 2:], want[1][2, 2:]) and torch.equal(got[2][2, 2:], want[2][2, 2:])
    torch.testing.assert_close(got[0], want[0], rtol=0, atol=2e-5)
    assert not bool(got[0].isnan().any() | got[3].isnan().any())
    assert not {0, 2, 3} & set(got[2][0].tolist()) and 1 not in got[2][1].tolist()


@pytest.mark.parametrize("k", [1, 11, 64])
def test_top_logits_are_torch_topk(k):
    # positive and negative logits, strided rows: the raw pass must not skip a row as if its values were <= 0
    logits = (torch.randn(40, 3001, generator=torch.Generator().manual_seed(k)) * 4 + 2)[:, :3000]
    assert native_beam_candidates(logits, torch.zeros(40, 1), k, raw=True) is not None or not native.active()
    values, tokens = top_logits(logits, k)
    want = logits.topk(k, dim=1)
    assert torch.equal(values, want.values) and torch.equal(tokens, want.indices)
    with pytest.raises(ValueError, match="k must lie"):
        top_logits(logits, 3001)


def stable_top(row: list[float], k: int) -> tuple[list[float], list[int]]:
    """The k largest of row by (value, then lower index), NaN never; missing places (-inf, 0), as the kernel."""
    ranked = sorted((-v, i) for i, v in enumerate(row) if v == v)[:k]
    ranked += [(float("inf"), 0)] * (k - len(ranked))
    return [-v for v, _ in ranked], [i for _, i in ranked]


@pytest.mark.parametrize("V", [1, 5, 31, 32, 33, 100, 127, 128, 129, 300, 4000])
def test_top_logits_ties_nan_and_inf_against_a_stable_sort(V):
    """Few distinct values (ties within and across the kernel's blocks), NaN and -inf lanes, rows with fewer than k
    values that are not NaN: the k best by value then index, as a stable sort gives them."""
    g = torch.Generator().manual_seed(V)
    logits = torch.randint(0, 6, (12, V), generator=g).float()
    logits[1] = float("nan")
    logits[2, ::3] = float("nan")
    logits[3, 1::2] = float("-inf")
    logits[4, :] = float("-inf")
    logits[5, V // 2 :] = float("nan")
    for k in sorted({1, min(V, 11), min(V, 64)}):
        found = native_beam_candidates(logits, torch.zeros(12, 1), k, raw=True)
        if found is None:
            assert not native.active()
            pytest.skip("no C kernels here")
        for r in range(12):
            values, tokens = stable_top(logits[r].tolist(), k)
            assert found[3][r].tolist() == values and found[1][r].tolist() == tokens, (r, k)


@pytest.mark.parametrize("K, V", [(1, 7), (3, 100), (4, 4000)])
def test_constrained_candidates_ban_a_token_and_give_each_rows_best(K, V):
    """A banned token is never a candidate nor a row's best, yet keeps its share of the log-sum-exp: where it is a
    row's largest logit (its block's maximum), in the tail block, or in a row with a tie for the best (the lower
    token wins); a row of -inf has no best. The C pass gives what the PyTorch path gives."""
    g = torch.Generator().manual_seed(K * V)
    n = 6
    logits = torch.randn(n * K, V, generator=g) * 3
    scores = -torch.rand(n, K, generator=g) * 4
    scores[0, 1:] = float("-inf")
    ban = torch.randint(0, V, (n * K,), generator=g)
    ban[::3] = -1
    ban[1] = logits[1].argmax()  # the row's best is banned: its second best is its best
    ban[2] = V - 1  # the tail block
    logits[4, 0] = logits[4, V - 1] = logits[4].max() + 1  # a tie for the row's best
    ban[4] = -1
    logits[5] = float("-inf")
    found = native_beam_candidates(logits, scores, min(2 * K, K * V), ban=ban)
    if found is None:
        assert not native.active()
        pytest.skip("no C kernels here")
    (s, t, b, lp), (best, best_lp, lse) = constrained_candidates(logits, scores, min(2 * K, K * V), ban)
    with native.off():
        (s2, t2, b2, lp2), (best2, best_lp2, lse2) = constrained_candidates(logits, scores, min(2 * K, K * V), ban)
    flat = (b2 * V + t2).tolist()
    order = torch.tensor([sorted(range(len(r)), key=lambda c: (-r[c], i[c])) for r, i in zip(s2.tolist(), flat)])
    s2, t2, b2, lp2 = (x.gather(1, order) for x in (s2, t2, b2, lp2))  # ties: the lower candidate first, as the C pass
    finite = s2 > float("-inf")
    assert torch.equal(t[finite], t2[finite]) and torch.equal(b[finite], b2[finite])
    assert torch.equal(best, best2) and best[4].item() == 0 and best[5].item() == 0
    torch.testing.assert_close(s, s2, rtol=0, atol=2e-5)
    torch.testing.assert_close(lp[finite], lp2[finite], rtol=0, atol=2e-5)
    torch.testing.assert_close(best_lp, best_lp2, rtol=0, atol=2e-5)
    torch.testing.assert_close(lse, lse2, rtol=0, atol=2e-5)
    rows = zip(s.tolist(), b.tolist(), t.tolist())
    chosen = [(i * K + bb, tt) for i, r in enumerate(rows) for sc, bb, tt in zip(*r) if sc > float("-inf")]
    assert all(tt != ban[r] for r, tt in chosen) and all(tt != ban[r] for r, tt in enumerate(best.tolist()))

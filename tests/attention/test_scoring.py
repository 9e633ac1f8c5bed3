"""One contract, every scoring implementation: rows sum to 1 over visible keys, masked keys get 0."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlab.attention import (
    AdditiveAttention,
    DotProductAttention,
    MultiHeadAttention,
    MultiplicativeAttention,
    record_attention,
)

D = 8


def make(kind, dtype=torch.float32):
    torch.manual_seed(0)
    m = {
        "dot": lambda: DotProductAttention(),
        "additive": lambda: AdditiveAttention(6, query_size=D, key_size=D),
        "multiplicative": lambda: MultiplicativeAttention(D, D),
        "multihead": lambda: MultiHeadAttention(D, 2, bias=True),
    }[kind]()
    return m.to(dtype).eval()


KINDS = ["dot", "additive", "multiplicative", "multihead"]


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=15, deadline=None)
@given(B=st.integers(1, 3), Lq=st.integers(1, 5), Lk=st.integers(1, 6), data=st.data())
def test_weights_contract(kind, B, Lq, Lk, data):
    m = make(kind)
    lens = torch.tensor(data.draw(st.lists(st.integers(0, Lk), min_size=B, max_size=B)))
    q, k, v = torch.randn(B, Lq, D), torch.randn(B, Lk, D), torch.randn(B, Lk, D)
    with record_attention(m) as rec:
        out = m(q, k, v, valid_lens=lens)
    (W,) = next(iter(rec.weights.values()))
    assert W.shape[0] == B and W.shape[-2:] == (Lq, Lk)
    for b in range(B):
        n = int(lens[b])
        assert torch.all(W[b, ..., n:] == 0)
        expected = 1.0 if n > 0 else 0.0
        torch.testing.assert_close(W[b].sum(-1), torch.full(W[b].shape[:-1], expected))
        if n == 0 and kind != "multihead":  # multi-head adds W_o's bias after pooling
            assert torch.all(out[b] == 0)
    assert not torch.isnan(out).any()


def test_additive_handles_different_sizes_and_lazy_init():
    m = AdditiveAttention(num_hiddens=8)
    q, k, v = torch.randn(2, 1, 20), torch.ones(2, 10, 2), torch.arange(40.0).reshape(1, 10, 4).repeat(2, 1, 1)
    out = m(q, k, v, torch.tensor([2, 6]))
    assert out.shape == (2, 1, 4)
    # Identical keys -> uniform weights over the visible ones (the book's worked example).
    with record_attention(m) as rec:
        m(q, k, v, torch.tensor([2, 6]))
    W = rec.weights["AdditiveAttention"][0]
    torch.testing.assert_close(W[0, 0, 0, :2], torch.full((2,), 0.5))
    torch.testing.assert_close(W[1, 0, 0, :6], torch.full((6,), 1 / 6))


def test_multiplicative_different_sizes():
    m = MultiplicativeAttention(query_size=5, key_size=3)
    assert m(torch.randn(2, 4, 5), torch.randn(2, 7, 3), torch.randn(2, 7, 9)).shape == (2, 4, 9)


def test_dot_product_scaled_by_sqrt_d():
    m = DotProductAttention()
    q = torch.ones(1, 1, 4)
    k = torch.tensor([[[1.0, 1, 1, 1], [0, 0, 0, 0]]])
    with record_attention(m) as rec:
        m(q, k, torch.randn(1, 2, 3))
    W = rec.weights["DotProductAttention"][0][0, 0, 0]
    # score 4 / sqrt(4) = 2 against 0
    torch.testing.assert_close(W, torch.softmax(torch.tensor([2.0, 0.0]), 0))


@pytest.mark.parametrize("kind", KINDS)
def test_gradcheck_float64(kind):
    m = make(kind, torch.float64)
    q = torch.randn(2, 3, D, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 4, D, dtype=torch.float64, requires_grad=True)
    v = torch.randn(2, 4, D, dtype=torch.float64, requires_grad=True)
    lens = torch.tensor([2, 4])
    assert torch.autograd.gradcheck(lambda q, k, v: m(q, k, v, valid_lens=lens), (q, k, v))


@pytest.mark.parametrize(
    "args, msg",
    [
        ((torch.randn(2, 3, D), torch.randn(3, 4, D), torch.randn(3, 4, D)), "batch sizes differ"),
        ((torch.randn(2, 3, D), torch.randn(2, 4, D), torch.randn(2, 5, D)), "same length"),
        ((torch.randn(2, 3, D), torch.randn(2, 4, D + 1), torch.randn(2, 4, D)), "same size"),
        ((torch.randn(3, D), torch.randn(2, 4, D), torch.randn(2, 4, D)), r"\(B, L, D\)"),
    ],
)
def test_bad_shapes_raise(args, msg):
    with pytest.raises(ValueError, match=msg):
        DotProductAttention()(*args)


def test_no_weights_kept_outside_recording():
    m = make("additive")
    m(torch.randn(1, 2, D), torch.randn(1, 3, D), torch.randn(1, 3, D))
    assert not any(isinstance(v, torch.Tensor) and v.dim() >= 3 for v in vars(m).values())
    assert not m.recording

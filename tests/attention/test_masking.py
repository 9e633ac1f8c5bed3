import pytest
import torch

from attnlab.attention import build_mask, masked_softmax, sequence_mask


def test_book_example_valid_lens_1d():
    # The book's worked example: valid_lens (2,) over 4 keys.
    X = torch.rand(2, 2, 4)
    W = masked_softmax(X, torch.tensor([2, 3]))
    assert torch.allclose(W.sum(-1), torch.ones(2, 2))
    assert torch.all(W[0, :, 2:] == 0) and torch.all(W[1, :, 3:] == 0)
    assert torch.all(W[0, :, :2] > 0)


def test_book_example_valid_lens_2d():
    X = torch.rand(2, 2, 4)
    W = masked_softmax(X, torch.tensor([[1, 3], [2, 4]]))
    assert torch.equal(W[0, 0], torch.tensor([1.0, 0, 0, 0]))
    assert torch.all(W[0, 1, 3:] == 0) and torch.all(W[1, 0, 2:] == 0)
    assert torch.allclose(W.sum(-1), torch.ones(2, 2))


def test_empty_row_is_zero_not_uniform_or_nan():
    X = torch.randn(2, 3, 5, requires_grad=True)
    W = masked_softmax(X, torch.tensor([0, 5]))
    assert torch.equal(W[0], torch.zeros(3, 5))
    assert not torch.isnan(W).any()
    W.sum().backward()
    assert not torch.isnan(X.grad).any()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_masks_exactly(dtype):
    X = (torch.randn(2, 3, 6) * 100).to(dtype)
    W = masked_softmax(X, torch.tensor([2, 6]))
    assert W.dtype == dtype
    assert torch.all(W[0, :, 2:] == 0)
    assert torch.allclose(W.float().sum(-1), torch.ones(2, 3), atol=1e-2)


def test_boolean_mask_and_valid_lens_combine():
    X = torch.randn(1, 2, 3)
    mask = torch.tensor([[True, False, True], [True, True, True]])
    W = masked_softmax(X, torch.tensor([2]), mask=mask)
    assert W[0, 0, 1] == 0 and W[0, 0, 2] == 0 and W[0, 0, 0] == 1
    assert W[0, 1, 2] == 0


@pytest.mark.parametrize(
    "valid_lens, msg",
    [
        (torch.tensor([-1, 2]), "valid_lens must lie"),
        (torch.tensor([2, 9]), "valid_lens must lie"),
        (torch.tensor([[1, 2, 3], [1, 2, 3]]), "Lq=2"),
        (torch.tensor([1, 2, 3]), "batch size"),
    ],
)
def test_bad_valid_lens_raise(valid_lens, msg):
    with pytest.raises(ValueError, match=msg):
        masked_softmax(torch.randn(2, 2, 4), valid_lens)


def test_mask_that_does_not_broadcast_raises():
    with pytest.raises(ValueError, match="does not broadcast"):
        masked_softmax(torch.randn(2, 2, 4), mask=torch.ones(2, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="boolean"):
        masked_softmax(torch.randn(2, 2, 4), mask=torch.ones(2, 4))


def test_sequence_mask_book_example():
    X = torch.tensor([[1, 2, 3], [4, 5, 6]])
    assert torch.equal(sequence_mask(X, torch.tensor([1, 2])), torch.tensor([[1, 0, 0], [4, 5, 0]]))


def test_build_mask_none_when_everything_visible():
    assert build_mask(2, 3, 4) is None
    m = build_mask(2, 3, 3, causal=True)
    assert m.shape == (1, 1, 3, 3) and torch.equal(m[0, 0], torch.tril(torch.ones(3, 3, dtype=torch.bool)))

import math

import pytest
import torch

from attnlab.attention import PositionalEncoding


def test_matches_formula():
    pe = PositionalEncoding(6, max_len=20)
    out = pe(torch.zeros(1, 20, 6))[0]
    for pos in (0, 3, 19):
        for j in range(3):
            angle = pos / 10000 ** (2 * j / 6)
            assert math.isclose(out[pos, 2 * j].item(), math.sin(angle), abs_tol=1e-6)
            assert math.isclose(out[pos, 2 * j + 1].item(), math.cos(angle), abs_tol=1e-6)


def test_extends_beyond_max_len_and_offsets():
    pe = PositionalEncoding(8, max_len=10)
    long = PositionalEncoding(8, max_len=100)
    x = torch.zeros(2, 30, 8)
    torch.testing.assert_close(pe(x), long(x))
    torch.testing.assert_close(pe(x[:, :5], offset=12), long(x)[:, 12:17])


def test_learned_variant_trains_and_refuses_overflow():
    pe = PositionalEncoding(4, max_len=5, learned=True)
    pe(torch.zeros(1, 5, 4)).sum().backward()
    assert pe.embedding.weight.grad is not None
    with pytest.raises(ValueError, match="5 positions"):
        pe(torch.zeros(1, 6, 4))


def test_odd_size_and_bad_input():
    assert PositionalEncoding(5)(torch.zeros(1, 3, 5)).shape == (1, 3, 5)
    with pytest.raises(ValueError, match=r"\(B, L, 5\)"):
        PositionalEncoding(5)(torch.zeros(3, 5))
